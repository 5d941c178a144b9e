"""`ship_bench.py storm`: Ray rotating its worker files fast, on a busy machine.

  storm [--writers 16] [--rate 3000] [--seconds 40] [--rotate-bytes 40000]
        [--backups 1000] [--busy 0] [--max-open-files N] [--close-inactive 1s]
        [--kill-every 0] [--sink es|loki] [--raylog PATH] [--keep] [--repeat 1]

  `raycorpus.py live` writes --writers Ray workers (a .out and a .err each, plus
  raylet.out) at --rate lines/s for --seconds, rotating every file at --rotate-bytes
  with its backups shifted (x -> x.1 -> x.2 ..., up to --backups). --busy processes
  spin on the CPU meanwhile. `raylog ship` (the agent, not --once; [api] on a free
  port) ships the tree to `capture_sink.py --out received.ndjson` with its default
  settings, except `source.max_open_files` and `source.close_inactive` when given.
  When the writers are done the bench waits until the agent caught up (/metrics:
  raylog_bytes_behind 0, nothing held, records sent and received unchanged for 3 s),
  stops it with SIGTERM, and runs `checkdelivery.py --max-dup-ratio 0`.

  --kill-every N: SIGKILL the agent every N seconds while the writers run, and start
  it again. Just before each kill the bench reads /metrics
  (raylog_sink_records_sent_total: records the sink acknowledged), and after it the
  number of records the receiver has. With one sink sending one batch at a time, the
  records the receiver has but the agent did not see acknowledged are the last
  `received - acknowledged` records of that run: its window. A duplicate is explained
  by kill k when its earlier copy is in kill k's window and its next copy arrived
  after kill k (from a later run of the agent, re-sending from the checkpoint).
  Any other duplicate is unexplained.

  Prints the duplicated stretches (file and offsets of both copies, document ids) and,
  for lost records, where they are on disk, then one result line. Exit 1 on any loss,
  on any duplicate without --kill-every, or on any unexplained duplicate with it.
"""
import bisect, json, os, re, shutil, signal, subprocess, sys, tempfile, time, urllib.request
from collections import Counter, defaultdict

from benchlib import RAYLOG, SHARED, free_port, sink_toml, start_sink, stats

SEQ = re.compile(r"\bseq=(\d+)\b")
HEX56 = re.compile(r"\b[0-9a-f]{56}\b")
SETTLE = 3.0          # seconds of nothing new before the agent counts as caught up
CATCH_UP = 120.0      # at most this long after the writers finished
STOP_GRACE = 30.0     # SIGTERM, then SIGKILL after this long


def add_parser(sp):
    s = sp.add_parser("storm", help="rotation storm: every line exactly once")
    s.add_argument("--writers", type=int, default=16, help="Ray workers writing (raycorpus.py live --workers)")
    s.add_argument("--rate", type=int, default=3000, help="lines per second, all writers together")
    s.add_argument("--seconds", type=float, default=40)
    s.add_argument("--rotate-bytes", type=int, default=40000)
    s.add_argument("--backups", type=int, default=1000)
    s.add_argument("--busy", type=int, default=0, help="busy-loop processes loading the CPU")
    s.add_argument("--max-open-files", type=int, help="source.max_open_files (default: the agent's)")
    s.add_argument("--close-inactive", help='source.close_inactive, e.g. "1s" (default: the agent\'s)')
    s.add_argument("--kill-every", type=float, default=0, help="SIGKILL and restart the agent every N s (0: never)")
    s.add_argument("--sink", default="es", choices=["es", "loki"])
    s.add_argument("--raylog", default=RAYLOG, help="the raylog binary (default: $RAYLOG_BIN or target/release/raylog)")
    s.add_argument("--keep", action="store_true", help="keep the temp dir (tree, received.ndjson, agent.log)")
    s.add_argument("--repeat", type=int, default=1, help="run this many times; fail if any run fails")
    return {"storm": main}


def main(a):
    results = [run(a) for _ in range(a.repeat)]
    if a.repeat > 1:
        print("storm: %d of %d runs passed" % (results.count(True), a.repeat))
    sys.exit(0 if all(results) else 1)


# ---------------------------------------------------------------------- agent

def scrape(port, timeout=2.0):
    """/metrics as {name: value}, labelled series summed over their labels."""
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=timeout).read().decode()
    out = defaultdict(float)
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, v = line.rpartition(" ")
            out[name.split("{")[0]] += float(v)
    return out


class Agent:
    """The `raylog ship` process, restarted after each kill; CPU and RSS add up over runs."""

    def __init__(self, a, cfg, api, log):
        self.cmd = [a.raylog, "ship", "--log-level", "warn", "--config", cfg]
        self.api, self.log = api, log
        self.p = None
        self.cpu_user = self.cpu_sys = 0.0
        self.peak_rss = 0.0  # MiB
        self.exits = []

    def start(self):
        with open(self.log, "ab") as err:
            self.p = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.p.poll() is not None:
                sys.exit("raylog ship exited at start (%s); see %s" % (self.p.returncode, self.log))
            try:
                return scrape(self.api, 0.5)
            except OSError:
                time.sleep(0.05)
        sys.exit("raylog ship: no /metrics on port %d after 15 s" % self.api)

    def _reap(self, block):
        pid, status, ru = os.wait4(self.p.pid, 0 if block else os.WNOHANG)
        if pid == 0:
            return False
        self.cpu_user += ru.ru_utime
        self.cpu_sys += ru.ru_stime
        self.peak_rss = max(self.peak_rss, ru.ru_maxrss / 1024)
        self.exits.append(os.waitstatus_to_exitcode(status))
        self.p.returncode = self.exits[-1]
        return True

    def kill(self):
        os.kill(self.p.pid, signal.SIGKILL)
        self._reap(True)

    def stop(self):
        """SIGTERM; seconds until it exited (SIGKILL after STOP_GRACE: None)."""
        t0 = time.time()
        os.kill(self.p.pid, signal.SIGTERM)
        while time.time() - t0 < STOP_GRACE:
            if self._reap(False):
                return time.time() - t0
            time.sleep(0.05)
        self.kill()
        return None


class Lines:
    """Counts the lines of the receiver's --out file as it grows."""

    def __init__(self, path):
        self.path, self.pos, self.n = path, 0, 0

    def count(self):
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1
            self.n += chunk.count(b"\n", 0, end)
            self.pos += end
        return self.n


# ------------------------------------------------------------------------ run

def config(tmp, out_dir, a, api, sink_port):
    extra = ""
    if a.max_open_files is not None:
        extra += "max_open_files = %d\n" % a.max_open_files
    if a.close_inactive is not None:
        extra += "close_inactive = %s\n" % json.dumps(a.close_inactive)
    cfg = os.path.join(tmp, "raylog.toml")
    with open(cfg, "w") as f:
        f.write('[source]\npaths = %s\nstate_dir = %s\n%s\n[api]\naddress = "127.0.0.1:%d"\n\n%s'
                % (json.dumps([out_dir]), json.dumps(os.path.join(tmp, "state")), extra, api,
                   sink_toml(a.sink, sink_port, old=True)))
    return cfg


def settings(a):
    s = "writers=%d rate=%d seconds=%g rotate=%d backups=%d busy=%d sink=%s" % (
        a.writers, a.rate, a.seconds, a.rotate_bytes, a.backups, a.busy, a.sink)
    if a.max_open_files is not None:
        s += " max_open_files=%d" % a.max_open_files
    if a.close_inactive is not None:
        s += " close_inactive=%s" % a.close_inactive
    if a.kill_every:
        s += " kill_every=%g" % a.kill_every
    return s


def run(a):
    tmp = tempfile.mkdtemp(prefix="raylog-storm-")
    out_dir = os.path.join(tmp, "ray")
    os.makedirs(out_dir)
    received = os.path.join(tmp, "received.ndjson")
    sink_port, api = free_port(), free_port()
    sink = start_sink(sink_port, "--out", received)
    cfg = config(tmp, out_dir, a, api, sink_port)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.busy)]
    agent = Agent(a, cfg, api, os.path.join(tmp, "agent.log"))
    lines = Lines(received)
    kills = []        # per kill: {"t", "cut", "run_received", "acked", "read"}
    caught_up, stopped = (None, ""), None
    try:
        agent.start()
        t0 = time.time()
        writer = subprocess.Popen([sys.executable, os.path.join(SHARED, "raycorpus.py"), "live", "--out", out_dir,
                                   "--workers", str(a.writers), "--rate", str(a.rate), "--seconds", str(a.seconds),
                                   "--rotate-bytes", str(a.rotate_bytes), "--backups", str(a.backups)],
                                  stdout=subprocess.DEVNULL)
        next_kill = time.time() + a.kill_every if a.kill_every else None
        while writer.poll() is None:
            time.sleep(0.05)
            if next_kill and time.time() >= next_kill:
                kills.append(kill_and_restart(agent, api, lines, kills, t0))
                next_kill = time.time() + a.kill_every
        if writer.returncode != 0:
            sys.exit("raycorpus.py live failed (%d)" % writer.returncode)
        caught_up = catch_up(agent, api, sink_port)
        stopped = agent.stop()
    finally:
        if agent.p and agent.p.returncode is None:
            agent.kill()
        for b in busy:
            b.kill()
            b.wait()
        sink.terminate()
        sink.wait()
    ok = report(a, tmp, out_dir, received, agent, kills, caught_up, stopped)
    if a.keep:
        print("kept", tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return ok


def kill_and_restart(agent, api, lines, kills, t0):
    """SIGKILL right after reading what the sink acknowledged; count what arrived; start again."""
    try:
        m = scrape(api)
        acked, read = m["raylog_sink_records_sent_total"], m["raylog_records_read_total"]
    except OSError:
        acked = read = None                       # no bound for this kill
    agent.kill()
    # The receiver may still be decoding a request the agent sent before it died:
    # wait until its file stops growing, so the cut splits the runs exactly.
    cut, since = lines.count(), time.time()
    while time.time() - since < 0.5:
        time.sleep(0.1)
        if lines.count() != cut:
            cut, since = lines.n, time.time()
    prev = kills[-1]["cut"] if kills else 0
    agent.start()
    return {"t": time.time() - t0, "cut": cut, "run_received": cut - prev, "acked": acked, "read": read}


def catch_up(agent, api, sink_port):
    """Waits until the agent is caught up: (seconds it took or None if not by the
    deadline, what it waited for last: "behind", "held" or "sending")."""
    t0 = time.time()
    last, since, why = None, time.time(), {}
    while time.time() - t0 < CATCH_UP:
        try:
            m = scrape(api)
            now = (m["raylog_sink_records_sent_total"], stats(sink_port)["entries"])
            busy = [k for k, v in (("behind", m["raylog_bytes_behind"]), ("held", m["raylog_records_held"])) if v]
        except OSError:
            now, busy = None, ["metrics"]
        if now != last:
            busy.append("sending")
        for k in busy:
            why[k] = time.time() - t0
        if busy:
            last, since = now, time.time()
        elif time.time() - since >= SETTLE:
            return since - t0, " ".join("%s until %.1fs" % kv for kv in sorted(why.items(), key=lambda kv: kv[1]))
        time.sleep(0.25)
    return None, " ".join("%s until %.1fs" % kv for kv in sorted(why.items(), key=lambda kv: kv[1]))


# --------------------------------------------------------------------- report

def short(name):
    """A file name with its 56-hex worker id cut to 8."""
    return HEX56.sub(lambda m: m.group(0)[:8], name or "?")


def where(rec):
    """(file, offset, doc id) of a received record, as far as the sink tells."""
    if rec.get("api") == "es":
        d = rec.get("doc") or {}
        return d.get("file"), d.get("offset"), rec.get("id")
    meta = rec.get("meta") or {}
    lab = rec.get("labels")
    f = meta.get("file") or (lab.get("file") if isinstance(lab, dict) else None)
    if f is None and isinstance(lab, str):
        m = re.search(r'file="([^"]*)"', lab)
        f = m and m.group(1)
    off = meta.get("offset")
    return f, int(off) if off not in (None, "") else None, None


def seqs_of(rec):
    if rec.get("api") == "loki":
        texts = [rec.get("line", "")] + [str(v) for v in (rec.get("meta") or {}).values()]
    else:
        texts = [json.dumps(rec.get("doc", {}), ensure_ascii=False)]
    return {int(m) for t in texts for m in SEQ.findall(t)}


def on_disk(out_dir, wanted):
    """Where the wanted seqs are in the tree now: {seq: (file, byte offset)}."""
    found = {}
    for root, _, files in os.walk(out_dir):
        for name in files:
            if name.endswith(".json"):
                continue
            path = os.path.join(root, name)
            off = 0
            with open(path, "rb") as f:
                for line in f:
                    for m in SEQ.finditer(line.decode("utf-8", "replace")):
                        s = int(m.group(1))
                        if s in wanted:
                            found[s] = (os.path.relpath(path, out_dir).split("/logs/", 1)[-1], off)
                    off += len(line)
    return found


def stretches(items):
    """Groups (key, position, detail) into runs of consecutive positions with one key."""
    runs = []
    for key, pos, det in sorted(items, key=lambda x: (x[0], x[1])):
        if runs and runs[-1]["key"] == key and pos - runs[-1]["last"] <= 50:
            r = runs[-1]
            r["n"] += 1
            r["last"] = pos
            r["dets"].append(det)
        else:
            runs.append({"key": key, "first": pos, "last": pos, "n": 1, "dets": [det]})
    return runs


def kind(name):
    """raylet.out, worker .out, worker .err, ... of a file name (rotation suffix dropped)."""
    base = re.sub(r"\.\d+$", "", name or "?")
    return "worker " + base.rsplit(".", 1)[-1] if base.startswith("worker-") else base


def span(offs):
    offs = [o for o in offs if o is not None]
    return "%d..%d" % (min(offs), max(offs)) if offs else "?"


def report(a, tmp, out_dir, received, agent, kills, caught_up, stopped):
    man_path = os.path.join(out_dir, "live_manifest.json")
    man = json.load(open(man_path))
    chk = subprocess.run([sys.executable, os.path.join(SHARED, "checkdelivery.py"), "--manifest", man_path,
                          "--received", received, "--max-dup-ratio", "0"], capture_output=True, text=True)
    print("checkdelivery:", chk.stdout.strip(), chk.stderr.strip())
    written = man["seq_count"]

    # Every received record: its seqs and where it came from.
    copies = defaultdict(list)             # seq -> [line index]
    info = []                              # line index -> (file, offset, id)
    with open(received, encoding="utf-8") as f:
        for i, line in enumerate(f):
            rec = json.loads(line)
            info.append(where(rec))
            for s in seqs_of(rec):
                copies[s].append(i)
    cuts = [k["cut"] for k in kills]
    run_of = lambda i: bisect.bisect_right(cuts, i)   # 0: before the first kill
    windows = []
    for k in kills:
        w = k["run_received"] if k["acked"] is None else max(0, k["run_received"] - int(k["acked"]))
        windows.append((k["cut"] - w, k["cut"]))
    lost = [s for s in range(written) if not copies.get(s)]
    dup_pairs = []                          # (seq, earlier line, later line)
    for s, pos in copies.items():
        for p, q in zip(pos, pos[1:]):
            dup_pairs.append((s, p, q))
    by_kill = Counter()
    unexplained = []
    for s, p, q in dup_pairs:
        k = run_of(p)
        if k < len(kills) and windows[k][0] <= p < windows[k][1] and run_of(q) > k:
            by_kill[k] += 1
        else:
            unexplained.append((s, p, q))
    dups = len(dup_pairs)

    if kills:
        print("kills (t: received in that run, acknowledged at the last /metrics, window = received - acknowledged,"
              " duplicates explained):")
        for k, kl in enumerate(kills):
            print("  kill %d at %5.1fs: received %6d  acknowledged %s  read %s  window %5d  explained %5d" % (
                k + 1, kl["t"], kl["run_received"], "?" if kl["acked"] is None else "%6d" % kl["acked"],
                "?" if kl["read"] is None else "%6d" % kl["read"], windows[k][1] - windows[k][0], by_kill[k]))

    place = on_disk(out_dir, set(lost) | {s for s, _, _ in unexplained}) if lost or unexplained else {}
    if unexplained:
        print("duplicated stretches not explained by a kill (file offsets: first copy -> next copy):")
        runs = stretches([((info[p][0], info[q][0], run_of(p), run_of(q)), p, (s, p, q)) for s, p, q in unexplained])
        runs.sort(key=lambda r: -r["n"])
        same_id = sum(1 for s, p, q in unexplained if info[p][2] is not None and info[p][2] == info[q][2])
        same_off = sum(1 for s, p, q in unexplained if info[p][1] is not None and info[p][1] == info[q][1])
        renamed = sum(1 for s, p, q in unexplained if info[p][0] != info[q][0])
        print("  %d copies: %d with the same document id, %d at the same offset, %d under another file name;"
              " %d stretches; the biggest (received line numbers; run: agent runs between kills;"
              " now: where the lines are on disk at the end):"
              % (len(unexplained), same_id, same_off, renamed, len(runs)))
        kinds = Counter()
        for s, p, q in unexplained:
            kinds[kind(info[p][0])] += 1
        print("  by file: %s; copies of a record: %s; stretches from offset 0: %d" % (
            ", ".join("%s %d" % kv for kv in kinds.most_common()),
            ", ".join("%dx %d" % kv for kv in sorted(Counter(len(copies[s]) for s in {s for s, _, _ in unexplained}).items())),
            sum(1 for r in runs if 0 in {info[q][1] for _, _, q in r["dets"]})))
        shown = Counter()
        for r in runs:
            f1, f2, r1, r2 = r["key"]
            shown[kind(f1)] += 1
            if shown[kind(f1)] > 4:
                continue
            d = r["dets"]
            now = Counter(place.get(s, ("?",))[0] for s, _, _ in d).most_common(1)[0][0]
            print("  %5d records  %s @%s -> %s @%s  lines %d..%d -> %d..%d (%d later)%s%s  now %s @%s" % (
                r["n"], short(f1), span(info[p][1] for _, p, _ in d), short(f2), span(info[q][1] for _, _, q in d),
                r["first"], r["last"], min(q for _, _, q in d), max(q for _, _, q in d), min(q - p for _, p, q in d),
                " run %d -> %d" % (r1, r2) if kills else "",
                " same ids" if all(info[p][2] is not None and info[p][2] == info[q][2] for _, p, q in d) else "",
                short(now), span(place.get(s, (None, None))[1] for s, _, _ in d)))
        if len(runs) > sum(min(n, 4) for n in shown.values()):
            print("  ... %d more stretches" % (len(runs) - sum(min(n, 4) for n in shown.values())))
    if lost:
        runs = stretches([(place.get(s, ("?", None))[0], s, (s, place.get(s, ("?", None))[1])) for s in lost])
        runs.sort(key=lambda r: -r["n"])
        print("lost records, where they are on disk now (%d stretches):" % len(runs))
        for r in runs[:12]:
            print("  %5d records  seq %d..%d  %s @%s" % (r["n"], r["first"], r["last"], short(r["key"]),
                                                      span(o for _, o in r["dets"])))
    warns = Counter()
    if os.path.exists(os.path.join(tmp, "agent.log")):
        for line in open(os.path.join(tmp, "agent.log"), errors="replace"):
            if " WARN " in line or " ERROR " in line:
                warns[re.sub(r"\d+", "N", HEX56.sub("<id>", line.split(":", 3)[-1].strip()))[:160]] += 1
    for w, n in warns.most_common(5):
        print("agent log (%dx): %s" % (n, w))

    explained = dups - len(unexplained)
    pct = 100.0 * dups / written if written else 0.0
    ok = not lost and caught_up[0] is not None and (not unexplained if a.kill_every else dups == 0)
    line = "storm %s: written=%d lost=%d duplicated=%d (%.2f%%)" % (settings(a), written, len(lost), dups, pct)
    if a.kill_every:
        line += " kills=%d explained_by_kills=%d unexplained=%d" % (len(kills), explained, len(unexplained))
    line += " rotations=%d cpu=%.1fs (user %.1f sys %.1f) peak_rss=%.1fMiB" % (
        man.get("rotations", 0), agent.cpu_user + agent.cpu_sys, agent.cpu_user, agent.cpu_sys, agent.peak_rss)
    took, why = caught_up
    line += " caught_up=%s%s stop=%s" % ("no" if took is None else "%.1fs" % took, " (%s)" % why if why else "",
                                        "killed" if stopped is None else "%.1fs exit %d" % (stopped, agent.exits[-1]))
    print(line + (" OK" if ok else " FAIL"))
    return ok
