"""Ray tasks whose stories raylog tells as traces, for `tests/it/live_traces.rs`.

    python tasks.py run TEMP_DIR MANIFEST     # the scenario (the test calls this)
    python tasks.py driver MANIFEST ADDRESS   # the job (run by `run`)

`run` starts a Ray head with Ray's own rotation off (Ray 2.60 gives task events no
`taskLogInfo` while it rotates worker files) and the event export the environment
sets, runs one job as its own driver process (so the job ends, and Ray says so,
while the cluster is up), waits for the last events and stops Ray. The job runs:
- a three-level tree: the driver calls `parent`, which calls two `child`ren;
- `fail`, which raises;
- `retried`, whose first attempt kills its own worker (SIGKILL) after printing, so
  Ray runs it again (`max_retries=1`);
- an actor, `Counter`, with three `incr` calls.
Every print is `raylog-trace <tok> task_id=<id>` with the id Ray's runtime context
gives where it printed. MANIFEST gets one JSON object per print, written by the job
itself: {"tok", "name", "task_id", "attempt" (the writer knows which attempt of
`retried` it is), "parent" (the task id of the caller, as the caller's context gave
it), "actor_id"}; and one {"driver_task_id", "job_id"} line.
"""
import json
import os
import signal
import sys
import time

import workload

HERE = os.path.abspath(__file__)


def env():
    e = workload.ray_env()
    # Ray's rotation off: with it, Ray 2.60 reports no byte ranges.
    e.pop("RAY_ROTATION_MAX_BYTES", None)
    e.pop("RAY_ROTATION_BACKUP_COUNT", None)
    return e


def run(temp_dir, manifest):
    import subprocess

    open(manifest, "w").close()
    if os.path.exists(manifest + ".retried"):
        os.remove(manifest + ".retried")
    port, dashboard = workload.free_port(), workload.free_port()
    ray = os.path.join(workload.BIN, "ray")
    subprocess.run([ray, "start", "--head", "--num-cpus=2", "--disable-usage-stats", f"--temp-dir={temp_dir}",
                    f"--port={port}", "--node-ip-address=127.0.0.1", "--include-dashboard=true",
                    "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}"], env=env(), check=True)
    try:
        subprocess.run([sys.executable, HERE, "driver", manifest, f"127.0.0.1:{port}"], env=env(), check=True)
        # The job's end and the last task events reach the aggregator, which posts
        # them (it flushes every second or so).
        time.sleep(8)
    finally:
        workload.stop_ray(temp_dir)


def say(name, tok, parent=None, attempt=None):
    import ray

    ctx = ray.get_runtime_context()
    task_id = ctx.get_task_id()
    print(f"raylog-trace {tok} task_id={task_id}", flush=True)
    return {"tok": tok, "name": name, "task_id": task_id, "attempt": attempt, "parent": parent,
            "actor_id": ctx.get_actor_id()}


def driver(manifest, address):
    import ray

    ray.init(address=address, logging_level="ERROR")
    me = ray.get_runtime_context()

    @ray.remote
    def child(k, parent):
        row = say("child", f"child-{k}", parent)
        time.sleep(0.5)
        return [row]

    @ray.remote
    def parent(driver_task):
        row = say("parent", "parent", driver_task)
        mine = ray.get_runtime_context().get_task_id()
        rows = [r for part in ray.get([child.remote(k, mine) for k in range(2)]) for r in part]
        return [row] + rows

    @ray.remote(max_retries=0)
    def fail(driver_task):
        say_row = say("fail", "fail", driver_task)
        with open(manifest, "a") as m:
            m.write(json.dumps(say_row) + "\n")
        raise ValueError("raylog-trace fails on purpose")

    @ray.remote(max_retries=1)
    def retried(driver_task, marker):
        first = not os.path.exists(marker)
        row = say("retried", f"retried-{0 if first else 1}", driver_task, 0 if first else 1)
        with open(manifest, "a") as m:
            m.write(json.dumps(row) + "\n")
        if first:
            open(marker, "w").close()
            # Long enough for RUNNING (and its byte range's start) to be posted.
            time.sleep(3)
            os.kill(os.getpid(), signal.SIGKILL)
        return []

    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def incr(self, driver_task):
            self.n += 1
            return [say("Counter.incr", f"incr-{self.n}", driver_task)]

    driver_task = me.get_task_id()
    rows = ray.get(parent.remote(driver_task))
    try:
        ray.get(fail.remote(driver_task))
    except ray.exceptions.RayTaskError:
        pass
    ray.get(retried.remote(driver_task, manifest + ".retried"))
    c = Counter.remote()
    for _ in range(3):
        rows += ray.get(c.incr.remote(driver_task))
    with open(manifest, "a") as m:
        for r in rows:
            m.write(json.dumps(r) + "\n")
        m.write(json.dumps({"driver_task_id": driver_task, "job_id": me.get_job_id()}) + "\n")
    time.sleep(2)
    ray.shutdown()


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "driver":
        driver(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
