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
import threading
from collections import Counter, deque
from collections.abc import Iterable
from datetime import datetime
from functools import lru_cache

from federation.core.envelope import Shape
from federation.core.snapshot import FederationSnapshot, JobRecord, SiteSnapshot

__all__ = ["OWN_JOB_PREFIX", "OwnJobs", "with_own_jobs"]

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


class OwnJobs:
    """A coordinator's latest placements, laid over the snapshots it decides on.

    :meth:`view` is :func:`with_own_jobs` of the latest ``keep`` placements, built
    incrementally: while decisions keep coming on one snapshot (a burst, a service's
    many callers between two probe rounds), each view is the last one plus the
    placements noted since, not every placement again. A placement stays in the views of
    that snapshot after it leaves the last ``keep``."""

    def __init__(self, keep: int = 256) -> None:
        self._latest: deque[tuple[Shape, datetime]] = deque(maxlen=keep)
        self._noted = 0  # placements noted ever
        self._last: tuple[FederationSnapshot, int, FederationSnapshot] | None = None
        self._lock = threading.Lock()  # held for a copy only

    def __len__(self) -> int:
        with self._lock:
            return len(self._latest)

    def note(self, shapes: Iterable[Shape], at: datetime) -> None:
        """Placements made at ``at`` (a decision's chosen shape and its hedges)."""
        with self._lock:
            for shape in shapes:
                self._latest.append((shape, at))
                self._noted += 1

    def view(self, snapshot: FederationSnapshot) -> FederationSnapshot:
        """``snapshot`` with the placements made since it was taken."""
        with self._lock:
            noted, last = self._noted, self._last
            if last is not None and last[0] is snapshot and noted - last[1] <= len(self._latest):
                base = last[2]
                new = list(self._latest)[len(self._latest) - (noted - last[1]) :]
            else:
                base, new = snapshot, list(self._latest)
        view = with_own_jobs(base, new)
        with self._lock:
            if self._last is None or self._last[1] <= noted or self._last[0] is not snapshot:
                self._last = (snapshot, noted, view)
        return view
