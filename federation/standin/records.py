"""What the stand-in Globus Compute service remembers of each task and endpoint."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from globus_compute_common.messagepack.message_types import Result

from federation.standin.endpoint_link import EndpointLink

__all__ = ["_Endpoint", "_TaskRecord"]


@dataclass
class _TaskRecord:
    task_id: str
    endpoint_id: str
    task_group_id: str
    status: str = "waiting-for-ep"
    """What ``GET /v2/tasks/<id>`` reports: ``waiting-for-ep`` until the result, then
    ``success`` or ``failed``, as the real service (its endpoints' heartbeats carry no
    per-task status: ``GlobusComputeEngine.get_status_report`` sends ``task_statuses={}``)."""
    result: Result | None = None
    job_id: str | None = None
    started_at: float | None = None
    completed_at: float | None = None
    delivered: bool = False
    """The endpoint took it (until then it waits in the service's queue)."""
    taken: threading.Event = field(default_factory=threading.Event)
    """Set with ``delivered`` (the embedded service's acknowledgement waits on it)."""


@dataclass
class _Endpoint:
    site: str
    link: EndpointLink
    task_ids: set[str] = field(default_factory=set)
