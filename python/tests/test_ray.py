"""raylog.ray.read_logs on a local Ray 2.60 cluster (two workers): the Dataset holds
the same multiset of records as `raylog parse` of the same inputs."""

import json
import shutil
import tarfile
import tempfile
from collections import Counter

import pytest

from conftest import TEXT, cli_records

ray = pytest.importorskip("ray")
pa = pytest.importorskip("pyarrow")

import raylog  # noqa: E402
import raylog.ray  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    # A cluster of its own (address="local"), in a temp dir of its own: the live
    # tests of the same run start Ray clusters, and agents tail their temp dirs.
    temp = tempfile.mkdtemp(prefix="rlpy-", dir="/tmp")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
    yield
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


def key(rec: dict) -> str:
    """A record as comparable text: the NDJSON's members, with the dataset's
    false flags and nulls left out as the NDJSON leaves them, and `fields` parsed."""
    rec = {k: v for k, v in rec.items() if v is not None and v is not False}
    if isinstance(rec.get("fields"), str):
        rec["fields"] = json.loads(rec["fields"])
    return json.dumps(rec, sort_keys=True)


def ns(text: str) -> int:
    return pa.array([text], pa.string()).cast(pa.timestamp("ns", tz="UTC"))[0].value


def test_read_logs_holds_the_records_of_parse(cluster, fixture_dirs, tmp_path):
    # One archive among the directories: `node.tar.gz` holds the text fixture's session.
    archive = tmp_path / "node.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        t.add(TEXT, arcname="ray")
    # A dir given twice is read once, by both.
    inputs = [d for d in fixture_dirs if d != str(TEXT)] + [str(archive), fixture_dirs[0]]
    want = cli_records(*inputs)
    for r in want:
        if "timestamp" in r:
            r["timestamp"] = ns(r["timestamp"])
    ds = raylog.ray.read_logs(inputs)
    assert ds.schema().names == raylog.arrow_schema().names
    table = pa.concat_tables(ray.get(ds.to_arrow_refs()))
    # Nanoseconds as integers: Python's datetime stops at microseconds.
    table = table.set_column(0, "timestamp", table.column("timestamp").cast(pa.int64()))
    rows = table.to_pylist()
    assert len(rows) == len(want) > 5_000
    assert Counter(key(r) for r in rows) == Counter(key(r) for r in want)


def test_filters_are_pushed_into_the_read(cluster, fixture_dirs):
    want = cli_records(*fixture_dirs, "--level", "ERROR")
    ds = raylog.ray.read_logs(fixture_dirs, level="ERROR")
    assert ds.count() == len(want) > 0
    with pytest.raises(TypeError, match="threads"):
        raylog.ray.read_logs(fixture_dirs, threads=4)
