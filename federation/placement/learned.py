"""The default placement (``auto``): the replay's best policy, with predictors that learn from
what a coordinator sees.

The replay benchmark ranks the digital twin policies first (``twin-watch`` where copies can be
withdrawn, ``twin`` otherwise) and ``earliest-start`` far below (docs/placement.md, "Placement
and the replay benchmark"). A coordinator has no trace to learn from, so :class:`LearnedPlacement`
learns from its own deployment, from the first task on:

* **Queue usage** (:class:`~.runtime_model.UsageRatioModel`): every snapshot's running jobs
  are censored observations of used/requested time; a job seen running in one snapshot and
  gone from the next ended in between, which is an observation (its end is taken midway
  between the two looks; the probe reads ``squeue``, not ``sacct``).
* **Task runtimes** (:class:`~.runtime_model.TaskRuntimeModel`, datasheet GPU prior): every
  finished task, keyed by its workload (the task's label, else its code hash). A workload
  never seen yet is ranked by predicted start (runtime 0 everywhere, except the
  datasheet's speed ratios), which is what ``earliest-start`` does, on the twin's waits.
* **Placement**: the conservative quantile twin (one replay per partition and quantile, not
  sampled twins) ranks the candidates; with ``hedge=True`` (a coordinator whose sites can
  withdraw a queued copy) the ranking is ``twin-watch``'s: a hedge copy when the runner-up is
  close or the wait uncertain, and one more copy for a task queued well past its
  prediction, bought from a budget of 1.2 copies per task on average, and only where it
  gains more than it may cost the jobs pending behind it
  (:func:`~federation.placement.policies.copy_cost_s`); with ``hedge=False``
  (no site can withdraw one) one copy per task, as ``twin``. Either way each candidate is
  also charged :data:`BOUND_WEIGHT` of how far Slurm's own plan (every job to its limit)
  lies beyond the twin's wait (:mod:`federation.placement.guard`, :func:`auto_policy`). A
  site whose queue lists more than ``max_jobs`` (3,000) jobs is predicted from its
  snapshot alone (a twin replays the whole queue: about 0.6 s per replay at 10,000 jobs),
  which the candidate's ``why`` says.

Thread safety: the learned state is updated under a lock; the workload a decision is for is
passed through a context variable (:meth:`workload`), so concurrent submissions do not mix.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

from federation.core.envelope import Shape
from federation.core.hardware import speed_prior
from federation.core.snapshot import FederationSnapshot, SiteSnapshot
from federation.core.spec import SiteSpec
from federation.placement.budget import HedgeBudget
from federation.placement.candidates import RuntimeFn, WaitFn
from federation.placement.guard import WaitBound
from federation.placement.policies import Policy, Watch, twin, twin_watch
from federation.placement.runtime_model import TaskRuntimeModel, UsageRatioModel
from federation.placement.twin import TwinPredictor

__all__ = ["AUTO", "BOUND_WEIGHT", "LearnedPlacement", "auto_policy"]

AUTO = "auto"
BOUND_WEIGHT = 0.5
"""The share of the gap between Slurm's plan and the twin's wait a candidate is charged: the
two opinions weighed alike. It was the twin's own risk weight (0.25) until issue 35: at 0.25
the default lost to best-feasible at the tail on the busiest development seeds (KTH-SP2
busy seeds 0-2: pooled P95 9,868 s against 8,444 s), where the tasks whose wait the twin
alone thought short made the tail. Chosen among 0.25, 0.5 and 1 on KTH-SP2 (a development
trace), never set per trace."""
_WORKLOAD: contextvars.ContextVar[str | None] = contextvars.ContextVar("workload", default=None)


def auto_policy(
    wait_fn: WaitFn,
    runtime_fn: RuntimeFn | None,
    plan_fn: WaitFn,
    *,
    hedge: bool = False,
    watch: Watch | None = None,
    budget: HedgeBudget | None = None,
    weight: float = BOUND_WEIGHT,
) -> Policy:
    """The default's ranking: ``twin`` (or ``twin-watch`` with ``hedge``) on ``wait_fn``,
    charged ``weight`` times how far Slurm's plan (``plan_fn``: every job to its limit) lies
    beyond each candidate's predicted wait (:mod:`federation.placement.guard`). The replay
    benchmark builds its ``auto`` row with this same function."""
    bound = WaitBound(plan_fn, weight)
    if hedge:
        p = twin_watch(wait_fn, runtime_fn, watch=watch, budget=budget, bound=bound)
    else:
        p = twin(wait_fn, runtime_fn, bound=bound)
    p.name = AUTO
    return p


class LearnedPlacement:
    """The ``auto`` policy and what it learns (see the module docstring)."""

    def __init__(
        self,
        specs: Sequence[SiteSpec],
        *,
        hedge: bool,
        copies_per_task: float = 1.2,
        samples: int = 0,
        watch: Watch | None = None,
        max_jobs: int | None = 3000,
    ) -> None:
        self.specs = {s.name: s for s in specs}
        self.usage = UsageRatioModel()
        self.runtimes = TaskRuntimeModel(speed=speed_prior(specs))
        self._lock = threading.Lock()
        self._running: dict[str, dict[str, tuple[datetime, float, str | None]]] = {}
        self._last_look: dict[str, datetime] = {}
        self.hedge = hedge
        # the quantile twin (samples=0) by default, hedging or not: sampled twins cost a
        # replay each per decision (16 by default in the replay's twin-watch)
        predictor = TwinPredictor(self.specs, self.usage, samples=samples, max_jobs=max_jobs)
        # Slurm's own plan (every job to its limit): the second opinion the ranking charges
        plan = TwinPredictor(
            self.specs, UsageRatioModel(), max_jobs=max_jobs, orders_from=predictor
        )
        if hedge:
            self.budget: HedgeBudget | None = HedgeBudget(copies_per_task=copies_per_task)
            self.policy: Policy = auto_policy(
                predictor, self._runtime, plan, hedge=True, watch=watch, budget=self.budget
            )
        else:
            self.budget = None
            self.policy = auto_policy(predictor, self._runtime, plan)
        self.policy.notes["auto"] = (
            f"auto: {'twin-watch' if hedge else 'twin'} charged for Slurm's plan "
            f"({'copies can be withdrawn' if hedge else 'one copy'})"
        )

    # -- what a decision is for ------------------------------------------------------------

    @contextmanager
    def workload(self, key: str | None) -> Iterator[None]:
        """Decisions inside are for workload ``key`` (its learned runtimes rank the shapes)."""
        token = _WORKLOAD.set(key)
        try:
            yield
        finally:
            _WORKLOAD.reset(token)

    def _runtime(self, shape: Shape) -> float:
        key = _WORKLOAD.get()
        if key is None:
            return 0.0
        with self._lock:
            return self.runtimes.predict(key, shape, default_s=0.0)

    # -- learning --------------------------------------------------------------------------

    def look(self, snapshot: FederationSnapshot) -> None:
        """Learn from a probe round: running jobs (censored), and jobs that ended since."""
        with self._lock:
            for site in snapshot.sites:
                if site.health.reachable:
                    self._look_site(site)

    def _look_site(self, site: SiteSnapshot) -> None:
        self.usage.look(site)
        now = site.taken_at
        before = self._running.get(site.site, {})
        last = self._last_look.get(site.site)
        seen: dict[str, tuple[datetime, float, str | None]] = {}
        for j in site.jobs:
            if j.state == "running" and j.start_time is not None and j.time_limit_s:
                seen[j.job_id] = (j.start_time, float(j.time_limit_s), j.partition)
        if last is not None and now > last:
            midway = last + (now - last) / 2
            for job_id, (start, limit_s, partition) in before.items():
                if job_id in seen:
                    continue
                used = max(0.0, min(limit_s, (midway - start).total_seconds()))
                self.usage.observe(site.site, limit_s, used, partition)
        self._running[site.site] = seen
        self._last_look[site.site] = now

    def ran(self, workload: str, shape: Shape, runtime_s: float) -> None:
        """A task of ``workload`` ran ``runtime_s`` at ``shape``."""
        if runtime_s <= 0:
            return
        with self._lock:
            self.runtimes.observe(workload, shape, runtime_s)
