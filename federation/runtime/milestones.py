"""Milestones: later events a task asked for, watched by one timer for the whole coordinator.

A task can request, on submit:

* ``started``: a ``task.milestone`` event (``milestone="started"``) when its batch job
  picks it up, with the Slurm job id and how long it queued;
* ``queued_longer_than_predicted``: a ``task.milestone`` event, once, if it is still queued
  ``predicted_wait_s * (1 + queue_slack) + queue_margin_s`` after submission.

Every task also gets ``task.stalled``, once, if it is still running ``stall_margin_s`` after
its own walltime estimate (the envelope's ``walltime_s``) has passed.

All deadlines live in one heap served by one thread (:class:`Timers`): the cost of watching
does not grow with threads or polls per task, and a deadline costs nothing until it is due.
The requested milestones are stored with the task, and a milestone already in the event log
is not emitted again after a restart.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, get_args

from pydantic import Field

from federation.core.model import Frozen
from federation.runtime.events import Event, EventBus

logger = logging.getLogger(__name__)

MilestoneName = Literal["started", "queued_longer_than_predicted"]
MILESTONE_NAMES: tuple[str, ...] = get_args(MilestoneName)


class Milestones(Frozen):
    """Which milestones a task wants, and the margins that decide when they fire."""

    started: bool = False
    queued_longer_than_predicted: bool = False
    queue_slack: float = Field(default=0.5, ge=0, description="fraction of the predicted wait")
    queue_margin_s: float = Field(default=60.0, ge=0)
    stall_margin_s: float = Field(default=300.0, ge=0)

    @classmethod
    def of(cls, spec: Milestones | Iterable[str] | None) -> Milestones:
        """``Milestones(...)``, or names such as ``("started", "queued_longer_than_predicted")``."""
        if spec is None:
            return cls()
        if isinstance(spec, Milestones):
            return spec
        names = [spec] if isinstance(spec, str) else list(spec)
        unknown = [n for n in names if n not in MILESTONE_NAMES]
        if unknown:
            raise ValueError(f"unknown milestone(s) {unknown}; choose from {list(MILESTONE_NAMES)}")
        return cls(**{n: True for n in names})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n in MILESTONE_NAMES if getattr(self, n))

    def queue_deadline_s(self, predicted_wait_s: float) -> float:
        """Seconds after submission at which a still-queued task has waited too long."""
        return predicted_wait_s * (1.0 + self.queue_slack) + self.queue_margin_s


class Timers:
    """One heap of deadlines and one thread that runs each callback when it is due.

    A cancelled deadline drops its callback at once (whatever it holds is freed), and the
    heap is compacted once most of its entries are cancelled: memory follows the deadlines
    still pending, not every deadline ever set.
    """

    def __init__(self, name: str = "federation-timers") -> None:
        self.name = name
        self._heap: list[tuple[float, int]] = []
        self._live: dict[int, Callable[[], object]] = {}
        """Each pending deadline's callback, by token (a cancelled token is not here)."""
        self._tokens = itertools.count(1)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def call_at(self, due_monotonic: float, callback: Callable[[], object]) -> int:
        """Run ``callback`` on the timer thread at ``due_monotonic``; returns a token."""
        with self._cond:
            if self._closed:
                raise RuntimeError("timers are closed")
            token = next(self._tokens)
            heapq.heappush(self._heap, (due_monotonic, token))
            self._live[token] = callback
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify()
            return token

    def call_later(self, delay_s: float, callback: Callable[[], object]) -> int:
        return self.call_at(time.monotonic() + max(0.0, delay_s), callback)

    def cancel(self, token: int) -> None:
        with self._cond:
            if self._live.pop(token, None) is None:
                return
            if len(self._heap) > 64 and len(self._heap) > 2 * len(self._live):
                self._heap = [e for e in self._heap if e[1] in self._live]
                heapq.heapify(self._heap)

    @property
    def pending(self) -> int:
        """Deadlines not yet due (cancelled ones excluded)."""
        with self._cond:
            return len(self._live)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._live.clear()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    if not self._heap:
                        self._cond.wait()
                        continue
                    due = self._heap[0][0] - time.monotonic()
                    if due > 0:
                        self._cond.wait(due)
                        continue
                    _, token = heapq.heappop(self._heap)
                    callback = self._live.pop(token, None)
                    if callback is not None:
                        break
                else:
                    return
            try:
                callback()
            except Exception:
                logger.exception("timer callback %r failed", callback)


@dataclass
class _Watched:
    task_id: str
    site: str | None
    wants: Milestones
    predicted_wait_s: float
    walltime_s: float
    running: bool = False
    fired: set[str] = field(default_factory=set)
    timers: list[int] = field(default_factory=list)


class MilestoneWatcher:
    """Turns task events and deadlines into ``task.milestone`` / ``task.stalled`` events.

    It subscribes to the bus once (not once per task) and keeps its deadlines in
    :class:`Timers`.
    """

    def __init__(self, bus: EventBus, timers: Timers | None = None) -> None:
        self.bus = bus
        self.timers = timers or Timers("milestone-timers")
        self._lock = threading.Lock()
        self._tasks: dict[str, _Watched] = {}
        bus.subscribe(self._on_event)

    def watch(
        self,
        task_id: str,
        site: str | None,
        wants: Milestones,
        *,
        predicted_wait_s: float,
        walltime_s: float,
        submitted_at: datetime,
        started_at: datetime | None = None,
    ) -> None:
        """Start watching a task (at submission, or again after a restart)."""
        fired = {
            str(e.detail.get("milestone")) if e.kind == "task.milestone" else e.kind
            for e in self.bus.history(task_id)
            if e.kind in ("task.milestone", "task.stalled")
        }
        w = _Watched(task_id, site, wants, predicted_wait_s, walltime_s, fired=fired)
        with self._lock:
            self._tasks[task_id] = w
        if started_at is not None:
            self._arm_stall(w, started_at)
        elif wants.queued_longer_than_predicted and "queued_longer_than_predicted" not in fired:
            due = wants.queue_deadline_s(predicted_wait_s)
            self._arm(w, submitted_at, due, self._queue_check)

    def watching(self) -> int:
        with self._lock:
            return len(self._tasks)

    def close(self) -> None:
        self.timers.close()

    # --- internals --------------------------------------------------------------------------
    def _arm(
        self, w: _Watched, since: datetime, after_s: float, check: Callable[[str], None]
    ) -> None:
        left = after_s - (datetime.now(UTC) - since).total_seconds()
        token = self.timers.call_later(left, lambda: check(w.task_id))
        with self._lock:
            w.timers.append(token)

    def _arm_stall(self, w: _Watched, started_at: datetime) -> None:
        with self._lock:
            w.running = True
        if "task.stalled" not in w.fired:
            self._arm(w, started_at, w.walltime_s + w.wants.stall_margin_s, self._stall_check)

    def _on_event(self, ev: Event) -> None:
        with self._lock:
            w = self._tasks.get(ev.task_id)
        if w is None:
            return
        if ev.kind == "task.started":
            self._cancel_timers(w)
            if w.wants.started and self._claim(w, "started"):
                self.bus.emit(
                    "task.milestone",
                    w.task_id,
                    ev.site,
                    milestone="started",
                    slurm_job_id=ev.detail.get("slurm_job_id"),
                    queue_wait_s=ev.detail.get("queue_wait_s"),
                )
            self._arm_stall(w, ev.at)
        elif ev.kind == "task.retried":
            self._cancel_timers(w)  # queued again elsewhere: the old deadlines do not apply
            with self._lock:
                w.running, w.site = False, ev.site
        elif ev.kind in ("task.completed", "task.failed"):
            self._cancel_timers(w)
            with self._lock:
                self._tasks.pop(w.task_id, None)

    def _claim(self, w: _Watched, name: str) -> bool:
        with self._lock:
            if name in w.fired:
                return False
            w.fired.add(name)
            return True

    def _cancel_timers(self, w: _Watched) -> None:
        with self._lock:
            tokens, w.timers = w.timers, []
        for t in tokens:
            self.timers.cancel(t)

    def _queue_check(self, task_id: str) -> None:
        with self._lock:
            w = self._tasks.get(task_id)
            still_queued = w is not None and not w.running
        if w is None or not still_queued or not self._claim(w, "queued_longer_than_predicted"):
            return
        self.bus.emit(
            "task.milestone",
            task_id,
            w.site,
            milestone="queued_longer_than_predicted",
            predicted_wait_s=round(w.predicted_wait_s, 3),
            deadline_s=round(w.wants.queue_deadline_s(w.predicted_wait_s), 3),
        )

    def _stall_check(self, task_id: str) -> None:
        with self._lock:
            w = self._tasks.get(task_id)
        if w is None or not w.running or not self._claim(w, "task.stalled"):
            return
        self.bus.emit(
            "task.stalled",
            task_id,
            w.site,
            walltime_s=w.walltime_s,
            margin_s=w.wants.stall_margin_s,
            reason="still running past its walltime estimate",
        )
