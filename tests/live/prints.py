"""A minute of prints from actors and tasks, for `tests/it/live_kill.rs`.

    python prints.py run TEMP_DIR MANIFEST [SECONDS]   # the scenario (the test calls this)
    python prints.py driver MANIFEST SECONDS ADDRESS   # the job (run by `run`)

`run` starts a local Ray with `workload.py`'s settings (small rotation limits, so files
rotate while the agent is being killed), runs one job for SECONDS (60) and stops Ray.
`tests/it/live.rs` runs its own cluster: the two tests take turns (a lock), and this
job names its cluster's address rather than `auto`.
The job keeps two actors and a stream of tasks printing, each a line every 50 ms. Every
printed line carries a unique token `KILL-<who>-<n>`; MANIFEST gets one JSON object per
token with the ids Ray's runtime context reports where it printed (`actor_id` for an
actor's prints), written by the job itself, not derived by raylog.
"""
import json
import os
import sys
import time

import workload

HERE = os.path.abspath(__file__)
PERIOD = 0.05


def run(temp_dir, manifest, seconds):
    open(manifest, "w").close()
    # Its own port, named to the driver: `address="auto"` finds the cluster started
    # last on the machine, which may be another test's.
    port = workload.free_port()
    workload.sh([os.path.join(workload.BIN, "ray"), "start", "--head", "--num-cpus=2", "--disable-usage-stats",
                 f"--temp-dir={temp_dir}", f"--port={port}", "--node-ip-address=127.0.0.1",
                 "--include-dashboard=false"])
    try:
        workload.sh([sys.executable, HERE, "driver", manifest, str(seconds), f"127.0.0.1:{port}"])
        time.sleep(2)  # log_monitor and the writers flush
    finally:
        workload.stop_ray(temp_dir)


def ids():
    import ray

    ctx = ray.get_runtime_context()
    return {"job_id": ctx.get_job_id(), "worker_id": ctx.get_worker_id(), "actor_id": ctx.get_actor_id()}


def talk(who, kind, until):
    rows, n = [], 0
    here = ids()
    while time.time() < until:
        tok = f"KILL-{who}-{n}"
        print(f"raylog-kill {tok} {kind} at {time.time_ns()}", flush=True)
        rows.append({"tok": tok, "kind": kind, **here})
        n += 1
        time.sleep(PERIOD)
    return rows


def driver(manifest, seconds, address):
    import ray

    ray.init(address=address)

    @ray.remote(num_cpus=0)
    class Talker:
        def talk(self, who, until):
            return talk(who, "actor-print", until)

    @ray.remote(num_cpus=1)
    def task(who, until):
        return talk(who, "task-print", until)

    end = time.time() + seconds
    actors = [Talker.remote() for _ in range(2)]
    pending = [a.talk.remote(f"a{i}", end) for i, a in enumerate(actors)]
    # Tasks of two seconds each, one after another, until the end.
    k = 0
    while time.time() < end:
        pending.append(task.remote(f"t{k}", min(end, time.time() + 2)))
        ray.get(pending[-1])
        k += 1
    rows = [r for part in ray.get(pending) for r in part]
    with open(manifest, "a") as m:
        for r in rows:
            m.write(json.dumps(r) + "\n")
    time.sleep(1)
    ray.shutdown()


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 60)
    elif sys.argv[1] == "driver":
        driver(sys.argv[2], float(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(__doc__)
