"""A cold block's start-up, charged where no block of the shape is warm.

Tasks of one shape share one ``user_endpoint_config`` at a site, hence one user endpoint
process and its blocks (``ComputeSite.shape_config``). A block is one Slurm job running one
worker pool: the shape's engine asks for blocks as its tasks arrive (up to the partition's
``max_blocks``), and a block stays up for the endpoint's idle time after its last task
(``max_idletime``: ``FEDERATION_MAX_IDLETIME_S``, 5 s by default,
``federation/templates/endpoint``). So a task placed on a shape whose block this
coordinator already has up, or starting, runs on it as soon as a worker is free, while a
task placed anywhere else waits for a new block: its batch job submitted and started, then
its worker pool started (the Slurm queue wait is predicted apart, as before). Without the
charge every idle site looked the same to a tiny task, and a map of 200 of them spread over
five sites, each paying its block start-ups (131.7 s to the last result, issue 33).

* :class:`WarmBlocks`: the shapes this coordinator's own tasks keep warm (fed by the
  runtime from its task events: shipped, started, ended). A shape is *starting* from its
  first task's shipment until one of its tasks starts, *up* from then while any task of it
  is open and for the idle time after the last one ends, and cold otherwise.
* :class:`ColdStarts`: each site's cold-start figure: the median of the latest start-ups
  measured there (from a task's shipment to its start, for a task that opened a cold
  shape, less its predicted queue wait), else the median of the other sites' figures, else
  :data:`DEFAULT_COLD_START_S`.
* :class:`ColdStart`: the placement step (``Policy.cold_start``, given by
  :func:`~federation.placement.policies.with_cold_start`): a cold candidate's predicted
  wait (and its Slurm-plan bound) is charged its site's figure (``Candidate.cold_start_s``
  says how much of the wait that is; its ``why`` says ``cold start +N s``): the wait is
  the time from shipping to the task's start, as the runtime measures it (queued past
  prediction, overdue). A warm one waits for its block instead of a new Slurm job
  (``why``: ``warm block ...``): until the starting block is predicted up (a block late
  past that is taken to need as long again; or, when the view has none of our own jobs
  laid over the partition, a fresh probe's, as long as the queue says a new job would
  wait), then behind the tasks of ours already on it.

Only a coordinator's placements are charged (``Coordinator._placer``); the replay's
simulated sites have no endpoints (every copy is its own job there), so its policies are
never given the step.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from federation.core.envelope import Shape
from federation.core.snapshot import FederationSnapshot
from federation.core.spec import SiteSpec
from federation.placement.candidates import Candidate
from federation.placement.overlay import OWN_JOB_PREFIX
from federation.placement.qos import live_class

__all__ = [
    "DEFAULT_BLOCK_IDLE_S",
    "DEFAULT_COLD_START_S",
    "BlockState",
    "ColdStart",
    "ColdStarts",
    "WarmBlocks",
]

DEFAULT_COLD_START_S = 20.0
"""A site's cold start before any is measured there: the user endpoint process of a new
shape, the block's batch job submitted (the engine's strategy period, ``sbatch``) and its
worker pool started (a Python manager and worker importing the endpoint's packages). Measured
on the local federation (2 cores): 4-8 s for one block, 20-30 s when 16 pools start at once
(docs/performance.md); on a real site a node's prolog and a shared file system's imports add
to it."""
DEFAULT_BLOCK_IDLE_S = 5.0
"""How long a block stays up after its last task (the endpoint template's default
``max_idletime``, ``FEDERATION_MAX_IDLETIME_S``)."""
DEFAULT_MAX_BLOCKS = 32
"""Blocks one shape may grow to where the partition publishes no per-user job limit (as the
endpoint template renders it: ``federation.sites.endpoint_config.max_blocks``)."""
KEEP_MEASURED = 20
"""How many of a site's latest measured cold starts its figure is the median of."""


@dataclass(frozen=True)
class BlockState:
    """A warm shape as a decision reads it."""

    up: bool
    """A block is up (a task of the shape started); else one is starting."""
    ready_in_s: float
    """When the starting block is predicted up, from now (0 once up, or late)."""
    late_s: float
    """How long a starting block is past the time it was predicted up (0 once up)."""
    open_tasks: int
    """Tasks of ours shipped to the shape and not ended."""


@dataclass
class _Blocks:
    """One shape's blocks as the coordinator's own tasks show them."""

    opened_at: datetime
    ready_at: datetime
    open: set[str] = field(default_factory=set)
    up: bool = False
    last_at: datetime | None = None
    """The latest shipment, start or end of a task of the shape."""
    idle_since: datetime | None = None
    opener: str | None = None
    """The task whose shipment opened the shape cold (its start measures the cold start)."""
    opener_wait_s: float = 0.0
    """Its predicted queue wait and stage-in (taken off the measured start)."""


class WarmBlocks:
    """The shapes this coordinator's tasks keep warm (thread-safe).

    Fed with each task's shipment (:meth:`opened`), start (:meth:`started`) and end
    (:meth:`closed`) by a key (the task id); read by :meth:`state`.
    """

    def __init__(self, idle_s: float = DEFAULT_BLOCK_IDLE_S) -> None:
        if idle_s < 0:
            raise ValueError(f"idle_s must be >= 0, got {idle_s}")
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._blocks: dict[Shape, _Blocks] = {}
        self._by_key: dict[str, set[Shape]] = {}

    def opened(
        self,
        key: str,
        shape: Shape,
        at: datetime,
        *,
        ready_in_s: float,
        cold: bool,
        wait_s: float = 0.0,
    ) -> None:
        """Task ``key`` was shipped to ``shape`` at ``at``: predicted to start in
        ``ready_in_s``; ``cold``: it was placed there as a cold shape (``wait_s``: its
        predicted queue wait and stage-in, the rest of its start is the cold start)."""
        with self._lock:
            b = self._blocks.get(shape)
            if b is None or not self._alive(b, shape, at):
                b = _Blocks(opened_at=at, ready_at=at + timedelta(seconds=max(0.0, ready_in_s)))
                self._blocks[shape] = b
                if cold:
                    b.opener, b.opener_wait_s = key, max(0.0, wait_s)
            b.open.add(key)
            b.idle_since = None
            b.last_at = at
            self._by_key.setdefault(key, set()).add(shape)

    def started(self, key: str, site: str, at: datetime) -> float | None:
        """Task ``key`` started at ``site``: a block of its shape there is up. Returns the
        cold start it measured (its shipment to its start, less its predicted wait) when it
        had opened that shape cold, else None."""
        measured = None
        with self._lock:
            for shape in self._by_key.get(key, ()):
                b = self._blocks.get(shape)
                if shape.site != site or b is None or key not in b.open:
                    continue
                b.up = True
                b.last_at = at
                if b.opener == key:
                    b.opener = None
                    measured = max(0.0, (at - b.opened_at).total_seconds() - b.opener_wait_s)
        return measured

    def closed(self, key: str, at: datetime) -> None:
        """Task ``key`` ended (every shape it was shipped to): the last open task of an up
        shape leaves its block idle; a shape that never came up is forgotten (nothing of
        ours waits for its block any more)."""
        with self._lock:
            for shape in self._by_key.pop(key, ()):
                b = self._blocks.get(shape)
                if b is None:
                    continue
                b.open.discard(key)
                if b.opener == key:
                    b.opener = None
                if b.open:
                    continue
                if b.up:
                    b.idle_since = b.last_at = at
                else:
                    del self._blocks[shape]

    def state(self, shape: Shape, now: datetime) -> BlockState | None:
        """The shape's blocks now, or None when it is cold."""
        with self._lock:
            b = self._blocks.get(shape)
            if b is None:
                return None
            if not self._alive(b, shape, now):
                del self._blocks[shape]
                return None
            ahead = 0.0 if b.up else (b.ready_at - now).total_seconds()
            return BlockState(
                up=b.up, ready_in_s=max(0.0, ahead), late_s=max(0.0, -ahead), open_tasks=len(b.open)
            )

    def _alive(self, b: _Blocks, shape: Shape, now: datetime) -> bool:
        if not b.open:  # idle: up for the idle time after its last task
            return b.idle_since is not None and (now - b.idle_since).total_seconds() <= self.idle_s
        # open tasks: a block never outlives its walltime, so tasks of ours that have shown
        # nothing for longer are ones whose end was never heard of
        quiet_s = (now - (b.last_at or b.opened_at)).total_seconds()
        return quiet_s <= shape.walltime_s


class ColdStarts:
    """Each site's cold-start figure: measured here, else the default (thread-safe)."""

    def __init__(self, default_s: float = DEFAULT_COLD_START_S, keep: int = KEEP_MEASURED) -> None:
        if default_s < 0:
            raise ValueError(f"default_s must be >= 0, got {default_s}")
        self.default_s = default_s
        self.keep = keep
        self._lock = threading.Lock()
        self._seen: dict[str, deque[float]] = {}

    def observe(self, site: str, seconds: float) -> None:
        """A cold start of ``seconds`` measured at ``site``."""
        if seconds < 0:
            return
        with self._lock:
            self._seen.setdefault(site, deque(maxlen=self.keep)).append(seconds)

    def figure(self, site: str) -> tuple[float, str]:
        """The site's cold start in seconds, and where the figure comes from: the median of
        its own measurements; at a site with none, the median of the other sites' figures
        (the federation's typical start-up: trying an unmeasured site costs a whole batch's
        blocks, so it is not taken to be faster); with none anywhere, the default."""
        with self._lock:
            seen = list(self._seen.get(site, ()))
            others = [statistics.median(v) for s, v in self._seen.items() if s != site and v]
        if seen:
            return statistics.median(seen), f"median of {len(seen)} measured here"
        if others:
            n = len(others)
            return statistics.median(others), f"none measured here: the median of {n} other site(s)"
        return self.default_s, "the default, none measured here yet"

    def figures(self) -> dict[str, float]:
        """Every site's measured figure (sites with no measurement left out)."""
        with self._lock:
            return {s: statistics.median(v) for s, v in self._seen.items() if v}


@dataclass
class ColdStart:
    """The placement step charging cold candidates and waiting warm ones on their block."""

    blocks: WarmBlocks
    starts: ColdStarts
    sites: frozenset[str] | None = None
    """The sites whose tasks run on blocks (None: every site); a candidate elsewhere (a
    site that starts nothing per shape) is left as it is."""

    def apply(
        self,
        cands: Sequence[Candidate],
        sites: Sequence[SiteSpec],
        snapshot: FederationSnapshot,
        now: datetime,
    ) -> list[Candidate]:
        specs = {s.name: s for s in sites}
        out: list[Candidate] = []
        for c in cands:
            if self.sites is not None and c.site not in self.sites:
                out.append(c)
                continue
            st = self.blocks.state(c.shape, now)
            if st is None:
                secs, source = self.starts.figure(c.site)
                cold = {
                    "predicted_wait_s": c.predicted_wait_s + secs,
                    "wait_q90_s": None if c.wait_q90_s is None else c.wait_q90_s + secs,
                    "wait_bound_s": None if c.wait_bound_s is None else c.wait_bound_s + secs,
                    "cold_start_s": secs,
                    "why": f"{c.why}; cold start +{secs:.0f} s (no block of this shape here: "
                    f"{source})",
                }
                out.append(c.model_copy(update=cold))
                continue
            blocks = self._blocks_for(c, st.open_tasks, specs.get(c.site), snapshot)
            backlog = st.open_tasks * c.predicted_runtime_s / blocks
            if st.up:
                wait = backlog
                why = f"warm block: ours, up here ({st.open_tasks} task(s) of ours open on it"
            else:  # a late block is taken to need as long again (as the late board does)
                wait = st.ready_in_s + st.late_s
                when = f"predicted up in {st.ready_in_s:.0f} s"
                if st.late_s:
                    when = f"{st.late_s:.0f} s later than predicted"
                if c.predicted_wait_s > wait and not _ours_laid_over(snapshot, c):
                    # its block waits in the queue as a new job would (a fresh probe's view)
                    wait = c.predicted_wait_s
                    when = f"{when}; the queue says {wait:.0f} s"
                wait += backlog
                why = (
                    f"warm block: ours, starting here ({when}; "
                    f"{st.open_tasks} task(s) of ours waiting for it"
                )
            if backlog > 0:
                why += f"; {backlog:.0f} s of them ahead over {blocks} block(s)"
            # no new job: Slurm's plan for one has no say (a starting block's queue wait is
            # in the wait above, when the view has none of our own jobs laid over it)
            bound = None if c.wait_bound_s is None else wait
            update = {
                "predicted_wait_s": wait,
                "wait_q90_s": wait,
                "wait_bound_s": bound,
                "cold_start_s": 0.0,
                "why": f"{why}); a new job here: {c.why}",
            }
            out.append(c.model_copy(update=update))
        return out

    @staticmethod
    def _blocks_for(
        c: Candidate, open_tasks: int, spec: SiteSpec | None, snapshot: FederationSnapshot
    ) -> int:
        """Blocks the shape's open tasks run on: as many as they are, up to the partition's
        per-user job limit (the engine's ``max_blocks``; its QOS's live one where the probe
        read it, :mod:`~federation.placement.qos`) and to what fits in it at once."""
        limit = DEFAULT_MAX_BLOCKS
        part = next((p for p in spec.partitions if p.name == c.partition), None) if spec else None
        site = snapshot.site(c.site)
        if part is not None and spec is not None:
            part = live_class(spec, part, site).cls  # its QOS's live MaxJobsPU/MaxSubmitPU
            limit = part.max_running_jobs_per_user or part.max_submitted_jobs_per_user or limit
        psnap = site.partition(c.partition) if site is not None else None
        if psnap is not None and psnap.cpus_total:
            limit = min(limit, psnap.cpus_total // max(1, c.shape.cpus * c.shape.nodes))
        return max(1, min(open_tasks, limit))


def _ours_laid_over(snapshot: FederationSnapshot, c: Candidate) -> bool:
    """Whether the view has our own latest submissions laid over ``c``'s partition
    (:mod:`~federation.placement.overlay`): the queue's prediction for a new job there then
    counts our own tasks, which share the shape's blocks, as jobs queued ahead of it."""
    site = snapshot.site(c.site)
    if site is None:
        return False
    for j in reversed(site.jobs):  # ours are last
        if not j.job_id.startswith(OWN_JOB_PREFIX):
            return False
        if j.partition == c.partition:
            return True
    return False
