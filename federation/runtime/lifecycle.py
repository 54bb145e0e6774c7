"""The task lifecycle: one state machine for every task handle.

A task is ``held`` (placed, not shipped: the policy gate waits for an operator), ``queued``
(shipped, or about to be, and not started), ``running`` (a site reported it started, or it
ended before any start report came), then ``completed`` or ``failed``. A cancelled task
(by request, or rejected by an operator) ends ``failed`` with the reason as its error. A
retry takes a failed attempt back to ``queued`` on another site.

:data:`TRANSITIONS` is the one table of allowed moves; :meth:`Lifecycle.transition` is the
one place a move happens: it checks the move (under the coordinator's lock), updates the
handle, persists it once (through the store), then emits its event (through the bus), in
that order. A transition refused by the table changes nothing and emits nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from federation.runtime.crashpoints import crash_point
from federation.runtime.handles import TaskHandle, TaskState
from federation.runtime.milestones import Milestones
from federation.runtime.rows import end_fields

if TYPE_CHECKING:
    from federation.runtime.context import Runtime
    from federation.runtime.events import EventKind
    from federation.runtime.registry import TaskRegistry

NEW = None
"""The state of a handle not in the registry yet (being submitted)."""

TRANSITIONS: Mapping[TaskState | None, frozenset[TaskState]] = {
    NEW: frozenset({"queued", "held"}),
    "held": frozenset({"queued", "failed"}),  # approved, or rejected
    "queued": frozenset({"running", "completed", "failed", "queued"}),  # queued: a retry
    "running": frozenset({"completed", "failed", "queued"}),
    "completed": frozenset(),
    "failed": frozenset(),
}
"""Allowed moves, from each state (``None``: a new handle) to the states it may enter."""

Detail = Callable[[], dict[str, Any]]


class Lifecycle:
    """Moves task handles through :data:`TRANSITIONS`; the only writer of ``state``."""

    def __init__(self, rt: Runtime, reg: TaskRegistry) -> None:
        self.rt = rt
        self.reg = reg
        self.on_end: Callable[[TaskHandle], None] | None = None
        """Told of every task that ended (completed or failed), after its event: the
        accountant (:mod:`federation.runtime.accounting`) queues it for its site's sacct."""

    def current(self, h: TaskHandle) -> TaskState | None:
        """``h``'s state in the table (``None`` while it is not registered yet)."""
        return h.state if self.reg.registered(h) else NEW

    def transition(
        self,
        h: TaskHandle,
        to: TaskState,
        kind: EventKind,
        detail: Detail,
        *,
        guard: Callable[[], bool] | None = None,
        update: Callable[[], None] | None = None,
        persist: Callable[[], None] | None = None,
        then: Callable[[], None] | None = None,
    ) -> bool:
        """Move ``h`` to ``to``: check the move (and ``guard``) and run ``update`` under the
        lock, then ``persist``, ``then`` (e.g. register the handle), and emit ``kind`` with
        ``detail()``. False, doing nothing more, when the move is not allowed now.

        One move of a task at a time, from the check to the event's number (``h.moving``):
        a start seen while the task ends is either recorded, persisted and numbered before
        the end, or refused, never persisted over the end nor numbered after it. The
        subscribers are called after (they may move other tasks)."""
        with h.moving:
            with self.reg.lock:
                if guard is not None and not guard():
                    return False
                if to not in TRANSITIONS[self.current(h)]:
                    return False
                if update is not None:
                    update()
                h.state = to
            if persist is not None:
                persist()
            if then is not None:
                then()
            ev, subs = self.rt.events.record(kind, h.id, h.site, **detail())
        self.rt.events.deliver(ev, subs)
        if to in ("completed", "failed"):
            if self.on_end is not None:
                self.on_end(h)
            self.release(h)
        return True

    def release(self, h: TaskHandle) -> None:
        """A finished task leaves memory once nothing more can happen to it (no copy
        still queued or being cancelled); the store keeps it. Nothing without a store."""
        self.reg.release(h, then=lambda: self.rt.events.forget(h.id))

    # --- the transitions ------------------------------------------------------------------
    def queue(
        self,
        h: TaskHandle,
        detail: dict[str, Any],
        persist: Callable[[], None],
        then: Callable[[], None],
    ) -> None:
        """A new (or approved) task is recorded, registered (``then``) and ``task.queued``."""
        self.transition(h, "queued", "task.queued", lambda: detail, persist=persist, then=then)

    def hold(
        self,
        h: TaskHandle,
        note: str,
        detail: dict[str, Any],
        persist: Callable[[], None],
        then: Callable[[], None],
    ) -> None:
        """A new task the policy gate holds for an operator (``policy.unresolved``)."""
        self.transition(
            h,
            "held",
            "policy.unresolved",
            lambda: detail,
            update=lambda: h.notes.append(note),
            persist=persist,
            then=then,
        )

    def start(
        self,
        h: TaskHandle,
        slurm_job_id: str | None,
        at: datetime | None = None,
        seen: str = "reported",
    ) -> None:
        """Record and announce (once) that ``h`` is running. ``seen``: ``reported`` by the
        site, or ``at_end`` when its end came before any start report."""
        store = self.rt.store

        def guard() -> bool:
            # the start was announced at the task's end; the site's report brings the job id
            late_job = bool(slurm_job_id) and h.started_at is not None
            late_job = late_job and h.slurm_job_id is None
            if late_job:
                h.slurm_job_id = slurm_job_id
            if h.started_at is not None or h.done:
                if late_job and store is not None:
                    store.update_task(h.id, slurm_job_id=slurm_job_id)
                return False
            return True

        def update() -> None:
            h.started_at = at or datetime.now(UTC)
            h.slurm_job_id = slurm_job_id

        def persist() -> None:
            if store is not None:
                assert h.started_at is not None
                store.update_task(
                    h.id,
                    state="running",
                    started_at=h.started_at.isoformat(),
                    slurm_job_id=slurm_job_id,
                )

        def detail() -> dict[str, Any]:
            assert h.started_at is not None
            wait = (h.started_at - h.submitted_at).total_seconds()
            d: dict[str, Any] = {"slurm_job_id": slurm_job_id, "queue_wait_s": round(wait, 3)}
            if seen != "reported":
                d["seen"] = seen  # the start report had not arrived when the task ended
            return d

        self.transition(
            h, "running", "task.started", detail, guard=guard, update=update, persist=persist
        )
        crash_point("started")

    def complete(self, h: TaskHandle, value: Any) -> None:
        """``h`` returned ``value`` (``task.completed``)."""

        def update() -> None:
            h.completed_at = datetime.now(UTC)
            h.value = value

        def detail() -> dict[str, Any]:
            return {"runtime_s": h.runtime_s, "slurm_job_id": h.slurm_job_id}

        self.transition(
            h,
            "completed",
            "task.completed",
            detail,
            update=update,
            persist=lambda: self.persist_end(h),
        )

    def fail(
        self,
        h: TaskHandle,
        message: str,
        traceback: str,
        value: Any = None,
        failure: str | None = None,
    ) -> None:
        """``h`` failed (or was cancelled) with ``message`` (``task.failed``)."""

        def update() -> None:
            h.completed_at = datetime.now(UTC)
            h.error = message
            h.remote_traceback = traceback
            h.value = value

        def detail() -> dict[str, Any]:
            d: dict[str, Any] = {"error": message}
            if failure:
                d["failure"] = failure
            if h.attempts:
                d["attempts"] = len(h.attempts) + 1
            return d

        if not self.transition(
            h, "failed", "task.failed", detail, update=update, persist=lambda: self.persist_end(h)
        ):
            # ended on another thread (e.g. the site's 'cancelled' result overtook cancel):
            # return once that end is in the store and announced, as if it were ours
            h._done.wait(10)

    def requeue(
        self, h: TaskHandle, update: Callable[[], None], persist: Callable[[], None], detail: Detail
    ) -> bool:
        """A failed attempt of ``h`` is retried (``task.retried``): back to ``queued``."""
        return self.transition(h, "queued", "task.retried", detail, update=update, persist=persist)

    # --- around the transitions -----------------------------------------------------------
    def persist_end(self, h: TaskHandle) -> None:
        store = self.rt.store
        if store is None or h.completed_at is None:
            return
        store.update_task(h.id, **end_fields(h))

    def announce_missed_end(self, h: TaskHandle) -> None:
        """Report an end the store has but the event log missed (the coordinator stopped
        between recording it and announcing it): ``recovered``, no change of state."""
        kind: Any = "task.completed" if h.state == "completed" else "task.failed"
        detail: dict[str, Any] = {"recovered": True}
        if h.error:
            detail["error"] = h.error
        self.rt.events.emit(kind, h.id, h.site, **detail)

    def watch(self, h: TaskHandle) -> None:
        """Watch the milestones ``h`` asked for (and its being overdue)."""
        self.rt.milestones.watch(
            h.id,
            h.site,
            h.wants or Milestones(),
            predicted_wait_s=h.decision.chosen.predicted_wait_s,
            walltime_s=h.envelope.walltime_s,
            submitted_at=h.submitted_at,
            started_at=h.started_at,
        )
