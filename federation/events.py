"""Typed events and the in-process bus that resumes waiting callers."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from pydantic import Field

from federation._model import Frozen

logger = logging.getLogger(__name__)

EventKind = Literal[
    "task.queued",
    "task.started",
    "task.completed",
    "task.failed",
    "task.retried",
    "group.submitted",
    "group.child_replaced",
    "group.round_terminal",
]


class Event(Frozen):
    """Something decision-relevant that happened to a task."""

    seq: int = Field(ge=0, description="position in the coordinator's event log")
    kind: EventKind
    task_id: str
    site: str | None = None
    at: datetime
    detail: dict[str, Any] = Field(default_factory=dict)


EventCallback = Callable[[Event], None]


class EventLog(Protocol):
    """Where events are persisted (see :class:`federation.store.Store`)."""

    def append_event(self, ev: Event) -> None: ...

    def events(self) -> list[Event]: ...


class EventBus:
    """Ordered log of events; subscribers are called on the thread that emits."""

    def __init__(self, log: EventLog | None = None) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._persist = log
        self._log: list[Event] = log.events() if log is not None else []
        self._seq = itertools.count(self._log[-1].seq + 1 if self._log else 1)
        self._subs: list[tuple[EventCallback, str | None]] = []

    def subscribe(self, callback: EventCallback, task_id: str | None = None) -> None:
        """Call ``callback`` for every later event (of ``task_id`` only, when given)."""
        with self._lock:
            self._subs.append((callback, task_id))

    def emit(self, kind: EventKind, task_id: str, site: str | None = None, **detail: Any) -> Event:
        with self._lock:
            ev = Event(
                seq=next(self._seq),
                kind=kind,
                task_id=task_id,
                site=site,
                at=datetime.now(UTC),
                detail=detail,
            )
            if self._persist is not None:  # written before anyone is told
                self._persist.append_event(ev)
            self._log.append(ev)
            subs = [cb for cb, tid in self._subs if tid is None or tid == task_id]
            self._changed.notify_all()
        for cb in subs:
            try:
                cb(ev)
            except Exception:
                logger.exception("event callback %r failed on %s", cb, ev.kind)
        return ev

    def history(self, task_id: str | None = None) -> list[Event]:
        with self._lock:
            return [e for e in self._log if task_id is None or e.task_id == task_id]

    def await_event(
        self,
        after_seq: int = 0,
        *,
        task_ids: set[str] | None = None,
        kinds: set[str] | None = None,
        timeout_s: float | None = None,
    ) -> list[Event]:
        """Block until events after ``after_seq`` match; return them (empty on timeout).

        Resumable: pass the last ``seq`` you saw as ``after_seq`` and no event between two
        calls is missed. The waiter sleeps on a condition variable: no polling.
        """

        def matching() -> list[Event]:
            return [
                e
                for e in self._log[after_seq:]
                if e.seq > after_seq
                and (task_ids is None or e.task_id in task_ids)
                and (kinds is None or e.kind in kinds)
            ]

        with self._changed:
            found = matching()
            if not found:
                self._changed.wait_for(lambda: bool(matching()), timeout=timeout_s)
                found = matching()
            return found

    @property
    def last_seq(self) -> int:
        with self._lock:
            return self._log[-1].seq if self._log else 0
