"""The main job: one round of tasks through the coordinator on the embedded local federation.

Brings the local sites up (if they are not), loads some of them with background jobs so the
queues differ, prints the snapshot, submits a CPU-only, a 1-GPU and a 4-GPU task plus one
that fails, prints every placement with its decision trace and every event as its callback
fires, then checks each granted shape against what the job itself saw.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from federation.core.envelope import ResourceEnvelope
from federation.core.errors import NoFeasibleSiteError
from federation.core.snapshot import FederationSnapshot
from federation.core.tasks import PythonTask, ShellTask
from federation.deploy.local import LocalSites
from federation.runtime.coordinator import Coordinator
from federation.runtime.events import Event
from federation.runtime.handles import TaskHandle
from functions.workloads import fail_with, report_allocation

BACKGROUND_TAG = "fed-background"


@dataclass(frozen=True)
class BackgroundJob:
    site: str
    partition: str
    gres: str | None
    cpus: int
    count: int
    time_limit: str = "00:30:00"


# Queue pressure like a busy afternoon: Delta's A100 and A40 nodes full with more waiting,
# Anvil's A100 partition full. Sites with free room should win the GPU tasks.
DEFAULT_LOAD = (
    BackgroundJob("delta", "gpuA100x4", "gpu:a100:4", 32, 3),
    BackgroundJob("delta", "gpuA40x4", "gpu:a40:4", 32, 3),
    BackgroundJob("anvil", "gpu", "gpu:a100:4", 32, 3),
)


def load_background(sites: LocalSites, jobs: tuple[BackgroundJob, ...]) -> int:
    """Submit ``sleep`` jobs through each site's own sbatch; returns how many were queued."""
    n = 0
    specs = {s.name: s for s in sites.specs}
    for j in jobs:
        if j.site not in specs:
            continue
        argv = [
            "sbatch",
            "--parsable",
            f"--account={specs[j.site].account_for(j.partition)}",
            f"--job-name={BACKGROUND_TAG}",
            f"--partition={j.partition}",
            f"--cpus-per-task={j.cpus}",
            f"--time={j.time_limit}",
            "--mem=8G",
            "--output=/dev/null",
            "--wrap=sleep 1800",
        ]
        if j.gres:  # the local clusters' GRES are typed; the job asks as the site documents
            argv.insert(2, f"--gpus-per-node={j.gres.rsplit(':', 1)[-1]}")
        for _ in range(j.count):
            res = sites.slurm.run(j.site, argv)
            if res.returncode != 0:
                raise RuntimeError(f"background sbatch on {j.site} failed: {res.stderr.strip()}")
            n += 1
    return n


def clear_background(sites: LocalSites) -> None:
    for spec in sites.specs:
        sites.slurm.run(spec.name, ["scancel", f"--name={BACKGROUND_TAG}"])


def wide_console() -> Console:
    """A console wide enough for the tables, also when output goes to a file or CI log."""
    probe = Console()
    return probe if probe.is_terminal and probe.width >= 120 else Console(width=140)


def snapshot_table(snap: FederationSnapshot) -> Table:
    t = Table(title=f"Federation snapshot at {snap.taken_at:%H:%M:%S} UTC", header_style="bold")
    for col in (
        "site",
        "partition",
        "health",
        "nodes",
        "CPUs idle/total",
        "GPUs idle/total",
        "running",
        "pending",
        "pending reasons",
    ):
        t.add_column(col, justify="right" if col in ("nodes", "running", "pending") else "left")
    for s in snap.sites:
        health = (
            f"ok {s.health.probe_age_s:.1f}s"
            if s.health.reachable
            else f"[red]down: {s.health.error}[/red]"
        )
        if not s.partitions:
            t.add_row(s.site, "-", health, "", "", "", "", "", "")
        for p in s.partitions:
            gt = sum(p.gpus_total_by_type.values())
            gi = sum(p.gpus_idle_by_type.values())
            gpus = f"{gi}/{gt} {','.join(p.gpus_total_by_type)}" if gt else "-"
            reasons = ", ".join(f"{k}:{v}" for k, v in p.pending_reasons.items()) or "-"
            t.add_row(
                s.site,
                p.partition,
                health,
                str(p.nodes_total),
                f"{p.cpus_idle}/{p.cpus_total}",
                gpus,
                str(p.jobs_running),
                str(p.jobs_pending),
                reasons,
            )
    return t


def _printer(console: Console, label: str, t0: float) -> object:
    def on_event(ev: Event) -> None:
        detail = ", ".join(f"{k}={v}" for k, v in ev.detail.items() if k != "error")
        style = {"task.completed": "green", "task.failed": "red", "task.started": "cyan"}.get(
            ev.kind, "white"
        )
        elapsed = time.monotonic() - t0
        msg = f"[{style}]+{elapsed:6.1f}s  callback  {label:<14} {ev.kind:<15}[/{style}]"
        msg += f" {ev.site or ''} {detail}"
        if ev.kind == "task.failed":
            msg += f"\n           error: {ev.detail.get('error')}"
        console.print(msg, highlight=False)

    return on_event


def run_demo(
    sites: list[str] | None = None,
    load: bool = True,
    timeout_s: float = 170.0,
    path: str | None = None,
) -> int:
    """Run the round; returns a process exit code (0 when every check passed). ``path``:
    how the sites are reached (:data:`federation.deploy.local.PATHS`; default ``$FEDERATION_PATH``,
    else ``cloud``: the round goes through what real endpoints offer)."""
    console = wide_console()
    t0 = time.monotonic()
    local = LocalSites(sites=sites, path=path or os.environ.get("FEDERATION_PATH") or "cloud")
    console.rule("[bold]1. Local federation")
    timings = local.up()
    console.print(
        f"Slurm clusters up in {timings['slurm_s']} s, endpoints in "
        f"{timings['endpoints_s']} s: {', '.join(s.name for s in local.specs)}; reached "
        f"through the {local.path} path"
    )
    coord = local.connect()
    try:
        return _round(console, local, coord, load, timeout_s, t0)
    finally:
        if load:
            clear_background(local)
        coord.close()
        if local.service is not None:
            local.service.close()


def _round(
    console: Console, local: LocalSites, coord: Coordinator, load: bool, timeout_s: float, t0: float
) -> int:
    if load:
        clear_background(local)
        n = load_background(local, DEFAULT_LOAD)
        console.print(
            f"Background load: {n} sleep jobs via sbatch "
            f"({', '.join(f'{j.site}/{j.partition}' for j in DEFAULT_LOAD)})"
        )
        time.sleep(1.5)  # let the controllers schedule them and compute start estimates
    console.rule("[bold]2. inspect_federation (probe functions shipped to each endpoint)")
    snap = coord.inspect_federation()
    console.print(snapshot_table(snap))

    console.rule("[bold]3. submit_task: placement by live queue state")
    plan: list[tuple[str, PythonTask | ShellTask, ResourceEnvelope]] = [
        (
            "cpu-prep",
            PythonTask(report_allocation, (1.0,), name="cpu-prep"),
            ResourceEnvelope(cpus_min=8, mem_gb_min=16, walltime_s=600),
        ),
        (
            "gpu-infer",
            PythonTask(report_allocation, (1.0,), name="gpu-infer"),
            ResourceEnvelope(gpus_min=1, cpus_min=8, mem_gb_min=32, walltime_s=600),
        ),
        (
            "ddp-train",
            PythonTask(report_allocation, (2.0,), name="ddp-train"),
            ResourceEnvelope(
                gpus_min=4, gpu_mem_gb_min=40, cpus_min=16, mem_gb_min=64, walltime_s=900
            ),
        ),
        (
            "shell-env",
            ShellTask(
                command="echo partition=$SLURM_JOB_PARTITION cpus=$SLURM_CPUS_PER_TASK",
                name="shell-env",
            ),
            ResourceEnvelope(cpus_min=2, mem_gb_min=4, walltime_s=300),
        ),
        (
            "bad-input",
            PythonTask(fail_with, ("input file has 0 rows",), name="bad-input"),
            ResourceEnvelope(cpus_min=1, mem_gb_min=2, walltime_s=300),
        ),
    ]
    handles: list[TaskHandle] = []
    for label, task, env in plan:
        snap = coord.inspect_federation()  # live state, including the tasks just placed
        h = coord.submit_task(task, env, snapshot=snap, on_event=_printer(console, label, t0))  # type: ignore[arg-type]
        handles.append(h)
        console.print(f"[bold]{label}[/bold] -> {h.shape.describe()}")
        console.print(h.decision.explain(), highlight=False, markup=False)

    console.print("\n[bold]An envelope no site can satisfy[/bold] (8 H100 on one node):")
    try:
        coord.submit_task(
            PythonTask(report_allocation), ResourceEnvelope(gpus_min=8, gpu_types=("h100",))
        )
    except NoFeasibleSiteError as e:
        console.print("[yellow]NoFeasibleSiteError:[/yellow]", highlight=False)
        console.print(str(e), highlight=False, markup=False)

    console.rule("[bold]4. Waiting: callbacks print as events arrive (no polling)")
    deadline = t0 + timeout_s
    done = threading.Event()
    remaining = [len(handles)]

    def _count(ev: Event) -> None:
        if ev.kind in ("task.completed", "task.failed"):
            remaining[0] -= 1
            if remaining[0] == 0:
                done.set()

    for h in handles:
        h.add_callback(_count)
    done.wait(max(1.0, deadline - time.monotonic()))

    console.rule("[bold]5. get_result: granted shape vs what the job saw")
    filled = {f"{j.site}/{j.partition}" for j in DEFAULT_LOAD} if load else set()
    return _report(console, coord, handles, plan, filled)


def _report(
    console: Console,
    coord: Coordinator,
    handles: list[TaskHandle],
    plan: list[tuple[str, PythonTask | ShellTask, ResourceEnvelope]],
    filled: set[str],
) -> int:
    """The table of granted and observed shapes; 0 when every check passed: each shape
    as the job saw it, the expected failure with its traceback, and no task placed on a
    partition the background load had filled (``filled``)."""
    table = Table(header_style="bold")
    for col in (
        "task",
        "site/partition",
        "status",
        "slurm job",
        "queue wait",
        "granted",
        "observed in job",
    ):
        table.add_column(col)
    problems: list[str] = []  # each failed check, named in the last line
    sites_used = set()
    for h, (label, _task, _env) in zip(handles, plan, strict=True):
        if not h.done:
            table.add_row(
                label, f"{h.site}/{h.partition}", f"[red]{h.state} (timeout)[/red]", "", "", "", ""
            )
            problems.append(f"{label} not done in time ({h.state})")
            continue
        r = coord.get_result(h)
        granted = f"{r.shape.cpus} CPU, {r.shape.mem_gb} GB, {r.shape.gpus} GPU"
        observed = "-"
        if isinstance(r.value, dict):
            v = r.value
            observed = f"{v['partition']}: {v['cpus']} CPU, {v['mem_gb']} GB, {v['gpus']} GPU"
            # a site that implies GPUs by partition (Vista) or refuses --mem gets no such
            # request, so the local job shows what Slurm defaults to there
            how = coord.backends[r.site].spec.submit_options(r.partition)
            match = (
                # a class with no partition runs in the site's default one (Perlmutter)
                (how.partition is None or v["partition"] == how.partition)
                and v["cpus"] == r.shape.cpus
                and (how.gpu_request != "gpus-per-node" or v["gpus"] == r.shape.gpus)
                and (how.mem_request != "allowed" or v["mem_gb"] == float(r.shape.mem_gb))
            )
            if not match:
                problems.append(f"{label}: the job saw another shape than granted")
            observed += " [green]ok[/green]" if match else " [red]MISMATCH[/red]"
        elif r.stdout is not None:
            observed = r.stdout.strip()
        expected_fail = label == "bad-input"
        status = r.status if not expected_fail else f"{r.status} (expected)"
        if (r.status == "failed") != expected_fail:
            problems.append(f"{label} {r.status}" + ("" if expected_fail else f": {r.error}"))
        if (
            expected_fail
            and r.status == "failed"
            and "input file has 0 rows" not in r.remote_traceback
        ):
            problems.append(f"{label}: the remote traceback lacks the raised message")
        wait = f"{r.queue_wait_s:.1f} s" if r.queue_wait_s is not None else "-"
        table.add_row(
            label, f"{r.site}/{r.partition}", status, r.slurm_job_id or "-", wait, granted, observed
        )
        if label in ("cpu-prep", "gpu-infer", "ddp-train"):
            sites_used.add(r.site)
    console.print(table)
    failed = next((h for h in handles if h.label == "bad-input" and h.done), None)
    if failed is not None:
        tb = coord.get_result(failed).remote_traceback.strip().splitlines()
        console.print("[bold]Remote traceback of bad-input (last lines):[/bold]")
        console.print("\n".join(tb[-4:]), highlight=False, markup=False)
    console.print(
        f"CPU, 1-GPU and 4-GPU tasks ran on {len(sites_used)} site(s): {sorted(sites_used)}"
    )
    into_full = sorted(
        f"{h.label} on {h.site}/{h.partition}"
        for h in handles
        if h.done and f"{h.site}/{h.partition}" in filled
    )
    if into_full:  # the busy queues were in the snapshot: placement must have gone around
        console.print(f"[red]placed into a partition the background load filled: {into_full}[/red]")
    elif filled:
        console.print(
            f"No task went to a partition the background load filled ({', '.join(sorted(filled))})"
        )
    if into_full:
        problems.append("a task went to a filled partition")
    console.print(
        "[bold green]Round complete: every check passed[/bold green]"
        if not problems
        else f"[bold red]Round finished with problems: {'; '.join(problems)}[/bold red]",
        highlight=False,
    )
    return 0 if not problems else 1
