"""The live Ray workload behind `cargo test --release live` (tests/it/live.rs).

    python workload.py run TEMP_DIR MANIFEST     # the whole scenario (the test calls this)
    python workload.py driver ENCODING JOB MANIFEST  # one job (run by `run`)
    python workload.py failing                   # a Jobs API entrypoint that dies of a task error
    python workload.py actors OUT                # create and kill 200 actors, then list them (OUT: JSON)
    python workload.py stop TEMP_DIR             # stop the cluster under TEMP_DIR (only that one)

`run` starts a real local Ray cluster with its temp dir at TEMP_DIR and small rotation
limits, runs a JSON-logging job, a TEXT-logging job and a Jobs API submission whose
task raises, makes GCS busy by creating and killing 200 actors, stops Ray, then starts it again (a second session appears under the same
temp root while the agent watches) and runs one more job before stopping for good.

Every line the workload itself writes carries a unique token `LIVE-<job>-<n>` and the
wall-clock time it was written (`at <ns>`), so the test can tell lost lines from
duplicates and measure delivery latency. MANIFEST gets one JSON object per token:
what wrote it (`kind`), and the ids the record must carry (`actor_id`, `job_id`, ...)
as Ray itself reports them through the runtime context, not as raylog derives them.
Nothing here uses `k=v` in printed text: TEXT structured logging appends its own pairs.
"""
import json
import logging
import os
import socket
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)
BIN = os.path.dirname(sys.executable)
# Enough output to rotate worker, core-worker, raylet and GCS files several times.
ROTATION_BYTES = 40_000
PRINTS_PER_TASK = 60
CHATTY_LINES = 1500


def ray_env():
    env = dict(os.environ)
    env.update(
        RAY_AUTH_MODE="disabled",
        RAY_USAGE_STATS_ENABLED="0",
        RAY_ROTATION_MAX_BYTES=str(ROTATION_BYTES),
        # Keep every rotated file: the test compares what arrived with what is on disk.
        RAY_ROTATION_BACKUP_COUNT="1000",
        # GCS, raylets and core workers print their `Event stats:` blocks every
        # second (Ray's default: a minute), for the latency checks (issue #25).
        RAY_event_stats_print_interval_ms="1000",
        PATH=BIN + os.pathsep + env.get("PATH", ""),
    )
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sh(args, check=True, **kw):
    print("+", " ".join(args), flush=True)
    return subprocess.run(args, env=ray_env(), check=check, **kw)


def start_ray(temp_dir, dashboard_port=None):
    args = [os.path.join(BIN, "ray"), "start", "--head", "--num-cpus=2", "--disable-usage-stats",
            f"--temp-dir={temp_dir}", f"--port={free_port()}", "--node-ip-address=127.0.0.1"]
    if dashboard_port:
        args += ["--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}"]
    else:
        args += ["--include-dashboard=false"]
    sh(args)


def stop_ray(temp_dir):
    """Stops only this test's cluster: `ray stop` would stop every Ray on the machine
    (a developer's, or another test run's). Ray's daemons name the temp dir on their
    command line. Drivers do not (a Jobs API entrypoint is `python workload.py ...`),
    and one that outlives its raylet keeps logging for a minute until its GCS client
    gives up; they are found by the log files they hold open in the temp dir. Only
    Python processes are taken that way: the agent under test holds those files too."""
    import signal

    def holds_file_in(pid):
        try:
            if not os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("python"):
                return False
            return any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith(temp_dir + "/")
                       for fd in os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            return False

    def ours():
        pids = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if int(pid) != os.getpid() and (temp_dir.encode() in cmd or holds_file_in(pid)):
                pids.append(int(pid))
        return pids

    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        for pid in ours():
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.time() + wait
        while ours() and time.time() < deadline:
            time.sleep(0.2)
    print("+ stopped this test's Ray processes", flush=True)


def run(temp_dir, manifest):
    open(manifest, "w").close()
    dashboard = free_port()
    start_ray(temp_dir, dashboard)
    try:
        sh([sys.executable, HERE, "driver", "JSON", "json", manifest])
        sh([sys.executable, HERE, "driver", "TEXT", "text", manifest])
        failed = sh([os.path.join(BIN, "ray"), "job", "submit", f"--address=http://127.0.0.1:{dashboard}",
                     "--submission-id=raysubmit_live_fail", "--", sys.executable, HERE, "failing"], check=False)
        assert failed.returncode != 0, "the failing job succeeded"
        with open(manifest, "a") as m:
            m.write(json.dumps({"tok": "LIVE-fail-0", "kind": "task-error"}) + "\n")
        # Last in the session: nothing creates an actor after the listing, so GCS's
        # last block holds every CreateActor call the listing counts.
        sh([sys.executable, HERE, "actors", os.path.join(os.path.dirname(manifest), "gcs_actors.json")])
        time.sleep(3)  # a block after the listing; log_monitor and the C++ writers flush
    finally:
        stop_ray(temp_dir)
    time.sleep(1)
    start_ray(temp_dir)  # a new session_* dir under the same temp root
    try:
        sh([sys.executable, HERE, "driver", "TEXT", "second", manifest])
        time.sleep(2)
    finally:
        stop_ray(temp_dir)


# ---- inside a job -------------------------------------------------------------------

def line(tok, what):
    return f"raylog-live {tok} {what} at {time.time_ns()}"


def context_ids():
    import ray

    ctx = ray.get_runtime_context()
    return {
        "job_id": ctx.get_job_id(),
        "worker_id": ctx.get_worker_id(),
        "node_id": ctx.get_node_id(),
        "task_id": ctx.get_task_id(),
        "actor_id": ctx.get_actor_id(),
    }


def define_remotes(ray):
    log = logging.getLogger("live")

    @ray.remote
    def chatty(prefix, n, lines):
        """Prints and logs; returns what the manifest needs."""
        out = []
        for i in range(n):
            tok = f"{prefix}-{i}"
            print(line(tok, "task print"), flush=True)
            out.append({"tok": tok, "kind": "task-print", **context_ids()})
        tok = f"{prefix}-{n}"
        log.warning(line(tok, "task structured log"))
        out.append({"tok": tok, "kind": "struct-log", **context_ids()})
        for i in range(lines):  # bulk output to force rotation; not in the manifest
            print(f"raylog-live filler {prefix} {i:05d} " + "x" * 60)
        return out

    @ray.remote
    def logs_exception(tok):
        try:
            {}["missing"]
        except KeyError:
            log.exception(line(tok, "logger.exception in a task"))
        return {"tok": tok, "kind": "struct-exception", **context_ids()}

    @ray.remote(max_restarts=1, max_task_retries=0)
    class Phoenix:
        def __init__(self, tok):
            print(line(tok, "actor init print"), flush=True)
            self.ids = context_ids()

        def hello(self, tok):
            print(line(tok, "actor method print"), flush=True)
            log.info(line(tok + "L", "actor structured log"))
            return [{"tok": tok, "kind": "actor-print", **context_ids()},
                    {"tok": tok + "L", "kind": "struct-log", **context_ids()}]

        def die(self, tok):
            print(line(tok, "actor print before os._exit"), flush=True)
            os._exit(1)

    return chatty, logs_exception, Phoenix


def driver(encoding, job, manifest):
    import ray

    ray.init(address="auto", logging_config=ray.LoggingConfig(encoding=encoding, log_level="INFO"))
    chatty, logs_exception, Phoenix = define_remotes(ray)
    rows = []
    for part in ray.get([chatty.remote(f"LIVE-{job}-t{k}", PRINTS_PER_TASK, CHATTY_LINES) for k in range(3)]):
        rows += part
    rows.append(ray.get(logs_exception.remote(f"LIVE-{job}-exc")))
    rows += actor_story(ray, Phoenix, job)
    with open(manifest, "a") as m:
        for r in rows:
            m.write(json.dumps(r) + "\n")
    time.sleep(1)
    ray.shutdown()


def actor_story(ray, Phoenix, job):
    """An actor printing in __init__ and methods, killed with os._exit, restarted."""
    p = Phoenix.remote(f"LIVE-{job}-init")
    actor_id = p._actor_id.hex()
    rows = ray.get(p.hello.remote(f"LIVE-{job}-a0"))
    rows.append({"tok": f"LIVE-{job}-init", "kind": "actor-print", "actor_id": actor_id})
    # Ray 2.60 copies a worker's stdout to its file on a thread of its own: os._exit
    # right after a print can kill the process before the line is written (seen
    # here for hello's print once the machine was busy). The test is about what
    # raylog does with lines on disk, so the worker gets a moment first.
    time.sleep(1)
    try:
        ray.get(p.die.remote(f"LIVE-{job}-die"))
    except Exception as e:  # the actor died; it will be restarted in a new worker
        print("phoenix died:", type(e).__name__)
    # os._exit can beat Ray's stdout redirection to the file: this print may never
    # reach the disk (the test then checks only that nothing on disk was lost).
    rows.append({"tok": f"LIVE-{job}-die", "kind": "actor-print-lossy", "actor_id": actor_id})
    # __init__ runs again in the new worker with the same token; both prints count.
    rows.append({"tok": f"LIVE-{job}-init", "kind": "actor-print", "actor_id": actor_id})
    for attempt in range(120):
        try:
            rows += ray.get(p.hello.remote(f"LIVE-{job}-b{attempt}"), timeout=10)
            break
        except Exception as e:  # ActorUnavailableError while restarting
            print("phoenix not back yet:", type(e).__name__)
            time.sleep(0.5)
    else:
        raise SystemExit("the actor did not come back")
    first, second = rows[0]["worker_id"], rows[-1]["worker_id"]
    assert first != second, "the actor restarted in the same worker"
    for r in rows:
        assert r["actor_id"] == actor_id, r
    return rows


def actors(out, total=200, wave=25):
    """Creates `total` actors, `wave` at a time (each is a worker process), waits
    for each to answer, kills them, and writes what Ray's state API lists: every
    actor of the session so far (these, the Phoenixes, the job supervisor), so GCS's
    `ActorInfoGcsService.grpc_server.CreateActor` total must equal `actors`."""
    import ray
    from ray.util.state import list_actors

    ray.init(address="auto")

    @ray.remote(num_cpus=0)
    class Busy:
        def ping(self):
            return os.getpid()

    for _ in range(total // wave):
        wave_actors = [Busy.remote() for _ in range(wave)]
        ray.get([a.ping.remote() for a in wave_actors])
        for a in wave_actors:
            ray.kill(a)
    listed = list_actors(limit=10_000, raise_on_missing_output=False)
    session = ray._private.worker._global_node.session_name
    with open(out, "w") as f:
        json.dump({"session": session, "actors": len(listed), "busy": total}, f)
    print(f"+ {total} actors created and killed; the state API lists {len(listed)} in {session}", flush=True)
    ray.shutdown()


def failing():
    import ray

    ray.init(address="auto")

    @ray.remote(max_retries=0)
    def explode():
        raise ValueError(line("LIVE-fail-0", "task raised"))

    ray.get(explode.remote())


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "run":
        run(sys.argv[2], sys.argv[3])
    elif cmd == "driver":
        driver(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "failing":
        failing()
    elif cmd == "actors":
        actors(sys.argv[2])
    elif cmd == "stop":
        stop_ray(sys.argv[2])
    else:
        sys.exit(f"unknown command {cmd!r}; see the module docstring")
