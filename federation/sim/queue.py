"""A virtual-time, Slurm-like batch queue for one site, fast enough for counterfactual replay.

Model
-----
* Each partition of the :class:`~federation.core.spec.SiteSpec` is ``N`` identical nodes with
  ``cpus_per_node`` CPUs, ``mem_gb_per_node`` GB and ``gpus_per_node`` GPUs. Partitions do not
  share nodes, so they are simulated independently.
* A :class:`SimJob` asks for ``nodes`` x (CPUs, memory, GPUs) per node and a time limit
  (``walltime_s``); it also carries its true run time ``run_s`` (which predictors must not
  use). Jobs may share a node when its free CPUs, memory and GPUs all suffice.
* Order: priority FIFO, by ``(-priority, submit time, submission order)``.
* EASY backfill: jobs start in order while they fit. The first job that does not fit (the
  *head*) gets a reservation: running jobs are assumed to end at their *requested* end
  (start + time limit), and the head's *shadow time* is the earliest such end at which it
  fits. The nodes it would take then are reserved (nodes busy now first, in the order they
  free up, so that nodes idle now stay available to backfill). A later job may start now if
  it fits now and either its time limit ends by the shadow time, or it only uses resources
  the head will not need at the shadow time (per reserved node: the projected free capacity
  at the shadow time minus the head's share; other nodes are unconstrained).
* A started job holds its nodes for ``min(start_delay_s + run_s, walltime_s)``: it is killed
  (state ``timeout``) at its time limit. ``start_delay_s`` models launch overhead (the
  allocation is held, the payload starts late).
* Event driven: the clock jumps between job ends and arrivals. A full pass (FIFO starts, a
  fresh reservation, the backfill scan) runs whenever resources are released (a job ends or
  is cancelled) or the head changes. An arrival behind the head is only checked against the
  standing reservation, like Slurm's quick scheduling attempt on submit between backfill
  cycles; jobs already queued cannot have become startable, since nothing was released.

Node choice: whole-node requests take the lowest-numbered idle nodes; partial requests fill
partly used nodes first (lowest number first), then idle ones, which keeps idle nodes for
wide jobs. All tie-breaks are deterministic, so a clone replays exactly what its parent would.

What-if
-------
:meth:`SimSite.what_if` answers "if I submitted this job now, when would it start and end?"
exactly, with the true run times of everything already queued and of the arrivals already
submitted for the future: it copies only the job's partition (lists and dicts of immutable
records, no deep copies) and plays it forward until the job *starts* (its end follows from
its own run time). :meth:`SimSite.what_if_many` answers several such questions for one
partition in one forward pass: the candidates are *ghosts* that take nothing until the first
moment one of them would start or reach the head of the queue; only then is that candidate
forked off and played on its own.

Job ends and limits are rounded to the microsecond (the resolution of snapshot timestamps),
so that a twin rebuilt from a snapshot sees the same simultaneous ends as the site.
:meth:`SimSite.seed_running` puts an already running job on given nodes (for such twins).

Snapshots
---------
:meth:`SimSite.snapshot` emits the same :class:`~federation.core.snapshot.SiteSnapshot` a probe of
a real site produces. Pending jobs carry a Slurm-style start estimate that assumes every job
runs to its time limit and nothing else arrives: the head job gets its exact EASY shadow time;
the jobs behind it are planned in priority order on a pooled capacity profile (each job
occupies its dominant share of a node times its node count from its estimated start to the
end of its time limit), like Slurm's backfill planner but without node fragmentation. No
pending job is estimated to start at the current instant (it would have started). Only the
first ``estimate_limit`` pending jobs per partition are planned (Slurm's ``bf_max_job_test``);
the others show no estimate.

Speed: a pass costs about the number of pending jobs (a plain loop that remembers which
request shapes already failed; from 1,024 pending jobs on, a numpy filter on aggregate bounds
first); the head's reservation walks running jobs in limit order (whole-node heads on
partitions of 256+ nodes use a vectorised node-free-time ranking instead).

Layout: :mod:`federation.sim.jobs` holds the job models, :mod:`federation.sim.nodes` a
partition's state, :mod:`federation.sim.backfill` the EASY reservation and start estimates,
:mod:`federation.sim.partition` the scheduler, :mod:`federation.sim.whatif` the what-if passes
and :mod:`federation.sim.probe` statuses and snapshots; this module is the :class:`SimSite`
facade over them and re-exports the public names.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from itertools import islice

from federation.core.snapshot import JobRecord, NodeRecord, SiteSnapshot
from federation.core.spec import PartitionSpec, SiteSpec
from federation.sim.jobs import (
    _INF,
    _Q,
    DEFAULT_EPOCH,
    SimJob,
    SimJobState,
    SimJobStatus,
    SimRequestError,
    UnknownSimJobError,
    _make_q,
)
from federation.sim.partition import _Part
from federation.sim.probe import _render_snapshot, _status
from federation.sim.whatif import Frontier, _what_if_part

__all__ = [
    "DEFAULT_EPOCH",
    "SimJob",
    "SimJobState",
    "SimJobStatus",
    "SimRequestError",
    "SimSite",
    "UnknownSimJobError",
]


def _scaled_nodes(p: PartitionSpec, node_scale: float | None, nodes: Mapping[str, int]) -> int:
    if p.name in nodes:
        n = int(nodes[p.name])
    elif node_scale is not None:
        n = max(1, round(p.nodes_real * node_scale))
    else:
        n = p.nodes_real
    if n < 1:
        raise SimRequestError(f"partition {p.name}: node count must be >= 1, got {n}")
    return n


class SimSite:
    """One simulated Slurm site (see the module docstring for the model).

    ``node_scale`` multiplies every partition's ``nodes_real`` (rounded, at least 1);
    ``nodes`` sets exact counts per partition name and wins over ``node_scale``.
    ``start_delay_s``: launch overhead per job (the allocation is held meanwhile).
    ``epoch``: the wall-clock time of t = 0 in snapshots.
    ``estimate_limit``: like Slurm's ``bf_max_job_test``, how many pending jobs per partition
    get a start estimate in snapshots (``None``: all).
    """

    def __init__(
        self,
        spec: SiteSpec,
        node_scale: float | None = None,
        *,
        nodes: Mapping[str, int] | None = None,
        start_delay_s: float = 0.0,
        epoch: datetime = DEFAULT_EPOCH,
        estimate_limit: int | None = 500,
    ) -> None:
        if start_delay_s < 0:
            raise SimRequestError(f"start_delay_s must be >= 0, got {start_delay_s}")
        unknown = set(nodes or {}) - {p.name for p in spec.partitions}
        if unknown:
            raise SimRequestError(
                f"site {spec.name} has no partition(s) {sorted(unknown)} "
                f"(has: {', '.join(p.name for p in spec.partitions)})"
            )
        self.spec = spec
        self.start_delay_s = float(start_delay_s)
        self.epoch = epoch
        self.estimate_limit = estimate_limit
        self._parts: dict[str, _Part] = {
            p.name: _Part(p, _scaled_nodes(p, node_scale, nodes or {}), self.start_delay_s)
            for p in spec.partitions
        }
        self._now = 0.0
        self._seq = 0
        self._where: dict[str, str] = {}
        self._node_recs: dict[tuple[str, int, int, int, int], NodeRecord] = {}
        self._run_recs: dict[tuple[str, datetime], JobRecord] = {}
        """Snapshot records of unchanged nodes and running jobs (immutable, so shared)."""
        self._frontiers: dict[str, Frontier] = {}
        """Per partition, how far what-ifs have played it (:mod:`.whatif`), for this clock
        and these submissions only."""

    # -- basics ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def now(self) -> float:
        """Simulated seconds since t = 0."""
        return self._now

    @property
    def partitions(self) -> tuple[str, ...]:
        return tuple(self._parts)

    def node_count(self, partition: str) -> int:
        return self._part(partition).n

    def jobs_running(self, partition: str | None = None) -> int:
        return sum(len(p.running) for p in self._select(partition))

    def jobs_pending(self, partition: str | None = None) -> int:
        return sum(len(p.pending) for p in self._select(partition))

    def _select(self, partition: str | None) -> list[_Part]:
        return list(self._parts.values()) if partition is None else [self._part(partition)]

    def _part(self, name: str) -> _Part:
        p = self._parts.get(name)
        if p is None:
            raise SimRequestError(
                f"site {self.spec.name} has no partition {name!r} (has: {', '.join(self._parts)})"
            )
        return p

    # -- submitting -----------------------------------------------------------------------

    def _make_q(self, job: SimJob) -> tuple[_Part, _Q]:
        part = self._part(job.partition)
        part.check(job)
        t = self._now if job.submit_s is None else float(job.submit_s)
        if t < self._now:
            raise SimRequestError(
                f"job submit_s={t} is in the past (site clock is at {self._now}); "
                "submit with submit_s=None for now"
            )
        self._seq += 1
        jid = str(self._seq)
        self._where[jid] = part.name
        return part, _make_q(job.priority, t, self._seq, jid, job)

    def submit(self, job: SimJob) -> str:
        """Queue ``job`` (now, or at ``job.submit_s`` if later); return its job id."""
        before = self._seq
        part, q = self._make_q(job)
        if q.submit_s > self._now:
            self._frontiers.pop(part.name, None)
            part.add_future([(q.submit_s, q.seq, q)])
        else:
            part.advance(self._now)
            self._queued_behind(part, [q], before)
            part.enqueue([q])
            if part.dirty:
                part.schedule()
        self._resync(before, {part.name})
        return q.job_id

    def submit_many(self, jobs: Iterable[SimJob]) -> list[str]:
        """Queue many jobs at once (one sort per partition: use this to preload a trace)."""
        before = self._seq
        ids: list[str] = []
        now_items: dict[str, list[_Q]] = {}
        future: dict[str, list[tuple[float, int, _Q]]] = {}
        for job in jobs:
            part, q = self._make_q(job)
            ids.append(q.job_id)
            if q.submit_s > self._now:
                future.setdefault(part.name, []).append((q.submit_s, q.seq, q))
            else:
                now_items.setdefault(part.name, []).append(q)
        for name, items in future.items():
            self._frontiers.pop(name, None)
            self._parts[name].add_future(items)
        for name, qs in now_items.items():
            part = self._parts[name]
            part.advance(self._now)
            self._queued_behind(part, qs, before)
            part.enqueue(qs)
            if part.dirty:
                part.schedule()
        self._resync(before, {*future, *now_items})
        return ids

    def _queued_behind(self, part: _Part, qs: list[_Q], before: int) -> None:
        """Keep ``part``'s what-if frontier through the jobs about to be queued now if it
        can (:meth:`.whatif.Frontier.with_queued`), else drop it."""
        fr = self._frontiers.pop(part.name, None)
        if fr is not None and fr.now_s == self._now and fr.seq == before:
            last = part.pending[-1] if part.pending else None
            kept = fr.with_queued(qs, last, self._seq)
            if kept is not None:
                self._frontiers[part.name] = kept

    def _resync(self, before: int, touched: set[str]) -> None:
        """After submissions numbered past ``before``: the other partitions' frontiers,
        untouched, hold for the new count (a frontier of any other count is dropped)."""
        for name, fr in list(self._frontiers.items()):
            if name in touched and fr.seq == self._seq:
                continue
            if name in touched or fr.seq != before:
                del self._frontiers[name]
            else:
                self._frontiers[name] = replace(fr, seq=self._seq)

    def seed_running(self, job: SimJob, nodes: Sequence[int]) -> str:
        """Put ``job`` on the site as already running, now, on exactly these nodes.

        ``nodes`` are 0-based node indices of ``job.partition`` (node ``i`` is named
        ``<partition>-<i + 1:04d>`` in snapshots), one per ``job.nodes``; each must have the
        job's per-node CPUs, memory and GPUs free. ``job.walltime_s`` is the time left until
        its limit and ``job.run_s`` the time it really has left (no launch delay is added).
        This is how a twin rebuilds a probed queue with the real allocation (and so the real
        fragmentation). Returns the job id; raises :class:`SimRequestError` if it cannot fit.
        """
        if job.submit_s is not None and job.submit_s != self._now:
            raise SimRequestError("seed_running: a running job has no future submit time")
        part = self._part(job.partition)
        part.check(job)
        part.advance(self._now)
        self._seq += 1
        jid = str(self._seq)
        q = _make_q(job.priority, self._now, self._seq, jid, job)
        part.seed(q, nodes)
        self._frontiers.pop(part.name, None)
        self._resync(self._seq - 1, set())
        self._where[jid] = part.name
        if part.pending:
            part.schedule()
        else:
            part.dirty = False
            part.resv = None
        return jid

    def cancel(self, job_id: str) -> bool:
        """Cancel a future, pending or running job; ``False`` if it had already finished."""
        part = self._part(self._where_is(job_id))
        part.advance(self._now)
        self._frontiers.pop(part.name, None)
        ok = part.cancel(job_id)
        if part.dirty:
            part.schedule()
        return ok

    def _where_is(self, job_id: str) -> str:
        name = self._where.get(job_id)
        if name is None:
            raise UnknownSimJobError(f"site {self.spec.name} has no job {job_id!r}")
        return name

    # -- time -----------------------------------------------------------------------------

    def advance(self, to_t: float) -> None:
        """Play every partition forward to ``to_t`` (event by event, not second by second)."""
        if to_t < self._now:
            raise SimRequestError(f"cannot go back in time: now={self._now}, asked {to_t}")
        if to_t != self._now:
            self._frontiers.clear()
        for p in self._parts.values():
            p.advance(to_t)
        self._now = float(to_t)

    def next_event_s(self) -> float | None:
        """Time of the next job end or arrival anywhere on the site (``None``: no more)."""
        t = min((p.next_event() for p in self._parts.values()), default=_INF)
        return None if t == _INF else t

    def run_until_idle(self) -> None:
        """Advance until nothing is queued, running or still to arrive."""
        while (t := self.next_event_s()) is not None:
            self.advance(t)

    # -- jobs -----------------------------------------------------------------------------

    def status(self, job_id: str) -> SimJobStatus:
        part = self._part(self._where_is(job_id))
        return _status(part, job_id)

    def statuses(self, partition: str | None = None) -> Iterator[SimJobStatus]:
        """Every job the site knows of, per partition: finished (in the order they ended),
        running, pending (in priority order), then future arrivals (by arrival time)."""
        for p in self._select(partition):
            for jid in p.done:
                yield _status(p, jid)
            for r in sorted(p.running.values(), key=lambda r: r.q.seq):
                yield _status(p, r.q.job_id)
            for q in p.pending:
                yield SimJobStatus(q.job_id, p.name, "pending", q.submit_s)
            for t, _, q in islice(p.arrivals, p.cursor, None):
                state: SimJobState = "cancelled" if q.job_id in p.cancelled else "future"
                yield SimJobStatus(q.job_id, p.name, state, t)

    def finished_since(self, since_s: float, partition: str | None = None) -> list[SimJobStatus]:
        """Jobs that ended (completed, timed out, cancelled) after ``since_s``, by end time:
        what ``sacct`` would add since then. Costs only the jobs returned."""
        out: list[SimJobStatus] = []
        for p in self._select(partition):
            got: list[SimJobStatus] = []
            for jid in reversed(p.done):
                if p.done[jid].end_s <= since_s:
                    break
                got.append(_status(p, jid))
            out.extend(reversed(got))
        out.sort(key=lambda s: s.end_s if s.end_s is not None else -_INF)
        return out

    # -- what-if --------------------------------------------------------------------------

    def clone(self) -> SimSite:
        """An independent copy (shares only immutable records); the cheap way to branch."""
        c = SimSite.__new__(SimSite)
        c.spec, c.start_delay_s, c.epoch = self.spec, self.start_delay_s, self.epoch
        c.estimate_limit = self.estimate_limit
        c._parts = {k: p.clone() for k, p in self._parts.items()}
        c._now, c._seq, c._where = self._now, self._seq, dict(self._where)
        # node records are keyed by their whole state, so clones may share them; a running
        # job's record is keyed by its id, which clones reuse for different jobs (each
        # numbers its own submissions; a background job starts at different times in each)
        c._node_recs, c._run_recs = self._node_recs, {}
        c._frontiers = dict(self._frontiers)  # never changed: replaced
        return c

    def what_if(self, job: SimJob, *, future_arrivals: bool = True) -> tuple[float, float]:
        """(start, end) of ``job`` if submitted now, given everything already submitted.

        Exact: equals submitting it to a :meth:`clone` and advancing until it ends. Costs one
        forward simulation of the job's partition from now until the job starts.
        ``future_arrivals=False`` ignores jobs submitted for later times (what the queue as it
        stands implies, with true run times): cheaper, and no longer the true future.
        """
        return self.what_if_many([job], future_arrivals=future_arrivals)[0]

    def what_if_many(
        self, jobs: Sequence[SimJob], *, future_arrivals: bool = True
    ) -> list[tuple[float, float]]:
        """:meth:`what_if` for several alternative jobs (each considered alone).

        Jobs for the same partition share one forward pass: until one of them would start or
        become the head of the queue, none of them changes anything, so they ride along as
        ghosts and are forked off one by one at that moment.
        """
        out: list[tuple[float, float] | None] = [None] * len(jobs)
        by_part: dict[str, list[int]] = {}
        for k, job in enumerate(jobs):
            self._part(job.partition).check(job)
            if job.submit_s is not None and job.submit_s < self._now:
                raise SimRequestError(f"what_if job submit_s={job.submit_s} is in the past")
            by_part.setdefault(job.partition, []).append(k)
        for name, idxs in by_part.items():
            part = self._parts[name]
            part.advance(self._now)
            fr = self._frontiers.get(name)
            if fr is not None and (fr.now_s != self._now or fr.seq != self._seq):
                fr = None
            answers, fr = _what_if_part(
                part, [jobs[k] for k in idxs], self._seq, future_arrivals, fr
            )
            if fr is None:
                self._frontiers.pop(name, None)
            else:
                self._frontiers[name] = fr
            for k, answer in zip(idxs, answers, strict=True):
                out[k] = answer
        return [x for x in out if x is not None]

    # -- measurement ----------------------------------------------------------------------

    def utilization(
        self, window: tuple[float, float] | None = None, partition: str | None = None
    ) -> float:
        """Allocated fraction of capacity over ``window`` (default: 0 to now).

        Capacity is GPUs on GPU partitions and CPUs elsewhere; several partitions are
        weighted by node count. Times after ``now`` are not counted.
        """
        t0, t1 = window if window is not None else (0.0, self._now)
        t1 = min(t1, self._now)
        if t1 <= t0:
            return 0.0
        num = 0.0
        den = 0.0
        for p in self._select(partition):
            if not p.track:
                continue
            frac = (p.integral(t1) - p.integral(t0)) / (p.capacity_units * (t1 - t0))
            num += frac * p.n
            den += p.n
        return num / den if den else 0.0

    # -- snapshots ------------------------------------------------------------------------

    def snapshot(self, now_dt: datetime | None = None) -> SiteSnapshot:
        """The site as a probe would see it now (``now_dt``: wall clock to stamp it with)."""
        for p in self._parts.values():
            p.advance(self._now)
        taken = now_dt if now_dt is not None else self.epoch + timedelta(seconds=self._now)
        return _render_snapshot(
            self.spec.name,
            self._parts.values(),
            self._now,
            taken,
            self.estimate_limit,
            self._node_recs,
            self._run_recs,
        )
