"""Exact what-if for one partition: when would a job submitted now start and end?

:func:`_what_if_part` answers it for several alternative jobs in one forward pass of a light
copy of the partition: candidates ride along as ghosts until one would start or reach the head
of the queue, and only then is that one forked off and played on its own (see
:meth:`federation.sim.queue.SimSite.what_if_many`).

A what-if also leaves a :class:`Frontier`: until the first of its candidates leaves the
shared pass, none of them changes anything, so the pass up to that moment is the partition's
own future. A later what-if for the same shapes resumes there instead of playing from now,
and so does one after a job of such a shape is queued behind every other (a burst of
decisions from one snapshot, each seeing the ones before it): each decision plays only what
the previous one had not, and the answers are the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from federation.sim.jobs import _INF, _Q, SimJob, SimRequestError, _Ghost, _make_q, _tick
from federation.sim.partition import _Part

ShapeKey = tuple[float, tuple[int, int, int, int]]
"""What decides when a job can start: its time limit and its per-node request."""


def shape_key(job: SimJob) -> ShapeKey:
    return (
        float(job.walltime_s),
        (job.nodes, job.cpus_per_node, job.mem_mb_per_node, job.gpus_per_node),
    )


@dataclass(slots=True)
class Frontier:
    """How far what-ifs have played a partition forward and what they proved on the way.

    :attr:`part` is the partition just before the first of its events at or after
    ``until_s`` (a light copy, never changed: copy it to play on), played from ``src`` (an
    earlier state of the same future) when first asked for: a single decision pays nothing
    for it, a burst's next decision plays it once. A what-if candidate of any shape in
    ``shapes``, queued behind every job at ``now_s``, neither starts nor reaches the head of
    the queue before ``until_s``, so it takes nothing and changes nothing until then: a
    what-if for those shapes may resume there, and a job of such a shape queued behind
    every other at ``now_s`` may be added there. ``seq``: the site's submission count it
    holds for (anything else submitted: stale).
    """

    src: _Part
    until_s: float
    shapes: frozenset[ShapeKey]
    now_s: float
    seq: int
    played: _Part | None = None

    @property
    def part(self) -> _Part:
        if self.played is None:
            fr = self.src.clone(light=True)
            while (t := fr.next_event()) < self.until_s:
                fr.step(t)
            self.played = self.src = fr
        return self.played

    def with_queued(self, qs: Sequence[_Q], last: _Q | None, seq: int) -> Frontier | None:
        """This frontier with ``qs`` (queued now, behind ``last``, the last job queued at the
        site, and of proven shapes) added; None if that cannot be proven (then a what-if
        plays from now again)."""
        if any(shape_key(q.job) not in self.shapes for q in qs):
            return None
        if last is not None and min(qs) < last:
            return None
        part = self.part.clone(light=True)
        part.enqueue(list(qs))
        if part.dirty:
            part.schedule()
        if any(q.job_id in part.running for q in qs):  # pragma: no cover - proven not to
            return None
        return Frontier(part, self.until_s, self.shapes, self.now_s, seq, part)


def _end_of(part: _Part, job: SimJob, start: float) -> float:
    held = part.delay + job.run_s
    return _tick(start + job.walltime_s) if held >= job.walltime_s else _tick(start + held)


def _what_if_part(
    part: _Part,
    jobs: Sequence[SimJob],
    seq: int,
    future_arrivals: bool = True,
    frontier: Frontier | None = None,
) -> tuple[list[tuple[float, float]], Frontier | None]:
    """Exact what-if for alternative ``jobs`` on one partition (see :meth:`SimSite.what_if_many`).

    Each candidate is what the next submission (sequence number ``seq + 1``) would be. At
    submission it either starts at once (it backfills), or it is the new head (then it is
    forked off at once), or it waits as a ghost in one shared forward pass of a copy. With a
    ``frontier`` that proved every candidate's shape, the shared pass resumes there.

    Returns the (start, end) of each and the frontier to keep (None: none proven).
    """
    now = part.now
    keys = [shape_key(j) for j in jobs]
    # what a frontier proves holds for candidates queued behind every job, now
    keepable = part.cursor >= len(part.arrivals) and all(j.submit_s is None for j in jobs)
    if keepable and part.pending:
        last = part.pending[-1]
        keepable = all(last < _make_q(j.priority, now, seq + 1, "", j) for j in jobs)
    if frontier is not None and keepable and all(k in frontier.shapes for k in keys):
        ghosts = {
            k: _Ghost(_make_q(job.priority, now, seq + 1, f"what-if-{k}", job))
            for k, job in enumerate(jobs)
        }
        _play(frontier.part.clone(light=True), ghosts, part.name)
        starts = {k: gh.start for k, gh in ghosts.items()}
        left = [gh.left_s for gh in ghosts.values()]
    else:
        starts, left = _from_now(part, jobs, seq, future_arrivals)
    out: list[tuple[float, float]] = []
    for k, job in enumerate(jobs):
        start = starts[k]
        assert start is not None
        out.append((start, _end_of(part, job, start)))
    if not keepable:
        return out, None
    until_s = min(t if t is not None else now for t in left)
    return out, _advance(part, frontier, until_s, keys, seq)


def _from_now(
    part: _Part, jobs: Sequence[SimJob], seq: int, future_arrivals: bool
) -> tuple[dict[int, float | None], list[float | None]]:
    """Every candidate's start, played from now; and when each left the shared pass."""
    base = part.clone(light=True)
    if not future_arrivals:
        base.arrivals, base.cursor, base.arrivals_shared = [], 0, False
    now = base.now
    starts: dict[int, float | None] = {}
    left: list[float | None] = []
    ghosts: dict[int, _Ghost] = {}
    for k, job in enumerate(jobs):
        t = now if job.submit_s is None else float(job.submit_s)
        q = _make_q(job.priority, t, seq + 1, f"what-if-{k}", job)
        if t > now:  # arrives later: play a copy of its own
            fork = base.clone(light=True)
            fork.add_future([(t, q.seq, q)])
            starts[k] = fork.play_until_started(q.job_id)
            left.append(now)
            continue
        pend = base.pending
        resv = base.resv
        if base.dirty or resv is None or not pend or q < pend[0]:
            fork = base.clone(light=True)
            fork.enqueue([q])
            if fork.dirty:
                fork.schedule()
            starts[k] = fork.play_until_started(q.job_id)
            left.append(now)
            continue
        long = now + job.walltime_s > resv.shadow
        fits = base.fit_long(*q.shape, resv) if long else base.fit_now(*q.shape)
        if fits is not None:
            starts[k] = now
            left.append(now)
        else:
            ghosts[k] = _Ghost(q)
    _play(base, ghosts, part.name)
    for k, gh in ghosts.items():
        starts[k] = gh.start
        left.append(gh.left_s)
    return starts, left


def _play(base: _Part, ghosts: dict[int, _Ghost], name: str) -> None:
    """Step ``base`` until every ghost has started (each records when it left the pass)."""
    waiting = sorted(ghosts.values(), key=lambda g: g.q)
    while waiting:
        t = base.next_event()
        if t == _INF:  # pragma: no cover - the queue ahead of a ghost always drains
            raise SimRequestError(f"what-if on {name}: queue never drains")
        base.step(t, waiting)
        waiting = [g for g in waiting if g.start is None]


def _advance(
    part: _Part, old: Frontier | None, until_s: float, keys: list[ShapeKey], seq: int
) -> Frontier | None:
    """The frontier after a what-if whose first candidate left the pass at ``until_s``: the
    partition's own future (from ``old`` if it is not past that, else from now) played to
    just before then, proven for the shapes just asked. ``old`` is kept if that is no
    further."""
    src = old.src if old is not None and old.until_s <= until_s else part
    if src.next_event() >= until_s:
        return old if src is not part else None
    if src is part:  # the site's own partition changes later: start from a copy of it now
        src = part.clone(light=True)
    return Frontier(src, until_s, frozenset(keys), part.now, seq)
