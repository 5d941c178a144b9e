"""raylog's Python API against its command line, on the real Ray fixtures: the same
records with the same values (the command's output is the expectation)."""

import datetime as dt
import json
import subprocess
import warnings

import pytest

import raylog
from conftest import TEXT, cli, cli_records, raylog_command

FILTERS = [
    {},
    {"actor_id": "ceeabe45"},
    {"level": "WARNING"},
    {"component": ["raylet", "gcs_server"]},
    {"job_id": "01000000", "grep": "actor|Actor"},
    {"since": "2026-11-30 10:21:10", "until": "2026-11-30 10:21:20"},
]


def flags(kw: dict) -> list:
    out = []
    for k, v in kw.items():
        out += [f"--{k.replace('_', '-')}", ",".join(v) if isinstance(v, list) else v]
    return out


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kw", FILTERS, ids=lambda kw: ",".join(kw) or "all")
def test_parse_yields_the_commands_records(kw, threads):
    want = cli_records(str(TEXT), *flags(kw))
    got = list(raylog.parse(TEXT, threads=threads, **kw))
    assert len(want) > 0, "the filter matches something in the fixture"
    assert got == want


def test_many_paths_and_threads_give_the_same_records(fixture_dirs):
    want = cli_records(*fixture_dirs, "--threads", "1")
    assert len(want) > 5_000
    assert list(raylog.parse(fixture_dirs, threads=2)) == want


def test_a_datetime_filter_means_the_same_as_its_text():
    text = list(raylog.parse(TEXT, since="2026-11-30 10:21:10"))
    assert text and text == list(raylog.parse(TEXT, since=dt.datetime(2026, 11, 30, 10, 21, 10)))
    aware = dt.datetime(2026, 11, 30, 10, 21, 10, tzinfo=dt.timezone.utc)
    assert text == list(raylog.parse(TEXT, since=aware))


def test_parse_arrow_holds_the_commands_values():
    pa = pytest.importorskip("pyarrow")
    want = cli_records(str(TEXT))
    batches = list(raylog.parse_arrow(TEXT, batch_rows=500))
    assert len(batches) > 1 and all(b.num_rows <= 500 for b in batches)
    assert all(b.schema == raylog.arrow_schema() for b in batches)
    table = pa.Table.from_batches(batches)
    assert table.num_rows == len(want)
    # Times as nanoseconds, parsed from the command's RFC 3339 text by pyarrow.
    want_ns = pa.array([r.get("timestamp") for r in want], pa.string()).cast(pa.timestamp("ns", tz="UTC"))
    assert table.column("timestamp").combine_chunks().equals(want_ns)
    rows = table.drop(["timestamp"]).to_pylist()
    for i, (row, rec) in enumerate(zip(rows, want)):
        for name, value in row.items():
            expect = rec.get(name)
            if name == "fields":
                value = None if value is None else json.loads(value)
            elif name in ("timestamp_inferred", "timestamp_estimated", "truncated"):
                expect = bool(expect)
            assert value == expect, (i, name)
    assert table.column("actor_id").null_count < table.num_rows


def test_trace_and_health_return_what_json_prints():
    want = json.loads(cli("trace", "--actor-id", "ceeabe45", "--format", "json", str(TEXT)).stdout)
    assert raylog.trace(TEXT, actor_id="ceeabe45") == want
    assert want["records"]
    want = json.loads(cli("health", "--format", "json", str(TEXT)).stdout)
    assert raylog.health(TEXT) == want


def test_errors_name_the_file_or_the_keyword(tmp_path):
    missing = tmp_path / "no-such-session"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        raylog.parse(missing)
    with pytest.raises(ValueError, match="actor_id"):
        raylog.parse(TEXT, actor_id="not-hex")
    with pytest.raises(TypeError, match="colour"):
        raylog.parse(TEXT, colour="red")
    with pytest.raises(raylog.RaylogError, match="no records about actor"):
        raylog.trace(TEXT, actor_id="abcdabcd")
    # A truncated archive: the good files' records come first, then the error names it.
    bad = tmp_path / "node.tar.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 64)
    with pytest.raises(raylog.RaylogError, match="node.tar.gz") as e:
        list(raylog.parse([TEXT, bad]))
    assert e.value.failures[0][0].endswith("node.tar.gz")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = list(raylog.parse([TEXT, bad], errors="warn"))
    assert got == cli_records(str(TEXT)) and any("node.tar.gz" in str(w.message) for w in seen)


def test_the_command_keeps_the_binarys_exit_codes_and_closed_pipe():
    assert cli("parse", str(TEXT), "--actor-id", "abcdabcd", check=False).returncode == 1
    run = cli("parse", "/nonexistent/ray", check=False)
    assert run.returncode == 2 and b"/nonexistent/ray" in run.stderr
    assert cli("--version").stdout.decode() == f"raylog {raylog.__build__}\n"
    assert raylog.__build__.startswith(f"{raylog.__version__} (commit ")
    # `raylog parse | head -1`: the reader goes away; raylog stops quietly with 0.
    p = subprocess.Popen([raylog_command(), "parse", str(TEXT)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.readline()
    p.stdout.close()
    assert p.wait(timeout=60) == 0, p.stderr.read()
    assert json.loads(first) and p.stderr.read() == b""


def test_stopping_early_frees_the_scan():
    it = raylog.parse(TEXT)
    first = next(it)
    it.close()
    assert first == cli_records(str(TEXT))[0]


def test_memory_stays_bounded_while_records_stream(tmp_path):
    """Streaming means the peak RSS does not grow with the input: 4 copies of a 32 MiB
    raycorpus.py tree peak about where one copy does, for parse and parse_arrow, each
    in a fresh process. Holding the records would add hundreds of MiB per copy (their
    dicts are several times the logs)."""
    import os
    import shutil
    import sys

    bench = os.environ.get("RAYLOG_BENCH_DIR")
    if not bench:
        pytest.skip("needs RAYLOG_BENCH_DIR (../shared/bench, its raycorpus.py)")
    one = tmp_path / "node-0"
    subprocess.run([sys.executable, f"{bench}/raycorpus.py", "generate", "--out", str(one), "--size-mb", "32"],
                   check=True, capture_output=True)
    records = sum(f["records"] for f in json.loads((one / "manifest.json").read_text())["files"].values())
    copies = [one] + [shutil.copytree(one, tmp_path / f"node-{i}", symlinks=True) for i in (1, 2, 3)]

    def peak(kind, paths):
        code = (
            "import raylog, resource, sys\n"
            "if sys.argv[1] == 'arrow':\n"
            "    import pyarrow\n"
            "    n = sum(b.num_rows for b in raylog.parse_arrow(sys.argv[2:], threads=1, batch_rows=8192))\n"
            "else:\n"
            "    n = sum(1 for _ in raylog.parse(sys.argv[2:], threads=1))\n"
            "print(n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)\n"
        )
        out = subprocess.run([sys.executable, "-c", code, kind, *map(str, paths)],
                             check=True, capture_output=True, text=True)
        return tuple(map(int, out.stdout.split()))

    for kind in ("dicts", "arrow"):
        n1, peak1 = peak(kind, copies[:1])
        n4, peak4 = peak(kind, copies)
        assert (n1, n4) == (records, 4 * records), (kind, n1, n4, records)
        assert peak4 < peak1 + 40, f"{kind}: peak RSS {peak1} MiB for one tree, {peak4} MiB for four"
