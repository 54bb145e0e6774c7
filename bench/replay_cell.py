"""One replay cell (trace x regime x seed): every policy in its own world, copies included.

Every compared policy gets its own :class:`~federation.sim.world.World`: clones of the same
loaded site queues, into which the policy's task copies are *submitted* as real jobs. A copy
holds its place until it starts or the coordinator cancels it, is seen by backfill and by every
job behind it, and shows in the policy's own probe snapshots. The coordinator sees a copy's
start at its next look (``seen_every_s``); a copy that started before that look beside the
winner is a running duplicate and is charged the time it ran. A last world gets no tasks: the
background jobs' extra wait against it is what a policy's tasks and copies cost the site.

The oracle of a task is played forward in the policy's own world at the task's submission
(every feasible site, partition and shape, alone, with true run times), so each policy is
scored against the best it could have done from where it stood.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np

from bench.replay_setup import (
    SITES,
    WORKLOADS,
    CellOptions,
    Workload,
    build_sites,
    make_policy,
    probe_job,
    true_runtime,
)
from federation.core.envelope import Shape
from federation.core.hardware import speed_prior
from federation.core.snapshot import FederationSnapshot, SiteSnapshot
from federation.core.spec import SiteSpec
from federation.placement.budget import HedgeBudget
from federation.placement.candidates import (
    Candidate,
    PlacementDecision,
    WaitFn,
    enumerate_candidates,
)
from federation.placement.lateness import LateAdjusted, LateBoard, QueuedCopy
from federation.placement.metrics import Outcome
from federation.placement.overlay import with_own_jobs
from federation.placement.policies import Policy
from federation.placement.runtime_model import TaskRuntimeModel, UsageRatioModel
from federation.placement.twin import TwinPredictor
from federation.sim.queue import DEFAULT_EPOCH, SimJob, SimSite
from federation.sim.trace_model import TraceJob
from federation.sim.world import TaskRun, World, background_delay

DAY_S = 86400.0
DRAIN_S = 7 * DAY_S
"""After the rounds and a day of watching, tasks still queued are played on (no more
decisions) for at most this long, so that their real completion is scored."""


@dataclass
class Cell:
    trace: str
    regime: str
    seed: int
    outcomes: dict[str, list[Outcome]]
    utilization: dict[str, float]
    seconds: float
    bg_delay: dict[str, tuple[float, int]] = field(default_factory=dict)
    """Per policy: total extra wait (s) of the background jobs, and how many were compared."""


@dataclass
class Learning:
    """A policy's runtime model, fed its tasks' runtimes when each task ends (as a
    coordinator sees them in its results and in sacct), not when it is placed."""

    model: TaskRuntimeModel
    _due: list[tuple[float, int, str, Shape, float]] = field(default_factory=list)
    _seq: int = 0

    def ran(self, end_s: float, workload: str, shape: Shape, runtime_s: float) -> None:
        self._seq += 1
        heapq.heappush(self._due, (end_s, self._seq, workload, shape, runtime_s))

    def learn_until(self, t: float) -> None:
        while self._due and self._due[0][0] <= t:
            _, _, workload, shape, runtime_s = heapq.heappop(self._due)
            self.model.observe(workload, shape, runtime_s)


@dataclass
class Task:
    """One task of one policy: its first decision, its copies and its oracle."""

    w: Workload
    submit_s: float
    noise: float
    first: PlacementDecision
    placed: list[Candidate]
    run: TaskRun
    oracle: tuple[float, float]
    slurm_wait_s: float | None = None


@dataclass
class Arm:
    """A policy with its own world, predictors and learning."""

    name: str
    world: World
    usage: UsageRatioModel
    learning: Learning
    slurm: TwinPredictor
    policies: dict[str, Policy]
    pending: list[Task] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    last_look: float = 0.0
    shipped: list[tuple[Shape, datetime]] = field(default_factory=list)
    """Copies shipped this tick: what the tick's snapshot cannot show yet."""

    def ship(self, run: TaskRun, c: Candidate, job: SimJob, now_dt: datetime) -> None:
        self.world.submit(run, c.site, job)
        self.shipped.append((c.shape, now_dt))

    def view(self, fed: FederationSnapshot) -> FederationSnapshot:
        """The tick's snapshot with this tick's own copies in it (as a coordinator keeps)."""
        return with_own_jobs(fed, self.shipped) if self.own_jobs else fed

    own_jobs: bool = True

    @property
    def watching(self) -> bool:
        return any(p.watch is not None for p in self.policies.values())


def make_arm(
    name: str, sims: dict[str, SimSite], specs: dict[str, SiteSpec], opts: CellOptions
) -> Arm:
    usage = UsageRatioModel()
    prior = speed_prior(specs.values()) if opts.runtime_prior else None
    learning = Learning(TaskRuntimeModel(speed=prior, optimism=opts.runtime_optimism))
    slurm = TwinPredictor(specs, UsageRatioModel())  # Slurm's own estimate: every job to its limit
    twin_pred: WaitFn = TwinPredictor(specs, usage, samples=opts.twin_samples)
    single: WaitFn = (
        twin_pred
        if opts.single_samples == opts.twin_samples
        else TwinPredictor(specs, usage, samples=opts.single_samples)
    )
    holder: list[Arm] = []
    if opts.late_board:  # our own copies queued past their predictions, as evidence
        board = LateBoard(lambda: _queued_copies(holder[0]))
        twin_pred, single = LateAdjusted(twin_pred, board), LateAdjusted(single, board)
    budget = HedgeBudget(copies_per_task=opts.budget) if opts.budget else None

    def rt_of(w: Workload) -> Callable[[Shape], float]:
        return lambda shape: learning.model.predict(w.name, shape, default_s=w.base_s)

    policies = {
        w.name: make_policy(name, twin_pred, single, slurm, rt_of(w), opts, budget)
        for w in WORKLOADS
    }
    arm = Arm(name, World.cloned(sims, opts.seen_every_s), usage, learning, slurm, policies)
    arm.own_jobs = opts.own_jobs
    holder.append(arm)
    return arm


def _queued_copies(a: Arm) -> list[QueuedCopy]:
    """The arm's copies still queued now, with their predicted waits (what a coordinator
    knows of its own jobs)."""
    out = []
    for k in a.pending:
        for c, cand in zip(k.run.copies, k.placed, strict=True):
            if c.cancelled_s is None and a.world.status(c).start_s is None:
                out.append(QueuedCopy(cand.shape, cand.predicted_wait_s, a.world.now - c.submit_s))
    return out


def run_cell(
    trace_name: str,
    trace: list[TraceJob],
    regime: str,
    seed: int,
    opts: CellOptions,
    oracle_of: str | None = None,
) -> Cell:
    """Run one cell; the ``oracle`` row is the oracle in ``oracle_of``'s world (default:
    the last policy, the judged one by convention)."""
    t_start = time.monotonic()
    rng = np.random.default_rng(seed)
    specs, sims = build_sites(trace, regime, seed, opts.warmup_h, opts.hours, rng)
    arms = [make_arm(n, sims, specs, opts) for n in opts.policies]
    base = World(sims)  # no tasks: the background jobs' own waits
    t = opts.warmup_h * 3600
    end = (opts.warmup_h + opts.hours) * 3600
    for a in arms:
        a.last_look = t
        a.world.advance(t)
    next_round = t
    watch_s = opts.watch.every_s if any(a.watching for a in arms) else 0.0
    tick_rng = np.random.default_rng(seed + 1_000_003)  # ticks leave the rounds' draws alone
    while t < end or (any(a.pending for a in arms) and t < end + DAY_S):
        is_round = next_round <= t < end
        draw = rng if is_round else tick_rng
        probe_t = t - float(draw.uniform(0, opts.probe_interval_s))
        noises = [float(rng.lognormal(0.0, 0.15)) for _ in WORKLOADS] if is_round else []
        for a in arms:  # a watch tick steps the watching policies only, so that a
            # policy's result does not depend on which others are compared beside it
            if is_round or a.watching:
                _step(a, specs, t, probe_t, is_round, noises)
        if is_round:
            next_round += 1800.0
        t = _next_tick(t, next_round, end, watch_s, any(a.pending for a in arms))
    for a in arms:  # no more judging: the queues drain (arrivals ended) until all started
        drain_end = a.world.now + DRAIN_S
        while a.pending and a.world.now < drain_end:
            a.world.advance(min(drain_end, a.world.now + 3600.0))
            _score_started(a, specs)
    final = max(a.world.now for a in arms) + DAY_S / 2
    outcomes: dict[str, list[Outcome]] = {}
    bg: dict[str, tuple[float, int]] = {}
    base.advance(final)
    for a in arms:
        for task in a.pending:  # still queued after the drain: scored as they stand
            a.world.withdraw(task.run)
            a.outcomes.append(_unstarted_outcome(task, a.world.now))
        a.world.advance(final)
        outcomes[a.name] = a.outcomes
        bg[a.name] = background_delay(a.world, base, window=(opts.warmup_h * 3600, end))
    outcomes["oracle"] = [
        Outcome(o.oracle_completion_s, o.oracle_wait_s, o.oracle_completion_s, o.oracle_wait_s)
        for o in outcomes[oracle_of or arms[-1].name]
    ]
    util = {n: round(s.utilization((opts.warmup_h * 3600, end)), 3) for n, s in base.sites.items()}
    return Cell(trace_name, regime, seed, outcomes, util, time.monotonic() - t_start, bg)


def _next_tick(t: float, next_round: float, end: float, watch_s: float, pending: bool) -> float:
    """The next round, or sooner the next watch tick while watched tasks are queued."""
    nxt = next_round if next_round < end else math.inf
    if watch_s and pending:
        return min(nxt, t + watch_s)
    return nxt


def _step(
    a: Arm,
    specs: dict[str, SiteSpec],
    t: float,
    probe_t: float,
    is_round: bool,
    noises: list[float],
) -> None:
    """One tick of one policy's world: score what started, probe, watch, place a round."""
    w = a.world
    w.advance(max(w.now, probe_t))
    _score_started(a, specs)
    overdue = [
        k
        for k in a.pending
        if k.run.winner is None
        and a.policies[k.w.name].overdue(k.first, len(k.run.copies), t - k.submit_s)
    ]
    snaps = []
    if is_round or overdue:  # a probe round: each site as it stood at probe_t
        for sim in w.sites.values():
            snaps.append(_aged(sim.snapshot(), t - probe_t))
            a.usage.look(snaps[-1])  # the jobs it shows running: censored usage observations
    w.advance(t)
    _score_started(a, specs)
    a.learning.learn_until(t)
    for name, sim in w.sites.items():
        _learn_usage(a.usage, a.last_look, sim, name)
    a.last_look = t
    if not snaps:
        return
    now_dt = DEFAULT_EPOCH + timedelta(seconds=t)
    fed = FederationSnapshot(taken_at=now_dt, sites=tuple(snaps))
    a.shipped = []
    _watch(a, [k for k in overdue if k.run.winner is None], specs, fed, now_dt, t)
    if is_round:
        for wl, noise in zip(WORKLOADS, noises, strict=True):
            _one_task(a, wl, noise, specs, fed, now_dt, t)


def _score_started(a: Arm, specs: dict[str, SiteSpec]) -> None:
    """Score the tasks whose start the coordinator has seen; the rest wait."""
    still = []
    for k in a.pending:
        se = a.world.start_end(k.run)
        if se is None:
            still.append(k)
            continue
        a.outcomes.append(_outcome(k, se))
        win = k.run.winner
        assert win is not None
        shape = k.placed[win].shape
        run = true_runtime(k.w, shape, specs[shape.site], k.noise)
        a.learning.ran(se[1], k.w.name, shape, run)
    a.pending = still


def _outcome(k: Task, se: tuple[float, float]) -> Outcome:
    return Outcome(
        completion_s=se[1] - k.submit_s,
        wait_s=se[0] - k.submit_s,
        oracle_completion_s=k.oracle[1] - k.submit_s,
        oracle_wait_s=k.oracle[0] - k.submit_s,
        predicted_wait_s=k.first.chosen.predicted_wait_s,
        copies=len(k.run.copies),
        hedge_held_s=k.run.held_s,
        duplicate_run_s=k.run.duplicate_run_s,
        slurm_predicted_wait_s=k.slurm_wait_s,
    )


def _unstarted_outcome(k: Task, now: float) -> Outcome:
    """A task no copy of which started by the end: at least its wait so far plus its run."""
    run_s = min(c.run_s for c in k.run.copies)
    return _outcome(k, (now, now + run_s))


def _watch(
    a: Arm,
    overdue: list[Task],
    specs: dict[str, SiteSpec],
    fed: FederationSnapshot,
    now_dt: object,
    t: float,
) -> None:
    """Judge every overdue watched task still queued: maybe one more copy."""
    fresh: dict[str, PlacementDecision] = {}
    for k in overdue:
        pol = a.policies[k.w.name]
        if k.w.name not in fresh:
            fresh[k.w.name] = pol.decide(
                k.w.envelope,
                list(specs.values()),
                a.view(fed),
                now_dt,  # type: ignore[arg-type]
                new_task=False,
            )
        ages = [t - c.submit_s for c in k.run.copies]
        c = pol.extra_copy(k.first, fresh[k.w.name], k.placed, t - k.submit_s, k.placed, ages)
        if c is None:
            continue
        a.ship(k.run, c, probe_job(k.w, c, specs, k.noise), now_dt)  # type: ignore[arg-type]
        k.placed.append(c)


def _one_task(
    a: Arm,
    w: Workload,
    noise: float,
    specs: dict[str, SiteSpec],
    fed: FederationSnapshot,
    now_dt: object,
    t: float,
) -> None:
    # the oracle: every feasible (site, partition, shape), alone, played forward in this world
    cands, _ = enumerate_candidates(
        w.envelope,
        list(specs.values()),
        fed,
        now_dt,  # type: ignore[arg-type]
        lambda *_: (0.0, 0.0, ""),
        None,
        ladder=True,
    )
    by_site: dict[str, list[Candidate]] = {}
    for c in cands:
        by_site.setdefault(c.site, []).append(c)
    best: tuple[float, float] | None = None
    for site, cs in by_site.items():
        for se in a.world.sites[site].what_if_many([probe_job(w, c, specs, noise) for c in cs]):
            if best is None or se[1] < best[1]:
                best = se
    assert best is not None
    pol = a.policies[w.name]
    fed = a.view(fed)
    d = pol.decide(w.envelope, list(specs.values()), fed, now_dt)  # type: ignore[arg-type]
    slurm_wait = None
    if a.name.startswith(("twin", "auto")):
        site_snap = next(s for s in fed.sites if s.site == d.chosen.site)
        slurm_wait = a.slurm.wait(d.chosen.shape, site_snap, now_dt, 0.5)  # type: ignore[arg-type]
    elif a.name == "best-feasible":
        slurm_wait = d.chosen.predicted_wait_s
    run = TaskRun(t)
    copies = [d.chosen, *d.hedges]
    for c in copies:
        a.ship(run, c, probe_job(w, c, specs, noise), now_dt)  # type: ignore[arg-type]
    a.pending.append(Task(w, t, noise, d, list(copies), run, best, slurm_wait))


def _aged(snap: SiteSnapshot, age_s: float) -> SiteSnapshot:
    health = snap.health.model_copy(update={"probe_age_s": age_s})
    return snap.model_copy(update={"health": health})


def _learn_usage(usage: UsageRatioModel, since_s: float, sim: SimSite, site: str) -> None:
    """What sacct adds since the last look: finished jobs' requested limit and real time."""
    for st in sim.finished_since(since_s):
        if st.start_s is None or st.end_s is None or st.limit_end_s is None:
            continue
        usage.observe(site, st.limit_end_s - st.start_s, st.end_s - st.start_s, st.partition)


__all__ = ["SITES", "Arm", "Cell", "Learning", "Task", "make_arm", "run_cell"]
