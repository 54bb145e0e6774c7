"""The replay experiment in real time, on the real local Slurm federation.

    python bench/live_experiment.py                # 24 probe tasks per policy, ~8 minutes
    python bench/live_experiment.py --jobs 6       # a quick look
    python bench/live_experiment.py --hedge        # twin-hedge and twin-watch too (copies)

A few local sites (default: delta, anvil, vista) are real Slurm clusters. Background load is
an excerpt of a real job log (KTH-SP2 by default), sized to each partition with the same
loader as the replay (``federation.sim.load.background_load``) and compressed in time
(``--time-scale`` trace seconds per real second; limits rounded up to whole minutes, which is
Slurm's unit); a thread ``sbatch``es each background job at its arrival time. Every
``--round-s`` seconds the coordinator probes every site once (through the endpoints, like
any caller) and places one task of each workload with every compared policy, in a rotating
order, from that same snapshot, through ``Coordinator.submit_task``: the policies share the
real queues and compete in them, in the same run. A probe task is a shell ``sleep`` whose
length depends on the partition it lands on (a CPU or GPU of a given speed), so where a
task runs changes how long it takes, as in the replay.

Measured for every task, from the coordinator's events and, for the wait, from Slurm's own
accounting (``sacct`` Submit/Start of the task's job): completion time (submit to result),
queue wait, the site chosen. There is no counterfactual oracle here (a real queue cannot be
replayed); "best observed" is the fastest completion any policy got in the same round for
the same workload, and "extra" is a task's completion minus that.

The predictors learn as a coordinator would: run-time/limit ratios of finished background
jobs from ``sacct`` (``UsageRatioModel``), runtimes of finished probe tasks
(``TaskRuntimeModel``).

``--hedge`` adds ``twin-hedge``: the coordinator ships a second copy where the runner-up
site is close or the wait uncertain, the first copy to start wins and the other is
cancelled; "hedge held s" is the queue time cancelled copies held (the hedge's cost). It
adds ``twin-watch`` too: ``twin-hedge`` whose tasks, while still queued past their
predicted start, are judged again every half round (real seconds: overdue by 10 s, a
site finishing 10 s sooner earns one more copy).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.live_compare import compare_lines, replay_means, wait_miss_lines  # noqa: E402
from federation.core.envelope import ResourceEnvelope, Shape  # noqa: E402
from federation.core.errors import NoFeasibleSiteError  # noqa: E402
from federation.core.hardware import speed_prior  # noqa: E402
from federation.core.spec import SiteSpec  # noqa: E402
from federation.core.tasks import ShellTask  # noqa: E402
from federation.deploy.local import LocalSites  # noqa: E402
from federation.parsing.times import parse_duration  # noqa: E402
from federation.placement.budget import HedgeBudget  # noqa: E402
from federation.placement.policies import (  # noqa: E402
    Policy,
    Watch,
    best_feasible,
    fixed_site,
    twin,
    twin_hedge,
    twin_watch,
)
from federation.placement.runtime_model import TaskRuntimeModel, UsageRatioModel  # noqa: E402
from federation.placement.twin import TwinPredictor  # noqa: E402
from federation.sim.load import background_load  # noqa: E402
from federation.sim.traces import default_trace_dir, load_swf  # noqa: E402

TRACES = {"KTH-SP2": "KTH-SP2-1996-2.1-cln.swf.gz", "CEA-Curie": "CEA-Curie-2011-2.1-cln.swf.gz"}
BG_NAME = "fed-bg"


@dataclass(frozen=True)
class LiveWorkload:
    name: str
    envelope: ResourceEnvelope
    seconds: dict[str, int]
    """Run time (s) per partition: where the task lands decides how long it takes."""
    default_s: float


WORKLOADS = (
    LiveWorkload(
        "cpu-prep",
        ResourceEnvelope(cpus_min=8, cpus_max=8, mem_gb_min=4, walltime_s=600),
        {"cpu": 40, "gg": 30, "gpu": 40, "ai": 30, "gh": 34, "ghx4": 30, "gpuA40x4": 40},
        40.0,
    ),
    LiveWorkload(
        "inference",
        ResourceEnvelope(gpus_min=1, gpus_max=1, cpus_min=4, mem_gb_min=4, walltime_s=600),
        {"gpuA40x4": 43, "gpuA100x4": 30, "gpu": 30, "ai": 16, "gh": 15, "ghx4": 15},
        30.0,
    ),
)


def probe_command(w: LiveWorkload) -> str:
    """A shell ``sleep`` whose length is chosen by the partition the job landed on."""
    cases = " ".join(f"{p}) t={s};;" for p, s in sorted(w.seconds.items()))
    return f'case "$SLURM_JOB_PARTITION" in {cases} *) t={int(w.default_s)};; esac; sleep $t'


@dataclass
class LiveRow:
    round: int
    policy: str
    workload: str
    site: str
    partition: str
    status: str
    completion_s: float | None
    wait_s: float | None
    slurm_wait_s: float | None
    predicted_wait_s: float
    slurm_job_id: str | None
    hedge_held_s: float = 0.0
    """Queue time held by this task's cancelled hedge copies (0 for a task placed once)."""


@dataclass
class LiveResult:
    rows: list[LiveRow]
    policies: list[str]
    background_jobs: dict[str, int]
    background_rejected: int
    elapsed_s: float
    unplaced: dict[str, int] = field(default_factory=dict)
    """Tasks a policy could not place (no site reachable), per policy."""
    args: dict[str, Any] = field(default_factory=dict)

    def table(self) -> list[dict[str, Any]]:
        """One summary row per policy."""
        best: dict[tuple[int, str], float] = {}
        for r in self.rows:
            if r.completion_s is not None:
                k = (r.round, r.workload)
                best[k] = min(best.get(k, math.inf), r.completion_s)
        out = []
        for p in self.policies:
            mine = [r for r in self.rows if r.policy == p]
            done = [r for r in mine if r.completion_s is not None]
            comp = np.array([r.completion_s or 0.0 for r in done], dtype=np.float64)
            extra = np.array(
                [(r.completion_s or 0.0) - best[(r.round, r.workload)] for r in done],
                dtype=np.float64,
            )
            waits = np.array(
                [
                    r.slurm_wait_s if r.slurm_wait_s is not None else (r.wait_s or math.nan)
                    for r in done
                ],
                dtype=np.float64,
            )
            waits = waits[~np.isnan(waits)] if waits.size else waits
            sites: dict[str, int] = defaultdict(int)
            for r in mine:
                sites[r.site] += 1
            out.append(
                {
                    "policy": p,
                    "tasks": len(mine),
                    "completed": len(done),
                    "best observed %": _pct(sum(1 for e in extra if e <= 1.0), len(done)),
                    "median compl. s": _q(comp, 50),
                    "mean compl. s": float(comp.mean()) if comp.size else math.nan,
                    "mean wait s": float(waits.mean()) if waits.size else math.nan,
                    "median extra s": _q(extra, 50),
                    "mean extra s": float(extra.mean()) if extra.size else math.nan,
                    "P95 extra s": _q(extra, 95),
                    "hedge held s": float(sum(r.hedge_held_s for r in mine)),
                    "sites": dict(sorted(sites.items())),
                }
            )
        return out

    def render(self) -> str:
        rows = self.table()
        cols = [
            "policy",
            "tasks",
            "completed",
            "best observed %",
            "median compl. s",
            "mean compl. s",
            "mean wait s",
            "median extra s",
            "mean extra s",
            "P95 extra s",
            "hedge held s",
            "sites",
        ]
        a = self.args
        lines = [
            f"# Live experiment ({self.elapsed_s:.0f} s; {a.get('jobs')} tasks per policy on "
            f"{a.get('sites')}, background from {a.get('trace')} x{a.get('time_scale')} "
            f"time-compressed, {sum(self.background_jobs.values())} background jobs "
            f"{self.background_jobs}, {self.background_rejected} rejected by sbatch, "
            f"unplaced {self.unplaced or 0})",
            "",
            "| " + " | ".join(cols) + " |",
            "|" + "---|" * len(cols),
        ]
        for r in rows:
            cells = []
            for c in cols:
                v = r[c]
                if isinstance(v, float):
                    cells.append("-" if math.isnan(v) else f"{v:,.0f}")
                elif isinstance(v, dict):
                    cells.append(", ".join(f"{k} {n}" for k, n in v.items()))
                else:
                    cells.append(str(v))
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"


def compare_with_replay(res: LiveResult, args: argparse.Namespace) -> list[str]:
    """Predicted-wait misses per policy, and the ranking beside the replay's."""
    lines = ["Predicted wait against the wait sacct recorded:", ""]
    lines += wait_miss_lines(res.rows, res.policies)
    lines.append("")
    label = f"{args.trace}:{args.replay_regime}"
    try:
        replay = replay_means(args.replay, args.trace, args.replay_regime)
    except (OSError, KeyError, ValueError) as e:
        return [*lines, f"No replay to compare with ({e}); run bench/replay.py first."]
    return lines + compare_lines(res.table(), replay, f"{label}, {args.replay.name}")


def _pct(k: int, n: int) -> float:
    return round(100.0 * k / n, 1) if n else math.nan


def _q(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q)) if a.size else math.nan


# --- background load ----------------------------------------------------------------------
@dataclass(frozen=True)
class BgJob:
    site: str
    at_s: float
    argv: tuple[str, ...]
    limit_s: float
    run_s: float


def background_jobs(
    specs: list[SiteSpec],
    nodes: dict[str, dict[str, int]],
    trace_path: Path,
    *,
    utilization: float,
    duration_s: float,
    time_scale: float,
    seed: int,
    max_jobs_per_site: int,
) -> list[BgJob]:
    """A time-compressed trace excerpt per site, as sbatch command lines at real times."""
    trace = load_swf(trace_path)
    out: list[BgJob] = []
    for i, spec in enumerate(specs):
        load = background_load(
            spec,
            trace,
            target_utilization=utilization,
            duration_s=duration_s * time_scale,
            seed=seed * 101 + i,
            nodes=nodes[spec.name],
        )
        jobs = sorted(load.jobs, key=lambda j: j.submit_s or 0.0)[:max_jobs_per_site]
        for j in jobs:
            limit_min = max(1, math.ceil(j.walltime_s / time_scale / 60.0))
            run_s = max(1.0, min(j.run_s / time_scale, limit_min * 60.0 - 2.0))
            part = spec.partition(j.partition)
            mem_mb = max(256, min(j.mem_mb_per_node or 1024, part.mem_gb_per_node * 1024 // 2))
            argv = [
                "sbatch",
                "--parsable",
                "-J",
                BG_NAME,
                "-p",
                j.partition,
                "-N",
                str(j.nodes),
                "--ntasks-per-node=1",
                "-c",
                str(j.cpus_per_node),
                f"--mem={mem_mb}M",
                "-t",
                str(limit_min),
                "-o",
                "/dev/null",
            ]
            if j.gpus_per_node:
                argv.append(f"--gres=gpu:{j.gpus_per_node}")
            argv += ["--wrap", f"sleep {run_s:.0f}"]
            out.append(
                BgJob(
                    spec.name, (j.submit_s or 0.0) / time_scale, tuple(argv), limit_min * 60, run_s
                )
            )
    out.sort(key=lambda b: b.at_s)
    return out


class Injector(threading.Thread):
    """Submits background jobs at their (real) arrival times."""

    def __init__(self, local: LocalSites, jobs: list[BgJob], t0: float) -> None:
        super().__init__(daemon=True, name="bg-injector")
        self.local, self.jobs, self.t0 = local, jobs, t0
        self.submitted: dict[str, int] = defaultdict(int)
        self.rejected = 0
        self.stop = threading.Event()

    def run(self) -> None:
        for b in self.jobs:
            delay = self.t0 + b.at_s - time.monotonic()
            if delay > 0 and self.stop.wait(delay):
                return
            if self.stop.is_set():
                return
            r = self.local.slurm.run(b.site, list(b.argv))
            if r.returncode == 0:
                self.submitted[b.site] += 1
            else:
                self.rejected += 1


# --- accounting ---------------------------------------------------------------------------
def sacct_rows(local: LocalSites, site: str) -> list[dict[str, str]]:
    r = local.slurm.run(
        site,
        [
            "sacct",
            "-X",
            "-n",
            "-P",
            "-S",
            "now-2hours",
            "-o",
            "JobID,JobName,Timelimit,Elapsed,State,Submit,Start,Partition",
        ],
    )
    keys = ("id", "name", "limit", "elapsed", "state", "submit", "start", "partition")
    return [dict(zip(keys, ln.split("|"), strict=False)) for ln in r.stdout.splitlines() if ln]


def learn_usage(
    usage: UsageRatioModel, local: LocalSites, sites: list[str], seen: set[str]
) -> None:
    """Feed finished background jobs' (limit, elapsed) into the usage model, once each."""
    for s in sites:
        for row in sacct_rows(local, s):
            key = f"{s}/{row['id']}"
            if key in seen or not row.get("state", "").startswith("COMPLETED"):
                continue
            limit, used = parse_duration(row["limit"]), parse_duration(row["elapsed"])
            if limit and used is not None:
                usage.observe(s, float(limit), float(used), row.get("partition") or None)
                seen.add(key)


def slurm_waits(local: LocalSites, sites: list[str]) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for s in sites:
        for row in sacct_rows(local, s):
            try:
                sub = datetime.fromisoformat(row["submit"])
                st = datetime.fromisoformat(row["start"])
            except (KeyError, ValueError):
                continue
            out[(s, row["id"])] = max(0.0, (st - sub).total_seconds())
    return out


# --- the experiment -----------------------------------------------------------------------
def make_policies(
    specs: dict[str, SiteSpec],
    usage: UsageRatioModel,
    runtimes: TaskRuntimeModel,
    w: LiveWorkload,
    fixed: str,
    samples: int,
    hedge: bool = False,
    round_s: float = 30.0,
    budgets: dict[str, HedgeBudget] | None = None,
) -> list[Policy]:
    """The compared policies for one workload; the hedging ones buy copies from
    ``budgets`` (one per policy, shared across workloads: 1.2 copies per task)."""
    budgets = budgets if budgets is not None else {}

    def rt(shape: Shape) -> float:
        return runtimes.predict(w.name, shape, default_s=w.default_s)

    slurm_estimate = TwinPredictor(specs, UsageRatioModel(), start_delay_s=2.0)
    bf = best_feasible(rt)
    bf.wait_fn = slurm_estimate
    predictor = TwinPredictor(specs, usage, start_delay_s=2.0, samples=samples)
    ours = twin(predictor, rt)
    if not hedge:
        return [fixed_site(fixed), bf, ours]
    watch = Watch(every_s=max(5.0, round_s / 2), overdue_s=10.0, margin_s=10.0)
    return [
        fixed_site(fixed),
        bf,
        ours,
        twin_hedge(predictor, rt, budget=budgets.get("twin-hedge")),
        twin_watch(predictor, rt, watch=watch, budget=budgets.get("twin-watch")),
    ]


def run_live(
    *,
    jobs: int = 24,
    sites: list[str] | None = None,
    trace: str = "KTH-SP2",
    trace_dir: Path | None = None,
    round_s: float = 30.0,
    time_scale: float = 60.0,
    utilization: float = 1.5,
    fixed: str = "delta",
    seed: int = 0,
    samples: int = 16,
    max_bg_per_site: int = 150,
    result_timeout_s: float = 600.0,
    hedge: bool = False,
    local: LocalSites | None = None,
    log: Any = print,
) -> LiveResult:
    """Run the experiment; ``jobs`` probe tasks per policy (split over the workloads).

    ``hedge`` adds ``twin-hedge`` and ``twin-watch`` to the compared policies."""
    site_names = sites or ["delta", "anvil", "vista"]
    local = local or LocalSites(sites=site_names)
    local.up()
    t_begin = time.monotonic()
    specs = {s.name: s for s in local.specs}
    rounds = max(1, math.ceil(jobs / len(WORKLOADS)))
    duration = rounds * round_s + 60.0
    nodes = {s.name: {p.name: max(1, p.nodes_local) for p in s.partitions} for s in local.specs}
    path = (trace_dir or default_trace_dir()) / TRACES[trace]
    bg = background_jobs(
        list(local.specs),
        nodes,
        path,
        utilization=utilization,
        duration_s=duration,
        time_scale=time_scale,
        seed=seed,
        max_jobs_per_site=max_bg_per_site,
    )
    # warm-up: a head start for the background so that queues exist when probing starts
    warm = min(60.0, round_s * 2)
    coord = local.connect(telemetry=False, probe_timeout_s=120)
    usage, runtimes = UsageRatioModel(), TaskRuntimeModel(speed=speed_prior(specs.values()))
    budgets = {n: HedgeBudget() for n in ("twin-hedge", "twin-watch")}
    policies = {
        w.name: make_policies(specs, usage, runtimes, w, fixed, samples, hedge, round_s, budgets)
        for w in WORKLOADS
    }
    names = [p.name for p in policies[WORKLOADS[0].name]]
    inj = Injector(local, bg, time.monotonic())
    inj.start()
    seen: set[str] = set()
    unplaced: dict[str, int] = defaultdict(int)
    handles: list[tuple[int, str, str, Any]] = []
    try:
        time.sleep(warm)
        t0 = time.monotonic()
        placed = 0
        for rnd in range(rounds):
            target = t0 + rnd * round_s
            if time.monotonic() < target:
                time.sleep(target - time.monotonic())
            learn_usage(usage, local, site_names, seen)
            snap = coord.inspect_federation()
            if not any(s.health.reachable for s in snap.sites):
                snap = coord.inspect_federation()  # one retry: probes time out under load
            for site_snap in snap.sites:  # running jobs: censored usage observations
                if site_snap.health.reachable:
                    usage.look(site_snap)
            for w in WORKLOADS:
                if placed >= jobs:
                    break
                placed += 1
                pols = policies[w.name]
                order = pols[rnd % len(pols) :] + pols[: rnd % len(pols)]
                for pol in order:
                    coord.policy = pol  # type: ignore[assignment]
                    task = ShellTask(command=probe_command(w), name=f"{w.name}-{pol.name}")
                    try:
                        h = coord.submit_task(task, w.envelope, snapshot=snap)
                    except NoFeasibleSiteError as e:  # e.g. every probe timed out: count it
                        unplaced[pol.name] += 1
                        log(f"  round {rnd + 1}: {pol.name} could not place {w.name}: {e}")
                        continue
                    handles.append((rnd, pol.name, w.name, h))
            log(
                f"  round {rnd + 1}/{rounds}: {len(handles)} tasks placed, "
                f"{sum(inj.submitted.values())} background jobs submitted",
                flush=True,
            )
        rows: list[LiveRow] = []
        results: list[tuple[int, str, str, Any, Any]] = []
        deadline = time.monotonic() + result_timeout_s
        for rnd, pname, wname, h in handles:
            res: Any
            try:
                res = coord.get_result(h, timeout_s=max(1.0, deadline - time.monotonic()))
            except Exception as e:  # a task that never finished is reported, not dropped
                res = e
            results.append((rnd, pname, wname, h, res))
            if not isinstance(res, Exception):
                wl = next(x for x in WORKLOADS if x.name == wname)
                if res.status == "completed":
                    runtimes.observe(wl.name, res.shape, _run_s(res))
        sw = slurm_waits(local, site_names)
        for rnd, pname, wname, h, res in results:
            chosen = h.decision.chosen
            if isinstance(res, Exception):
                rows.append(
                    LiveRow(
                        rnd,
                        pname,
                        wname,
                        chosen.site,
                        chosen.partition,
                        f"unfinished: {type(res).__name__}",
                        None,
                        None,
                        None,
                        chosen.predicted_wait_s,
                        None,
                    )
                )
                continue
            ok = res.status == "completed"
            comp = (res.completed_at - res.submitted_at).total_seconds() if ok else None
            rows.append(
                LiveRow(
                    rnd,
                    pname,
                    wname,
                    res.site,
                    res.partition,
                    res.status,
                    comp,
                    res.queue_wait_s,
                    sw.get((res.site, res.slurm_job_id or "")),
                    chosen.predicted_wait_s,
                    res.slurm_job_id,
                    _hedge_held_s(res),
                )
            )
    finally:
        inj.stop.set()
        inj.join(timeout=10)
        for *_, h in handles:  # unfinished at the deadline: withdrawn, not left queued
            if not h.done:
                coord.cancel(h, reason="the live run ended before this task finished")
        coord.close()
        if local.service is not None:
            local.service.close()
        for s in site_names:  # the background is ours: clear it (probe tasks are done)
            local.slurm.run(s, ["scancel", "--name", BG_NAME])
    return LiveResult(
        rows=rows,
        policies=names,
        background_jobs=dict(inj.submitted),
        background_rejected=inj.rejected,
        unplaced=dict(unplaced),
        elapsed_s=time.monotonic() - t_begin,
        args={
            "jobs": jobs,
            "sites": ",".join(site_names),
            "trace": trace,
            "time_scale": time_scale,
        },
    )


def _hedge_held_s(res: Any) -> float:
    """Queue time the task's cancelled (or abandoned) copies held before they lost."""
    lost = [c for c in res.copies if c["state"] in ("cancelled", "abandoned")]
    return float(sum(c["held_s"] or 0.0 for c in lost))


def _run_s(res: Any) -> float:
    if res.started_at is None:
        return float((res.completed_at - res.submitted_at).total_seconds())
    return float((res.completed_at - res.started_at).total_seconds())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=24, help="probe tasks per policy")
    ap.add_argument("--sites", default="delta,anvil,vista")
    ap.add_argument("--trace", default="KTH-SP2", choices=sorted(TRACES))
    ap.add_argument("--trace-dir", type=Path, default=None)
    ap.add_argument("--round-s", type=float, default=30.0, help="real seconds between rounds")
    ap.add_argument("--time-scale", type=float, default=60.0, help="trace s per real s")
    ap.add_argument("--utilization", type=float, default=1.5, help="offered background load")
    ap.add_argument("--fixed", default="delta", help="the fixed-site baseline's site")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hedge", action="store_true", help="compare twin-hedge and twin-watch too")
    ap.add_argument(
        "--replay",
        type=Path,
        default=ROOT / "bench" / "results" / "replay.json",
        help="the replay's JSON results, to compare the ranking with",
    )
    ap.add_argument("--replay-regime", default="busy", help="the replay group's regime")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "live.md")
    args = ap.parse_args(argv)
    res = run_live(
        jobs=args.jobs,
        sites=args.sites.split(","),
        trace=args.trace,
        trace_dir=args.trace_dir,
        round_s=args.round_s,
        time_scale=args.time_scale,
        utilization=args.utilization,
        fixed=args.fixed,
        seed=args.seed,
        hedge=args.hedge,
    )
    report = res.render() + "\n" + "\n".join(compare_with_replay(res, args)) + "\n"
    print(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    return 0


if __name__ == "__main__":
    if "FEDERATION_HOME" not in os.environ:
        print(
            "note: using the default federation (~/.federation); set FEDERATION_HOME for a "
            "private one",
            file=sys.stderr,
        )
    raise SystemExit(main())
