"""`ship_bench.py pushback`: restarts while the store pushes back (issue #57).

  pushback [--seconds 15] [--rate 2000] [--kills 5] [--reject-every 10]
           [--outage 4:7] [--sink loki|es|otlp] [--raylog PATH] [--keep] [--repeat 1]

  `raycorpus.py live` writes --rate lines/s for --seconds (8 Ray workers, half of them
  actors, rotation on, a new session halfway). `raylog ship` runs with its default
  settings (Loki's per-stream and tenant pacing on) into `capture_sink.py`, which
  answers 429 to every --reject-every'th push and 503 during --outage (seconds after
  the receiver started). The agent is SIGKILLed --kills times, evenly over the
  writing, and started again each time; after the writer ends, `ship --once` delivers
  the rest.

  Reports, from what the receiver stored:
  - lost: seq tokens written and never received (must be 0);
  - wire duplicates: copies received beyond the first (checkdelivery.py's count);
  - stored duplicates: copies a Loki would keep, i.e. one line sent again as a
    different entry (another stream, time or line). Loki stores an entry with the
    same stream, time and line once, so a copy that matches is no harm there;
  - for Elasticsearch, copies under another document id (a 409 answers the rest).

  Exit 1 on any loss, on any stored duplicate, or when wire duplicates exceed
  --max-wire-dup (a share of what was written; 0.01 by default).
"""
import json, os, shutil, signal, subprocess, sys, tempfile, time
from collections import defaultdict

from benchlib import RAYLOG, SHARED, free_port, start_sink, stats, write_config
import re

SEQ = re.compile(r"\bseq=(\d+)\b")


def add_parser(sp):
    s = sp.add_parser("pushback", help="SIGKILLs while the store answers 429s and is down")
    s.add_argument("--seconds", type=float, default=15)
    s.add_argument("--rate", type=int, default=2000)
    s.add_argument("--kills", type=int, default=5)
    s.add_argument("--reject-every", type=int, default=10, help="429 for every Nth push")
    s.add_argument("--outage", default="4:7", help="503 from second A to B of the receiver's life")
    s.add_argument("--rotate-bytes", type=int, default=2_000_000)
    s.add_argument("--sink", default="loki", choices=["loki", "es"])
    s.add_argument("--extra", default="", help="TOML appended to the sink's table (e.g. max_stream_bytes_per_second = 0)")
    s.add_argument("--max-wire-dup", type=float, default=0.01)
    s.add_argument("--raylog", default=RAYLOG)
    s.add_argument("--keep", action="store_true")
    s.add_argument("--repeat", type=int, default=1)
    return {"pushback": main}


def main(a):
    results = [run(a) for _ in range(a.repeat)]
    if a.repeat > 1:
        print("pushback: %d of %d runs passed" % (results.count(True), a.repeat))
    sys.exit(0 if all(results) else 1)


def sink_table(kind, port, extra):
    url = "http://127.0.0.1:%d" % port
    if kind == "loki":
        return '[[sinks]]\ntype = "loki"\nendpoint = "%s"\n%s\n' % (url, extra)
    return '[[sinks]]\ntype = "elasticsearch"\nendpoint = "%s"\n%s\n' % (url, extra)


def run(a):
    tmp = tempfile.mkdtemp(prefix="raylog-pushback-")
    out_dir = os.path.join(tmp, "ray")
    received = os.path.join(tmp, "received.ndjson")
    port = free_port()
    extra = ["--conflicts"] if a.sink == "es" else []
    sink = start_sink(port, "--out", received, "--outage", a.outage, "--reject-every", str(a.reject_every), *extra,
                      kind=a.sink)
    cfg = write_config(tmp, [out_dir], sink_table(a.sink, port, a.extra.replace("\\n", "\n")))
    log = open(os.path.join(tmp, "agent.log"), "ab")
    writer = subprocess.Popen([sys.executable, os.path.join(SHARED, "raycorpus.py"), "live", "--out", out_dir,
                               "--rate", str(a.rate), "--seconds", str(a.seconds), "--rotate-bytes",
                               str(a.rotate_bytes), "--new-session-at", str(a.seconds / 2)],
                              stdout=subprocess.DEVNULL)
    time.sleep(0.3)
    gap = a.seconds / (a.kills + 1)
    kills, at = 0, []
    try:
        while writer.poll() is None:
            agent = subprocess.Popen([a.raylog, "ship", "--log-level", "warn", "--config", cfg], stdout=subprocess.DEVNULL,
                                     stderr=log)
            deadline = time.time() + (gap if kills < a.kills else 3600)
            while time.time() < deadline and writer.poll() is None:
                time.sleep(0.05)
            if writer.poll() is None:
                agent.send_signal(signal.SIGKILL)
                agent.wait()
                kills += 1
                at.append(stats(port)["entries"])
            else:
                agent.send_signal(signal.SIGTERM)
            agent.wait()
        final = subprocess.run([a.raylog, "ship", "--once", "--log-level", "warn", "--config", cfg],
                               stdout=subprocess.DEVNULL, stderr=log).returncode
        time.sleep(0.5)
    finally:
        sink.terminate()
        log.close()
    ok = report(a, out_dir, received, kills, final)
    print("  entries received at each kill: %s" % at)
    if a.keep or not ok:
        print("kept %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return ok


def report(a, out_dir, received, kills, final):
    n = json.load(open(os.path.join(out_dir, "live_manifest.json")))["seq_count"]
    copies = defaultdict(list)
    for line in open(received, encoding="utf-8"):
        rec = json.loads(line)
        if rec.get("api") == "loki":
            text, entry = rec.get("line", ""), (rec.get("labels"), rec.get("ts"), rec.get("line"))
        else:
            text, entry = json.dumps(rec.get("doc", {}), sort_keys=True), rec.get("id")
        for s in set(int(m) for m in SEQ.findall(text)):
            if s < n:
                copies[s].append(entry)
    lost = n - len(copies)
    wire = sum(len(c) - 1 for c in copies.values())
    stored = sum(len(set(c)) - 1 for c in copies.values())
    moved = [s for s, c in copies.items() if len(set(c)) > 1]
    print("pushback: sink=%s written=%d kills=%d final_exit=%d lost=%d wire_duplicates=%d (%.2f%%) "
          "stored_duplicates=%d" % (a.sink, n, kills, final, lost, wire, 100.0 * wire / max(n, 1), stored))
    for s in sorted(moved)[:5]:
        print("  seq=%d sent as %d different entries: %s" % (s, len(set(copies[s])), sorted(set(map(str, copies[s])))[:3]))
    return lost == 0 and stored == 0 and wire <= a.max_wire_dup * n
