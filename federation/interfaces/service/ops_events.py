"""Event operations of :class:`~federation.interfaces.service.ops.LocalOps`: the caller's
events after a cursor, waited for on the event bus in short slices (no polling)."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence

import anyio
import anyio.to_thread

from federation.core.errors import CursorAheadError
from federation.interfaces.service.errors import OpsError
from federation.interfaces.service.models import EVENT_KINDS, EventsPage
from federation.interfaces.service.ownership import Ownership, Who
from federation.interfaces.service.translate import translate
from federation.runtime.coordinator import Coordinator

__all__ = ["WAIT_SLICE_S", "EventOps", "parse_kinds"]

WAIT_SLICE_S = 1.0
"""A long wait sleeps on the event bus in slices this long, so an abandoned waiter (a client
that went away, a cancelled tool call) frees its thread within a second. Events still wake
it at once: each slice is a condition-variable wait, not a poll."""


class EventOps:
    """Events, mixed into :class:`~federation.interfaces.service.ops.LocalOps`."""

    coord: Coordinator
    owners: Ownership
    waiters: int
    _lock: threading.Lock
    _limiter: anyio.CapacityLimiter
    _max_waiters: int

    def expand_ids(self, ids: set[str] | None) -> set[str] | None:
        """A group id stands for the group and every attempt of every child (so far)."""
        if not ids:
            return ids
        out = set(ids)
        groups = []
        for i in ids:
            try:  # in memory while open, else read back from the store
                groups.append(self.coord.groups.get(i))
            except KeyError:
                continue
        for g in groups:
            for child in list(g.children):
                out.update(a.id for a in list(child.attempts))
        return out

    def check_event_filter(
        self, task_ids: Sequence[str] | None, kinds: Sequence[str] | None, caller: str = ""
    ) -> tuple[set[str] | None, set[str] | None]:
        """The filters, checked: ids the caller cannot see are refused as unknown (404)."""
        ids = set(task_ids) if task_ids else None
        if ids:
            unknown = self.owners.unseen(self.owners.who(caller), ids)
            if unknown:
                raise OpsError(
                    404,
                    "unknown_task",
                    f"no task, group or transfer with id(s) {unknown} on this coordinator",
                    "filter on ids that submit_task, submit_group or move_data returned",
                )
        kind_set = set(kinds) if kinds else None
        if kind_set:
            bad = sorted(kind_set - set(EVENT_KINDS))
            if bad:
                raise OpsError(
                    422,
                    "bad_event_kind",
                    f"unknown event kind(s) {bad}",
                    f"use some of {list(EVENT_KINDS)}",
                )
        return ids, kind_set

    def check_cursor(self, after: int, caller: str = "") -> None:
        """Refuse a cursor past the end of the caller's log (409 ``cursor_ahead``: the
        service restarted without its store, or the cursor is another service's)."""
        self._check_cursor(after, self.owners.who(caller))

    def _check_cursor(self, after: int, who: Who) -> None:
        if after < 0:
            raise OpsError(422, "bad_cursor", f"after={after} is negative", "start from 0")
        try:
            self.coord.events.check_cursor(after, None if who.operator else who.name)
        except CursorAheadError as e:
            raise translate(e) from e

    async def events(
        self,
        after: int,
        task_ids: Sequence[str] | None,
        kinds: Sequence[str] | None,
        timeout_s: float,
        abandoned: Callable[[], Awaitable[bool]] | None = None,
        caller: str = "",
    ) -> EventsPage:
        """The caller's events after ``after`` matching the filters; waits up to
        ``timeout_s`` for one.

        A caller's cursor counts their own events (each event's ``seq`` is its place in
        their log, 1, 2, 3, ... with no gaps); an operator's counts every event. The wait
        runs in worker threads (one condition-variable wait per slice), so the event loop
        stays free. ``abandoned()`` is asked between slices; when it says so (the client
        went away), the wait ends early.
        """
        who = self.owners.who(caller)
        self._check_cursor(after, who)
        ids, kind_set = self.check_event_filter(task_ids, kinds, who.name)
        owner = None if who.operator else who.name
        bus = self.coord.events
        deadline = time.monotonic() + max(0.0, timeout_s)
        if self.waiters >= self._max_waiters:
            raise OpsError(
                503,
                "too_many_waiters",
                f"{self._max_waiters} event waits are already in progress",
                "retry shortly, or wait on several tasks in one call",
            )
        with self._lock:
            self.waiters += 1
        try:
            while True:
                remaining = deadline - time.monotonic()
                wait = functools.partial(
                    bus.await_event,
                    after,
                    task_ids=self.expand_ids(ids),
                    kinds=kind_set,
                    timeout_s=max(0.0, min(WAIT_SLICE_S, remaining)),
                    owner=owner,
                )
                try:
                    found = await anyio.to_thread.run_sync(wait, limiter=self._limiter)
                except CursorAheadError as e:  # the bus checks the cursor too
                    raise translate(e) from e
                if found:
                    found = self.owners.shown(who, found)
                    return EventsPage(
                        events=tuple(found),
                        cursor=max(e.seq for e in found),
                        timed_out=False,
                        last_seq=self.owners.cursor(who),
                    )
                if time.monotonic() >= deadline:
                    break
                if abandoned is not None and await abandoned():
                    break
        finally:
            with self._lock:
                self.waiters -= 1
        return EventsPage(events=(), cursor=after, timed_out=True, last_seq=self.owners.cursor(who))


def parse_kinds(values: Iterable[str] | None) -> list[str] | None:
    """``["task.completed,task.failed", "task.started"]`` -> the three kinds (None if empty)."""
    if not values:
        return None
    out = [k.strip() for v in values for k in v.split(",") if k.strip()]
    return out or None
