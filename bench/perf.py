"""Performance suite: every figure next to its target, measured in one run.

    .venv/bin/python bench/perf.py                 # full suite (~3-6 min on 2 cores)
    .venv/bin/python bench/perf.py --tasks 200 --rounds 1 --skip-resume   # a quick look

1. Dispatch overhead: the same tiny tasks (``functions.workloads.square``) through
   ``Coordinator.submit_task`` (snapshot reused, placement over every site, the task
   shipped through the SDK Executor) versus straight into the same endpoint through a real
   ``globus_compute_sdk.Executor`` with the same ``user_endpoint_config``, hence the same
   engine and Slurm job. Rounds alternate the order (ABBA); reported: the ratio of median
   end-to-end times (first submit to last result) and of the caller's submit-loop times.
   Needs the local federation (it is brought up if it is not).
2. Placement decision latency, ``federation.placement.decide.place`` over synthetic sites (three
   partitions each, the snapshot built by the real parser from
   :mod:`federation.parsing.synthetic`), for a CPU and a GPU envelope: median and P95.
3. Snapshot parsing of a 50,000-job queue (``bench/bench_parsing.py``).
4. Completion-to-resume latency, one task at a time (``bench/bench_events.py``).

Writes ``bench/results/perf-latest.json`` (and prints a rich table).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from federation.core.envelope import ResourceEnvelope  # noqa: E402
from federation.core.snapshot import FederationSnapshot  # noqa: E402
from federation.core.spec import PartitionSpec, SiteSpec  # noqa: E402
from federation.parsing.snapshot_builder import build_site_snapshot  # noqa: E402
from federation.parsing.synthetic import BASE, synthetic_probe  # noqa: E402
from federation.placement.decide import place  # noqa: E402

RESULTS = ROOT / "bench" / "results"

DISPATCH_TARGET_RATIO = 1.5
PLACEMENT_TARGET_S = {4: 0.005, 100: 0.050}
PARSE_TARGET_S = 0.5
RESUME_TARGET_S = 0.1

CPU_ENVELOPE = ResourceEnvelope(cpus_min=4, mem_gb_min=8, walltime_s=3600)
GPU_ENVELOPE = ResourceEnvelope(gpus_min=1, cpus_min=8, mem_gb_min=32, walltime_s=7200)


@dataclass
class Figure:
    """One measured figure and its target (``ok`` is None when there is no target)."""

    name: str
    value: float
    unit: str
    target: str
    ok: bool | None
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile of ``values`` (0 < q <= 1)."""
    s = sorted(values)
    return s[max(0, min(len(s) - 1, round(q * len(s)) - 1))]


# --- placement over synthetic sites -------------------------------------------------------
def synthetic_site_spec(name: str) -> SiteSpec:
    """A site shaped like :mod:`federation.parsing.synthetic`'s nodes and partitions."""
    return SiteSpec(
        name=name,
        institution="synthetic",
        arch="x86_64",
        access="login-node",
        default_account="bench",
        partitions=(
            PartitionSpec(
                name="cpu",
                nodes_real=8,
                nodes_local=8,
                cpus_per_node=128,
                mem_gb_per_node=250,
                max_walltime_s=2 * 86400,
            ),
            PartitionSpec(
                name="gpuA100x4",
                nodes_real=4,
                nodes_local=4,
                cpus_per_node=64,
                mem_gb_per_node=500,
                gpus_per_node=4,
                gpu_type="a100",
                gpu_mem_gb=40,
                max_walltime_s=86400,
            ),
            PartitionSpec(
                name="gpuH100x4",
                nodes_real=4,
                nodes_local=4,
                cpus_per_node=64,
                mem_gb_per_node=500,
                gpus_per_node=4,
                gpu_type="h100",
                gpu_mem_gb=80,
                max_walltime_s=2 * 86400,
            ),
        ),
    )


def synthetic_federation(
    n_sites: int, jobs_per_site: int
) -> tuple[list[SiteSpec], FederationSnapshot, datetime]:
    """``n_sites`` sites, each with a ``jobs_per_site``-job queue, and the moment to place at.

    The snapshot is parsed once from a synthetic probe and copied per site (parsing is
    measured on its own); the decision time is one minute after the probe.
    """
    now = BASE + timedelta(seconds=60)
    base = build_site_snapshot("site000", synthetic_probe(jobs_per_site), now=now)
    specs, sites = [], []
    for i in range(n_sites):
        name = f"site{i:03d}"
        specs.append(synthetic_site_spec(name))
        sites.append(base.model_copy(update={"site": name}))
    return specs, FederationSnapshot(taken_at=now, sites=tuple(sites)), now


def placement_latencies(
    n_sites: int, jobs_per_site: int, repeat: int = 50, policy: str = "earliest-start"
) -> list[float]:
    """Seconds per ``place`` call, alternating a CPU and a GPU envelope (``repeat`` each)."""
    specs, snap, now = synthetic_federation(n_sites, jobs_per_site)
    times: list[float] = []
    for _ in range(repeat):
        for env in (CPU_ENVELOPE, GPU_ENVELOPE):
            t0 = time.perf_counter()
            d = place(env, specs, snap, policy=policy, now=now)
            times.append(time.perf_counter() - t0)
            considered = len(d.candidates) + len(d.rejected)
            if considered < n_sites:  # every site must appear in the trace
                raise AssertionError(f"decision considered {considered} of {n_sites} sites")
    return times


# --- dispatch overhead --------------------------------------------------------------------
@dataclass
class DispatchRun:
    path: str
    tasks: int
    submit_s: float
    end_to_end_s: float
    completed: int


def _run_direct(ex: Any, n: int) -> DispatchRun:
    from functions.workloads import square

    t0 = time.perf_counter()
    futs = [ex.submit(square, i) for i in range(n)]
    t1 = time.perf_counter()
    ok = sum(1 for i, f in enumerate(futs) if f.result(timeout=600) == i * i)
    return DispatchRun("direct", n, t1 - t0, time.perf_counter() - t0, ok)


def _run_coordinator(coord: Any, env: ResourceEnvelope, snap: Any, n: int) -> DispatchRun:
    from federation.core.tasks import PythonTask
    from functions.workloads import square

    t0 = time.perf_counter()
    handles = [coord.submit_task(PythonTask(square, (i,)), env, snapshot=snap) for i in range(n)]
    t1 = time.perf_counter()
    for h in handles:
        h.wait(600)
    t2 = time.perf_counter()
    ok = sum(1 for i, h in enumerate(handles) if h.state == "completed" and h.value == i * i)
    return DispatchRun("coordinator", n, t1 - t0, t2 - t0, ok)


def dispatch_overhead(
    n_tasks: int = 1000,
    rounds: int = 3,
    site: str = "local",
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Coordinator versus direct Executor on the same endpoint engine (see module doc)."""
    from federation.deploy.local import LocalSites
    from federation.endpoint.manager import local_endpoint_id
    from federation.sites.user_config import shape_to_user_config
    from functions.workloads import square

    local = LocalSites()
    local.up()
    coord = local.connect(telemetry=False, probe_timeout_s=120)
    assert local.service is not None
    direct_ex = None
    try:
        env = ResourceEnvelope(sites=(site,), walltime_s=600)
        snap = coord.inspect_federation()
        sh = coord.plan(env, snap).chosen.shape
        uec = shape_to_user_config(
            partition=sh.partition,
            nodes=sh.nodes,
            cpus=sh.cpus,
            mem_gb=sh.mem_gb,
            gpus=sh.gpus,
            walltime_s=sh.walltime_s,
            account=sh.account,
        )
        client = coord.backends[site].client  # type: ignore[attr-defined]
        direct_ex = local.service.executor(
            local_endpoint_id(site), client, user_endpoint_config=uec
        )
        direct_ex.submit(square, 2).result(timeout=600)  # starts the engine and Slurm job
        runs: list[DispatchRun] = []
        for r in range(rounds):
            order = ("direct", "coordinator") if r % 2 == 0 else ("coordinator", "direct")
            for path in order:
                direct_ex.submit(square, 3).result(timeout=600)  # block still up
                if progress:
                    progress(f"dispatch round {r + 1}/{rounds}: {path}, {n_tasks} tasks")
                run = (
                    _run_direct(direct_ex, n_tasks)
                    if path == "direct"
                    else _run_coordinator(coord, env, snap, n_tasks)
                )
                if run.completed != n_tasks:
                    raise RuntimeError(f"{path}: {run.completed} of {n_tasks} tasks completed")
                runs.append(run)
    finally:
        if direct_ex is not None:
            direct_ex.shutdown(wait=False, cancel_futures=True)
        coord.close()
        local.service.close()
    by = {p: [x for x in runs if x.path == p] for p in ("direct", "coordinator")}
    med = {p: statistics.median(x.end_to_end_s for x in v) for p, v in by.items()}
    sub = {p: statistics.median(x.submit_s for x in v) for p, v in by.items()}
    return {
        "tasks": n_tasks,
        "rounds": rounds,
        "shape": sh.describe(),
        "ratio_end_to_end": med["coordinator"] / med["direct"],
        "direct_end_to_end_s": med["direct"],
        "coordinator_end_to_end_s": med["coordinator"],
        "direct_submit_us_per_task": sub["direct"] / n_tasks * 1e6,
        "coordinator_submit_us_per_task": sub["coordinator"] / n_tasks * 1e6,
        "direct_tasks_per_s": n_tasks / med["direct"],
        "coordinator_tasks_per_s": n_tasks / med["coordinator"],
        "runs": [asdict(x) for x in runs],
    }


# --- the suite ----------------------------------------------------------------------------
def run_suite(args: argparse.Namespace, console: Console) -> list[Figure]:
    figures: list[Figure] = []

    def say(msg: str) -> None:
        console.print(f"[dim]{datetime.now(UTC):%H:%M:%S}[/dim] {msg}", highlight=False)

    if not args.skip_dispatch:
        d = dispatch_overhead(args.tasks, args.rounds, progress=say)
        figures.append(
            Figure(
                name=f"dispatch overhead, {d['tasks']:,} tiny tasks (end to end)",
                value=round(d["ratio_end_to_end"], 3),
                unit="x direct",
                target=f"<= {DISPATCH_TARGET_RATIO}x",
                ok=d["ratio_end_to_end"] <= DISPATCH_TARGET_RATIO,
                detail=(
                    f"coordinator {d['coordinator_end_to_end_s']:.2f} s "
                    f"({d['coordinator_tasks_per_s']:.0f}/s) vs direct Executor "
                    f"{d['direct_end_to_end_s']:.2f} s ({d['direct_tasks_per_s']:.0f}/s), "
                    f"median of {d['rounds']}"
                ),
                extra=d,
            )
        )
        sub_c, sub_d = d["coordinator_submit_us_per_task"], d["direct_submit_us_per_task"]
        figures.append(
            Figure(
                name="  caller's submit call, per task",
                value=round(sub_c),
                unit="us",
                target="-",
                ok=None,
                detail=f"direct Executor.submit {sub_d:.0f} us (queues; ships on a thread)",
            )
        )
    say("placement latency")
    for n_sites in (4, 100):
        lat = placement_latencies(n_sites, args.jobs_per_site, args.placement_repeat)
        med, p95 = statistics.median(lat), quantile(lat, 0.95)
        target = PLACEMENT_TARGET_S[n_sites]
        figures.append(
            Figure(
                name=f"placement decision, {n_sites} sites x {args.jobs_per_site:,} jobs",
                value=round(med * 1000, 2),
                unit="ms median",
                target=f"< {target * 1000:.0f} ms",
                ok=p95 < target,
                detail=(
                    f"P95 {p95 * 1000:.2f} ms over {len(lat)} decisions (CPU and GPU task); "
                    f"first on a new snapshot {lat[0] * 1000:.1f} ms"
                ),
                extra={"median_s": med, "p95_s": p95, "first_s": lat[0], "n": len(lat)},
            )
        )
    say("snapshot parsing")
    from bench.bench_parsing import parse_times

    for label, times in parse_times(args.parse_jobs, args.parse_repeat).items():
        best, med = min(times), statistics.median(times)
        figures.append(
            Figure(
                name=f"{label}, {args.parse_jobs:,}-job queue",
                value=round(med, 3),
                unit="s median",
                target=f"< {PARSE_TARGET_S} s",
                ok=med < PARSE_TARGET_S,
                detail=f"best {best:.3f} s of {len(times)}",
                extra={"times_s": times},
            )
        )
    if not args.skip_resume:
        say("completion-to-resume latency")
        from bench.bench_events import local_endpoint, resume_latencies

        with local_endpoint() as ep:
            lat = resume_latencies(ep, args.resume_tasks)
        med, p95 = statistics.median(lat), quantile(lat, 0.95)
        figures.append(
            Figure(
                name="completion-to-resume latency, one at a time",
                value=round(med * 1000, 2),
                unit="ms median",
                target=f"< {RESUME_TARGET_S * 1000:.0f} ms",
                ok=med < RESUME_TARGET_S,
                detail=f"P95 {p95 * 1000:.2f} ms over {len(lat)} tasks",
                extra={"median_s": med, "p95_s": p95, "n": len(lat)},
            )
        )
    return figures


def render(figures: list[Figure], title: str) -> Table:
    table = Table(title=title)
    for col in ("figure", "measured", "target", "", "detail"):
        table.add_column(col, overflow="fold")
    for f in figures:
        verdict = "-" if f.ok is None else ("[green]met[/green]" if f.ok else "[red]missed[/red]")
        table.add_row(f.name, f"{f.value:,} {f.unit}", f.target, verdict, f.detail)
    return table


def write_json(figures: list[Figure], path: Path, meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**meta, "figures": [asdict(f) for f in figures]}, indent=2))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=1000, help="tiny tasks per dispatch run")
    ap.add_argument("--rounds", type=int, default=3, help="dispatch rounds (each path once)")
    ap.add_argument("--jobs-per-site", type=int, default=1000, help="queue per synthetic site")
    ap.add_argument("--placement-repeat", type=int, default=50)
    ap.add_argument("--parse-jobs", type=int, default=50_000)
    ap.add_argument("--parse-repeat", type=int, default=5)
    ap.add_argument("--resume-tasks", type=int, default=100)
    ap.add_argument("--skip-dispatch", action="store_true", help="no local federation needed")
    ap.add_argument("--skip-resume", action="store_true")
    ap.add_argument("--json", type=Path, default=RESULTS / "perf-latest.json")
    args = ap.parse_args(argv)
    console = Console()
    t0 = time.monotonic()
    figures = run_suite(args, console)
    elapsed = time.monotonic() - t0
    console.print(render(figures, f"performance suite ({elapsed:.0f} s)"))
    meta = {
        "command": "bench/perf.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "finished_at": datetime.now(UTC).isoformat(),
        "elapsed_s": round(elapsed, 1),
    }
    write_json(figures, args.json, meta)
    console.print(f"written to {args.json}")
    return 0 if all(f.ok is not False for f in figures) else 1


if __name__ == "__main__":
    raise SystemExit(main())
