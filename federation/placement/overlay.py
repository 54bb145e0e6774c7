"""A snapshot with the coordinator's own latest submissions in it.

A coordinator places a burst of tasks (a round of probes, a group, an agent's fan-out) from
one snapshot, reused for up to a probe interval. The snapshot cannot show what the
coordinator itself shipped since it was taken, so each task of the burst is placed as if the
others were not there, and the second one "starts now" where the first just took the last
free GPU. Measured in the replay (``bench/replay.py``, KTH-SP2 busy): most of the tasks
predicted to start at once that then queued were in that case.

:func:`with_own_jobs` adds each such submission to its site's snapshot as a pending job
(submitted when it was shipped, behind everything already queued), so that the job-level
predictors see it: the twin replays it like any other job (the partition aggregates that the
snapshot-only estimates read are left as probed). Only
submissions made after the site's snapshot was taken are added; earlier ones are in it.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from functools import lru_cache

from federation.core.envelope import Shape
from federation.core.snapshot import FederationSnapshot, JobRecord, SiteSnapshot

__all__ = ["OWN_JOB_PREFIX", "with_own_jobs"]

OWN_JOB_PREFIX = "own-"
"""Job ids of the added records (never a Slurm job id)."""


def with_own_jobs(
    snapshot: FederationSnapshot, own: Iterable[tuple[Shape, datetime]]
) -> FederationSnapshot:
    """``snapshot`` with every ``(shape, shipped_at)`` shipped after its site's snapshot
    added there as a pending job; the same object when there is nothing to add."""
    by_site: dict[str, list[tuple[Shape, datetime]]] = {}
    for shape, at in own:
        by_site.setdefault(shape.site, []).append((shape, at))
    if not by_site:
        return snapshot
    sites: list[SiteSnapshot] = []
    changed = False
    for site in snapshot.sites:
        later = sorted(
            (x for x in by_site.get(site.site, ()) if x[1] > site.taken_at), key=lambda x: x[1]
        )
        if not later or not site.health.reachable:
            sites.append(site)
            continue
        changed = True
        seen: Counter[tuple[Shape, datetime]] = Counter()
        added = []
        for x in later:  # the n-th identical (shape, at) of the list is its own job
            added.append(_own_record(*x, seen[x]))
            seen[x] += 1
        sites.append(site.model_copy(update={"jobs": (*site.jobs, *added)}))
    if not changed:
        return snapshot
    return snapshot.model_copy(update={"sites": tuple(sites)})


_OWN_IDS = itertools.count()


@lru_cache(maxsize=4096)
def _own_record(s: Shape, at: datetime, n: int) -> JobRecord:
    """The pending job for the ``n``-th own submission ``(s, at)`` (``n`` is nearly always
    0): built once, with an id of its own, as a burst re-reads every earlier submission of
    its snapshot on each of its decisions."""
    return JobRecord(
        job_id=f"{OWN_JOB_PREFIX}{next(_OWN_IDS)}",
        partition=s.partition,
        state="pending",
        reason="Priority",
        nodes=s.nodes,
        cpus=s.cpus * s.nodes,
        mem_mb=s.mem_gb * 1024,
        gpus=s.gpus * s.nodes,
        gpu_type=s.gpu_type,
        time_limit_s=s.walltime_s,
        submit_time=at,
        priority=0,
    )
