#!/usr/bin/env python3
"""A regression guard that cannot flake: instructions per MiB of `raylog parse`.

    python3 bench/instructions.py [--raylog target/release/raylog] [--update]

Generates (once, cached under $XDG_CACHE_HOME/raylog or ~/.cache/raylog) the fixed
16 MiB tree `raycorpus.py generate --size-mb 16 --seed 7` (byte-identical on every
run: fixed seed, fixed start time), runs `raylog parse --threads 1 TREE > /dev/null`
(one thread, so the count does not depend on the machine's cores) under
`valgrind --tool=callgrind`, and divides the instructions it counted by the tree's
MiB. Instruction counts do not depend on the machine's load or clock, so the same
binary gives the same figure (seen here: 424,127,226 twice, with the other core busy).

The figure is compared with `bench/instructions.json`: more than `tolerance` (5 %)
above it fails (exit 1), as does more than 5 % below it, because a speed-up should
be recorded on purpose so that it is kept. `--update` writes the new figure (commit
it with the change that moved it). Needs a release build: the figure is for the
release profile and this machine kind's toolchain. raycorpus.py is found through
RAYLOG_BENCH_DIR (as the tests do) or ../shared/bench.

Standard library only.
"""
import argparse, json, os, re, shutil, subprocess, sys

from benchlib import ROOT, SHARED

BASELINE = os.path.join(ROOT, "bench", "instructions.json")
SIZE_MB, SEED = 16, 7


def tree():
    """The fixed tree, generated once into the cache."""
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "raylog")
    out = os.path.join(cache, "instructions-tree-%dmb-seed%d" % (SIZE_MB, SEED))
    if not os.path.exists(os.path.join(out, "manifest.json")):
        bench = os.environ.get("RAYLOG_BENCH_DIR") or SHARED
        gen = os.path.join(bench, "raycorpus.py")
        if not os.path.exists(gen):
            sys.exit("raycorpus.py not found in %s: set RAYLOG_BENCH_DIR to ../shared/bench" % bench)
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run([sys.executable, gen, "generate", "--out", out, "--size-mb", str(SIZE_MB),
                        "--seed", str(SEED)], check=True, stdout=subprocess.DEVNULL)
    return out


def instructions(raylog, path):
    """Instructions callgrind counted for `raylog parse path`."""
    if not shutil.which("valgrind"):
        sys.exit("valgrind not found: install it (Debian: apt-get install valgrind)")
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", raylog, "parse", "--threads", "1", path]
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit("raylog parse under valgrind failed (%d): %s" % (p.returncode, p.stderr[-2000:]))
    m = re.search(r"Collected : (\d+)", p.stderr)
    if not m:
        sys.exit("callgrind printed no 'Collected' line: %s" % p.stderr[-2000:])
    return int(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--raylog", default=os.path.join(ROOT, "target", "release", "raylog"))
    ap.add_argument("--update", action="store_true", help="store the figure measured now in %s" % BASELINE)
    a = ap.parse_args()
    path = tree()
    mib = json.load(open(os.path.join(path, "manifest.json")))["bytes"] / 2**20
    n = instructions(a.raylog, path)
    per_mib = n / mib
    print("raylog parse: %d instructions for %.2f MiB = %.0f per MiB" % (n, mib, per_mib))
    if a.update:
        with open(BASELINE, "w") as f:
            json.dump({"parse_instructions_per_mib": round(per_mib), "tolerance": 0.05,
                       "tree": "raycorpus.py generate --size-mb %d --seed %d" % (SIZE_MB, SEED)}, f, indent=2)
            f.write("\n")
        print("stored in %s" % BASELINE)
        return
    base = json.load(open(BASELINE))
    want, tol = base["parse_instructions_per_mib"], base["tolerance"]
    ratio = per_mib / want
    print("stored: %.0f per MiB; now %.3f of it (tolerance ±%.0f %%)" % (want, ratio, tol * 100))
    if ratio > 1 + tol:
        sys.exit("raylog parse runs %.1f %% more instructions per MiB than bench/instructions.json records. "
                 "Find what made it slower, or, if the change is worth it, record the new figure with "
                 "`python3 bench/instructions.py --update` and say why in the commit." % ((ratio - 1) * 100))
    if ratio < 1 - tol:
        sys.exit("raylog parse runs %.1f %% fewer instructions per MiB than recorded: keep the gain by "
                 "recording it with `python3 bench/instructions.py --update`." % ((1 - ratio) * 100))


if __name__ == "__main__":
    main()
