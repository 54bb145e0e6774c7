"""What the stand-in Globus Compute service remembers of each task and endpoint."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

from globus_compute_common import messagepack
from globus_compute_common.messagepack.message_types import Result

from federation.standin.endpoint_link import EndpointLink

__all__ = ["_Endpoint", "_TaskRecord"]


TAKEN = threading.Event()
TAKEN.set()
"""Shared by every record once its endpoint took it: a record's own event is freed."""


@dataclass(slots=True)
class _TaskRecord:
    task_id: str
    endpoint_id: str
    task_group_id: str
    status: str = "waiting-for-ep"
    """What ``GET /v2/tasks/<id>`` reports: ``waiting-for-ep`` until the result, then
    ``success`` or ``failed``, as the real service (its endpoints' heartbeats carry no
    per-task status: ``GlobusComputeEngine.get_status_report`` sends ``task_statuses={}``)."""
    packed: bytes | None = None
    """The result as the endpoint sent it (messagepack): a few hundred bytes, where the
    unpacked object costs kilobytes for as long as the service remembers the task."""
    job_id: str | None = None
    started_at: float | None = None
    completed_at: float | None = None
    delivered: bool = False
    """The endpoint took it (until then it waits in the service's queue)."""
    fetched: bool = False
    """Its result reached the client: delivered to a live result watcher of its task group
    (as the AMQP stream delivers it) or returned by ``GET /v2/tasks/<id>`` or
    ``batch_status`` (:mod:`federation.standin.retention`)."""
    taken: threading.Event = field(default_factory=threading.Event)
    """Set with ``delivered`` (the embedded service's acknowledgement waits on it)."""

    @property
    def result(self) -> Result | None:
        if self.packed is None:
            return None
        res = messagepack.unpack(self.packed)
        assert isinstance(res, Result)
        return res

    @result.setter
    def result(self, res: Result | None) -> None:
        self.packed = None if res is None else messagepack.pack(res)

    def took(self) -> None:
        """The endpoint took the task: waiters wake, the record's own event is dropped."""
        self.delivered = True
        self.taken.set()
        self.taken = TAKEN


@dataclass
class _Endpoint:
    site: str
    link: EndpointLink
    task_ids: set[str] = field(default_factory=set)
    shipped: Counter[str] = field(default_factory=Counter)
    """Tasks accepted for the endpoint, by function name: what clients shipped to the site."""
