#!/usr/bin/env python3
"""Two raylog binaries side by side: the same commands, old and new alternating.

    bench/compare.sh OLD_BIN NEW_BIN [--size-mb 64] [--rounds 3] [--only parse,ship-loki]
                                     [--corpus DIR] [--instructions]

CPU time on this kind of machine drifts from run to run and day to day, so figures
taken at different times do not compare. This runs each workload as pairs (old then
new, then new then old, alternating, so neither always runs second) on one
page-cached tree and prints, per workload, both binaries' CPU-seconds, each pair's
new/old ratio and their median. Below 1 is faster.

Workloads: `parse` (`raylog parse TREE > /dev/null`), `health` (`raylog health
TREE`), and `ship-loki`, `ship-es`, `ship-otlp` (`ship_bench.py throughput`, agent
CPU only, into a receiver that counts). The tree is `raycorpus.py generate --seed 7`
of --size-mb, cached in /tmp/raylog-bench. --instructions adds callgrind's
instruction counts for `parse` on bench/instructions.py's fixed 16 MiB tree, which do
not drift at all.

`parse` and `health` run with `--threads 1` (or `--threads N`) on a binary that
has the flag, so CPU-seconds compare like for like with older single-threaded
builds; wall-clock speed-ups from threads are measured in docs/benchmarks.md's "All cores"
tables instead.

Standard library only.
"""
import argparse, json, os, statistics, subprocess, sys

from benchlib import ROOT, SHARED, run_measured

WORKLOADS = ["parse", "health", "ship-loki", "ship-es", "ship-otlp"]


def corpus(a):
    path = a.corpus or "/tmp/raylog-bench/c%d" % a.size_mb
    if not os.path.exists(os.path.join(path, "manifest.json")):
        subprocess.run([sys.executable, os.path.join(SHARED, "raycorpus.py"), "generate", "--out", path,
                        "--size-mb", str(a.size_mb), "--seed", "7"], check=True, stdout=subprocess.DEVNULL)
    return path


THREADS = {}


def threads_args(binary, n):
    """`--threads n` when `binary` has the flag (builds before it read on one thread)."""
    if binary not in THREADS:
        h = subprocess.run([binary, "parse", "--help"], capture_output=True, text=True).stdout
        THREADS[binary] = "--threads" in h
    return ["--threads", str(n)] if THREADS[binary] else []


def run(work, binary, tree, threads=1):
    """(CPU-seconds, peak RSS MiB) of one run."""
    if work in ("parse", "health"):
        code, ru, _, err = run_measured([binary, work] + threads_args(binary, threads) + [tree])
        # `health` exits 1 when it found problems: a verdict, not a failure.
        if code not in (0, 1):
            sys.exit("%s %s failed (%d): %s" % (binary, work, code, err[-2000:]))
        return ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024
    sink = work.split("-", 1)[1]
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "ship_bench.py"), "throughput",
                        "--corpus", tree, "--sink", sink, "--raylog", binary], capture_output=True, text=True)
    line = next((l for l in p.stdout.splitlines() if l.startswith("sink=")), None)
    if p.returncode != 0 or line is None:
        sys.exit("ship_bench.py throughput --sink %s with %s failed: %s%s" % (sink, binary, p.stdout, p.stderr))
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    return float(fields["cpu"].rstrip("s")), float(line.rsplit("peak RSS", 1)[1].split()[0])


def instructions(binary):
    # The count is printed before the check against the stored figure, which may fail.
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "instructions.py"), "--raylog", binary],
                         capture_output=True, text=True)
    line = next((l for l in out.stdout.splitlines() if "per MiB" in l), None)
    if line is None:
        sys.exit("instructions.py failed: %s%s" % (out.stdout, out.stderr))
    return int(line.split(" instructions")[0].rsplit(" ", 1)[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--size-mb", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", help="comma-separated workloads (default: all of %s)" % ",".join(WORKLOADS))
    ap.add_argument("--corpus")
    ap.add_argument("--instructions", action="store_true")
    ap.add_argument("--threads", type=int, default=1,
                    help="--threads for parse and health, on binaries that have it (default 1)")
    a = ap.parse_args()
    bins = {"old": os.path.abspath(a.old), "new": os.path.abspath(a.new)}
    for k, b in bins.items():
        if not os.access(b, os.X_OK):
            sys.exit("%s binary %s is not executable: build it first (cargo build --release)" % (k, b))
    works = a.only.split(",") if a.only else WORKLOADS
    unknown = set(works) - set(WORKLOADS)
    if unknown:
        sys.exit("unknown workload(s) %s; choose from %s" % (", ".join(sorted(unknown)), ", ".join(WORKLOADS)))
    tree = corpus(a)
    mib = json.load(open(os.path.join(tree, "manifest.json")))["bytes"] / 2**20
    print("tree %s (%.0f MiB), %d rounds; CPU-s per run, new/old per pair" % (tree, mib, a.rounds))
    print("%-10s %-24s %-24s %-26s %s" % ("workload", "old CPU-s", "new CPU-s", "new/old per pair", "median"))
    for work in works:
        cpu = {"old": [], "new": []}
        rss = {"old": [], "new": []}
        for r in range(a.rounds):
            for k in (("old", "new") if r % 2 == 0 else ("new", "old")):
                c, m = run(work, bins[k], tree, a.threads)
                cpu[k].append(c)
                rss[k].append(m)
        ratios = [n / o for o, n in zip(cpu["old"], cpu["new"])]
        fmt = lambda xs: ", ".join("%.2f" % x for x in xs)
        print("%-10s %-24s %-24s %-26s %.3f   (peak RSS median: old %.1f MiB, new %.1f MiB)"
              % (work, fmt(cpu["old"]), fmt(cpu["new"]), fmt(ratios), statistics.median(ratios),
                 statistics.median(rss["old"]), statistics.median(rss["new"])))
    if a.instructions:
        o, n = instructions(bins["old"]), instructions(bins["new"])
        print("%-10s old %d, new %d instructions (16 MiB, callgrind): new/old %.4f" % ("parse-ir", o, n, n / o))


if __name__ == "__main__":
    main()
