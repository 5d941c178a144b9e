#!/usr/bin/env python3
"""Measure `raylog ship` with the shared instruments (../shared/bench).

  ship_bench.py throughput [--size-mb 256] [--sink loki|loki-json|es|otlp|otlp-none|otlp-json|otlp-zlib1]
                           [--no-count] [--raylog PATH]
      `raylog ship --once` of a raycorpus.py tree into `capture_sink.py --discard`
      (or, for otlp*, bench/otlp_sink.py --count: gunzips and counts LogRecords; with
      --no-count it answers without decompressing anything): CPU seconds (user+sys of
      raylog alone, from wait4: the receiver's are not in it), MiB per CPU-second,
      peak RSS, and the record count the receiver saw vs the corpus manifest (otlp*
      fails on a mismatch). otlp = protobuf + gzip (the defaults), otlp-none =
      protobuf uncompressed, otlp-json = OTLP/JSON + gzip, otlp-zlib1 =
      protobuf + zlib's gzip level 1 (`compression_level = 1`).

  ship_bench.py live [--seconds 40] [--rate 2000] [--kill-every 4] [--sink loki|es|otlp|…]
      `raycorpus.py live` (rotation on, a new session midway) while raylog ships to
      `capture_sink.py --outage A:B --reject-every N --out received.ndjson`, killed
      with SIGKILL and restarted every --kill-every seconds; then
      `checkdelivery.py` reports written / delivered / lost / duplicates.

  ship_bench.py outage [--seconds 60] [--rate 5000] [--sink loki|es|otlp|…]
      The sink answers 503 for the whole run while lines arrive; reports raylog's
      peak RSS (VmHWM) and that it recovers and delivers everything afterwards.

  ship_bench.py real-loki [--size-mb 256] [--rate-limit BYTES]
      `raylog ship --once` of a tree generated with `--start now-3.2h --span-hours 3`
      (a catch-up or backfill: every file spans hours) into the real Loki 3.4.5 of
      ../shared/loki with stock limits; reports what Loki stored (queried back after
      POST /flush) against the records parsed, loki_discarded_samples_total by reason,
      dead-lettered records, CPU seconds, peak RSS and wall time. --rate-limit sets
      the sink's max_bytes_per_second (default: the sink's own, 3 MiB/s; 0: unpaced).

  ship_bench.py manyfiles --files 100000 [--nofile 1024] [--sessions 1]
  ship_bench.py soak --minutes 60 [--rate 2000]
      A node that ran for weeks (see bench/manyfiles.py).

  ship_bench.py storm [--writers 16] [--rate 3000] [--seconds 40] [--rotate-bytes 40000]
                      [--backups 1000] [--busy 0] [--max-open-files N] [--close-inactive 1s]
                      [--kill-every 0] [--sink es|loki] [--raylog PATH] [--keep] [--repeat 1]
      Every line exactly once while Ray rotates (x -> x.1 -> x.2 ...) under load:
      `raycorpus.py live` writers, --busy spinning processes, the agent (restarted
      after a SIGKILL every --kill-every s, if given) into capture_sink.py; after a
      catch-up, `checkdelivery.py --max-dup-ratio 0`. Any loss fails; any duplicate
      fails, except, with --kill-every, those re-sent from a kill's unacknowledged
      window (see bench/storm.py). Prints the duplicated and lost stretches.

  ship_bench.py pushback [--seconds 15] [--rate 2000] [--kills 5] [--reject-every 10]
                         [--outage 4:7] [--sink loki|es] [--extra TOML] [--repeat 1]
      A live writer, the agent SIGKILLed --kills times while the receiver answers 429
      to every Nth push and is down for a few seconds, default agent settings (Loki's
      pacing on). Lost lines, duplicates on the wire, and duplicates a Loki would
      store (the same line sent again as another entry). See bench/pushback.py.

Run `cargo build --release` first (or set RAYLOG_BIN). Standard library only.
"""
import argparse, json, os, signal, subprocess, sys, tempfile, time, urllib.parse, urllib.request

# The helpers every mode shares are in benchlib.py; the modes in their own files
# (manyfiles.py, storm.py) are imported by main() and import nothing from here.
from benchlib import (OTLP_KINDS, RAYLOG, SHARED, free_port, run_measured, sink_toml, start_sink, stats, vm_hwm,
                      write_config)


def throughput(a):
    corpus = a.corpus or "/tmp/raylog-bench/c%d" % a.size_mb
    if not os.path.exists(os.path.join(corpus, "manifest.json")):
        subprocess.run([sys.executable, os.path.join(SHARED, "raycorpus.py"), "generate", "--out", corpus,
                        "--size-mb", str(a.size_mb)], check=True)
    man = json.load(open(os.path.join(corpus, "manifest.json")))
    mib = man["bytes"] / 2**20
    port = free_port()
    otlp = a.sink in OTLP_KINDS
    sink = start_sink(port, *([] if otlp and a.no_count else ["--discard"]), kind=a.sink)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = write_config(tmp, [corpus], sink_toml(a.sink, port, old=True), '')
            code, ru, wall, err = run_measured([a.raylog, "ship", "--once", "--log-level", "warn", "--config", cfg])
            if code != 0:
                sys.exit("raylog ship failed (%d): %s" % (code, err))
        cpu = ru.ru_utime + ru.ru_stime
        st = stats(port)
    finally:
        sink.terminate()
    print("sink=%s input=%.1f MiB user=%.2fs sys=%.2fs cpu=%.2fs wall=%.2fs -> %.0f MiB/CPU-s, peak RSS %.1f MiB"
          % (a.sink, mib, ru.ru_utime, ru.ru_stime, cpu, wall, mib / cpu, ru.ru_maxrss / 1024))
    print("receiver stats:", json.dumps(st))
    print("manifest records:", man["records"])
    if otlp and not a.no_count and st["records"] != man["records"]:
        sys.exit("the receiver counted %d LogRecords, the manifest has %d" % (st["records"], man["records"]))


def live(a):
    tmp = tempfile.mkdtemp(prefix="raylog-live-")
    out_dir = os.path.join(tmp, "ray")
    received = os.path.join(tmp, "received.ndjson")
    port = free_port()
    outage = "%d:%d" % (a.seconds // 4, a.seconds // 4 + 5)
    sink = start_sink(port, "--out", received, "--outage", outage, "--reject-every", str(a.reject_every),
                      kind=a.sink)
    cfg = write_config(tmp, [out_dir], sink_toml(a.sink, port), 'idle_flush = "200ms"\n[batch]\nmax_wait = "200ms"\n[retry]\nmax_backoff = "2s"\n')
    writer = subprocess.Popen([sys.executable, os.path.join(SHARED, "raycorpus.py"), "live", "--out", out_dir,
                               "--rate", str(a.rate), "--seconds", str(a.seconds), "--rotate-bytes", str(a.rotate_bytes),
                               "--new-session-at", str(a.seconds // 2)], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    kills, peak = 0, 0.0
    while writer.poll() is None:
        agent = subprocess.Popen([RAYLOG, "ship", "--log-level", "warn", "--config", cfg], stdout=subprocess.DEVNULL)
        deadline = time.time() + a.kill_every
        while time.time() < deadline and writer.poll() is None:
            peak = max(peak, vm_hwm(agent.pid))
            time.sleep(0.2)
        agent.send_signal(signal.SIGKILL)
        agent.wait()
        kills += 1
    code, ru, wall, err = run_measured([RAYLOG, "ship", "--once", "--log-level", "warn", "--config", cfg])
    time.sleep(1)
    sink.terminate()
    print("kills=%d final --once exit=%d peak RSS during run %.1f MiB; outage %s s, reject-every %d"
          % (kills, code, peak, outage, a.reject_every))
    # Each SIGKILL may resend what was in flight (at-least-once), so the bound on
    # duplicates scales with the kills; loss must be zero.
    r = subprocess.run([sys.executable, os.path.join(SHARED, "checkdelivery.py"), "--manifest",
                        os.path.join(out_dir, "live_manifest.json"), "--received", received,
                        "--max-dup-ratio", "0.05"])
    sys.exit(r.returncode)


def outage(a):
    tmp = tempfile.mkdtemp(prefix="raylog-outage-")
    out_dir = os.path.join(tmp, "ray")
    received = os.path.join(tmp, "received.ndjson")
    port = free_port()
    sink = start_sink(port, "--out", received, "--outage", "0:%d" % a.seconds, kind=a.sink)
    cfg = write_config(tmp, [out_dir], sink_toml(a.sink, port), '[retry]\nmax_backoff = "2s"\n')
    writer = subprocess.Popen([sys.executable, os.path.join(SHARED, "raycorpus.py"), "live", "--out", out_dir,
                               "--rate", str(a.rate), "--seconds", str(a.seconds), "--rotate-bytes", "50000000"],
                              stdout=subprocess.DEVNULL)
    agent = subprocess.Popen([RAYLOG, "ship", "--log-level", "warn", "--config", cfg], stdout=subprocess.DEVNULL)
    peak = 0.0
    while writer.poll() is None:
        peak = max(peak, vm_hwm(agent.pid))
        time.sleep(0.5)
    time.sleep(8)  # the outage is over: it catches up
    peak = max(peak, vm_hwm(agent.pid))
    agent.send_signal(signal.SIGTERM)
    agent.wait()
    # Whatever was still queued resumes from the checkpoints: deliver it and exit.
    code, _, _, _ = run_measured([RAYLOG, "ship", "--once", "--log-level", "warn", "--config", cfg])
    time.sleep(1)
    sink.terminate()
    print("outage %ds at %d lines/s: raylog peak RSS %.1f MiB (final --once exit %d)" % (a.seconds, a.rate, peak, code))
    r = subprocess.run([sys.executable, os.path.join(SHARED, "checkdelivery.py"), "--manifest",
                        os.path.join(out_dir, "live_manifest.json"), "--received", received,
                        "--max-dup-ratio", "0.05"])
    sys.exit(r.returncode)


def loki_query(port, q):
    url = "http://127.0.0.1:%d/loki/api/v1/query?query=%s" % (port, urllib.parse.quote(q))
    r = json.loads(urllib.request.urlopen(url, timeout=120).read())["data"]["result"]
    return sum(int(x["value"][1]) for x in r)


def loki_discarded(port):
    out = {}
    for line in urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode().splitlines():
        if line.startswith("loki_discarded_samples_total{"):
            reason = line.split('reason="')[1].split('"')[0]
            out[reason] = out.get(reason, 0) + int(float(line.rsplit(" ", 1)[1]))
    return out


def count_records(corpus):
    # Streamed, not captured: this process's size is what a forked raylog starts
    # from, and ru_maxrss would report it.
    p = subprocess.Popen([RAYLOG, "parse", corpus], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    n = 0
    for chunk in iter(lambda: p.stdout.read(1 << 20), b""):
        n += chunk.count(b"\n")
    p.wait()
    return n


def real_loki(a):
    corpus = "/tmp/raylog-bench/recent%d" % a.size_mb
    # Regenerated every run: its times must end minutes ago, and Loki keeps 7 days.
    subprocess.run(["rm", "-rf", corpus], check=True)
    subprocess.run([sys.executable, os.path.join(SHARED, "raycorpus.py"), "generate", "--out", corpus,
                    "--size-mb", str(a.size_mb), "--start", "now-3.2h", "--span-hours", "3"],
                   check=True, stdout=subprocess.DEVNULL)
    man = json.load(open(os.path.join(corpus, "manifest.json")))
    mib = man["bytes"] / 2**20
    parsed = count_records(corpus)
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        pid = subprocess.run([os.path.join(SHARED, "..", "loki", "start-loki.sh"), str(port),
                              os.path.join(tmp, "loki")], capture_output=True, check=True, text=True).stdout.strip()
        try:
            sink = '[[sinks]]\ntype = "loki"\nendpoint = "http://127.0.0.1:%d"\n' % port
            if a.rate_limit >= 0:
                sink += "max_bytes_per_second = %d\n" % a.rate_limit
            cfg = write_config(tmp, [corpus], sink, "")
            code, ru, wall, err = run_measured([RAYLOG, "ship", "--once", "--log-level", "warn", "--config", cfg])
            if code != 0:
                sys.exit("raylog ship failed (%d): %s" % (code, err))
            dead_file = os.path.join(tmp, "state", "dead-letter.ndjson")
            dead = sum(1 for _ in open(dead_file)) if os.path.exists(dead_file) else 0
            urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:%d/flush" % port, method="POST"), timeout=60)
            stored, last = None, -1
            while stored != last:
                time.sleep(3)
                last, stored = stored, loki_query(port, 'sum(count_over_time({service_name="ray"}[7d]))')
            discarded = loki_discarded(port)
        finally:
            os.kill(int(pid), signal.SIGTERM)
            # Loki writes its data dir until it exits; the temp dir goes after it.
            for _ in range(100):
                if not os.path.exists("/proc/%s" % pid):
                    break
                time.sleep(0.1)
    cpu = ru.ru_utime + ru.ru_stime
    print("real Loki 3.4.5, stock limits: input=%.1f MiB (%d records parsed), every file spanning 3 h"
          % (mib, parsed))
    print("stored=%d (%s) discarded=%s dead_lettered=%d" % (stored, "all" if stored == parsed else
          "MISSING %d" % (parsed - stored), json.dumps(discarded), dead))
    print("raylog: cpu=%.2fs (user %.2f sys %.2f) wall=%.1fs peak RSS %.1f MiB"
          % (cpu, ru.ru_utime, ru.ru_stime, wall, ru.ru_maxrss / 1024))
    sys.exit(0 if stored == parsed and dead == 0 else 1)


SINKS = ["loki", "loki-json", "es"] + list(OTLP_KINDS)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp = ap.add_subparsers(dest="cmd", required=True)
    t = sp.add_parser("throughput")
    t.add_argument("--size-mb", type=int, default=256)
    t.add_argument("--corpus")
    t.add_argument("--sink", default="loki", choices=SINKS)
    t.add_argument("--no-count", action="store_true",
                   help="otlp*: the receiver counts requests and bytes only, decompressing nothing")
    t.add_argument("--raylog", default=RAYLOG, help="the binary to measure (default: this tree's release build)")
    l = sp.add_parser("live")
    l.add_argument("--seconds", type=int, default=40)
    l.add_argument("--rate", type=int, default=2000)
    l.add_argument("--kill-every", type=float, default=4)
    l.add_argument("--rotate-bytes", type=int, default=2_000_000)
    l.add_argument("--reject-every", type=int, default=50)
    l.add_argument("--sink", default="loki", choices=SINKS)
    o = sp.add_parser("outage")
    o.add_argument("--seconds", type=int, default=60)
    o.add_argument("--rate", type=int, default=5000)
    o.add_argument("--sink", default="loki", choices=SINKS)
    r = sp.add_parser("real-loki")
    r.add_argument("--size-mb", type=int, default=256)
    r.add_argument("--rate-limit", type=int, default=-1)
    import manyfiles, pushback, storm
    modes = {"throughput": throughput, "live": live, "outage": outage, "real-loki": real_loki}
    modes.update(manyfiles.add_parsers(sp))
    modes.update(storm.add_parser(sp))
    modes.update(pushback.add_parser(sp))
    a = ap.parse_args()
    modes[a.cmd](a)


if __name__ == "__main__":
    main()
