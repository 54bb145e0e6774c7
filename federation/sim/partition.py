"""The queue model of one partition: priority FIFO with EASY backfill, in virtual time.

:class:`_Part` is a partition that runs: it starts, finishes, seeds and cancels jobs, takes
arrivals, runs the full scheduling pass (FIFO starts, the head's reservation, the backfill
scan, with what-if ghosts checked in their place), and moves its clock from event to event.
The model itself is described in :mod:`federation.sim.queue`.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence

import numpy as np

from federation.sim.backfill import _PartPlan
from federation.sim.jobs import (
    _INF,
    _Q,
    SimJobState,
    SimRequestError,
    _Done,
    _Ghost,
    _Resv,
    _Run,
    _tick,
)
from federation.sim.nodes import _VECTOR_MIN


class _Part(_PartPlan):
    """One partition's nodes, queue and clock. Everything mutable is copied by :meth:`clone`."""

    __slots__ = ()

    # -- job life cycle -------------------------------------------------------------------

    def start(
        self, q: _Q, nodes: list[int], t: float, long: bool, delay: float | None = None
    ) -> None:
        job = q.job
        c, m, g = job.cpus_per_node, job.mem_mb_per_node, job.gpus_per_node
        self._take(nodes, c, m, g)
        if long and self.resv is not None:
            ex = self.resv.extra
            for i in nodes:
                e = ex.get(i)
                if e is not None:
                    e[0] -= c
                    e[1] -= m
                    e[2] -= g
        limit = _tick(t + job.walltime_s)
        held = (self.delay if delay is None else delay) + job.run_s
        end = limit if held >= job.walltime_s else _tick(t + held)
        runs, lims = self.node_runs, self.node_lim
        for i in nodes:
            runs[i] = (*runs[i], limit)
            if limit > lims[i]:
                lims[i] = limit
        run = _Run(q, t, end, limit, tuple(nodes))
        self.running[q.job_id] = run
        del self.pending_ids[q.job_id]
        heapq.heappush(self.ends, (end, q.seq, q.job_id))
        bisect.insort(self.limits, (limit, q.seq, q.job_id))
        self.units += self.primary(job)
        self._hist(t)

    def seed(self, q: _Q, nodes: Sequence[int]) -> None:
        """Start ``q`` now on exactly ``nodes`` (no launch delay: it is already running)."""
        job = q.job
        c, m, g = job.cpus_per_node, job.mem_mb_per_node, job.gpus_per_node
        picked = list(nodes)
        problems = []
        if len(picked) != job.nodes or len(set(picked)) != len(picked):
            problems.append(f"needs {job.nodes} distinct node(s), got {picked}")
        for i in picked:
            if not 0 <= i < self.n:
                problems.append(f"node index {i} out of range (partition has {self.n})")
            elif self.free_c[i] < c or self.free_m[i] < m or self.free_g[i] < g:
                problems.append(
                    f"node {i} has {self.free_c[i]} CPUs, {self.free_m[i]} MB, "
                    f"{self.free_g[i]} GPUs free"
                )
        if problems:
            raise SimRequestError(
                f"partition {self.name} cannot seed running job: " + "; ".join(problems)
            )
        self.pending_ids[q.job_id] = q
        self.start(q, picked, self.now, False, delay=0.0)
        self.dirty = True  # the standing reservation did not know this job

    def finish(self, job_id: str, t: float, state: SimJobState) -> None:
        r = self.running.pop(job_id)
        job = r.q.job
        self._give(r.nodes, job.cpus_per_node, job.mem_mb_per_node, job.gpus_per_node)
        runs, lims = self.node_runs, self.node_lim
        for i in r.nodes:
            left = list(runs[i])
            left.remove(r.limit_end_s)
            runs[i] = tuple(left)
            lims[i] = max(left) if left else -_INF
        key = (r.limit_end_s, r.q.seq, job_id)
        k = bisect.bisect_left(self.limits, key)
        del self.limits[k]
        self.units -= self.primary(job)
        self._hist(t)
        self.done[job_id] = _Done(r.q, state, r.start_s, t)
        self.dirty = True

    def enqueue(self, qs: Sequence[_Q]) -> None:
        """Add arrived jobs; schedule at once if only they need checking, else mark dirty."""
        pend = self.pending
        at_front = False
        if len(qs) > 8:
            first = pend[0] if pend else None
            self.pend_extend(qs)
            at_front = first is None or pend[0] is not first
        else:
            for q in qs:
                at_front = self.pend_insert(q) == 0 or at_front
        if at_front or self.resv is None:
            self.dirty = True
        if self.dirty:
            return
        resv = self.resv
        assert resv is not None
        t = self.now
        for q in sorted(qs):
            long = t + q.job.walltime_s > resv.shadow
            nodes = self.fit_long(*q.shape, resv) if long else self.fit_now(*q.shape)
            if nodes is not None:
                self.pend_delete([bisect.bisect_left(pend, q)])
                self.start(q, nodes, t, long)

    def schedule(self, ghosts: list[_Ghost] | None = None) -> None:
        """Full pass: FIFO starts, then the head's reservation, then EASY backfill.

        ``ghosts`` (sorted by priority key) are what-if candidates: each is checked at its
        place in the priority order exactly as a queued job would be, but takes nothing.
        One that would start records the time; one that would become the head is forked
        off into its own copy of the partition and played until it starts.
        """
        self.dirty = False
        t = self.now
        pend = self.pending
        ng = len(ghosts) if ghosts else 0
        gi = 0
        i = 0
        n_pend = len(pend)
        while i < n_pend:
            q = pend[i]
            if gi < ng:
                assert ghosts is not None
                while gi < ng and ghosts[gi].q < q:
                    self._ghost_turn(ghosts[gi], i)
                    gi += 1
            nodes = self.fit_now(*q.shape)
            if nodes is None:
                break
            self.start(q, nodes, t, False)
            i += 1
        else:
            while gi < ng:
                assert ghosts is not None
                self._ghost_turn(ghosts[gi], i)
                gi += 1
        if i:
            self.pend_delete(range(i))
        if not pend:
            self.resv = None
            return
        resv = self.resv = self.reserve(pend[0])
        shadow = resv.shadow
        failed_short: set[tuple[int, int, int, int]] = set()
        failed_long: set[tuple[int, int, int, int]] = set()
        started: list[int] = []
        vector = len(pend) >= _VECTOR_MIN
        if vector:
            # Visit only jobs within every aggregate bound (free totals, and the largest free
            # amount on any node). Free capacity only shrinks during the pass, so the others
            # would fail anyway; after each start the rest is filtered again.
            cand = self._within_bounds(np.arange(1, len(pend)))
            if len(cand):
                lows = self.columns()[cand].min(axis=0).tolist()
        else:
            cand = np.arange(1, len(pend))
        cand_l: list[int] = cand.tolist()
        pos = 0
        while pos < len(cand_l):
            k = cand_l[pos]
            pos += 1
            q = pend[k]
            if gi < ng:
                assert ghosts is not None
                while gi < ng and ghosts[gi].q < q:
                    self._ghost_backfill(ghosts[gi], t, resv, failed_short, failed_long)
                    gi += 1
            if self.tot_c == 0:
                gi = ng
                break
            shape = q.shape
            if shape in failed_short:
                continue
            if t + q.job.walltime_s <= shadow:
                nodes = self.fit_now(*shape)
                if nodes is None:
                    failed_short.add(shape)
                    continue
                self.start(q, nodes, t, False)
            else:
                if shape in failed_long:
                    continue
                nodes = self.fit_long(*shape, resv)
                if nodes is None:
                    failed_long.add(shape)
                    continue
                self.start(q, nodes, t, True)
            started.append(k)
            if vector and pos < len(cand_l):
                if (
                    self.tot_c < lows[0]
                    or self.tot_m < lows[1]
                    or self.tot_g < lows[2]
                    or max(self.free_c) < lows[3]
                    or max(self.free_m) < lows[4]
                    or max(self.free_g) < lows[5]
                ):
                    break  # nothing left in the candidates can fit any more
                if len(cand_l) - pos > 64:
                    cand = self._within_bounds(cand[pos:])
                    cand_l = cand.tolist()
                    pos = 0
        while gi < ng:
            assert ghosts is not None
            self._ghost_backfill(ghosts[gi], t, resv, failed_short, failed_long)
            gi += 1
        if started:
            self.pend_delete(started)

    def _within_bounds(self, rows: np.ndarray) -> np.ndarray:
        """The pending rows (indices) whose request is within every aggregate bound now."""
        a = self.columns()[rows]
        mask = (
            (a[:, 0] <= self.tot_c)
            & (a[:, 1] <= self.tot_m)
            & (a[:, 2] <= self.tot_g)
            & (a[:, 3] <= max(self.free_c))
            & (a[:, 4] <= max(self.free_m))
            & (a[:, 5] <= max(self.free_g))
        )
        out: np.ndarray = rows[mask]
        return out

    def _ghost_backfill(
        self,
        gh: _Ghost,
        t: float,
        resv: _Resv,
        failed_short: set[tuple[int, int, int, int]],
        failed_long: set[tuple[int, int, int, int]],
    ) -> None:
        shape = gh.q.shape
        if shape in failed_short or self.tot_c == 0:
            return
        if t + gh.q.job.walltime_s <= resv.shadow:
            if self.fit_now(*shape) is None:
                failed_short.add(shape)
                return
        else:
            if shape in failed_long:
                return
            if self.fit_long(*shape, resv) is None:
                failed_long.add(shape)
                return
        gh.start = gh.left_s = t

    def _ghost_turn(self, gh: _Ghost, i: int) -> None:
        """Every job ahead of the ghost has started: it starts now or becomes the head."""
        gh.left_s = self.now
        if self.fit_now(*gh.q.shape) is not None:
            gh.start = self.now
            return
        fork = self.clone(light=True)
        if i:
            fork.pend_delete(range(i))
        fork.pend_insert(gh.q)
        fork.resv = None
        fork.schedule()
        gh.start = fork.play_until_started(gh.q.job_id)

    def play_until_started(self, job_id: str) -> float:
        """Step until ``job_id`` (already queued or due to arrive) starts; return when."""
        running, done = self.running, self.done
        while job_id not in running and job_id not in done:
            t = self.next_event()
            if t == _INF:  # pragma: no cover - a valid job always starts eventually
                raise SimRequestError(f"job {job_id} on {self.name} never starts")
            self.step(t)
        r = running.get(job_id)
        start = r.start_s if r is not None else done[job_id].start_s
        if start is None:  # pragma: no cover - what-if jobs are never cancelled
            raise SimRequestError(f"job {job_id} on {self.name} was cancelled")
        return start

    def cancel(self, job_id: str) -> bool:
        t = self.now
        if job_id in self.running:
            self.finish(job_id, t, "cancelled")
            return True
        q = self.pending_ids.pop(job_id, None)
        if q is not None:
            k = bisect.bisect_left(self.pending, q)
            self.pend_delete([k])
            self.done[job_id] = _Done(q, "cancelled", None, t)
            if k == 0:
                self.dirty = True
            return True
        if job_id in self.done or job_id in self.cancelled:
            return False
        self.cancelled.add(job_id)
        return True

    # -- time -----------------------------------------------------------------------------

    def next_event(self) -> float:
        te = self.ends[0][0] if self.ends else _INF
        ta = self.arrivals[self.cursor][0] if self.cursor < len(self.arrivals) else _INF
        return te if te <= ta else ta

    def step(self, t: float, ghosts: list[_Ghost] | None = None) -> None:
        """Process every event at time ``t`` (completions, then arrivals), then schedule."""
        self.now = t
        ends = self.ends
        running = self.running
        while ends and ends[0][0] <= t:
            end, _, jid = heapq.heappop(ends)
            r = running.get(jid)
            if r is not None and r.end_s == end:
                killed = self.delay + r.q.job.run_s > r.q.job.walltime_s
                self.finish(jid, t, "timeout" if killed else "completed")
        arr = self.arrivals
        new: list[_Q] = []
        while self.cursor < len(arr) and arr[self.cursor][0] <= t:
            q = arr[self.cursor][2]
            self.cursor += 1
            if q.job_id in self.cancelled:
                self.cancelled.discard(q.job_id)
                self.done[q.job_id] = _Done(q, "cancelled", None, q.submit_s)
                continue
            new.append(q)
        if new:
            self.enqueue(new)
        if self.dirty:
            self.schedule(ghosts)

    def advance(self, to_t: float) -> None:
        while True:
            t = self.next_event()
            if t > to_t:
                break
            self.step(t)
        if to_t > self.now:
            self.now = to_t

    def add_future(self, items: list[tuple[float, int, _Q]]) -> None:
        if self.arrivals_shared:
            self.arrivals = self.arrivals[self.cursor :]
            self.cursor = 0
            self.arrivals_shared = False
        if len(items) == 1:
            bisect.insort(self.arrivals, items[0], lo=self.cursor)
        else:
            rest = self.arrivals[self.cursor :]
            rest.extend(items)
            rest.sort()
            self.arrivals = rest
            self.cursor = 0
