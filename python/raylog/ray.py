"""Archived Ray logs as a Ray Dataset, parsed across a Ray cluster.

``read_logs(paths)`` gives each node's logs dir (one session of one node) and each
archive under ``paths`` a read task of its own, so a cluster reparses a fleet's
archives in parallel, and the ids that ``parse`` learns across a node's files (which
actor a worker hosts, the node a dir belongs to) stay on its records. Each task runs
:func:`raylog.parse_arrow` on the CPUs Ray gave it, with the filters pushed down into
the read: records that do not match never leave the task.

Needs ``pip install 'raylog[ray]'``. The paths must be readable where the tasks run:
a shared filesystem, or a bucket (``s3://…``) in the KubeRay History Server's layout.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Optional

import raylog

from . import _raylog

__all__ = ["read_logs", "RaylogDatasource"]

try:
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask
except ImportError as e:  # pragma: no cover - depends on the extras installed
    raise ImportError("raylog.ray needs Ray Data: pip install 'raylog[ray]'") from e


def _assigned_cpus() -> int:
    """The CPUs Ray gave the running task (its `num_cpus`), at least 1."""
    try:
        import ray

        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1)
    except Exception:  # not in a Ray task
        cpus = 1
    return max(1, int(cpus))


def _size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


class RaylogDatasource(Datasource):
    """A Ray Data source of raylog records: one read task per logs dir or archive."""

    def __init__(self, paths: Any, *, batch_rows: int = 65536, **filters: Any):
        given = raylog._paths(paths)
        remote = [p for p in given if "://" in p]
        # Buckets are listed and read by the task that parses them.
        local = [p for p in given if "://" not in p]
        self._units: List[str] = remote + (_raylog.read_units(local) if local else [])
        self._filters = filters
        self._batch_rows = batch_rows
        # Checked here, on the driver: a bad keyword fails before any task runs.
        raylog._flags(filters, raylog.FILTERS + ("timezone", "max_line_bytes"), "read_logs")
        self._schema = raylog.arrow_schema()

    def estimate_inmemory_data_size(self) -> Optional[int]:
        return None

    def get_read_tasks(self, parallelism: int, per_task_row_limit: Optional[int] = None, data_context: Any = None) -> List[ReadTask]:
        tasks = []
        for unit in self._units:
            size = None if "://" in unit else _size(unit)
            meta = BlockMetadata(num_rows=None, size_bytes=size, input_files=[unit], exec_stats=None)
            tasks.append(ReadTask(self._reader(unit), meta, schema=self._schema))
        return tasks

    def _reader(self, unit: str):
        filters, rows = dict(self._filters), self._batch_rows

        def read() -> Iterable[Any]:
            import pyarrow as pa

            for batch in raylog.parse_arrow(unit, batch_rows=rows, threads=_assigned_cpus(), **filters):
                yield pa.Table.from_batches([batch])

        return read

    def get_name(self) -> str:
        return "ReadRaylog"


def read_logs(paths: Any, *, num_cpus: float = 1, batch_rows: int = 65536, ray_remote_args: Optional[Dict[str, Any]] = None, **filters: Any) -> "ray.data.Dataset":  # noqa: F821
    """A Ray Dataset of the records under ``paths``, in :func:`raylog.arrow_schema`.

    ``paths``: Ray temp roots, session or logs dirs, archives (``node.tar.gz``),
    files, or buckets, as :func:`raylog.parse` takes them. Every logs dir and every
    archive is one read task. ``num_cpus``: CPUs per read task; the task parses on
    that many threads. Filters (``actor_id=…``, ``level=…``, ``since=…``…) as in
    :func:`raylog.parse`, applied inside each read task.
    """
    import ray.data

    source = RaylogDatasource(paths, batch_rows=batch_rows, **filters)
    return ray.data.read_datasource(source, num_cpus=num_cpus, ray_remote_args=ray_remote_args)
