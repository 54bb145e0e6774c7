"""Replay benchmark: placement policies on a simulated four-site federation under real load.

    python bench/replay.py                       # default grid, prints and writes the table
    python bench/replay.py --seeds 1 --hours 12  # a quick look

Four sites shaped like the paper's (Delta, DeltaAI, Anvil, Vista: partitions, GPU types and
per-node counts from endpoint_configs/*/site.yaml, node counts scaled down), each a
Slurm-like queue in virtual time (priority FIFO with EASY backfill, federation.sim.queue)
loaded with jobs replayed from real logs (KTH-SP2 and CEA-Curie from the Parallel
Workloads Archive; ../shared/traces or $FEDERATION_TRACES), scaled to each site's size and
a target utilization. Every 30 virtual minutes a round of three probe tasks (CPU
preparation, single-GPU inference, DDP training) is placed by every policy through the
real placement code. The oracle plays every feasible (site, partition, shape) forward from
the same queue state (``SimSite.what_if``), so every policy is scored against the same
outcomes. Predictors see what a real coordinator sees: snapshots up to a probe interval
old, requested walltimes of background jobs, how long *finished* jobs ran (sacct) and how
long the running ones have run so far (squeue), the runtimes of earlier probe tasks once
they have ended (of the copy that ran), and a datasheet prior of GPU speed
(``--runtime-prior``); not true runtimes, runtime noise, or start delays.
"""

from __future__ import annotations

import argparse
import heapq
import sys
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from federation.core.envelope import ResourceEnvelope, Shape  # noqa: E402
from federation.core.hardware import speed_prior  # noqa: E402
from federation.core.snapshot import FederationSnapshot, SiteSnapshot  # noqa: E402
from federation.core.spec import SiteSpec, load_sites  # noqa: E402
from federation.placement.candidates import (  # noqa: E402
    Candidate,
    PlacementDecision,
    enumerate_candidates,
)
from federation.placement.lateness import LateAdjusted, LateBoard, QueuedCopy  # noqa: E402
from federation.placement.metrics import (  # noqa: E402
    Outcome,
    PolicySummary,
    first_to_start,
    fmt_s,
    hedged,
    hedged_over_time,
    summarize,
)
from federation.placement.policies import (  # noqa: E402
    Policy,
    Watch,
    best_feasible,
    earliest_start,
    fixed_site,
    shortest_queue,
    twin,
    twin_hedge,
    twin_watch,
)
from federation.placement.runtime_model import TaskRuntimeModel, UsageRatioModel  # noqa: E402
from federation.placement.twin import TwinPredictor  # noqa: E402
from federation.sim.load import background_load  # noqa: E402
from federation.sim.queue import DEFAULT_EPOCH, SimJob, SimSite  # noqa: E402
from federation.sim.traces import TraceJob, default_trace_dir, load_swf  # noqa: E402

SITES = ("delta", "deltaai", "anvil", "vista")
TRACES = {"KTH-SP2": "KTH-SP2-1996-2.1-cln.swf.gz", "CEA-Curie": "CEA-Curie-2011-2.1-cln.swf.gz"}
# Target utilization per site: busy regimes differ by site, as production systems do.
REGIMES = {
    "light": {"delta": 0.45, "deltaai": 0.35, "anvil": 0.5, "vista": 0.4},
    "busy": {"delta": 1.4, "deltaai": 1.2, "anvil": 1.35, "vista": 1.3},
    # every site offered the loader's maximum (1.5x its capacity in work): the trace's own
    # arrivals compressed further, for traces whose short jobs keep "busy" queues shallow
    "heavy": {"delta": 1.5, "deltaai": 1.5, "anvil": 1.5, "vista": 1.5},
}
# busy targets, but each partition's trace start point is chosen by the busy-window rule
# (federation.sim.load.busy_start_offset): a seeded pick among evenly spaced start points
# whose measured day is offered at least the target, decided on the load alone
REGIMES["busy-window"] = dict(REGIMES["busy"])
WINDOW_REGIMES = frozenset({"busy-window"})
# Relative speed of a GPU type (A100 = 1) and of CPU partitions, for the true runtimes.
GPU_SPEED = {"a100": 1.0, "a40": 0.7, "h100": 1.9, "gh200": 2.1}
CPU_SPEED = {"delta": 1.0, "deltaai": 1.3, "anvil": 1.0, "vista": 1.2}


@dataclass(frozen=True)
class Workload:
    name: str
    envelope: ResourceEnvelope
    base_s: float  # at the envelope's smallest shape on the reference hardware
    speedup: float  # per doubling of the scaling resource


WORKLOADS = (
    Workload(
        "cpu-prep",
        ResourceEnvelope(cpus_min=16, cpus_max=64, mem_gb_min=32, walltime_s=3 * 3600),
        1200.0,
        1.7,
    ),
    Workload(
        "inference",
        ResourceEnvelope(gpus_min=1, gpus_max=1, cpus_min=8, mem_gb_min=32, walltime_s=2 * 3600),
        900.0,
        1.0,
    ),
    Workload(
        "ddp-train",
        ResourceEnvelope(gpus_min=1, gpus_max=4, cpus_min=8, mem_gb_min=32, walltime_s=6 * 3600),
        3600.0,
        1.93,
    ),
)


def true_runtime(w: Workload, shape: Shape, spec: SiteSpec, noise: float) -> float:
    part = spec.partition(shape.partition)
    units = shape.gpus if w.envelope.gpus_min else shape.cpus
    base_units = w.envelope.gpus_min or w.envelope.cpus_min
    speed = GPU_SPEED[part.gpu_type or "a100"] if shape.gpus else CPU_SPEED[spec.name]
    return float(w.base_s / speed / (w.speedup ** np.log2(units / base_units)) * noise)


def node_counts(spec: SiteSpec) -> dict[str, int]:
    return {p.name: max(2, min(12, round(p.nodes_real / 12))) for p in spec.partitions}


@dataclass
class Cell:
    trace: str
    regime: str
    seed: int
    outcomes: dict[str, list[Outcome]]
    utilization: dict[str, float]
    seconds: float


@dataclass
class Pending:
    """A task of a watching policy whose copies may all still be queued."""

    policy: Policy
    w: Workload
    submit_s: float
    noise: float
    first: PlacementDecision
    copies: list[tuple[str, float, float, float]]  # (site, submitted, start, end)
    oracle: tuple[float, float]  # (start, end)
    placed: list[Candidate]  # the copies' candidates, in the order of ``copies``

    def started_by(self, t: float) -> bool:
        return min(c[2] for c in self.copies) <= t

    def winner(self) -> int:
        """The copy that started first (the one that ran), as :func:`hedged_over_time` picks."""
        return first_to_start([c[1:] for c in self.copies])

    def outcome(self) -> Outcome:
        comp, wait, held = hedged_over_time([c[1:] for c in self.copies], self.submit_s)
        return Outcome(
            completion_s=comp,
            wait_s=wait,
            oracle_completion_s=self.oracle[1] - self.submit_s,
            oracle_wait_s=self.oracle[0] - self.submit_s,
            predicted_wait_s=self.first.chosen.predicted_wait_s,
            copies=len(self.copies),
            hedge_held_s=held,
        )


@dataclass
class Learning:
    """Each policy's own runtime model, fed its probe tasks' runtimes when each task ends
    (as a coordinator sees them in its results and in sacct), not when it is placed.

    A coordinator runs one policy and learns only from the tasks it ran, so no policy
    learns from another's placements (which would hand it their exploration for free).
    """

    make: Callable[[], TaskRuntimeModel]
    models: dict[str, TaskRuntimeModel] = field(default_factory=dict)
    _due: list[tuple[float, int, str, str, Shape, float]] = field(default_factory=list)
    _seq: int = 0

    def model(self, policy: str) -> TaskRuntimeModel:
        if policy not in self.models:
            self.models[policy] = self.make()
        return self.models[policy]

    def ran(self, policy: str, end_s: float, workload: str, shape: Shape, runtime_s: float) -> None:
        self._seq += 1
        heapq.heappush(self._due, (end_s, self._seq, policy, workload, shape, runtime_s))

    def learn_until(self, t: float) -> None:
        while self._due and self._due[0][0] <= t:
            _, _, policy, workload, shape, runtime_s = heapq.heappop(self._due)
            self.model(policy).observe(workload, shape, runtime_s)


def build_sites(
    trace: Sequence[TraceJob],
    regime: str,
    seed: int,
    warmup_h: float,
    hours: float,
    rng: np.random.Generator,
) -> tuple[dict[str, SiteSpec], dict[str, SimSite]]:
    """The four simulated sites of one cell, loaded with its background jobs (each site's
    start delay drawn from ``rng``)."""
    specs = {s.name: s for s in load_sites(list(SITES))}
    sims: dict[str, SimSite] = {}
    for name, spec in specs.items():
        load = background_load(
            spec,
            trace,
            target_utilization=REGIMES[regime][name],
            duration_s=(warmup_h + hours + 24) * 3600,
            seed=seed * 7919 + zlib.crc32(name.encode()) % 1000,
            nodes=node_counts(spec),
            busy_window_s=(
                (warmup_h * 3600, (warmup_h + hours) * 3600) if regime in WINDOW_REGIMES else None
            ),
        )
        sim = load.site_for(spec, start_delay_s=float(rng.uniform(5, 40)))
        sim.submit_many(load.jobs)
        sims[name] = sim
    return specs, sims


def run_cell(
    trace_name: str,
    trace: Sequence[TraceJob],
    regime: str,
    seed: int,
    hours: float,
    warmup_h: float,
    probe_interval_s: float,
    max_copies: int = 2,
    twin_samples: int = 0,
    single_samples: int = 0,
    watch: Watch | None = None,
    late_board: bool = False,
    late_board_weight: float = 1.0,
    runtime_prior: bool = True,
    runtime_optimism: float = 0.05,
) -> Cell:
    t_start = time.monotonic()
    rng = np.random.default_rng(seed)
    specs, sims = build_sites(trace, regime, seed, warmup_h, hours, rng)
    usage = UsageRatioModel()
    last_look = 0.0
    # a datasheet prior of each partition's GPU speed until a workload has run there (not the
    # simulator's true speeds, GPU_SPEED: a different, public estimate;
    # see federation.core.hardware)
    prior = speed_prior(specs.values()) if runtime_prior else None
    learning = Learning(lambda: TaskRuntimeModel(speed=prior, optimism=runtime_optimism))
    twin_pred = TwinPredictor(specs, usage, samples=twin_samples)
    single = (
        twin_pred
        if single_samples == twin_samples
        else TwinPredictor(specs, usage, samples=single_samples)
    )
    outcomes: dict[str, list[Outcome]] = defaultdict(list)
    pending: list[Pending] = []
    t = warmup_h * 3600
    # twin-watch's own copies still queued at t, late against their predictions
    board = (
        LateBoard(lambda: _queued_copies(pending, t), weight=late_board_weight)
        if late_board
        else None
    )
    policies = {
        w.name: make_policies(twin_pred, learning.model, w, max_copies, single, watch, board)
        for w in WORKLOADS
    }
    end = (warmup_h + hours) * 3600
    next_round = t
    watch_s = min((p.watch.every_s for ps in policies.values() for p in ps if p.watch), default=0)
    # rounds every 30 min until the end; in between (and after, until every watched task
    # has started, for at most a day) ticks at the watch interval re-judge queued tasks
    tick_rng = np.random.default_rng(seed + 1_000_003)  # ticks leave the rounds' draws alone
    while t < end or (pending and t < end + 86400):
        is_round = next_round <= t < end
        pending = _score_started(pending, t, outcomes, specs, learning)
        learning.learn_until(t)
        if not is_round and not any(
            p.policy.overdue(p.first, len(p.copies), t - p.submit_s) for p in pending
        ):  # nothing to judge at this tick: no probe needed
            t = _next_tick(t, next_round, end, watch_s, pending)
            continue
        # probes: a snapshot of each site, up to one probe interval old
        draw = rng if is_round else tick_rng
        probe_t = t - float(draw.uniform(0, probe_interval_s))
        snaps = []
        for sim in sims.values():
            sim.advance(probe_t)
            snaps.append(_aged(sim.snapshot(), t - probe_t))
            usage.look(snaps[-1])  # the jobs it shows running: censored usage observations
        for name, sim in sims.items():
            sim.advance(t)
            _learn_usage(usage, last_look, sim, name)
        last_look = t
        now_dt = DEFAULT_EPOCH + timedelta(seconds=t)
        fed = FederationSnapshot(taken_at=now_dt, sites=tuple(snaps))
        _watch(pending, specs, sims, fed, now_dt, t)
        if is_round:
            for w in WORKLOADS:
                _one_task(
                    w,
                    specs,
                    sims,
                    fed,
                    now_dt,
                    t,
                    policies[w.name],
                    learning,
                    rng,
                    outcomes,
                    pending,
                )
            next_round += 1800.0
        t = _next_tick(t, next_round, end, watch_s, pending)
    for p in pending:  # still queued a day after the last round: scored as they stand
        outcomes[p.policy.name].append(p.outcome())
    util = {n: round(s.utilization((warmup_h * 3600, end)), 3) for n, s in sims.items()}
    return Cell(trace_name, regime, seed, outcomes, util, time.monotonic() - t_start)


def _next_tick(
    t: float, next_round: float, end: float, watch_s: float, pending: list[Pending]
) -> float:
    """The next round, or sooner the next watch tick while watched tasks are queued."""
    nxt = next_round if next_round < end else float("inf")
    if watch_s and pending:
        return min(nxt, t + watch_s)
    return nxt


def _queued_copies(pending: list[Pending], t: float) -> list[QueuedCopy]:
    """The copies of watched tasks still queued at ``t`` (what a coordinator knows of them)."""
    return [
        QueuedCopy(c.shape, c.predicted_wait_s, t - sub)
        for p in pending
        for (_, sub, start, _), c in zip(p.copies, p.placed, strict=True)
        if start > t
    ]


def _score_started(
    pending: list[Pending],
    t: float,
    outcomes: dict[str, list[Outcome]],
    specs: dict[str, SiteSpec],
    learning: Learning,
) -> list[Pending]:
    """Score the watched tasks that have started by ``t`` (a copy won); the rest wait."""
    still = []
    for p in pending:
        if p.started_by(t):
            outcomes[p.policy.name].append(p.outcome())
            win = p.winner()
            shape = p.placed[win].shape
            run = true_runtime(p.w, shape, specs[shape.site], p.noise)
            learning.ran(p.policy.name, p.copies[win][3], p.w.name, shape, run)
        else:
            still.append(p)
    return still


def _watch(
    pending: list[Pending],
    specs: dict[str, SiteSpec],
    sims: dict[str, SimSite],
    fed: FederationSnapshot,
    now_dt: object,
    t: float,
) -> None:
    """Re-judge every watched task still queued at ``t`` and overdue: maybe one more copy."""
    fresh: dict[tuple[str, str], PlacementDecision] = {}
    for p in pending:
        if not p.policy.overdue(p.first, len(p.copies), t - p.submit_s):
            continue
        key = (p.policy.name, p.w.name)
        if key not in fresh:
            sites = list(specs.values())
            fresh[key] = p.policy.decide(p.w.envelope, sites, fed, now_dt)  # type: ignore[arg-type]
        ages = [t - c[1] for c in p.copies]
        c = p.policy.extra_copy(p.first, fresh[key], p.placed, t - p.submit_s, p.placed, ages)
        if c is None:
            continue
        (se,) = sims[c.site].what_if_many([_probe_job(p.w, c, specs, p.noise)])
        p.copies.append((c.site, t, *se))
        p.placed.append(c)


def _probe_job(w: Workload, c: Candidate, specs: dict[str, SiteSpec], noise: float) -> SimJob:
    """The probe task at candidate ``c`` as a batch job, with its true run time."""
    return SimJob(
        partition=c.partition,
        walltime_s=float(c.shape.walltime_s),
        run_s=true_runtime(w, c.shape, specs[c.site], noise),
        nodes=1,
        cpus_per_node=c.shape.cpus,
        mem_mb_per_node=c.shape.mem_gb * 1024,
        gpus_per_node=c.shape.gpus,
    )


def _aged(snap: SiteSnapshot, age_s: float) -> SiteSnapshot:
    health = snap.health.model_copy(update={"probe_age_s": age_s})
    return snap.model_copy(update={"health": health})


def _learn_usage(usage: UsageRatioModel, since_s: float, sim: SimSite, site: str) -> None:
    """What sacct adds since the last look: finished jobs' requested limit and real time."""
    for st in sim.finished_since(since_s):
        if st.start_s is None or st.end_s is None or st.limit_end_s is None:
            continue
        usage.observe(site, st.limit_end_s - st.start_s, st.end_s - st.start_s, st.partition)


def _key(c: Candidate) -> tuple[str, str, int, int]:
    return (c.site, c.partition, c.shape.gpus, c.shape.cpus)


def _one_task(
    w: Workload,
    specs: dict[str, SiteSpec],
    sims: dict[str, SimSite],
    fed: FederationSnapshot,
    now_dt: object,
    t: float,
    policies: list[Policy],
    learning: Learning,
    rng: np.random.Generator,
    outcomes: dict[str, list[Outcome]],
    pending: list[Pending],
) -> None:
    noise = float(rng.lognormal(0.0, 0.15))
    # the oracle: every feasible (site, partition, shape), played forward with true runtimes
    cands, _ = enumerate_candidates(
        w.envelope,
        list(specs.values()),
        fed,
        now_dt,  # type: ignore[arg-type]
        lambda *_: (0.0, 0.0, ""),
        None,
        ladder=True,
    )
    table: dict[tuple[str, str, int, int], tuple[float, float]] = {}
    by_site: dict[str, list[tuple[Candidate, SimJob]]] = defaultdict(list)
    for c in cands:
        by_site[c.site].append((c, _probe_job(w, c, specs, noise)))
    for site, pairs in by_site.items():
        results = sims[site].what_if_many([j for _, j in pairs])
        for (c, _), se in zip(pairs, results, strict=True):
            table[_key(c)] = se
    best_key = min(table, key=lambda k: table[k][1])
    o_start, o_end = table[best_key]
    for pol in policies:
        d = pol.decide(w.envelope, list(specs.values()), fed, now_dt)  # type: ignore[arg-type]
        copies = [d.chosen, *d.hedges]
        copy_se = [table[_key(c)] for c in copies]
        if pol.watch is not None:
            placed = [(c.site, t, *se) for c, se in zip(copies, copy_se, strict=True)]
            pending.append(Pending(pol, w, t, noise, d, placed, (o_start, o_end), copies))
            continue  # learned from once a copy has started (_score_started)
        comp, wait, held = hedged(copy_se, t)
        outcomes[pol.name].append(
            Outcome(
                completion_s=comp,
                wait_s=wait,
                oracle_completion_s=o_end - t,
                oracle_wait_s=o_start - t,
                predicted_wait_s=d.chosen.predicted_wait_s,
                copies=len(copies),
                hedge_held_s=held,
            )
        )
        win = first_to_start([(t, *se) for se in copy_se])  # the copy that ran
        ran = copies[win].shape
        run = true_runtime(w, ran, specs[ran.site], noise)
        learning.ran(pol.name, copy_se[win][1], w.name, ran, run)
    outcomes["oracle"].append(
        Outcome(
            completion_s=o_end - t,
            wait_s=o_start - t,
            oracle_completion_s=o_end - t,
            oracle_wait_s=o_start - t,
        )
    )


def make_policies(
    twin_pred: TwinPredictor,
    runtimes: Callable[[str], TaskRuntimeModel],
    w: Workload,
    max_copies: int = 2,
    single: TwinPredictor | None = None,
    watch: Watch | None = None,
    late_board: LateBoard | None = None,
) -> list[Policy]:
    """The compared policies for one workload; ``runtimes(name)`` is the runtime model
    the policy of that name learns (its own).

    ``twin_pred`` feeds ``twin-hedge``; ``single`` (default: the same) feeds ``twin``. A
    single copy is best placed on the conservative quantile twin: the sampled twins' median
    wait ignores later arrivals that backfill ahead of the probe, so it is optimistic, and
    the one copy pays for it in the tail; the hedge covers that risk with its second copy.
    """

    def rt_of(policy: str) -> Callable[[Shape], float]:
        model = runtimes(policy)
        return lambda shape: model.predict(w.name, shape, default_s=w.base_s)

    # best-feasible as the paper ran it, on Slurm's own start estimates: the same backfill
    # replay of the visible queue with every job running to its limit (an empty usage model)
    slurm_estimate = TwinPredictor(
        twin_pred.specs, UsageRatioModel(), start_delay_s=twin_pred.start_delay_s
    )
    bf = best_feasible(rt_of("best-feasible"))
    bf.wait_fn = slurm_estimate
    bf.prepare = slurm_estimate.prepare  # batched what-ifs: the same numbers, sooner
    return [
        fixed_site("delta"),
        shortest_queue(),
        earliest_start(),
        bf,
        twin(single or twin_pred, rt_of("twin")),
        twin_hedge(twin_pred, rt_of("twin-hedge"), max_copies=max_copies),
        twin_watch(
            LateAdjusted(twin_pred, late_board) if late_board else twin_pred,
            rt_of("twin-watch"),
            max_copies=max_copies,
            watch=watch,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=",".join(TRACES), help="comma list of trace names")
    ap.add_argument("--trace-dir", type=Path, default=None)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument(
        "--first-seed", type=int, default=0, help="seeds first..first+seeds-1 (3: held out)"
    )
    ap.add_argument("--regimes", default="light,busy", help=f"comma list of {sorted(REGIMES)}")
    ap.add_argument("--hours", type=float, default=24.0, help="virtual hours of probe rounds")
    ap.add_argument("--warmup-h", type=float, default=24.0)
    ap.add_argument("--probe-interval-s", type=float, default=120.0)
    ap.add_argument("--max-copies", type=int, default=2, help="twin-hedge: copies at most")
    ap.add_argument(
        "--twin-samples",
        type=int,
        default=16,
        help="twin-hedge: sampled queue replays per site (0: one replay at the usage quantile)",
    )
    ap.add_argument(
        "--twin-single-samples",
        type=int,
        default=0,
        help="twin (single copy): sampled replays per site (0: the quantile twin)",
    )
    ap.add_argument(
        "--watch-max-copies", type=int, default=Watch.max_copies, help="twin-watch: copies at most"
    )
    ap.add_argument(
        "--watch-every-s", type=float, default=Watch.every_s, help="twin-watch: judged this often"
    )
    ap.add_argument(
        "--watch-overdue-s",
        type=float,
        default=Watch.overdue_s,
        help="twin-watch: judged once queued this long past its predicted wait",
    )
    ap.add_argument(
        "--watch-margin-s",
        type=float,
        default=Watch.margin_s,
        help="twin-watch: another site must finish this much sooner",
    )
    ap.add_argument(
        "--watch-late-weight",
        type=float,
        default=Watch.late_weight,
        help="twin-watch: share of a held copy's lateness charged to its site",
    )
    ap.add_argument(
        "--watch-places",
        choices=("site", "shape"),
        default=Watch.places,
        help="twin-watch: a copy goes to another site, or to any new (site, partition, shape)",
    )
    ap.add_argument(
        "--watch-shapes",
        choices=("any", "smallest"),
        default=Watch.shapes,
        help="twin-watch: an added copy takes the best shape, or the envelope's smallest",
    )
    ap.add_argument(
        "--watch-charge",
        choices=("task", "site"),
        default=Watch.charge,
        help="twin-watch: charge holding sites the task's lateness, or each copy's own",
    )
    ap.add_argument(
        "--late-board",
        choices=("on", "off"),
        default="off",
        help="twin-watch: charge a new request the lateness of its own queued copies no larger",
    )
    ap.add_argument(
        "--late-board-weight",
        type=float,
        default=1.0,
        help="twin-watch with --late-board on: share of a late copy's lateness charged",
    )
    ap.add_argument(
        "--runtime-prior",
        choices=("datasheet", "none"),
        default="datasheet",
        help="runtimes on hardware a workload has not run on: scaled by GPU memory "
        "bandwidth from datasheets, or taken as elsewhere (none)",
    )
    ap.add_argument(
        "--runtime-optimism",
        type=float,
        default=0.05,
        help="on hardware a workload has not run on, predict this share faster (so that "
        "among equal partitions the untried one is tried once); 0: none",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "replay.md")
    args = ap.parse_args(argv)
    tdir = args.trace_dir or default_trace_dir()
    t0 = time.monotonic()
    cells: list[Cell] = []
    for tname in args.traces.split(","):
        path = tdir / TRACES[tname]
        if not path.exists():
            print(
                f"trace {path} not found: pass --trace-dir or set FEDERATION_TRACES",
                file=sys.stderr,
            )
            return 2
        trace = load_swf(path)
        for regime in args.regimes.split(","):
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                cell = run_cell(
                    tname,
                    trace,
                    regime,
                    seed,
                    args.hours,
                    args.warmup_h,
                    args.probe_interval_s,
                    args.max_copies,
                    args.twin_samples,
                    args.twin_single_samples,
                    Watch(
                        every_s=args.watch_every_s,
                        overdue_s=args.watch_overdue_s,
                        margin_s=args.watch_margin_s,
                        max_copies=args.watch_max_copies,
                        late_weight=args.watch_late_weight,
                        places=args.watch_places,
                        shapes=args.watch_shapes,
                        charge=args.watch_charge,
                    ),
                    args.late_board == "on",
                    args.late_board_weight,
                    args.runtime_prior == "datasheet",
                    args.runtime_optimism,
                )
                cells.append(cell)
                print(
                    f"  {tname:9s} {regime:5s} seed {seed}: {len(cell.outcomes['oracle'])} tasks, "
                    f"util {cell.utilization}, {cell.seconds:.1f} s",
                    flush=True,
                )
    report = render(cells, time.monotonic() - t0, args)
    print(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    return 0


def render(cells: list[Cell], elapsed_s: float, args: argparse.Namespace) -> str:
    lines = [
        f"# Replay benchmark ({elapsed_s:.0f} s; seeds {args.first_seed}.."
        f"{args.first_seed + args.seeds - 1}, {args.hours:g} h of rounds "
        f"after {args.warmup_h:g} h warm-up, probe interval {args.probe_interval_s:g} s, "
        f"twin samples {args.twin_single_samples} (twin) / {args.twin_samples} (twin-hedge), "
        f"twin-watch every {args.watch_every_s:g} s, overdue {args.watch_overdue_s:g} s, "
        f"margin {args.watch_margin_s:g} s, max copies {args.watch_max_copies}, "
        f"late weight {args.watch_late_weight:g}, places {args.watch_places}, "
        f"shapes {args.watch_shapes}, charge {args.watch_charge}, "
        f"late board {args.late_board}"
        + (f" x{args.late_board_weight:g}" if args.late_board == "on" else "")
        + f", runtime prior {args.runtime_prior}, optimism {args.runtime_optimism:g})",
        "",
    ]
    groups: dict[tuple[str, str], list[Cell]] = defaultdict(list)
    for c in cells:
        groups[(c.trace, c.regime)].append(c)
    for (tname, regime), cs in groups.items():
        util = {k: round(float(np.mean([c.utilization[k] for c in cs])), 2) for k in SITES}
        lines.append(f"## {tname}, {regime} (utilization {util})")
        lines.append("")
        lines.append(
            "| policy | fastest % | near-fastest % | median compl. s | mean compl. s | mean wait s "
            "| median extra s | mean extra s | P95 extra s | P99 extra s | oracle queued % "
            "| wait ±1 min % | wait ±10 min % | copies/task | hedge held s/task |"
        )
        lines.append("|" + "---|" * 15)
        pols = sorted(cs[0].outcomes, key=lambda name: name == "oracle")  # the oracle last
        for p in pols:
            s = summarize(p, [o for c in cs for o in c.outcomes[p]])
            lines.append(_row(s))
        lines.append("")
    return "\n".join(lines)


def _row(s: PolicySummary) -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"

    return (
        f"| {s.policy} | {s.fastest_pct:.1f} | {s.near_fastest_pct:.1f} "
        f"| {fmt_s(s.median_completion_s)} "
        f"| {fmt_s(s.mean_completion_s)} | {fmt_s(s.mean_wait_s)} | {fmt_s(s.median_extra_s)} "
        f"| {fmt_s(s.mean_extra_s)} | {fmt_s(s.p95_extra_s)} | {fmt_s(s.p99_extra_s)} "
        f"| {s.oracle_queued_pct:.1f} | {pct(s.wait_within_60s_pct)} "
        f"| {pct(s.wait_within_600s_pct)} "
        f"| {s.copies_per_task:.2f} | {fmt_s(s.hedge_held_s_per_task)} |"
    )


if __name__ == "__main__":
    raise SystemExit(main())
