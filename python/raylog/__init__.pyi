"""Type stubs for raylog (see the module's docstrings)."""

import datetime
import os
from typing import Any, Dict, Iterable, Iterator, List, Literal, Optional, Sequence, Tuple, Union

import pyarrow

Paths = Union[str, os.PathLike[str], Iterable[Union[str, os.PathLike[str]]]]
Time = Union[str, datetime.datetime, datetime.date]

__version__: str
#: `raylog --version`: the version and the commit it was built from.
__build__: str
FILTERS: Tuple[str, ...]
INPUT: Tuple[str, ...]

class RaylogError(Exception):
    """An input could not be read (``failures``: [(path, why)]), or ``trace`` found
    nothing about the id."""

    failures: List[Tuple[str, str]]

class RaylogWarning(UserWarning): ...

def parse(
    paths: Paths = "/tmp/ray",
    *,
    errors: Literal["raise", "warn"] = "raise",
    actor_id: Optional[str] = None,
    task_id: Optional[str] = None,
    job_id: Optional[str] = None,
    worker_id: Optional[str] = None,
    node_id: Optional[str] = None,
    component: Union[str, Sequence[str], None] = None,
    level: Optional[str] = None,
    since: Optional[Time] = None,
    until: Optional[Time] = None,
    grep: Optional[str] = None,
    timezone: Optional[str] = None,
    max_line_bytes: Optional[int] = None,
    threads: Optional[int] = None,
) -> Iterator[Dict[str, Any]]: ...
def parse_arrow(
    paths: Paths = "/tmp/ray",
    *,
    batch_rows: int = 65536,
    errors: Literal["raise", "warn"] = "raise",
    actor_id: Optional[str] = None,
    task_id: Optional[str] = None,
    job_id: Optional[str] = None,
    worker_id: Optional[str] = None,
    node_id: Optional[str] = None,
    component: Union[str, Sequence[str], None] = None,
    level: Optional[str] = None,
    since: Optional[Time] = None,
    until: Optional[Time] = None,
    grep: Optional[str] = None,
    timezone: Optional[str] = None,
    max_line_bytes: Optional[int] = None,
    threads: Optional[int] = None,
) -> Iterator[pyarrow.RecordBatch]: ...
def arrow_schema() -> pyarrow.Schema: ...
def trace(
    paths: Paths = "/tmp/ray",
    *,
    errors: Literal["raise", "warn"] = "raise",
    actor_id: Optional[str] = None,
    task_id: Optional[str] = None,
    job_id: Optional[str] = None,
    worker_id: Optional[str] = None,
    context: Optional[int] = None,
    printed: bool = False,
    timezone: Optional[str] = None,
    max_line_bytes: Optional[int] = None,
    threads: Optional[int] = None,
) -> Dict[str, Any]: ...
def health(
    paths: Paths = "/tmp/ray",
    *,
    errors: Literal["raise", "warn"] = "raise",
    since: Optional[Time] = None,
    until: Optional[Time] = None,
    timezone: Optional[str] = None,
    max_line_bytes: Optional[int] = None,
    threads: Optional[int] = None,
) -> Dict[str, Any]: ...
