from typing import Any, Dict, Optional

import ray.data
from ray.data.datasource import Datasource

from . import Paths, Time

class RaylogDatasource(Datasource):
    def __init__(self, paths: Paths, *, batch_rows: int = 65536, **filters: Any) -> None: ...

def read_logs(
    paths: Paths,
    *,
    num_cpus: float = 1,
    batch_rows: int = 65536,
    ray_remote_args: Optional[Dict[str, Any]] = None,
    actor_id: Optional[str] = None,
    task_id: Optional[str] = None,
    job_id: Optional[str] = None,
    worker_id: Optional[str] = None,
    node_id: Optional[str] = None,
    component: Optional[Any] = None,
    level: Optional[str] = None,
    since: Optional[Time] = None,
    until: Optional[Time] = None,
    grep: Optional[str] = None,
    timezone: Optional[str] = None,
    max_line_bytes: Optional[int] = None,
) -> ray.data.Dataset: ...
