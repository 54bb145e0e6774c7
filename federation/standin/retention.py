"""How long the Globus Compute service holds a completed task's result.

Globus Compute docs, "Limits", "Task TTL" (``globus/globus-compute`` ``docs/limits.rst``;
funcx.readthedocs.io/en/latest/limits.html): "Globus Compute considers a task to be
abandoned when there has been no activity on a task for more than **2 weeks**. However,
when a result is available but has not been fetched by the client within **30 minutes** of
completion, the result is marked as abandoned." Hence :data:`RESULT_RETENTION_S`. (The copy
found, commit ``25d6a1f5`` of that file, predates the 10 MB payload limit; no later
statement of the window was found.)

What the service keeps of a result once fetched is not documented. The open-source web
service the SDK grew up with deleted a task as soon as ``GET /tasks/<id>`` or
``batch_status`` returned its result (``funcx-web-service``, ``RedisTask.delete``: "to be
used after the result is gotten"), which is why the SDK's ``Client`` keeps the results it
fetched itself; the SDK's high-assurance path, on the other hand, reads a result over HTTP
right after the AMQP stream delivered it. The stand-in holds every result, fetched or not,
until the window after its completion ends, then releases it: its memory is bounded by the
results completed within one window.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable

__all__ = ["RESULT_RETENTION_S", "ResultRetention"]

logger = logging.getLogger(__name__)

RESULT_RETENTION_S = 30 * 60.0
"""The abandonment window: a result is held this long after its task completed."""


class ResultRetention:
    """The deadlines of the results the service holds, soonest first."""

    def __init__(self, retention_s: float, clock: Callable[[], float] = time.time) -> None:
        if retention_s <= 0:
            raise ValueError(f"result_retention_s must be positive, not {retention_s}")
        self.retention_s = retention_s
        self._clock = clock  # wall clock: completion times come from the endpoint's
        self._deadlines: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._deadlines)

    def expired(self, completed_at: float) -> bool:
        """Whether a result that completed at ``completed_at`` is past its window."""
        return completed_at + self.retention_s <= self._clock()

    def hold(self, task_id: str, completed_at: float) -> None:
        with self._lock:
            heapq.heappush(self._deadlines, (completed_at + self.retention_s, task_id))

    def due(self) -> list[str]:
        """The tasks whose results are past their window (each told once)."""
        now = self._clock()
        out: list[str] = []
        with self._lock:
            while self._deadlines and self._deadlines[0][0] <= now:
                out.append(heapq.heappop(self._deadlines)[1])
        return out

    def abandoned(self, task_ids: list[str]) -> None:
        """Say which released results were never fetched (their clients lost them)."""
        if task_ids:
            logger.warning(
                "%d result(s) abandoned, never fetched within %.0f s of completion: %s",
                len(task_ids),
                self.retention_s,
                ", ".join(task_ids[:5]) + (" ..." if len(task_ids) > 5 else ""),
            )
