#!/usr/bin/env python3
"""Ray 2.60 task events for a raycorpus.py tree: what the cost of tagging prints is measured on.

    python3 bench/task_events.py CORPUS_DIR OUT_DIR [--lines-per-task 20]

raycorpus.py writes worker-*.out/.err files but no Ray events. This writes, into
OUT_DIR/ray_events-000000000001.ndjson, one TASK_LIFECYCLE_EVENT per task in the shape
Ray 2.60's aggregator posts (base64 ids, int64s as strings): each worker file is cut
into tasks of --lines-per-task lines (at line starts), and each task's event carries a
`taskLogInfo` with the file and its byte range, as a task attempt of Ray's own would.
With --lifecycle, each task also gets what its owner posts in Ray 2.60 (a
TASK_DEFINITION_EVENT, and a TASK_LIFECYCLE_EVENT from PENDING_ARGS_AVAIL to FINISHED,
in the shape of fixtures/ray-2.60-events), so each gives a schedule and a run span
(the cost of `traces = true`). Bench input only; the tests use events Ray really posted.

Prints how many tasks and files it wrote. Standard library only, deterministic.
"""

import argparse
import base64
import glob
import json
import os
import random


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus")
    ap.add_argument("out")
    ap.add_argument("--lines-per-task", type=int, default=20)
    ap.add_argument("--lifecycle", action="store_true", help="add each task's definition and owner transitions")
    a = ap.parse_args()
    rng = random.Random(7)
    sessions = sorted(glob.glob(os.path.join(a.corpus, "session_2*")))
    if not sessions:
        raise SystemExit(f"{a.corpus}: no session_* dir; make one with raycorpus.py generate")
    os.makedirs(a.out, exist_ok=True)
    tasks = files = 0
    path = os.path.join(a.out, "ray_events-000000000001.ndjson")
    with open(path, "w") as out:
        for session in sessions:
            name = os.path.basename(session)
            for f in sorted(glob.glob(os.path.join(session, "logs", "worker-*.*"))):
                stream = "stdout" if f.endswith(".out") else "stderr" if f.endswith(".err") else None
                if stream is None:
                    continue
                files += 1
                with open(f, "rb") as fh:
                    data = fh.read()
                starts = [0] + [i + 1 for i, b in enumerate(data) if b == 0x0A and i + 1 < len(data)]
                for k in range(0, len(starts), a.lines_per_task):
                    start = starts[k]
                    end = starts[k + a.lines_per_task] if k + a.lines_per_task < len(starts) else len(data)
                    task_id = base64.b64encode(rng.randbytes(24)).decode()
                    info = {
                        f"{stream}File": f"/tmp/ray/{name}/logs/{os.path.basename(f)}",
                        f"{stream}Start": str(start),
                        f"{stream}End": str(end),
                    }
                    event = {
                        "eventId": base64.b64encode(rng.randbytes(18)).decode(),
                        "sourceType": "CORE_WORKER",
                        "eventType": "TASK_LIFECYCLE_EVENT",
                        "timestamp": "2026-12-01T19:45:56.000000000Z",
                        "severity": "INFO",
                        "sessionName": name,
                        "taskLifecycleEvent": {
                            "taskId": task_id,
                            "taskAttempt": 0,
                            "stateTransitions": [{"state": "RUNNING", "timestamp": "2026-12-01T19:45:56.000000000Z"}],
                            "taskLogInfo": info,
                        },
                    }
                    out.write(json.dumps(event, separators=(",", ":")) + "\n")
                    if a.lifecycle:
                        for e in owner_events(rng, name, task_id, tasks):
                            out.write(json.dumps(e, separators=(",", ":")) + "\n")
                    tasks += 1
    print(f"{path}: {tasks} tasks over {files} worker files")


def owner_events(rng, session, task_id, n):
    """The definition and the owner's transitions of task `task_id` (the n-th)."""
    job = "AQAAAA=="
    t = lambda ms: f"2026-12-01T19:45:{55 + ms // 1000:02d}.{ms % 1000:03d}000000Z"
    base = {"sourceType": "CORE_WORKER", "severity": "INFO", "sessionName": session, "timestamp": t(900)}
    definition = {
        "taskId": task_id,
        "taskFunc": {"pythonFunctionDescriptor": {"moduleName": "bench", "functionName": f"f{n % 50}", "className": ""}},
        "taskName": f"f{n % 50}",
        "jobId": job,
        "parentTaskId": "//////////////////////////8BAAAA",
        "taskAttempt": 0,
        "taskType": "NORMAL_TASK",
        "language": "PYTHON",
    }
    states = ["PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "SUBMITTED_TO_WORKER", "FINISHED"]
    life = {
        "taskId": task_id,
        "taskAttempt": 0,
        "jobId": job,
        "stateTransitions": [{"state": s, "timestamp": t(100 + 300 * i)} for i, s in enumerate(states)],
    }
    return [
        dict(base, eventId=base64.b64encode(rng.randbytes(18)).decode(), eventType="TASK_DEFINITION_EVENT",
             taskDefinitionEvent=definition),
        dict(base, eventId=base64.b64encode(rng.randbytes(18)).decode(), eventType="TASK_LIFECYCLE_EVENT",
             taskLifecycleEvent=life),
    ]


if __name__ == "__main__":
    main()
