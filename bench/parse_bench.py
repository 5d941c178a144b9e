#!/usr/bin/env python3
"""Throughput and memory of `raylog parse` on a generated Ray log tree.

    python3 bench/parse_bench.py [--size-mb 256] [--runs 5] [--corpus DIR]
                                 [--raycorpus ../shared/bench/raycorpus.py]

Generates (once, cached in --corpus) a Ray log tree with raycorpus.py, builds
nothing itself (run `cargo build --release` first), then runs
`target/release/raylog parse DIR` --runs times with NDJSON going to /dev/null,
and once more into a pipe to count the records. Reports per run the user and
system CPU seconds of the raylog process (from wait4's rusage), MiB of input per
CPU-second, and peak RSS; then the median and best run. Fails (exit 1) if the
record count differs from the corpus manifest's `records`.

Standard library only.
"""
import argparse, json, os, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_once(cmd, stdout):
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - start
    err = p.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("raylog failed (%s): %s" % (status, err))
    return ru.ru_utime, ru.ru_stime, ru.ru_maxrss / 1024.0, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=256)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--corpus", default=None, help="corpus dir (default /tmp/raylog-bench/c<size>)")
    ap.add_argument("--raycorpus", default=os.path.join(ROOT, "..", "shared", "bench", "raycorpus.py"))
    ap.add_argument("--raylog", default=os.path.join(ROOT, "target", "release", "raylog"))
    ap.add_argument("--extra", default="", help="extra raylog parse arguments, space-separated")
    a = ap.parse_args()

    corpus = a.corpus or "/tmp/raylog-bench/c%d" % a.size_mb
    manifest = os.path.join(corpus, "manifest.json")
    if not os.path.exists(manifest):
        if not os.path.exists(a.raycorpus):
            sys.exit("no corpus at %s and no raycorpus.py at %s (pass --raycorpus)" % (corpus, a.raycorpus))
        print("generating %d MiB corpus in %s ..." % (a.size_mb, corpus), flush=True)
        subprocess.run([sys.executable, a.raycorpus, "generate", "--out", corpus, "--size-mb", str(a.size_mb)], check=True)
    man = json.load(open(manifest))
    mib = man["bytes"] / 2**20
    if not os.path.exists(a.raylog):
        sys.exit("%s not found: run `cargo build --release` first" % a.raylog)
    cmd = [a.raylog, "parse", corpus] + a.extra.split()

    # Record count, through a pipe.
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    records = sum(1 for _ in p.stdout)
    p.wait()
    ok = records == man["records"]
    print("input %.1f MiB, %d files; records written %d, manifest %d: %s"
          % (mib, len(man["files"]), records, man["records"], "OK" if ok else "MISMATCH"))

    rows = []
    with open(os.devnull, "wb") as null:
        for i in range(a.runs):
            u, s, rss, wall = run_once(cmd, null)
            rows.append((u, s, rss, wall))
            print("run %d: user %.2f s  sys %.2f s  cpu %.2f s  wall %.2f s  %.0f MiB/CPU-s  peak RSS %.1f MiB"
                  % (i + 1, u, s, u + s, wall, mib / (u + s), rss), flush=True)
    cpus = [u + s for u, s, _, _ in rows]
    med = statistics.median(cpus)
    best = min(cpus)
    print("median: cpu %.2f s = %.0f MiB/CPU-s; best: cpu %.2f s = %.0f MiB/CPU-s; max peak RSS %.1f MiB"
          % (med, mib / med, best, mib / best, max(r[2] for r in rows)))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
