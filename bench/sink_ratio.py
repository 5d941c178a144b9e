#!/usr/bin/env python3
"""One raylog binary, two sinks side by side: what one costs against the other.

    bench/sink_ratio.py [BIN] [--base loki] [--sink otlp] [--rounds 10] [--size-mb 256]

Runs `ship_bench.py throughput` with the --base sink and the --sink sink in
alternating pairs (base first, then the other first, so neither always runs
second) on one page-cached tree, the OTLP receiver with --no-count (it then takes
no CPU from the agent's share of this machine's cores), and prints each pair's
CPU-seconds (the agent's alone), their ratio, the median ratio and the ratio of the
sums. This is how the OTLP sink's "no more CPU per MiB than the Loki sink (±10 %)"
is measured (docs/benchmarks.md, "Sink throughput"). BIN defaults to this tree's release build.

Standard library only.
"""
import argparse, os, statistics, subprocess, sys

from benchlib import RAYLOG, ROOT


def cpu(binary, sink, tree, size_mb):
    cmd = [sys.executable, os.path.join(ROOT, "bench", "ship_bench.py"), "throughput", "--sink", sink,
           "--raylog", binary, "--size-mb", str(size_mb)]
    if tree:
        cmd += ["--corpus", tree]
    if sink.startswith("otlp"):
        cmd.append("--no-count")
    p = subprocess.run(cmd, capture_output=True, text=True)
    line = next((l for l in p.stdout.splitlines() if l.startswith("sink=")), None)
    if p.returncode != 0 or line is None:
        sys.exit("ship_bench.py throughput --sink %s failed: %s%s" % (sink, p.stdout, p.stderr))
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    return float(fields["cpu"].rstrip("s"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary", nargs="?", default=RAYLOG)
    ap.add_argument("--base", default="loki")
    ap.add_argument("--sink", default="otlp")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--size-mb", type=int, default=256)
    ap.add_argument("--corpus", help="a raycorpus.py tree (default: the --size-mb one in /tmp/raylog-bench)")
    a = ap.parse_args()
    binary = os.path.abspath(a.binary)
    if not os.access(binary, os.X_OK):
        sys.exit("%s is not executable: build it first (cargo build --release)" % binary)
    base, other, ratios = [], [], []
    print("pair  %s CPU-s  %s CPU-s  %s/%s" % (a.base, a.sink, a.sink, a.base))
    for r in range(a.rounds):
        order = (a.base, a.sink) if r % 2 == 0 else (a.sink, a.base)
        got = {s: cpu(binary, s, a.corpus, a.size_mb) for s in order}
        base.append(got[a.base])
        other.append(got[a.sink])
        ratios.append(got[a.sink] / got[a.base])
        print("%4d  %10.2f  %10.2f  %.3f" % (r + 1, got[a.base], got[a.sink], ratios[-1]))
    print("median ratio %.3f, ratio of the sums %.3f (%.2f / %.2f CPU-s), %d of %d pairs within 1.10"
          % (statistics.median(ratios), sum(other) / sum(base), sum(other), sum(base),
             sum(1 for x in ratios if x <= 1.10), len(ratios)))


if __name__ == "__main__":
    main()
