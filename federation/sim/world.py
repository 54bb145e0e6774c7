"""A policy's own simulated federation, where every copy of a task is a real queued job.

A :class:`World` is a set of :class:`~federation.sim.queue.SimSite` (one per site, cloned from
the same loaded queues for every compared policy) in which a policy's task copies are
*submitted*: from its submission until it starts or is cancelled a copy holds a place in its
site's queue, is seen by backfill, delays the background jobs and the other copies behind it,
and shows in the snapshots a probe takes. Nothing is free.

How copies end, as a coordinator ends them:

* The coordinator learns that a copy started only at its next look: the start-check cadence
  ``seen_every_s`` (a real site's ``job_check_s``, squeue every 60 s; the embedded path's
  events take ~2 s). At that look the first copy to start wins and every other copy is
  cancelled (``scancel``).
* A cancelled copy that was still queued *held* the queue from its submission until then
  (:attr:`TaskRun.held_s`).
* A cancelled copy that had *started* too (two copies started between two looks) is a running
  duplicate: it burned its allocation from its start until the cancel
  (:attr:`TaskRun.duplicate_run_s`, single-node jobs, so allocation-seconds of one node share).

:func:`background_delay` measures what the copies cost everyone else: the extra wait of the
background jobs in a world against a twin world that received no tasks at all.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from federation.sim.jobs import SimJob, SimJobStatus
from federation.sim.queue import SimSite

__all__ = ["Copy", "TaskRun", "World", "background_delay"]


@dataclass
class Copy:
    """One submitted copy of a task."""

    site: str
    job_id: str
    submit_s: float
    run_s: float
    cancelled_s: float | None = None


@dataclass
class TaskRun:
    """A task's copies in one world, and what became of them."""

    submit_s: float
    copies: list[Copy] = field(default_factory=list)
    winner: int | None = None
    """Index of the copy that ran (known once the coordinator has seen a start)."""
    seen_s: float | None = None
    """When the coordinator saw the winner's start (its next look)."""
    held_s: float = 0.0
    duplicate_run_s: float = 0.0
    duplicates: int = 0


class World:
    """Sites with a policy's copies in their queues (see the module docstring)."""

    def __init__(self, sites: Mapping[str, SimSite], seen_every_s: float = 60.0) -> None:
        if seen_every_s <= 0:
            raise ValueError(f"seen_every_s must be > 0, got {seen_every_s}")
        self.sites = dict(sites)
        self.seen_every_s = float(seen_every_s)
        self.now = max((s.now for s in self.sites.values()), default=0.0)
        self._open: list[TaskRun] = []

    @classmethod
    def cloned(cls, sites: Mapping[str, SimSite], seen_every_s: float = 60.0) -> World:
        """A world of independent clones of ``sites`` (same jobs, same ids)."""
        return cls({n: s.clone() for n, s in sites.items()}, seen_every_s)

    # -- submitting ---------------------------------------------------------------------------

    def submit(self, run: TaskRun, site: str, job: SimJob) -> Copy:
        """Queue a copy of ``run``'s task at ``site`` now."""
        sim = self.sites[site]
        sim.advance(self.now)
        c = Copy(site, sim.submit(job), self.now, job.run_s)
        run.copies.append(c)
        if run not in self._open:
            self._open.append(run)
        return c

    def status(self, c: Copy) -> SimJobStatus:
        return self.sites[c.site].status(c.job_id)

    # -- time ---------------------------------------------------------------------------------

    def advance(self, to_t: float) -> None:
        """Play every site to ``to_t``, looking for starts at every ``seen_every_s`` tick
        while some task has more than one copy out."""
        while True:
            if not any(len(r.copies) > 1 for r in self._open):
                self._to(to_t)
                self._settle_single()
                return
            tick = (math.floor(self.now / self.seen_every_s) + 1) * self.seen_every_s
            if tick > to_t:
                self._to(to_t)
                return
            self._to(tick)
            self.look(tick)

    def _to(self, t: float) -> None:
        if t < self.now:
            raise ValueError(f"cannot go back in time: now={self.now}, asked {t}")
        for s in self.sites.values():
            s.advance(t)
        self.now = t

    def _settle_single(self) -> None:
        """Single-copy tasks need no look: the one copy is the winner once it has started."""
        still = []
        for r in self._open:
            if len(r.copies) == 1 and self.status(r.copies[0]).start_s is not None:
                r.winner = 0
                st = self.status(r.copies[0]).start_s
                r.seen_s = st
            else:
                still.append(r)
        self._open = still

    def look(self, t: float) -> None:
        """The coordinator's look at ``t``: a task with a started copy keeps its first
        starter; every other copy is cancelled now (held or duplicate time is charged)."""
        still = []
        for r in self._open:
            sts = [self.status(c) for c in r.copies]
            started = [
                (st.start_s, st.end_s or math.inf, i)
                for i, st in enumerate(sts)
                if st.start_s is not None and st.start_s <= t and r.copies[i].cancelled_s is None
            ]
            if not started:
                still.append(r)
                continue
            win = min(started)[2]
            r.winner, r.seen_s = win, t
            for i, (c, st) in enumerate(zip(r.copies, sts, strict=True)):
                if i == win or c.cancelled_s is not None:
                    continue
                self.sites[c.site].cancel(c.job_id)
                c.cancelled_s = t
                if st.start_s is not None and st.start_s <= t:
                    r.duplicates += 1
                    r.duplicate_run_s += min(t, st.end_s or t) - st.start_s
                else:
                    r.held_s += t - c.submit_s
        self._open = still

    def withdraw(self, run: TaskRun) -> None:
        """Cancel every copy of a task still out (the end of a replay). Not charged as
        held time: no copy won, so none held the queue for another."""
        for c in run.copies:
            if c.cancelled_s is None and self.status(c).start_s is None:
                self.sites[c.site].cancel(c.job_id)
                c.cancelled_s = self.now

    # -- outcome ------------------------------------------------------------------------------

    def start_end(self, run: TaskRun) -> tuple[float, float] | None:
        """(start, end) of the copy that ran, or None while no copy has been seen starting."""
        if run.winner is None:
            return None
        st = self.status(run.copies[run.winner])
        assert st.start_s is not None and st.end_s is not None
        return st.start_s, st.end_s


def background_delay(
    world: World, base: World, jobs: Iterable[str] | None = None, *, window: tuple[float, float]
) -> tuple[float, int]:
    """Total extra wait (s) of background jobs submitted in ``window`` that started in both
    worlds, ``world`` against ``base`` (a world without tasks), and how many were compared.

    Background jobs keep their ids in every clone; ``jobs`` limits the comparison (default:
    every job ``base`` knows, which has no task copies)."""
    total = 0.0
    n = 0
    for name, b in base.sites.items():
        w = world.sites[name]
        wanted = None if jobs is None else set(jobs)
        for st in b.statuses():
            if wanted is not None and st.job_id not in wanted:
                continue
            if not (window[0] <= st.submit_s < window[1]) or st.start_s is None:
                continue
            other = w.status(st.job_id)
            if other.start_s is None:
                continue
            total += other.start_s - st.start_s
            n += 1
    return total, n
