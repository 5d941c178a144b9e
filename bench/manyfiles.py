"""`ship_bench.py manyfiles` and `ship_bench.py soak`: a node that ran for weeks.

  manyfiles --files 100000 [--nofile 1024] [--lines 5] [--sessions 1] [--delete N] [--idle 60]
      A session (or --sessions of them) of finished worker files, --lines lines each,
      every line a unique `seq=<n>` token, shipped by `raylog ship` (the agent, not
      --once) running under an open-files limit of --nofile into capture_sink.py.
      Reports: catch-up time (until every line arrived), peak fds and RSS, CPU and
      bytes written to disk (/proc/PID/io write_bytes) over --idle (60) quiet
      seconds, the latency of a new worker file and of one in a new session dir, of
      lines appended to random old files, and, after a SIGTERM, the
      restart time (start until an appended line arrives) and what was sent again.
      While the catch-up runs, a line is appended to raylet.out every 10 s and one new
      worker file is written: their latencies show whether live files wait for the
      backlog. --delete N deletes N read files at once after the appends and reports
      when the agent has forgotten them (forget_after 1m) and its RSS then.
      checkdelivery.py counts loss and duplicates at the end.

  soak --minutes 60 [--rate 2000] [--nofile 1024]
      Workers keep starting and finishing (each writes for ~30 s, then its files are
      done), raylet.out rotates (`.1` .. `.5`), the oldest finished worker files are
      deleted past --keep-files, at --rate lines per second. Every minute: RSS, fds,
      files tracked, checkpoint bytes on disk, lines behind. Then checkdelivery.py.
"""
import json, os, random, resource, signal, subprocess, sys, tempfile, time

from benchlib import RAYLOG, SHARED, free_port, start_sink, stats

SESSION = "session_2026-11-20_08-00-00_000000_1"


def worker_name(i, session=0):
    wid = "%056x" % (0xA000000 + session * 10_000_000 + i)
    return "worker-%s-01000000-%d" % (wid, 10_000 + i)


def generate(root, files, lines, sessions):
    """Finished worker .out files; returns how many seq tokens were written.

    Each starts as Ray starts a worker's log: a `:job_id:` line, and for every
    other one (an actor's) an `:actor_name:` line. They are not records, but the
    agent keeps the context they set for each file it has read."""
    seq = 0
    per = files // sessions
    for s in range(sessions):
        logs = os.path.join(root, "session_2026-11-%02d_08-00-00_000000_%d" % (1 + s % 28, s + 1), "logs")
        os.makedirs(logs, exist_ok=True)
        with open(os.path.join(logs, "raylet.out"), "w") as f:
            f.write("[2026-11-20 08:00:00,000 I 1 1] (raylet) main.cc:1: raylet started seq=%d\n" % seq)
            seq += 1
        for i in range(per):
            with open(os.path.join(logs, worker_name(i, s) + ".out"), "w") as f:
                f.write(":job_id:01000000\n" + (":actor_name:Trainer\n" if i % 2 else ""))
                f.write("".join("finished work item %d seq=%d\n" % (k, seq + k) for k in range(lines)))
            seq += lines
    return seq


def limit_nofile(n):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def config(tmp, paths, port, extra="", api=""):
    cfg = os.path.join(tmp, "raylog.toml")
    with open(cfg, "w") as f:
        f.write('[source]\npaths = %s\nstate_dir = "%s"\n%s\n[api]\naddress = "%s"\n'
                '[[sinks]]\ntype = "loki"\nendpoint = "http://127.0.0.1:%d"\nmax_bytes_per_second = 0\n'
                'max_stream_bytes_per_second = 0\nreject_old_after = "3650d"\n' % (json.dumps(paths), os.path.join(tmp, "state"), extra, api, port))
    return cfg


def metric(api, name):
    """One of the agent's metrics (-1 when it has none of that name)."""
    import urllib.request
    for line in urllib.request.urlopen("http://%s/metrics" % api, timeout=5).read().decode().splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    return -1


def files_watched(api):
    """The agent's `raylog_files_watched` gauge."""
    return metric(api, "raylog_files_watched")


def delete_at_scale(a, proc, api, logs):
    """Deletes --delete of the (already read) worker files at once; reports how long
    until the agent forgot them (`forget_after` is 1m here), its RSS then and 90 s
    later. Returns the files left."""
    before, rss0 = files_watched(api), proc.rss()
    gone, logs = logs[:a.delete], logs[a.delete:]
    t0 = time.monotonic()
    for path in gone:
        os.unlink(path)
    print("deleted %d files in %.1f s; tracked %d, RSS %.1f MiB" % (len(gone), time.monotonic() - t0, before, rss0))
    while time.monotonic() - t0 < 300 and files_watched(api) > before - len(gone):
        time.sleep(1)
    time.sleep(5)
    print("deletion: tracked %d after %.0f s (%d dropped), RSS %.1f MiB (before %.1f), CPU so far %.1f s"
          % (files_watched(api), time.monotonic() - t0, before - files_watched(api), proc.rss(), rss0, proc.cpu()))
    # A dropped file's position is kept where files resume from for `forget_after`
    # more (a file found again continues where it stopped): memory comes back after.
    t1, low = time.monotonic(), proc.rss()
    while time.monotonic() - t1 < 90:
        time.sleep(5)
        low = min(low, proc.rss())
    print("deletion: RSS %.1f MiB %.0f s after the drop (lowest %.1f)" % (proc.rss(), time.monotonic() - t1, low))
    return logs


class Proc:
    """/proc figures of a running raylog."""

    def __init__(self, pid):
        self.pid = pid

    def _status(self, key):
        for line in open("/proc/%d/status" % self.pid):
            if line.startswith(key):
                return int(line.split()[1]) / 1024
        return 0.0

    def rss(self):
        return self._status("VmRSS:")

    def hwm(self):
        return self._status("VmHWM:")

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.pid))

    def cpu(self):
        f = open("/proc/%d/stat" % self.pid).read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    def written(self):
        for line in open("/proc/%d/io" % self.pid):
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
        return 0


def start(cfg, nofile, err):
    return subprocess.Popen([RAYLOG, "ship", "--log-level", "warn", "--config", cfg], stdout=subprocess.DEVNULL,
                            stderr=err, preexec_fn=limit_nofile(nofile))


def wait_entries(port, want, timeout, on_tick=None):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if stats(port)["entries"] >= want:
            return time.monotonic() - t0
        if on_tick:
            on_tick()
        time.sleep(0.2)
    return None


def seen(out, token, pos):
    """Whether `token` is in the receiver's file past `pos`; returns (found, new pos)."""
    with open(out, "rb") as f:
        f.seek(pos)
        data = f.read()
    cut = data.rfind(b"\n") + 1
    return token.encode() in data[:cut], pos + cut


def append_latency(out, path, seq, head=""):
    """Appends one line with token seq=N to `path` (after `head`, for a new file);
    seconds until the receiver has it."""
    pos = os.path.getsize(out)
    t0 = time.monotonic()
    with open(path, "a") as f:
        f.write("%sappended later seq=%d\n" % (head, seq))
    while time.monotonic() - t0 < 30:
        # The token ends the line: in the receiver's JSON, a quote follows it.
        found, pos = seen(out, 'seq=%d"' % seq, pos)
        if found:
            return time.monotonic() - t0
        time.sleep(0.02)
    return float("inf")


class LiveProbes:
    """While a catch-up runs: every `every` seconds a line appended to raylet.out (a
    live file beside the backlog), and once a new worker file; each line's latency
    until the receiver has it (the issue's "live files are not starved")."""

    def __init__(self, out, root, seq, every=10.0):
        self.out, self.pos, self.seq, self.every = out, 0, seq, every
        self.logs = next(os.path.join(d, "") for d, _, fs in os.walk(root) if "raylet.out" in fs)
        self.next = time.monotonic() + every
        self.pending, self.lat, self.first = {}, {"raylet.out": [], "new worker file": []}, None
        self.worker_done = False

    def _write(self, path, what):
        token = 'seq=%d"' % self.seq
        with open(path, "a") as f:
            f.write("[%s,000 I 1 1] (raylet) main.cc:1: live probe seq=%d\n"
                    % (time.strftime("%Y-%m-%d %H:%M:%S"), self.seq) if what == "raylet.out"
                    else "live worker print seq=%d\n" % self.seq)
        self.pending[token] = (what, time.monotonic())
        self.seq += 1

    def tick(self, entries):
        now = time.monotonic()
        if self.first is None and entries > 0:
            self.first = now
        if now >= self.next:
            self.next = now + self.every
            self._write(self.logs + "raylet.out", "raylet.out")
            if not self.worker_done:
                self.worker_done = True
                self._write(self.logs + worker_name(9_999_999, 99) + ".out", "new worker file")
        if self.pending:
            with open(self.out, "rb") as f:
                f.seek(self.pos)
                data = f.read(256 << 20)
            cut = data.rfind(b"\n") + 1
            self.pos += cut
            for token in [t for t in self.pending if t.encode() in data[:cut]]:
                what, t0 = self.pending.pop(token)
                self.lat[what].append(now - t0)

    def report(self, t0):
        print("first record after %s" % ("%.1f s" % (self.first - t0) if self.first else "never"))
        for what, lat in self.lat.items():
            lost = sum(1 for w, _ in self.pending.values() if w == what)
            if lat or lost:
                print("during the catch-up, a line appended to %s: max %.2f s, median %.2f s over %d (%d not arrived)"
                      % (what, max(lat or [0]), sorted(lat or [0])[len(lat) // 2], len(lat), lost))


def stop(p, sink):
    """SIGTERM to raylog (SIGKILL if it does not exit within a minute), then the sink."""
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
    sink.terminate()


def check_delivery(tmp, out, seq, keep):
    """checkdelivery.py over seq tokens 0..seq-1 (no duplicate allowed); exits with its code."""
    with open(os.path.join(tmp, "live_manifest.json"), "w") as f:
        json.dump({"seq_count": seq}, f)
    r = subprocess.run([sys.executable, os.path.join(SHARED, "checkdelivery.py"), "--manifest",
                        os.path.join(tmp, "live_manifest.json"), "--received", out, "--max-dup-ratio", "0"])
    print("raylog stderr (first lines):", open(os.path.join(tmp, "raylog.err")).read()[:2000])
    if not keep:
        subprocess.run(["rm", "-rf", tmp])
    sys.exit(r.returncode)


def manyfiles(a):
    tmp = tempfile.mkdtemp(prefix="raylog-many-")
    root, out = os.path.join(tmp, "ray"), os.path.join(tmp, "received.ndjson")
    t0 = time.monotonic()
    seq = generate(root, a.files, a.lines, a.sessions)
    print("generated %d files (%d sessions), %d lines in %.1fs under %s" % (a.files, a.sessions, seq, time.monotonic() - t0, tmp))
    port = free_port()
    sink = start_sink(port, "--out", out)
    api = "127.0.0.1:%d" % free_port()
    cfg = config(tmp, [root], port, 'forget_after = "1m"' if a.delete else "", api)
    err = open(os.path.join(tmp, "raylog.err"), "w")
    p = start(cfg, a.nofile, err)
    proc, peak_fds = Proc(p.pid), [0]

    probes = LiveProbes(out, root, seq)
    started = time.monotonic()

    def tick():
        peak_fds[0] = max(peak_fds[0], proc.fds())
        probes.tick(stats(port)["entries"])

    try:
        took = None
        while time.monotonic() - started < a.timeout:
            tick()
            if stats(port)["entries"] >= probes.seq:
                took = time.monotonic() - started
                break
            time.sleep(0.2)
        probes.tick(stats(port)["entries"])
        probes.report(started)
        # The probes' lines are counted too (they must arrive once, like the rest).
        seq = probes.seq
        print("catch-up: %s, peak fds %d (limit %d), RSS %.1f MiB (peak %.1f)"
              % ("%.1f s" % took if took else "NOT DONE in %ds (%d of %d)" % (a.timeout, stats(port)["entries"], seq),
                 peak_fds[0], a.nofile, proc.rss(), proc.hwm()))
        time.sleep(10)  # let the last checkpoint saves and idle flushes settle
        c0, w0 = proc.cpu(), proc.written()
        time.sleep(a.idle)
        c1, w1 = proc.cpu(), proc.written()
        print("idle %d s: CPU %.2f%% of a core, %d bytes written to disk, fds %d, RSS %.1f MiB"
              % (a.idle, (c1 - c0) / a.idle * 100, w1 - w0, proc.fds(), proc.rss()))
        # After the catch-up: a new (task) worker's file, and one in a new session.
        logs_dir = next(d for d, _, fs in os.walk(root) if "raylet.out" in fs)
        new_file = os.path.join(logs_dir, worker_name(9_999_998, 98) + ".out")
        print("after the catch-up, a new worker file -> sink: %.2f s"
              % append_latency(out, new_file, seq, ":job_id:01000000\n"))
        seq += 1
        session = os.path.join(root, "session_2026-12-05_08-00-00_000000_99", "logs")
        os.makedirs(session)
        time.sleep(0.5)  # the session's dir is made first, as Ray does, then its files
        print("after the catch-up, a new session's worker file -> sink: %.2f s (0.5 s after its dir)"
              % append_latency(out, os.path.join(session, worker_name(9_999_996, 97) + ".out"), seq,
                               ":job_id:01000000\n"))
        seq += 1
        state = os.path.join(tmp, "state")
        size = sum(os.path.getsize(os.path.join(state, f)) for f in os.listdir(state))
        print("state dir: %s, %d bytes" % (sorted(os.listdir(state)), size))
        logs = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.startswith("worker-")]
        # The probes go to task workers' files (even pids, see `generate`): an
        # actor's print waits up to actor_hold (10 s) for the core-worker log that
        # names its actor, which these trees do not have; measured once, apart.
        tasks = [p for p in logs if int(p.rsplit("-", 1)[1].split(".")[0]) % 2 == 0]
        rng = random.Random(7)
        lat = []
        for _ in range(a.appends):
            lat.append(append_latency(out, rng.choice(tasks), seq))
            seq += 1
            time.sleep(0.5)
        lat.sort()
        print("append to a random old task worker's file: median %.2f s, max %.2f s over %d"
              % (lat[len(lat) // 2], lat[-1], len(lat)))
        actors = [p for p in logs if int(p.rsplit("-", 1)[1].split(".")[0]) % 2 == 1]
        if actors:
            print("append to an old actor worker's file (its actor unknown: waits actor_hold): %.2f s"
                  % append_latency(out, rng.choice(actors), seq))
            seq += 1
        if a.delete:
            logs = delete_at_scale(a, proc, api, logs)
        before = stats(port)["entries"]
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
        t1 = time.monotonic()
        p = start(cfg, a.nofile, err)
        proc = Proc(p.pid)
        tasks = [p for p in logs if int(p.rsplit("-", 1)[1].split(".")[0]) % 2 == 0]
        with open(rng.choice(tasks), "a") as f:
            f.write("appended after restart seq=%d\n" % seq)
        seq += 1
        took = wait_entries(port, before + 1, 60)
        time.sleep(5)
        again = stats(port)["entries"] - before - 1
        print("restart: the line appended at start arrived %.2f s after the start; %d entries sent again; RSS %.1f MiB"
              % (took or -1, again, proc.rss()))
        # The peak of a restart comes once the listing has tracked every file again
        # beside the checkpoints loaded.
        while files_watched(api) < a.files - (a.delete or 0) and time.monotonic() - t1 < 300:
            time.sleep(1)
        time.sleep(5)
        print("restart: all %d files tracked again %.1f s after the start; RSS %.1f MiB (peak %.1f); CPU %.1f s, "
              "of which loading the checkpoints %.2f s"
              % (files_watched(api), time.monotonic() - t1 - 5, proc.rss(), proc.hwm(), proc.cpu(),
                 metric(api, "raylog_checkpoints_load_cpu_milliseconds") / 1000))
    finally:
        stop(p, sink)
    check_delivery(tmp, out, seq, a.keep)


class Soak:
    """Writers that behave like a busy Ray node: workers come and go, raylet rotates."""

    def __init__(self, logs, keep_files, rng):
        self.logs, self.keep, self.rng = logs, keep_files, rng
        self.seq, self.next_worker, self.active, self.finished = 0, 0, [], []
        self.raylet = os.path.join(logs, "raylet.out")

    def new_worker(self):
        name = worker_name(self.next_worker)
        self.next_worker += 1
        files = [open(os.path.join(self.logs, name + ext), "a") for ext in (".out", ".err")]
        self.active.append((time.monotonic() + self.rng.uniform(10, 50), files))

    def rotate_raylet(self):
        if os.path.exists(self.raylet) and os.path.getsize(self.raylet) > 2_000_000:
            for k in range(5, 0, -1):
                src = self.raylet if k == 1 else "%s.%d" % (self.raylet, k - 1)
                if os.path.exists(src):
                    os.replace(src, "%s.%d" % (self.raylet, k))

    def write(self, n):
        now = time.monotonic()
        while len(self.active) < 40:
            self.new_worker()
        for end, files in [w for w in self.active if w[0] <= now]:
            self.active.remove((end, files))
            for f in files:
                f.close()
                self.finished.append(f.name)
        while len(self.finished) > self.keep:
            os.remove(self.finished.pop(0))
        self.rotate_raylet()
        with open(self.raylet, "a") as r:
            for _ in range(n):
                if self.rng.random() < 0.2:
                    ts = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
                    r.write("[%s,000 I 1 1] (raylet) node_manager.cc:1: tick seq=%d\n" % (ts, self.seq))
                else:
                    f = self.rng.choice(self.rng.choice(self.active)[1])
                    f.write("step %d seq=%d\n" % (self.seq % 1000, self.seq))
                self.seq += 1
        for _, files in self.active:
            for f in files:
                f.flush()


def soak(a):
    tmp = tempfile.mkdtemp(prefix="raylog-soak-")
    logs = os.path.join(tmp, "ray", SESSION, "logs")
    os.makedirs(logs)
    out = os.path.join(tmp, "received.ndjson")
    port = free_port()
    sink = start_sink(port, "--out", out)
    cfg = config(tmp, [os.path.join(tmp, "ray")], port, 'forget_after = "%s"\n' % a.forget_after)
    err = open(os.path.join(tmp, "raylog.err"), "w")
    p = start(cfg, a.nofile, err)
    proc, w = Proc(p.pid), Soak(logs, a.keep_files, random.Random(7))
    state = os.path.join(tmp, "state")
    t0 = time.monotonic()
    next_report = t0 + 60
    print("minute  RSS_MiB  fds  files_on_disk  checkpoint_bytes  cpu_s  received  written")
    try:
        while time.monotonic() - t0 < a.minutes * 60:
            tick = time.monotonic()
            w.write(a.rate // 10)
            time.sleep(max(0, 0.1 - (time.monotonic() - tick)))
            if time.monotonic() >= next_report:
                next_report += 60
                cp = sum(os.path.getsize(os.path.join(state, f)) for f in os.listdir(state) if f.startswith("checkpoints"))
                print("%6d  %7.1f  %3d  %13d  %16d  %5.1f  %8d  %7d" % (
                    round((time.monotonic() - t0) / 60), proc.rss(), proc.fds(), len(os.listdir(logs)), cp,
                    proc.cpu(), stats(port)["entries"], w.seq), flush=True)
        for _, files in w.active:
            for f in files:
                f.close()
        wait_entries(port, w.seq, 60)
    finally:
        stop(p, sink)
    print("peak RSS %.1f MiB" % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024))
    check_delivery(tmp, out, w.seq, a.keep)


def add_parsers(sp):
    m = sp.add_parser("manyfiles")
    m.add_argument("--files", type=int, default=100_000)
    m.add_argument("--lines", type=int, default=5)
    m.add_argument("--sessions", type=int, default=1)
    m.add_argument("--nofile", type=int, default=1024)
    m.add_argument("--appends", type=int, default=10)
    m.add_argument("--idle", type=int, default=60, help="seconds of quiet measured after the catch-up")
    m.add_argument("--timeout", type=int, default=900)
    m.add_argument("--delete", type=int, default=0, help="after the catch-up, delete this many read files at once "
                   "(forget_after 1m) and report when they are forgotten and the RSS after")
    m.add_argument("--keep", action="store_true", help="keep the temp dir")
    s = sp.add_parser("soak")
    s.add_argument("--minutes", type=float, default=60)
    s.add_argument("--rate", type=int, default=2000)
    s.add_argument("--nofile", type=int, default=1024)
    s.add_argument("--keep-files", type=int, default=3000)
    s.add_argument("--forget-after", default="10m")
    s.add_argument("--keep", action="store_true", help="keep the temp dir")
    return {"manyfiles": manyfiles, "soak": soak}
