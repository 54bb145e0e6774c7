"""Exact what-if for one partition: when would a job submitted now start and end?

:func:`_what_if_part` answers it for several alternative jobs in one forward pass of a light
copy of the partition: candidates ride along as ghosts until one would start or reach the head
of the queue, and only then is that one forked off and played on its own (see
:meth:`federation.sim.queue.SimSite.what_if_many`).
"""

from __future__ import annotations

from collections.abc import Sequence

from federation.sim.jobs import _INF, SimJob, SimRequestError, _Ghost, _make_q, _tick
from federation.sim.partition import _Part


def _end_of(part: _Part, job: SimJob, start: float) -> float:
    held = part.delay + job.run_s
    return _tick(start + job.walltime_s) if held >= job.walltime_s else _tick(start + held)


def _what_if_part(
    part: _Part, jobs: Sequence[SimJob], seq: int, future_arrivals: bool = True
) -> list[tuple[float, float]]:
    """Exact what-if for alternative ``jobs`` on one partition (see :meth:`SimSite.what_if_many`).

    Each candidate is what the next submission (sequence number ``seq + 1``) would be. At
    submission it either starts at once (it backfills), or it is the new head (then it is
    forked off at once), or it waits as a ghost in one shared forward pass of a copy.
    """
    base = part.clone(light=True)
    if not future_arrivals:
        base.arrivals, base.cursor, base.arrivals_shared = [], 0, False
    now = base.now
    starts: list[float | None] = [None] * len(jobs)
    ghosts: dict[int, _Ghost] = {}
    for k, job in enumerate(jobs):
        t = now if job.submit_s is None else float(job.submit_s)
        q = _make_q(job.priority, t, seq + 1, f"what-if-{k}", job)
        if t > now:  # arrives later: play a copy of its own
            fork = base.clone(light=True)
            fork.add_future([(t, q.seq, q)])
            starts[k] = fork.play_until_started(q.job_id)
            continue
        pend = base.pending
        resv = base.resv
        if base.dirty or resv is None or not pend or q < pend[0]:
            fork = base.clone(light=True)
            fork.enqueue([q])
            if fork.dirty:
                fork.schedule()
            starts[k] = fork.play_until_started(q.job_id)
            continue
        long = now + job.walltime_s > resv.shadow
        fits = base.fit_long(*q.shape, resv) if long else base.fit_now(*q.shape)
        if fits is not None:
            starts[k] = now
        else:
            ghosts[k] = _Ghost(q)
    waiting = sorted(ghosts.values(), key=lambda g: g.q)
    while waiting:
        t = base.next_event()
        if t == _INF:  # pragma: no cover - the queue ahead of a ghost always drains
            raise SimRequestError(f"what-if on {part.name}: queue never drains")
        base.step(t, waiting)
        waiting = [g for g in waiting if g.start is None]
    out: list[tuple[float, float]] = []
    for k, job in enumerate(jobs):
        gh = ghosts.get(k)
        start = gh.start if gh is not None else starts[k]
        assert start is not None
        out.append((start, _end_of(part, job, start)))
    return out
