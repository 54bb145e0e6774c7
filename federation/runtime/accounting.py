"""The accountant: the scheduler's record (``sacct``) of the jobs finished tasks ran in,
read in the background, one request per site per look, so a read never ships anything.

``get_result`` and a task's status answer from what is known (the handle, the store). A task
that ran in a Slurm job is handed here when it ends (:meth:`Accountant.ended`, called by
the lifecycle), and a coordinator built over a store takes back the recent tasks that ended
without accounting recorded (:meth:`Accountant.recover`: after a restart). Each site has
a queue; one thread serves them all:

* a **look** at a site happens once its oldest task is due (its end is
  :attr:`Accountant.settle_s` old: slurmdbd records a job's end asynchronously, and an idle
  block is released a few seconds after its last task); it takes every task that ended
  there since the last look (and those asked before that are due again before the next
  look could be) and asks the site for all their jobs in **one**
  :func:`functions.accounting.sacct_jobs` call (one per identity, where callers
  act under their own: :mod:`federation.runtime.callers`), on the probe profile like the
  probes; two looks at a site are at least :attr:`Accountant.look_s` apart and never
  overlap, and with nothing due the thread sleeps on a condition (no polling);
* each task's share of the answer goes on its handle and into the store (``accounting``),
  and ``task.accounted`` is emitted once the record is complete (every job ended), or when
  the accountant gives up on it: a record still incomplete is asked again on a later look,
  :data:`MAX_ASKS` times at most, further apart each time; an error keeps what an earlier
  look found.

:meth:`Accountant.wait` is for a caller that wants the record: it waits for that event
with a deadline; it never asks the site itself. :meth:`Accountant.close` stops the thread
before the coordinator closes its store; nothing is written or logged after it returns.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from federation.runtime.handles import TaskHandle
from federation.runtime.provenance import Accounting, FunctionSite, parse_accounting
from functions.accounting import sacct_jobs

if TYPE_CHECKING:
    from federation.runtime.context import Runtime
    from federation.runtime.lifecycle import Lifecycle
    from federation.runtime.registry import TaskRegistry

logger = logging.getLogger(__name__)

LOOK_S = 5.0
"""Default shortest time between two looks at one site (:attr:`Accountant.look_s`;
``$FEDERATION_ACCOUNTING_LOOK_S``)."""
SETTLE_S = 10.0
"""Default age of a task's end before its first look (:attr:`Accountant.settle_s`;
``$FEDERATION_ACCOUNTING_SETTLE_S``)."""
MAX_ASKS = 6
"""Looks a task gets at most: an incomplete record is asked again ``look_s``, then twice,
four times... that later (at most :data:`MAX_BACKOFF_S`), then given up as it stands."""
MAX_BACKOFF_S = 60.0
REQUEST_TIMEOUT_S = 60.0
"""How long a look waits for its site's answer (then it counts as an error)."""
MAX_TASKS_PER_LOOK = 500
"""Tasks one look asks about at most (the rest are due at the next look)."""
RECOVER_WITHIN_S = 86400.0
"""A restart takes back the tasks that ended without accounting this recently."""
KEEP_LOOKS = 256


def site_job_ids(site: str, attempts: Iterable[dict[str, Any]], last: str | None) -> list[str]:
    """The Slurm jobs a task ran in on ``site`` (earlier attempts' there first, then the
    last): the ids another site's jobs had mean nothing to this site's accounting."""
    ids = [a.get("slurm_job_id") for a in attempts if a.get("site") == site] + [last]
    return list(dict.fromkeys(str(j) for j in ids if j))


@dataclass
class Look:
    """One request to one site: the tasks and jobs it asked about, and how it went."""

    site: str
    at: datetime
    task_ids: tuple[str, ...]
    job_ids: tuple[str, ...]
    seconds: float | None = None
    error: str | None = None


@dataclass(eq=False)
class _Due:
    """A finished task waiting for its accounting."""

    task_id: str
    site: str
    caller: str
    ended: float
    """When it was queued (monotonic): its first look is ``settle_s`` after."""
    handle: TaskHandle | None = None
    """The live handle (None: a task read back from the store after a restart)."""
    job_ids: tuple[str, ...] = ()
    """The store's job ids (for a task read back; a live handle is read at the look)."""
    last: Accounting | None = None
    asks: int = 0
    again: float | None = None
    """When it is due again (monotonic), after an incomplete answer."""

    def ids(self) -> list[str]:
        h = self.handle
        if h is None:
            return list(self.job_ids)
        return site_job_ids(h.site, h.attempts, h.slurm_job_id)

    @property
    def known(self) -> Accounting | None:
        return self.handle.accounting if self.handle is not None else self.last


@dataclass(eq=False)
class _Request:
    look: Look
    entries: list[_Due]
    backend: object
    fut: Future[Any] | None = None
    error: str | None = None
    sent: float = field(default_factory=time.monotonic)


class Accountant:
    """Reads finished tasks' accounting per site per look, off every caller's path."""

    def __init__(self, rt: Runtime, reg: TaskRegistry, life: Lifecycle) -> None:
        self.rt = rt
        self.reg = reg
        life.on_end = self.ended
        self._cond = threading.Condition()
        self._look_s = _seconds("FEDERATION_ACCOUNTING_LOOK_S", LOOK_S)
        self._settle_s = _seconds("FEDERATION_ACCOUNTING_SETTLE_S", SETTLE_S)
        self.max_asks = MAX_ASKS
        self.requests: Counter[str] = Counter()
        """Accounting requests sent, per site."""
        self.looks: deque[Look] = deque(maxlen=KEEP_LOOKS)
        """The latest requests (one per site per look), oldest first."""
        self._queues: dict[str, dict[str, _Due]] = {}
        self._busy: dict[str, list[_Request]] = {}
        """Each site's look in flight (its requests, sent or being sent)."""
        self._last_look: dict[str, float] = {}
        self._thread: threading.Thread | None = None
        self._closed = False
        self.recover()

    @property
    def look_s(self) -> float:
        """Shortest time between two looks at one site (a change applies at once)."""
        return self._look_s

    @look_s.setter
    def look_s(self, value: float) -> None:
        with self._cond:
            self._look_s = max(0.0, value)
            self._cond.notify_all()

    @property
    def settle_s(self) -> float:
        """How old a task's end is before its first look (a change applies at once)."""
        return self._settle_s

    @settle_s.setter
    def settle_s(self, value: float) -> None:
        with self._cond:
            self._settle_s = max(0.0, value)
            self._cond.notify_all()

    # --- what comes in ----------------------------------------------------------------------
    def accountable(self, site: str) -> bool:
        """Whether ``site`` can be asked (its backend runs functions on its login node)."""
        return isinstance(self.rt.backends.get(site), FunctionSite)

    def ended(self, h: TaskHandle) -> None:
        """``h`` ended: queue it for its site's accounting if it ran in a Slurm job there
        (its job id may still be on its way: it is read at the look)."""
        if h.started_at is None and not h.slurm_job_ids:
            return  # never ran: no job to ask about
        if (h.accounting is not None and h.accounting.complete) or not self.accountable(h.site):
            return
        self._queue([_Due(h.id, h.site, h.caller, time.monotonic(), handle=h)])

    def recover(self, within_s: float = RECOVER_WITHIN_S) -> int:
        """After a restart (a coordinator built over a store calls it): queue the tasks the
        store has as ended in a Slurm job within ``within_s``, with no accounting recorded,
        due ``settle_s`` later (a short-lived coordinator asks nothing). Returns how many."""
        store = self.rt.store
        if store is None:
            return 0
        since = (datetime.now(UTC) - timedelta(seconds=within_s)).isoformat()
        now = time.monotonic()
        found: list[_Due] = []
        for row in store.unaccounted_tasks(since):
            site, tid = row["site"], row["id"]
            if tid in self.reg.handles or not self.accountable(site):
                continue  # in memory (re-attached): its end is handed over by the lifecycle
            attempts = json.loads(row["attempts"]) if row["attempts"] else []
            ids = tuple(site_job_ids(site, attempts, row["slurm_job_id"]))
            if ids:
                found.append(_Due(tid, site, row["owner"], now, job_ids=ids))
        self._queue(found)
        return len(found)

    def _queue(self, entries: list[_Due]) -> None:
        if not entries:
            return
        with self._cond:
            if self._closed:
                return
            for e in entries:
                self._queues.setdefault(e.site, {}).setdefault(e.task_id, e)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="accountant", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def pending(self) -> int:
        """Tasks waiting for a look or in one."""
        with self._cond:
            queued = sum(len(q) for q in self._queues.values())
            return queued + sum(len(r.entries) for rs in self._busy.values() for r in rs)

    # --- the looks ----------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                work = self._next()
            if work is None:
                return
            finished, starting = work
            for reqs in starting:
                self._send(reqs)
            for reqs in finished:
                try:
                    self._settle(reqs)
                except Exception:  # never the thread's end: the next looks go on
                    if not self._closed:
                        logger.exception("accountant: a look at %s failed", reqs[0].look.site)

    def _next(self) -> tuple[list[list[_Request]], list[list[_Request]]] | None:
        """Under the lock: wait until a look is due or one in flight is answered; None once
        closed. Returns the looks answered (or timed out) and the looks to send."""
        while not self._closed:
            now = time.monotonic()
            finished: list[list[_Request]] = []
            for site, reqs in list(self._busy.items()):
                sent = [r for r in reqs if r.fut is not None or r.error is not None]
                if len(sent) < len(reqs):
                    continue  # still being sent
                if all(_answered(r, now) for r in reqs):
                    finished.append(self._busy.pop(site))
            starting: list[list[_Request]] = []
            wake: float | None = None
            for site, queue in self._queues.items():
                if not queue or site in self._busy:
                    continue
                at = max(
                    min(self._due(e) for e in queue.values()),
                    self._last_look.get(site, float("-inf")) + self.look_s,
                )
                if at > now:
                    wake = at if wake is None else min(wake, at)
                    continue
                horizon = now + self.look_s  # what would be due before the next look
                due = [e for e in queue.values() if e.asks == 0 or self._due(e) <= horizon]
                due = sorted(due, key=self._due)[:MAX_TASKS_PER_LOOK]
                for e in due:
                    del queue[e.task_id]
                self._last_look[site] = now
                self._busy[site] = reqs = self._requests(site, due)
                starting.append(reqs)
            for reqs in self._busy.values():
                for r in reqs:
                    if r.fut is not None and not r.fut.done():
                        end = r.sent + REQUEST_TIMEOUT_S
                        wake = end if wake is None else min(wake, end)
            if finished or starting:
                return finished, starting
            self._cond.wait(None if wake is None else max(0.0, wake - now))
        return None

    def _due(self, e: _Due) -> float:
        return e.again if e.again is not None else e.ended + self.settle_s

    def _requests(self, site: str, due: list[_Due]) -> list[_Request]:
        """One request per identity the due tasks of ``site`` act under (usually one)."""
        by_backend: dict[int, _Request] = {}
        for e in due:
            try:
                backend: object = self.rt.site_for(e.caller, site)
            except Exception as exc:  # e.g. a caller whose tokens are gone
                backend = exc
            req = by_backend.get(id(backend))
            if req is None:
                look = Look(site=site, at=datetime.now(UTC), task_ids=(), job_ids=())
                req = by_backend[id(backend)] = _Request(look, [], backend)
            req.entries.append(e)
        return list(by_backend.values())

    def _send(self, reqs: list[_Request]) -> None:
        """Send one look's requests (outside the lock; the SDK only queues them)."""
        for r in reqs:
            ids = list(dict.fromkeys(j for e in r.entries for j in e.ids()))
            r.look.task_ids = tuple(e.task_id for e in r.entries)
            r.look.job_ids = tuple(ids)
            fut: Future[Any] | None = None
            error: str | None = None
            if isinstance(r.backend, Exception):
                error = f"accounting query failed: {type(r.backend).__name__}: {r.backend}"
            elif not ids:
                error = "no Slurm job id was recorded"
            elif not isinstance(r.backend, FunctionSite):
                error = "this site cannot run functions on its login node"
            else:
                try:
                    fut = r.backend.executor({"profile": "probe"}).submit(sacct_jobs, ids)
                except Exception as exc:  # the endpoint is down, the executor stopped
                    error = f"accounting query failed: {type(exc).__name__}: {exc}"
            with self._cond:
                if fut is not None:
                    self.requests[r.look.site] += 1
                    self.looks.append(r.look)
                r.sent, r.fut, r.error = time.monotonic(), fut, error
            if fut is not None:
                fut.add_done_callback(self._wake)
        with self._cond:
            self._cond.notify_all()

    def _wake(self, _fut: Future[Any]) -> None:
        with self._cond:
            self._cond.notify_all()

    def _settle(self, reqs: list[_Request]) -> None:
        """Give each task its share of its look's answer; queue again what is incomplete."""
        for r in reqs:
            answer = self._answer(r)
            for e in r.entries:
                if self._closed:
                    return
                ids = e.ids()
                if ids:
                    self._apply(e, share(answer, ids))
                    continue
                e.asks += 1  # its job id may still be on its way (read from the site)
                if e.asks < self.max_asks:
                    self._again(e)

    def _answer(self, r: _Request) -> Accounting:
        site, now = r.look.site, datetime.now(UTC)
        fut = r.fut
        if fut is None or not fut.done():
            error = r.error or f"accounting query timed out after {REQUEST_TIMEOUT_S:.0f} s"
        elif fut.cancelled() or fut.exception() is not None:
            exc = fut.exception() if not fut.cancelled() else None
            error = f"accounting query failed: {type(exc).__name__}: {exc}"
        else:
            r.look.seconds = round(time.monotonic() - r.sent, 3)
            acct = parse_accounting(site, fut.result(), started=True)
            r.look.error = acct.error
            return acct
        r.look.error = error
        return Accounting(site=site, fetched_at=now, error=error)

    def _apply(self, e: _Due, acct: Accounting) -> None:
        known = e.known
        if acct.error and known is not None and known.jobs:
            acct = known  # keep what an earlier look found
        else:
            if e.handle is not None:
                e.handle.accounting = acct
            e.last = acct
            store = self.rt.store
            if store is not None:
                store.update_task(e.task_id, accounting=acct.model_dump_json())
        e.asks += 1
        if acct.complete or e.asks >= self.max_asks:
            self._announce(e, acct)
        else:
            self._again(e)

    def _again(self, e: _Due) -> None:
        """Queue ``e`` for a later look: ``look_s``, then twice, four times... that later."""
        delay = min(self.look_s * 2 ** (e.asks - 1), MAX_BACKOFF_S)
        e.again = time.monotonic() + max(delay, self.look_s)
        self._queue([e])

    def _announce(self, e: _Due, acct: Accounting) -> None:
        """``task.accounted``: the task's record is complete, or as complete as it gets."""
        detail: dict[str, Any] = {
            "slurm_job_ids": [j.job_id for j in acct.jobs],
            "states": {j.job_id: j.state for j in acct.jobs},
            "complete": acct.complete,
            "asks": e.asks,
        }
        if acct.error:
            detail["error"] = acct.error
        self.rt.events.emit("task.accounted", e.task_id, e.site, **detail)
        if self.rt.store is not None and e.task_id not in self.reg.handles:
            self.rt.events.forget(e.task_id)  # released: its history stays in the store

    # --- for callers ----------------------------------------------------------------------
    def wait(self, handle: TaskHandle | str, timeout_s: float | None = 60.0) -> Accounting | None:
        """The task's accounting once ``task.accounted`` says it is in (waits up to
        ``timeout_s``; the task may still be running). None when it did not arrive in time,
        or never will (the task never ran in a Slurm job, or its site cannot be asked).
        Never asks the site: the accountant's looks do."""
        h = self.reg.get(handle)
        bus = self.rt.events
        after = bus.last_seq
        if not any(ev.kind == "task.accounted" for ev in bus.history(h.id)):
            if h.done and h.started_at is None and not h.slurm_job_ids:
                return None
            if not self.accountable(h.site):
                return None
            got = bus.await_event(
                after, task_ids={h.id}, kinds={"task.accounted"}, timeout_s=timeout_s
            )
            if not got:
                return None
        fresh = self.reg.find(h.id)
        return (fresh or h).accounting or h.accounting

    def close(self) -> None:
        """Stop looking (before the store closes): nothing is written or logged after."""
        with self._cond:
            self._closed = True
            self._queues.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(10.0)
            if thread.is_alive():
                logger.warning("accountant: still applying a look after 10 s; it stops there")


def _seconds(name: str, default: float) -> float:
    try:
        return max(0.0, float(os.environ.get(name) or default))
    except ValueError:
        return default


def _answered(r: _Request, now: float) -> bool:
    if r.fut is None:
        return True  # never sent: its error is the answer
    return r.fut.done() or now >= r.sent + REQUEST_TIMEOUT_S


def share(answer: Accounting, ids: Iterable[str]) -> Accounting:
    """One task's part of a look's answer: the jobs among ``ids`` (the error, if any)."""
    if answer.error and not answer.jobs:
        return answer
    mine = set(ids)
    jobs = tuple(j for j in answer.jobs if j.job_id in mine)
    return Accounting(
        site=answer.site,
        jobs=jobs,
        fetched_at=answer.fetched_at,
        source=answer.source,
        error=None if jobs else "sacct knows none of these jobs (yet)",
    )
