"""Helpers shared by the ship benchmarks (ship_bench.py and the modes it imports).

Standard library only. Imports nothing from the bench modules, so any of them can
import it without a cycle.
"""
import json, os, socket, subprocess, sys, tempfile, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _shared():
    """../shared/bench next to the repo, or next to a parent dir (a git worktree in
    ../wt/NAME); RAYLOG_SHARED_BENCH overrides."""
    if os.environ.get("RAYLOG_SHARED_BENCH"):
        return os.environ["RAYLOG_SHARED_BENCH"]
    d = ROOT
    while os.path.dirname(d) != d:
        d = os.path.dirname(d)
        if os.path.isdir(os.path.join(d, "shared", "bench")):
            return os.path.join(d, "shared", "bench")
    return os.path.join(ROOT, "..", "shared", "bench")


SHARED = _shared()
RAYLOG = os.environ.get("RAYLOG_BIN") or os.path.join(ROOT, "target", "release", "raylog")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


OTLP_KINDS = ("otlp", "otlp-none", "otlp-json", "otlp-zlib1")


def start_sink(port, *extra, kind="loki"):
    """The receiver for sink `kind`: capture_sink.py (Loki, Elasticsearch), or
    bench/otlp_sink.py for the OTLP kinds. `extra` are capture_sink.py's options;
    otlp_sink.py takes --out, --outage, --status and --reject-every alike, and
    `--discard` becomes its `--count` (decompress and count LogRecords)."""
    if kind in OTLP_KINDS:
        args = ["--count" if x == "--discard" else x for x in extra]
        script = os.path.join(ROOT, "bench", "otlp_sink.py")
    else:
        args = list(extra)
        script = os.path.join(SHARED, "capture_sink.py")
    p = subprocess.Popen([sys.executable, script, "--port", str(port)] + args,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            urllib.request.urlopen("http://127.0.0.1:%d/ready" % port, timeout=1).read()
            return p
        except Exception:
            time.sleep(0.05)
    sys.exit("%s did not start" % os.path.basename(script))


def stats(port):
    return json.loads(urllib.request.urlopen("http://127.0.0.1:%d/stats" % port, timeout=5).read())


def sink_toml(kind, port, old=False):
    url = "http://127.0.0.1:%d" % port
    # The receiver here has no rate limit: no pacing (0), so the run measures CPU, not
    # the pace. And a corpus generated without --start is dated 2026-01-15: older
    # than Loki takes, so the sink would dead-letter it unsent; this receiver takes it.
    age = "max_bytes_per_second = 0\n" + ('reject_old_after = "3650d"\n' if old else "")
    # Nor any stream sharding to stay under: no per-stream pace either.
    streams = "max_stream_bytes_per_second = 0\n"
    if kind == "loki":
        return '[[sinks]]\ntype = "loki"\nendpoint = "%s"\n%s%s' % (url, age, streams)
    if kind == "loki-json":
        return '[[sinks]]\ntype = "loki"\nendpoint = "%s"\nencoding = "json"\n%s%s' % (url, age, streams)
    if kind in OTLP_KINDS:
        # No pacing and no age limits to lift: the OTLP sink has neither.
        return '[[sinks]]\ntype = "otlp"\nendpoint = "%s"\n%s' % (
            url, {"otlp": "", "otlp-none": 'compression = "none"\n', "otlp-json": 'encoding = "json"\n',
                  "otlp-zlib1": 'compression_level = 1\n'}[kind])
    return '[[sinks]]\ntype = "elasticsearch"\nendpoint = "%s"\ncompression = "gzip"\n' % url


def write_config(tmp, paths, sink, extra=""):
    cfg = os.path.join(tmp, "raylog.toml")
    with open(cfg, "w") as f:
        f.write('[source]\npaths = %s\nstate_dir = "%s"\npoll_interval = "200ms"\n%s\n[api]\naddress = ""\n%s'
                % (json.dumps(paths), os.path.join(tmp, "state"), extra, sink))
    return cfg


def run_measured(cmd):
    start = time.monotonic()
    # stderr to a file, not a pipe: a pipe nobody reads until the end would block
    # raylog once 64 KiB of its logs filled it.
    with tempfile.TemporaryFile() as errf:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errf)
        _, status, ru = os.wait4(p.pid, 0)
        errf.seek(0)
        err = errf.read().decode(errors="replace")
    return os.waitstatus_to_exitcode(status), ru, time.monotonic() - start, err


def vm_hwm(pid):
    try:
        for line in open("/proc/%d/status" % pid):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0
