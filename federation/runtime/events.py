"""Typed events and the in-process bus that resumes waiting callers."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from pydantic import Field

from federation.core.errors import CursorAheadError
from federation.core.model import Frozen

logger = logging.getLogger(__name__)

DEFAULT_OWNER = "local"
"""Who owns work whose creator is not named: the in-process user (the Python API, the CLI
without ``--service``), and every record written before records carried an owner."""

EventKind = Literal[
    "task.queued",
    "task.staging",
    "task.staged",
    "task.started",
    "task.completed",
    "task.failed",
    "task.retried",
    "task.hedge_cancelled",
    "task.copy_added",
    "task.milestone",
    "task.stalled",
    "task.accounted",
    "group.submitted",
    "group.child_replaced",
    "group.child_stalled",
    "group.exception",
    "group.round_terminal",
    "hook.failed",
    "transfer.submitted",
    "transfer.progress",
    "transfer.completed",
    "transfer.failed",
    "policy.unresolved",
    "policy.approved",
    "policy.rejected",
    "policy.copy_refused",
]


class Event(Frozen):
    """Something decision-relevant that happened to a task."""

    seq: int = Field(ge=0, description="position in the coordinator's event log")
    kind: EventKind
    task_id: str
    site: str | None = None
    at: datetime
    detail: dict[str, Any] = Field(default_factory=dict)
    owner: str = Field(
        default=DEFAULT_OWNER, description="the caller whose task, group or transfer this is"
    )
    owner_seq: int = Field(
        default=0, ge=0, description="position in the owner's own event log (gap-free)"
    )

    def as_seen_by_owner(self) -> Event:
        """This event in its owner's view: ``seq`` is the owner's own cursor."""
        return self.model_copy(update={"seq": self.owner_seq})


EventCallback = Callable[[Event], None]


class EventLog(Protocol):
    """Where events are persisted (see :class:`federation.runtime.store.Store`): the whole
    log, of which the bus keeps only the latest part in memory."""

    def append_event(self, ev: Event) -> None: ...

    def events(
        self, after_seq: int = 0, *, owner: str | None = None, record_id: str | None = None
    ) -> list[Event]:
        """Events after ``after_seq`` in order (``owner``: that owner's, ``after_seq`` their
        own cursor; ``record_id``: one task's, group's or transfer's)."""
        ...

    def event_tail(self, n: int) -> list[Event]: ...

    def owner_cursors(self) -> dict[str, int]: ...

    def record_owner(self, record_id: str) -> str | None: ...


class _Subscriber:
    """One callback; its lock orders a replay before the live events that follow it."""

    def __init__(self, callback: EventCallback, task_id: str | None) -> None:
        self.callback = callback
        self.task_id = task_id
        self.lock = threading.RLock()

    def wants(self, ev: Event) -> bool:
        return self.task_id is None or self.task_id == ev.task_id

    def call(self, ev: Event) -> None:
        try:
            self.callback(ev)
        except Exception:
            logger.exception("event callback %r failed on %s", self.callback, ev.kind)


KEEP_EVENTS = 4096
"""Events a bus with a persisted log keeps in memory (the latest); older ones are read back
from the log when a caller's cursor or a record's history reaches them."""


class EventBus:
    """Ordered log of events; subscribers are called on the thread that emits.

    Without a persisted log the bus is the log and keeps every event. With one (the store),
    memory stays flat however many tasks pass: the latest :data:`KEEP_EVENTS` events (and
    each owner's latest), the histories of records still open, and who owns them; a
    finished record is :meth:`forget`-ten and read back from the log when asked about.
    """

    def __init__(self, log: EventLog | None = None, *, keep_events: int = KEEP_EVENTS) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._persist = log
        self._keep = max(1, keep_events) if log is not None else None
        self._log: list[Event] = log.event_tail(self._keep or 0) if log is not None else []
        """The latest events in order; seqs are contiguous (the first is ``_log[0].seq``)."""
        self._last = self._log[-1].seq if self._log else 0
        self._seq = itertools.count(self._last + 1)
        self._all: list[_Subscriber] = []
        """Subscribers to every event."""
        self._by_task: dict[str, list[_Subscriber]] = {}
        """Subscribers to one task's (or group's) events: emit costs O(its subscribers)."""
        self._task_log: dict[str, list[Event]] = {}
        """Whole histories of the records this bus has seen an event of (until forgotten);
        a record not here is read from the persisted log."""
        self._owner_log: dict[str, list[Event]] = {}
        """Each owner's latest events in order; an event's ``owner_seq`` is its position + 1
        in the owner's whole log (contiguous here too)."""
        self._owner_last: dict[str, int] = log.owner_cursors() if log is not None else {}
        self._owners: dict[str, str] = {}
        """Who owns each task, group and transfer id (set when it is created)."""
        for ev in self._log:  # every owner event after the tail's start: contiguous too
            self._owner_log.setdefault(ev.owner, []).append(ev)

    def _owner(self, record_id: str) -> str | None:
        """``record_id``'s owner (memory, else the persisted log); under ``_lock``."""
        owner = self._owners.get(record_id)
        if owner is None and self._persist is not None:
            owner = self._persist.record_owner(record_id)
            if owner is not None:
                self._owners[record_id] = owner
        return owner

    def set_owner(self, record_id: str, owner: str, *, new: bool = False) -> None:
        """Record that ``record_id`` (a task, group or transfer) belongs to ``owner``: its
        events go to that owner's log. Call it before the record's first event; an owner
        once set is kept (a record never changes hands). ``new``: an id just made here
        (a fresh random one), which no log can hold yet, so none is read, and its
        history starts empty here (its first event reads nothing back either)."""
        with self._lock:
            if new:
                self._owners[record_id] = owner
                self._task_log.setdefault(record_id, [])
                return
            known = self._owner(record_id) or self._owners.setdefault(record_id, owner)
        if known != owner:
            raise ValueError(f"{record_id!r} already belongs to {known!r}, not {owner!r}")

    def owner_of(self, record_id: str) -> str | None:
        """Who owns ``record_id`` (None: no record of that id has an owner here)."""
        with self._lock:
            return self._owner(record_id)

    def forget(self, record_id: str) -> None:
        """A finished record's history and subscribers leave memory (the persisted log keeps
        the history; :meth:`history` reads it back). Nothing happens without a log."""
        if self._persist is None:
            return
        with self._lock:
            self._task_log.pop(record_id, None)
            self._owners.pop(record_id, None)
            self._by_task.pop(record_id, None)

    def subscribe(
        self, callback: EventCallback, task_id: str | None = None, *, replay: bool = False
    ) -> None:
        """Call ``callback`` for every later event (of ``task_id`` only, when given).

        ``replay``: first call it for the matching events already in the log. Taking the
        past and registering for the future happen atomically, so no event is missed or
        delivered twice, and events from other threads wait until the replay is done.
        """
        sub = _Subscriber(callback, task_id)
        with sub.lock:
            with self._lock:
                if task_id is None:
                    self._all.append(sub)
                    past = self._since(0, None) if replay else []
                else:
                    self._by_task.setdefault(task_id, []).append(sub)
                    past = self._record_history(task_id) if replay else []
            for ev in past:
                sub.call(ev)

    def unsubscribe(self, callback: EventCallback, task_id: str | None = None) -> None:
        """Stop calling ``callback`` (as subscribed with the same ``task_id``)."""
        with self._lock:
            subs = self._all if task_id is None else self._by_task.get(task_id, [])
            subs[:] = [s for s in subs if s.callback != callback]
            if task_id is not None and not subs:
                self._by_task.pop(task_id, None)

    def emit(self, kind: EventKind, task_id: str, site: str | None = None, **detail: Any) -> Event:
        ev, subs = self.record(kind, task_id, site, **detail)
        self.deliver(ev, subs)
        return ev

    def record(
        self, kind: EventKind, task_id: str, site: str | None = None, **detail: Any
    ) -> tuple[Event, list[Any]]:
        """Number, persist and log an event (waiting cursors wake); the subscribers to
        :meth:`deliver` it to, outside whatever lock the caller holds."""
        with self._lock:
            owner = self._owner(task_id) or self._owners.setdefault(task_id, DEFAULT_OWNER)
            ev = Event(
                seq=next(self._seq),
                kind=kind,
                task_id=task_id,
                site=site,
                at=datetime.now(UTC),
                detail=detail,
                owner=owner,
                owner_seq=self._owner_last.get(owner, 0) + 1,
            )
            own = self._record_history(task_id)  # before the append: the whole past
            if self._persist is not None:  # written before anyone is told
                self._persist.append_event(ev)
            self._task_log[task_id] = own
            own.append(ev)
            self._last = ev.seq
            self._owner_last[owner] = ev.owner_seq
            self._append(self._log, ev)
            self._append(self._owner_log.setdefault(owner, []), ev)
            subs = [*self._by_task.get(task_id, ()), *self._all]
            self._changed.notify_all()
        return ev, subs

    @staticmethod
    def deliver(ev: Event, subs: list[Any]) -> None:
        """Call each subscriber with ``ev`` (what :meth:`record` returned)."""
        for sub in subs:
            with sub.lock:
                sub.call(ev)

    def _append(self, log: list[Event], ev: Event) -> None:
        log.append(ev)
        if self._keep is not None and len(log) > 2 * self._keep:
            del log[: len(log) - self._keep]  # amortized: trimmed in halves

    def _record_history(self, record_id: str) -> list[Event]:
        """``record_id``'s whole history (a new list when read from the persisted log);
        under ``_lock``."""
        known = self._task_log.get(record_id)
        if known is not None:
            return known
        if self._persist is None:
            return []
        return self._persist.events(record_id=record_id)

    def _since(self, after_seq: int, owner: str | None) -> list[Event]:
        """Every event after ``after_seq`` (``owner``: theirs, by their cursor); from memory
        when it reaches back that far, else from the persisted log; under ``_lock``."""
        log = self._log if owner is None else self._owner_log.get(owner, [])
        if log:
            first = log[0].seq if owner is None else log[0].owner_seq
            if after_seq >= first - 1 or self._persist is None:
                return log[max(0, after_seq - (first - 1)) :]
        elif after_seq >= (self._last if owner is None else self._owner_last.get(owner, 0)):
            return []
        if self._persist is None:
            return []
        return self._persist.events(after_seq, owner=owner)

    def history(self, task_id: str | None = None) -> list[Event]:
        """Every event (``task_id``: that record's), in order."""
        with self._lock:
            return list(self._since(0, None) if task_id is None else self._record_history(task_id))

    def await_event(
        self,
        after_seq: int = 0,
        *,
        task_ids: set[str] | None = None,
        kinds: set[str] | None = None,
        timeout_s: float | None = None,
        owner: str | None = None,
    ) -> list[Event]:
        """Block until events after ``after_seq`` match; return them (empty on timeout).

        Resumable: pass the last ``seq`` you saw as ``after_seq`` and no event between two
        calls is missed. The waiter sleeps on a condition variable: no polling.

        ``owner``: only that owner's events, and ``after_seq`` is a position in the owner's
        own log (their ``owner_seq``): the cursor of a caller who sees only their own work.
        The events are returned as stored (``seq`` global, ``owner_seq`` the cursor).

        A cursor past the end of the log raises :class:`CursorAheadError` at once (no event
        could ever match: the log it came from is not this one).
        """

        def pos(e: Event) -> int:
            return e.seq if owner is None else e.owner_seq

        cursor = after_seq

        def matching() -> list[Event]:
            nonlocal cursor
            past = self._since(cursor, owner)
            found = [
                e
                for e in past
                if pos(e) > cursor
                and (task_ids is None or e.task_id in task_ids)
                and (kinds is None or e.kind in kinds)
            ]
            if past and not found:
                cursor = max(cursor, pos(past[-1]))  # seen: not read again while waiting
            return found

        with self._changed:
            self._check_cursor(after_seq, owner)
            found = matching()
            if not found:
                self._changed.wait_for(lambda: bool(matching()), timeout=timeout_s)
                found = matching()
            return found

    def check_cursor(self, after_seq: int, owner: str | None = None) -> None:
        """Raise :class:`CursorAheadError` when ``after_seq`` is past the end of the log
        (``owner``: of that owner's own log)."""
        with self._lock:
            self._check_cursor(after_seq, owner)

    def _check_cursor(self, after_seq: int, owner: str | None) -> None:
        last = self._last if owner is None else self._owner_last.get(owner, 0)
        if after_seq > last:
            raise CursorAheadError(after_seq, last, owner)

    @property
    def last_seq(self) -> int:
        with self._lock:
            return self._last

    def last_seq_of(self, owner: str) -> int:
        """The cursor of ``owner``'s own log: how many events it has (read without the
        lock, which :meth:`record` holds while it writes: one dict read is atomic, and a
        cursor read a moment early only means the caller sees one event more)."""
        return self._owner_last.get(owner, 0)
