#!/usr/bin/env python3
"""raylog.ray.read_logs against `raylog parse` on the same archives.

    python3 bench/ray_data_bench.py --python VENV/bin/python --raylog BIN ARCHIVE...

VENV holds the wheel and Ray Data (python/test-venv.sh makes one). For each of 1 and
2 Ray workers (a local cluster with num_cpus=N, one CPU per read task) it reads every
archive into a Dataset and counts it, and reports the wall time and the CPU seconds
of the whole cluster (every process Ray started, reaped at shutdown) minus those of
the same cluster started and stopped with no read: the reader's own cost, Ray Data's
scheduling included. `raylog parse` of the same archives (-j1 and -j2, output to
/dev/null) is the yardstick. Rounds alternate; the median is reported.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

CHILD = r"""
import json, resource, sys, time, tempfile, shutil
import ray, raylog.ray
workers, read, paths = int(sys.argv[1]), sys.argv[2] == "read", sys.argv[3:]
temp = tempfile.mkdtemp(prefix="rlb-", dir="/tmp")
t0 = time.monotonic()
ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
t1 = time.monotonic()
rows = raylog.ray.read_logs(paths).count() if read else 0
t2 = time.monotonic()
ray.shutdown()
shutil.rmtree(temp, ignore_errors=True)
me = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
print(json.dumps({"rows": rows, "read_s": t2 - t1, "cpu_s": cpu}))
"""


def child(python, workers, read, paths):
    out = subprocess.run([python, "-c", CHILD, str(workers), "read" if read else "idle", *paths],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def parse(raylog, threads, paths):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    with open(os.devnull, "wb") as null:
        subprocess.run([raylog, "parse", "-q", "-j", str(threads), *paths], stdout=null, check=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", required=True)
    ap.add_argument("--raylog", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("archives", nargs="+")
    a = ap.parse_args()
    mib = sum(os.path.getsize(p) for p in a.archives) / 2**20
    # Uncompressed size, what both parse: the sum of the members' sizes.
    import tarfile
    raw = sum(m.size for p in a.archives for m in tarfile.open(p) if m.isfile()) / 2**20
    runs = {k: [] for k in ("parse -j1", "parse -j2", "ray 1 worker", "ray 2 workers")}
    rows = None
    for _ in range(a.rounds):
        for j in (1, 2):
            runs[f"parse -j{j}"].append(parse(a.raylog, j, a.archives))
        for w in (1, 2):
            idle = child(a.python, w, False, a.archives)
            got = child(a.python, w, True, a.archives)
            rows = got["rows"]
            runs[f"ray {w} worker" + ("s" if w > 1 else "")].append(
                {"wall_s": got["read_s"], "cpu_s": got["cpu_s"] - idle["cpu_s"]})
    print(f"{len(a.archives)} archives, {mib:.1f} MiB compressed, {raw:.1f} MiB of logs, {rows} records; "
          f"median of {a.rounds} rounds")
    print(f"{'run':<15} {'wall s':>7} {'CPU s':>7} {'CPU ms/MiB':>11}")
    for name, rs in runs.items():
        wall = statistics.median(r["wall_s"] for r in rs)
        cpu = statistics.median(r["cpu_s"] for r in rs)
        print(f"{name:<15} {wall:7.2f} {cpu:7.2f} {1000 * cpu / raw:11.1f}")


if __name__ == "__main__":
    sys.exit(main())
