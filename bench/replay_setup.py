"""The replay's fixed parts: the four sites, the regimes, the probe workloads, the policies.

Four sites shaped like the paper's (Delta, DeltaAI, Anvil, Vista: partitions, GPU types and
per-node counts from federation/sites_data/*/site.yaml, node counts scaled down), each loaded with
background jobs from a real log sized to a target utilization per regime. Three probe
workloads (CPU preparation, single-GPU inference, DDP training) with true run times from a
speed table the predictors never see (they get a public datasheet prior instead).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.spec import SiteSpec, load_sites
from federation.placement.budget import HedgeBudget
from federation.placement.candidates import Candidate, WaitFn
from federation.placement.learned import BOUND_WEIGHT, auto_policy
from federation.placement.policies import (
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
from federation.placement.twin import TwinPredictor
from federation.sim.load import background_load
from federation.sim.queue import SimJob, SimSite
from federation.sim.trace_model import TraceJob

SITES = ("delta", "deltaai", "anvil", "vista")
POLICIES = (
    "fixed:delta",
    "shortest-queue",
    "earliest-start",
    "best-feasible",
    "twin",
    "twin-hedge",
    "twin-watch",
    "auto",
    "auto-1",
)
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


@dataclass
class CellOptions:
    """How a cell is run (the command line's knobs)."""

    hours: float = 24.0
    warmup_h: float = 24.0
    probe_interval_s: float = 120.0
    seen_every_s: float = 60.0
    """How often the coordinator looks for a copy's start (a real site's job_check_s)."""
    policies: Sequence[str] = POLICIES
    max_copies: int = 2
    twin_samples: int = 16
    single_samples: int = 0
    watch: Watch = field(default_factory=Watch)
    budget: float | None = 1.2
    """Copies per task at most on average for hedging policies (None: no budget)."""
    runtime_prior: bool = True
    runtime_optimism: float = 0.05
    own_jobs: bool = True
    late_board: bool = True
    """The twin policies charge a request the lateness of their own queued copies no larger
    than it (federation.placement.lateness)."""
    """Decisions see the copies shipped since the snapshot (federation.placement.overlay)."""


def true_runtime(w: Workload, shape: Shape, spec: SiteSpec, noise: float) -> float:
    part = spec.partition(shape.partition)
    units = shape.gpus if w.envelope.gpus_min else shape.cpus
    base_units = w.envelope.gpus_min or w.envelope.cpus_min
    speed = GPU_SPEED[part.gpu_type or "a100"] if shape.gpus else CPU_SPEED[spec.name]
    return float(w.base_s / speed / (w.speedup ** np.log2(units / base_units)) * noise)


def node_counts(spec: SiteSpec) -> dict[str, int]:
    return {p.name: max(2, min(12, round(p.nodes_real / 12))) for p in spec.partitions}


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


def probe_job(w: Workload, c: Candidate, specs: dict[str, SiteSpec], noise: float) -> SimJob:
    """The probe task at candidate ``c`` as a batch job, with its true run time."""
    return SimJob(
        partition=c.partition,
        walltime_s=float(c.shape.walltime_s),
        run_s=true_runtime(w, c.shape, specs[c.site], noise),
        nodes=1,
        cpus_per_node=c.shape.cpus,
        mem_mb_per_node=c.shape.mem_gb * 1024,
        gpus_per_node=c.shape.gpus,
        name="probe",
    )


def make_policy(
    name: str,
    twin_pred: WaitFn,
    single: WaitFn,
    slurm: TwinPredictor,
    runtime: Callable[[Shape], float],
    opts: CellOptions,
    budget: HedgeBudget | None,
) -> Policy:
    """One compared policy for one workload, with the arm's own predictors.

    ``best-feasible`` is the paper's, on Slurm's own start estimates (``slurm``: the same
    backfill replay of the visible queue with every job running to its limit). ``twin``
    places its single copy on the conservative quantile twin (``single``); ``twin-hedge`` and
    ``twin-watch`` use the sampled twins (``twin_pred``). ``auto`` hedges on the quantile
    twin, as a coordinator does where copies can be withdrawn, and ``auto-1`` is its single
    copy form (no site can withdraw one). The hedging policies share one ``budget`` across
    workloads.
    """
    if name.startswith("fixed:"):
        return fixed_site(name.split(":", 1)[1])
    if name == "shortest-queue":
        return shortest_queue()
    if name == "earliest-start":
        return earliest_start()
    if name == "best-feasible":
        bf = best_feasible(runtime)
        bf.wait_fn = slurm
        bf.prepare = slurm.prepare  # batched what-ifs: the same numbers, sooner
        return bf
    if name == "twin":
        return twin(single, runtime)
    if name == "auto" or name.startswith("auto@"):  # the default, as a coordinator builds
        # it where copies can be withdrawn (every simulated site): hedging, within the
        # budget; auto@<w>: with another weight on Slurm's plan
        weight = float(name.split("@", 1)[1]) if "@" in name else BOUND_WEIGHT
        p = auto_policy(
            single, runtime, slurm, hedge=True, watch=opts.watch, budget=budget, weight=weight
        )
        p.name = name
        return p
    if name == "auto-1" or name.startswith("auto-1@"):  # the default where no copy could be
        # withdrawn: one copy per task; auto-1@<w>: with another weight on Slurm's plan
        weight = float(name.split("@", 1)[1]) if "@" in name else BOUND_WEIGHT
        p = auto_policy(single, runtime, slurm, weight=weight)
        p.name = name
        return p
    if name == "twin-hedge":
        return twin_hedge(twin_pred, runtime, max_copies=opts.max_copies, budget=budget)
    if name == "twin-watch":
        return twin_watch(
            twin_pred, runtime, max_copies=opts.max_copies, watch=opts.watch, budget=budget
        )
    raise ValueError(f"unknown policy {name!r}; use one of {', '.join(POLICIES)} or fixed:<site>")
