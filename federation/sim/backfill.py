"""EASY backfill planning for one partition: the head's reservation and start estimates.

:class:`_PartPlan` adds to the partition state what EASY backfill plans with: the head job's
shadow time and the nodes reserved for it (:meth:`_PartPlan.reserve`), the placement of a long
backfill job that may only use what the head leaves over (:meth:`_PartPlan.fit_long`), and the
Slurm-style start estimates of pending jobs shown in snapshots (:meth:`_PartPlan.estimates`; see
:mod:`federation.sim.queue` for the model). It starts no jobs itself.
"""

from __future__ import annotations

import heapq

import numpy as np

from federation.sim.jobs import _INF, _Q, SimRequestError, _Resv
from federation.sim.nodes import _PartState

_WHOLE_NODE_MIN = 256  # from this many nodes on, whole-node reservations use numpy


class _PartPlan(_PartState):
    """A partition that can plan EASY backfill (see the module docstring)."""

    __slots__ = ()

    def fit_long(self, n: int, c: int, m: int, g: int, resv: _Resv) -> list[int] | None:
        """Like :meth:`fit_now`, but on reserved nodes only what the head leaves over."""
        if n * c > self.tot_c or n * m > self.tot_m or n * g > self.tot_g:
            return None
        ex = resv.extra
        blocked = resv.blocked
        idle = self.idle
        chosen: list[int] = []
        if c < self.C and self.partial:
            fc, fm, fg = self.free_c, self.free_m, self.free_g
            for i in self._sorted_partial():
                if fc[i] >= c and fm[i] >= m and fg[i] >= g:
                    if i in blocked:
                        continue
                    e = ex.get(i)
                    if e is not None and (e[0] < c or e[1] < m or e[2] < g):
                        continue
                    chosen.append(i)
                    if len(chosen) == n:
                        return chosen
        need = n - len(chosen)
        if len(idle) < need:
            return None
        skip = blocked & idle if blocked else set()
        for i, e in ex.items():
            if i in idle and (e[0] < c or e[1] < m or e[2] < g):
                skip.add(i)
        if not skip:
            return chosen + heapq.nsmallest(need, idle)
        if len(idle) - len(skip) < need:
            return None
        picked = [i for i in heapq.nsmallest(need + len(skip), idle) if i not in skip]
        return chosen + picked[:need]

    def reserve(self, head: _Q) -> _Resv:
        """EASY shadow time of ``head``: running jobs released at their requested ends."""
        if head.job.cpus_per_node == self.C and self.n >= _WHOLE_NODE_MIN:
            return self._reserve_whole(head)
        return self._reserve_general(head)

    def _reserve_general(self, head: _Q) -> _Resv:
        job = head.job
        n, c, m, g = job.nodes, job.cpus_per_node, job.mem_mb_per_node, job.gpus_per_node
        fc, fm, fg = self.free_c, self.free_m, self.free_g
        count = len(self.idle) + sum(
            1 for i in self.partial if fc[i] >= c and fm[i] >= m and fg[i] >= g
        )
        delta: dict[int, list[int]] = {}
        became: list[tuple[float, int]] = []
        shadow = _INF
        running = self.running
        for lim, _, jid in self.limits:
            if lim > shadow:
                break
            r = running[jid]
            rj = r.q.job
            rc, rm, rg = rj.cpus_per_node, rj.mem_mb_per_node, rj.gpus_per_node
            for i in r.nodes:
                d = delta.get(i)
                if d is None:
                    d = delta[i] = [fc[i], fm[i], fg[i]]
                was = d[0] >= c and d[1] >= m and d[2] >= g
                d[0] += rc
                d[1] += rm
                d[2] += rg
                if not was and d[0] >= c and d[1] >= m and d[2] >= g:
                    count += 1
                    became.append((lim, i))
            if shadow == _INF and count >= n:
                shadow = lim
        if shadow == _INF:  # pragma: no cover - check() guarantees the job fits an empty partition
            raise SimRequestError(f"job {head.job_id} can never fit partition {self.name}")
        # Reserve nodes busy now first (in the order they free up), leaving the nodes that are
        # free now to backfill; then free partly used nodes, then idle ones.
        became.sort()
        chosen = [i for _, i in became[:n]]
        if len(chosen) < n:
            taken = set(chosen)
            more = [
                i
                for i in self._sorted_partial()
                if i not in taken and fc[i] >= c and fm[i] >= m and fg[i] >= g
            ]
            chosen += more[: n - len(chosen)]
            if len(chosen) < n:
                chosen += heapq.nsmallest(n - len(chosen), self.idle - taken)
        extra: dict[int, list[int]] = {}
        for i in chosen:
            d = delta.get(i) or [fc[i], fm[i], fg[i]]
            extra[i] = [d[0] - c, d[1] - m, d[2] - g]
        return _Resv(head.job_id, shadow, extra)

    def _reserve_whole(self, head: _Q) -> _Resv:
        """:meth:`reserve` for a head that takes whole nodes: only node-free times matter."""
        job = head.job
        n = job.nodes
        lims = np.asarray(self.node_lim)
        shadow = float(np.partition(lims, n - 1)[n - 1])  # idle nodes sort first (-inf)
        busy = np.flatnonzero((lims <= shadow) & (lims > -_INF))
        busy = busy[np.lexsort((busy, lims[busy]))][:n]
        chosen = busy.tolist()
        if len(chosen) < n:  # pragma: no cover - the head would fit now
            chosen += heapq.nsmallest(n - len(chosen), self.idle)
        return _Resv(head.job_id, shadow, blocked=set(chosen))

    def estimates(self, limit: int | None) -> dict[str, float]:
        """Slurm-style start estimates for pending jobs (see :mod:`federation.sim.queue`)."""
        pend = self.pending if limit is None else self.pending[:limit]
        if not pend:
            return {}
        now = self.now
        running = self.running
        lims = self.limits
        free_now = float(self.n) - sum(self.share(r.q.job) for r in running.values())
        if lims:
            t_arr = np.fromiter((x[0] for x in lims), dtype=np.float64, count=len(lims))
            s_arr = np.fromiter(
                (self.share(running[x[2]].q.job) for x in lims), dtype=np.float64, count=len(lims)
            )
            ut = np.unique(np.maximum(t_arr, now))
            rel = np.cumsum(s_arr)[np.searchsorted(t_arr, ut, side="right") - 1]
            if ut[0] > now:
                ts = np.concatenate(([now], ut))
                free = np.concatenate(([free_now], free_now + rel))
            else:
                ts, free = ut, free_now + rel
        else:
            ts = np.array([now], dtype=np.float64)
            free = np.array([free_now], dtype=np.float64)
        # Preallocated profile (breakpoints ``ts``, free node-equivalents ``free`` from each
        # breakpoint to the next; the last segment runs forever): each job adds at most two
        # breakpoints, inserted by shifting in place.
        size = len(ts)
        cap = size + 2 * len(pend) + 2
        T = np.empty(cap, dtype=np.float64)
        F = np.empty(cap, dtype=np.float64)
        T[:size], F[:size] = ts, free
        bad = np.empty(cap + 1, dtype=np.int64)
        bad[0] = 0
        out: dict[str, float] = {}
        resv = self.resv
        for q in pend:
            job = q.job
            d = self.share(job)
            w = job.walltime_s
            Tn = T[:size]
            if resv is not None and q.job_id == resv.job_id:
                start = resv.shadow
                k = int(Tn.searchsorted(start, side="right")) - 1
                if T[k] != start:
                    k += 1
                    T[k + 1 : size + 1] = T[k:size]
                    F[k + 1 : size + 1] = F[k:size]
                    T[k] = start
                    F[k] = F[k - 1]
                    size += 1
                    Tn = T[:size]
            else:
                np.cumsum(F[:size] < d - 1e-9, out=bad[1 : size + 1])
                j = Tn.searchsorted(Tn + w, side="left")
                ok = bad[j] == bad[:size]
                ok[0] &= size == 1  # still pending after a pass: it cannot start right now
                k = int(np.argmax(ok))
                start = float(T[k])
            out[q.job_id] = start
            stop = start + w
            e = int(Tn.searchsorted(stop, side="left"))
            if e >= size or T[e] != stop:
                T[e + 1 : size + 1] = T[e:size]
                F[e + 1 : size + 1] = F[e:size]
                T[e] = stop
                F[e] = F[e - 1]
                size += 1
            F[k:e] -= d
        return out
