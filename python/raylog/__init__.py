"""raylog: Ray's log files as structured records tagged with Ray ids.

The same code as the ``raylog`` command line, called in-process (no subprocess):

- :func:`parse` yields records as dicts, with the fields of ``raylog parse``'s NDJSON;
- :func:`parse_arrow` yields ``pyarrow.RecordBatch`` es with a fixed schema
  (:func:`arrow_schema`), for pandas, Polars and Ray Data (``pip install 'raylog[arrow]'``);
- :func:`trace` and :func:`health` return what ``--format json`` prints;
- :mod:`raylog.ray` reads archives across a Ray cluster (``pip install 'raylog[ray]'``).

Paths are what the command line takes: a Ray temp root (``/tmp/ray``), session dirs,
logs dirs, files, ``.gz`` files, ``.tar``/``.tar.gz``/``.tgz`` archives, or a bucket
(``s3://``, ``gs://``, ``az://``) in the KubeRay History Server's layout. Filters are
the command line's flags as keywords (``actor_id="ceeabe45"``, ``level="ERROR"``) and
mean the same; all must match. Parsing runs on threads of its own without the GIL.
"""

from __future__ import annotations

import datetime as _dt
import json as _json
import os as _os
import warnings as _warnings
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from . import _raylog
from ._raylog import RaylogError, __build__, __version__

__all__ = [
    "parse",
    "parse_arrow",
    "trace",
    "health",
    "arrow_schema",
    "RaylogError",
    "RaylogWarning",
    "__version__",
    "__build__",
]

Paths = Union[str, "_os.PathLike[str]", Iterable[Union[str, "_os.PathLike[str]"]]]

#: Record filters, as ``raylog parse`` names them (``--actor-id`` is ``actor_id``).
FILTERS = ("actor_id", "task_id", "job_id", "worker_id", "node_id", "component", "level", "since", "until", "grep")
#: How inputs are read, shared by every function.
INPUT = ("timezone", "max_line_bytes", "threads")


class RaylogWarning(UserWarning):
    """What ``raylog`` prints as a warning: invalid UTF-8 kept, lines cut, a file that
    could not be read while ``errors="warn"``."""


def _paths(paths: Paths) -> List[str]:
    if isinstance(paths, (str, bytes, _os.PathLike)):
        paths = [paths]
    out = [_os.fsdecode(p) for p in paths]
    if not out:
        raise ValueError("no paths given: give a Ray temp root (/tmp/ray), a session or logs dir, a file or an archive")
    return out


def _value(key: str, v: Any) -> str:
    if isinstance(v, _dt.datetime):
        # Naive times are read in `timezone`, as on the command line.
        return v.isoformat() if v.tzinfo else v.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(v, _dt.date):
        return v.isoformat()
    if key == "component" and not isinstance(v, str):
        return ",".join(v)
    return str(v)


def _flags(kw: Dict[str, Any], allowed: Tuple[str, ...], what: str) -> List[Tuple[str, Optional[str]]]:
    flags: List[Tuple[str, Optional[str]]] = []
    for key, v in kw.items():
        if key not in allowed:
            raise TypeError(f"{what}() got an unexpected keyword argument {key!r}; it takes {', '.join(allowed)}")
        if v is None or v is False:
            continue
        flags.append((key, None) if v is True else (key, _value(key, v)))
    return flags


def _finish(end: Dict[str, Any], errors: str, stacklevel: int = 3) -> None:
    for w in end["warnings"]:
        _warnings.warn(w, RaylogWarning, stacklevel=stacklevel)
    failures = end["failures"]
    if not failures:
        return
    text = "; ".join(f"{path}: {why}" for path, why in failures)
    if errors == "warn":
        _warnings.warn(f"could not read: {text}", RaylogWarning, stacklevel=stacklevel)
        return
    err = RaylogError(f"could not read: {text} (the records of the other inputs were yielded; errors='warn' goes on)")
    err.failures = failures  # type: ignore[attr-defined]
    raise err


def _check_errors(errors: str) -> None:
    if errors not in ("raise", "warn"):
        raise ValueError(f"errors={errors!r}: give 'raise' or 'warn'")


def parse(paths: Paths = "/tmp/ray", *, errors: str = "raise", **filters: Any) -> Iterator[Dict[str, Any]]:
    """Yield every record under ``paths`` that matches ``filters``, as a dict.

    The dicts are ``raylog parse``'s NDJSON lines: the same keys (absent fields are
    left out, never None) and the same values (``timestamp`` is an RFC 3339 string).
    Keywords: the filters ``actor_id``, ``task_id``, ``job_id``, ``worker_id``,
    ``node_id``, ``component`` (a name or a list), ``level`` (a minimum), ``since``,
    ``until`` (a string or a ``datetime``), ``grep`` (a regular expression); and
    ``timezone``, ``max_line_bytes``, ``threads``.

    Arguments are checked at once (``ValueError`` names the keyword,
    ``FileNotFoundError`` the path). An input that cannot be read raises
    :class:`RaylogError` at the end, after the records of the others, or with
    ``errors="warn"`` warns. Memory stays bounded however much is read.
    """
    _check_errors(errors)
    scan = _raylog.Scan(_paths(paths), _flags(filters, FILTERS + INPUT, "parse"), "ndjson", 0)
    return _records(scan, errors)


def _records(scan: Any, errors: str) -> Iterator[Dict[str, Any]]:
    for chunk in scan:
        # One JSON array per chunk: a record's line holds no raw newline.
        yield from _json.loads(b"[" + chunk[:-1].replace(b"\n", b",") + b"]")
    _finish(scan.end(), errors)


_SCHEMA = None


def arrow_schema() -> "pyarrow.Schema":  # noqa: F821
    """The fixed schema of :func:`parse_arrow`'s batches: one column per NDJSON field,
    in its order. Ids and names are strings, ``timestamp`` is ``timestamp[ns, UTC]``,
    ``timestamp_inferred``/``timestamp_estimated``/``truncated`` are booleans (false
    where the NDJSON leaves them out), ``offset`` uint64, ``task_attempt`` and ``pid``
    uint32, ``fields`` a JSON object as a string. Absent fields are null."""
    global _SCHEMA
    if _SCHEMA is None:
        pa = _pyarrow()
        types = {
            "timestamp_ns": pa.timestamp("ns", tz="UTC"),
            "bool": pa.bool_(),
            "utf8": pa.string(),
            "uint64": pa.uint64(),
            "uint32": pa.uint32(),
        }
        nullable = {"message": False, "component": False, "file": False, "offset": False}
        _SCHEMA = pa.schema(
            [pa.field(name, types[t], nullable=nullable.get(name, t != "bool")) for name, t in _raylog.schema()]
        )
    return _SCHEMA


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError as e:
        raise ImportError("parse_arrow needs pyarrow: pip install 'raylog[arrow]'") from e
    return pyarrow


def parse_arrow(
    paths: Paths = "/tmp/ray", *, batch_rows: int = 65536, errors: str = "raise", **filters: Any
) -> Iterator["pyarrow.RecordBatch"]:  # noqa: F821
    """Like :func:`parse`, but yields ``pyarrow.RecordBatch`` es of at most
    ``batch_rows`` rows (and about 64 MiB of text), in :func:`arrow_schema`.

    The columns are built in Rust as Arrow buffers and wrapped without a copy per
    value. ``pyarrow.Table.from_batches(raylog.parse_arrow(...)).to_pandas()`` gives
    a DataFrame; ``polars.from_arrow`` takes the same.
    """
    _check_errors(errors)
    if batch_rows < 1:
        raise ValueError(f"batch_rows={batch_rows}: give 1 or more")
    schema = arrow_schema()
    scan = _raylog.Scan(_paths(paths), _flags(filters, FILTERS + INPUT, "parse_arrow"), "columns", batch_rows)
    return _batches(scan, schema, errors)


def _batches(scan: Any, schema: Any, errors: str) -> Iterator[Any]:
    pa = _pyarrow()

    def buf(b: Optional[bytes]) -> Any:
        return None if b is None else pa.py_buffer(b)

    for rows, columns in scan:
        arrays = []
        for field, (nulls, valid, first, second) in zip(schema, columns):
            buffers = [buf(valid), buf(first)] + ([buf(second)] if second is not None else [])
            arrays.append(pa.Array.from_buffers(field.type, rows, buffers, null_count=nulls))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)
    _finish(scan.end(), errors)


def _report(command: str, paths: Paths, flags: List[Tuple[str, Optional[str]]], errors: str) -> Dict[str, Any]:
    code, text, messages = _raylog.report(command, _paths(paths), flags)
    failures = []
    for m in messages:
        if m.startswith("raylog: error: "):
            path, _, why = m[len("raylog: error: ") :].partition(": ")
            failures.append((path, why))
        elif m.startswith("raylog: warning: "):
            _warnings.warn(m[len("raylog: warning: ") :], RaylogWarning, stacklevel=3)
        elif not text:
            # `trace` found nothing about the id, or no printed lines.
            raise RaylogError(m[len("raylog: ") :] if m.startswith("raylog: ") else m)
    _finish({"warnings": [], "failures": failures}, errors, stacklevel=4)
    if not text:
        raise RaylogError(f"raylog {command} printed nothing (exit code {code})")
    return _json.loads(text)


def trace(paths: Paths = "/tmp/ray", *, errors: str = "raise", **kw: Any) -> Dict[str, Any]:
    """The story of one actor, task, job or worker: what ``raylog trace --format json``
    prints, ``{"summary": {...}, "records": [...]}``.

    Give exactly one of ``actor_id``, ``task_id``, ``job_id``, ``worker_id`` (a full
    id or a prefix); also ``context`` (records before each error), ``printed=True``
    (with ``task_id``: only what the task printed), ``timezone``, ``max_line_bytes``,
    ``threads``. Raises :class:`RaylogError` when nothing is about the id or the
    prefix matches several.
    """
    _check_errors(errors)
    allowed = ("actor_id", "task_id", "job_id", "worker_id", "context", "printed") + INPUT
    return _report("trace", paths, _flags(kw, allowed, "trace"), errors)


def health(paths: Paths = "/tmp/ray", *, errors: str = "raise", **kw: Any) -> Dict[str, Any]:
    """What went wrong: what ``raylog health --format json`` prints (worker deaths,
    OOM kills, actor failures, node deaths, GCS health, failed tasks, top errors).

    Keywords: ``since``, ``until``, ``timezone``, ``max_line_bytes``, ``threads``.
    """
    _check_errors(errors)
    return _report("health", paths, _flags(kw, ("since", "until") + INPUT, "health"), errors)
