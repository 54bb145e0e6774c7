"""Load test: many tiny tasks and groups through the coordinator, many sites in placement.

    .venv/bin/python bench/load.py                         # 10,000 tasks, 500 groups
    .venv/bin/python bench/load.py --tasks 500 --groups 10  # a quick look
    .venv/bin/python bench/load.py --only placement         # section 4 alone (no federation)

1. Tasks: ``--tasks`` tiny tasks (``functions.workloads.square``) through
   ``Coordinator.submit_task`` against the local federation, spread round-robin over the
   sites through each envelope's site list (every endpoint takes load), one snapshot reused.
   Reported: submit and completion throughput (overall and per window of tasks, to show
   whether it degrades as tasks accumulate), coordinator RSS growth, and a final count:
   completed + failed must equal submitted.
2. Groups: ``--groups`` groups of ``--group-size`` children through ``submit_group`` (the
   distinct-sites soft constraint), all waited for and counted the same way.
3. Memory: a separate ``--trace-tasks`` run under ``tracemalloc`` (its peak; tracing slows
   the coordinator, so its throughput is not reported).
4. Placement latency as sites (4, 25, 100) and queued jobs per site (0, 1k, 10k) grow,
   synthetic sites as in ``bench/perf.py``.
Writes ``bench/results/load-latest.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.progress import (  # noqa: E402
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table  # noqa: E402

from bench.perf import RESULTS, placement_latencies, quantile  # noqa: E402
from federation.core.envelope import ResourceEnvelope  # noqa: E402
from federation.core.tasks import PythonTask  # noqa: E402
from federation.runtime.events import Event  # noqa: E402
from functions.workloads import square  # noqa: E402


def rss_mb() -> float:
    """Resident set size of this process (MB), from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Tally:
    """Counts terminal events as their callbacks fire (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.completed = 0
        self.failed = 0
        self.done_at: list[float] = []
        self.errors: list[str] = []

    def __call__(self, ev: Event) -> None:
        if ev.kind not in ("task.completed", "task.failed"):
            return
        with self._lock:
            if ev.kind == "task.completed":
                self.completed += 1
            else:
                self.failed += 1
                if len(self.errors) < 5:
                    self.errors.append(str(ev.detail.get("error")))
            self.done_at.append(time.perf_counter())

    @property
    def terminal(self) -> int:
        with self._lock:
            return self.completed + self.failed


@contextmanager
def progress_bars(console: Console, enabled: bool) -> Iterator[Progress]:
    columns = (
        TextColumn("{task.description:<10}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, disable=not enabled, transient=False) as prog:
        yield prog


def _windows(stamps: list[float], t0: float, size: int) -> list[float]:
    """Tasks per second in each consecutive window of ``size`` completions."""
    s = sorted(stamps)
    out, prev = [], t0
    for i in range(size - 1, len(s), size):
        out.append(size / max(1e-9, s[i] - prev))
        prev = s[i]
    return out


RSS_BUDGET_MB = 50.0
"""Issue 18: the coordinator's RSS may grow less than this over 10,000 tasks."""


def run_tasks(
    coord: Any, sites: list[str], n: int, console: Console, bars: bool, timeout_s: float
) -> dict[str, Any]:
    """``n`` tiny tasks through ``submit_task``; waits for all and accounts for each.

    Only task ids are kept here (a handle kept by the caller stays in memory however the
    coordinator releases it); values are read back at the end (from the store when the
    coordinator has one). RSS is sampled at every tenth of the completions."""
    snap = coord.inspect_federation()
    envs = [ResourceEnvelope(sites=(s,), walltime_s=600) for s in sites]
    tally = Tally()
    window = max(1, n // 10)
    rss0 = rss_mb()
    rss_by_window: list[float] = []
    submit_at: list[float] = []
    ids: list[str] = []
    per_site: dict[str, int] = {}
    t0 = time.perf_counter()
    with progress_bars(console, bars) as prog:
        sub = prog.add_task("submitted", total=n)
        fin = prog.add_task("finished", total=n)

        def sample() -> None:
            while len(rss_by_window) < tally.terminal // window:
                rss_by_window.append(rss_mb())

        for i in range(n):
            h = coord.submit_task(
                PythonTask(square, (i,)), envs[i % len(envs)], on_event=tally, snapshot=snap
            )
            ids.append(h.id)
            per_site[h.site] = per_site.get(h.site, 0) + 1
            del h
            submit_at.append(time.perf_counter())
            if i % 50 == 0:
                prog.update(sub, completed=i + 1)
                prog.update(fin, completed=tally.terminal)
                sample()
        prog.update(sub, completed=n)
        t_sub = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        while tally.terminal < n and time.monotonic() < deadline:
            prog.update(fin, completed=tally.terminal)
            sample()
            time.sleep(0.25)
        prog.update(fin, completed=tally.terminal)
    t_end = time.perf_counter()
    gc.collect()
    rss1 = rss_mb()
    live = len(coord.live_handles())
    wrong = 0
    for i, tid in enumerate(ids):
        h = coord.task(tid)
        if h is not None and h.state == "completed" and h.value != i * i:
            wrong += 1
    return {
        "submitted": n,
        "completed": tally.completed,
        "failed": tally.failed,
        "unaccounted": n - tally.terminal,
        "wrong_values": wrong,
        "errors": tally.errors,
        "per_site": per_site,
        "submit_s": t_sub - t0,
        "wall_s": t_end - t0,
        "submit_per_s": n / (t_sub - t0),
        "throughput_per_s": tally.terminal / (t_end - t0),
        "window": window,
        "completion_per_s_by_window": _windows(tally.done_at, t0, window),
        "submit_per_s_by_window": _windows(submit_at, t0, window),
        "rss_start_mb": rss0,
        "rss_end_mb": rss1,
        "rss_growth_mb": rss1 - rss0,
        "rss_mb_by_window": rss_by_window,
        "rss_growth_kb_per_task": (rss1 - rss0) * 1024 / n,
        "handles_in_memory_at_end": live,
        "handles_released": coord._registry.released,
    }


def run_groups(
    coord: Any, n_groups: int, size: int, console: Console, bars: bool, timeout_s: float
) -> dict[str, Any]:
    """``n_groups`` groups of ``size`` tiny children; waits for every group."""
    env = ResourceEnvelope(walltime_s=600)
    tally = Tally()
    groups = []
    submit_s: list[float] = []
    t0 = time.perf_counter()
    with progress_bars(console, bars) as prog:
        sub = prog.add_task("groups", total=n_groups)
        for g in range(n_groups):
            kids = [(f"c{k}", PythonTask(square, (g * size + k,)), env) for k in range(size)]
            t = time.perf_counter()
            gh = coord.submit_group(kids, objective=f"load group {g}")
            submit_s.append(time.perf_counter() - t)
            for c in gh.children:
                c.handle.add_callback(tally)
            groups.append(gh)
            prog.update(sub, completed=g + 1)
        deadline = time.monotonic() + timeout_s
        for gh in groups:
            gh.wait(max(0.1, deadline - time.monotonic()))
    t_end = time.perf_counter()
    children = n_groups * size
    distinct = sum(1 for gh in groups if len({c.handle.site for c in gh.children}) == size)
    return {
        "groups": n_groups,
        "group_size": size,
        "groups_done": sum(1 for gh in groups if gh.done),
        "children_submitted": children,
        "children_completed": tally.completed,
        "children_failed": tally.failed,
        "unaccounted": children - tally.terminal,
        "groups_on_distinct_sites": distinct,
        "replacements": sum(len(gh.replacements) for gh in groups),
        "submit_group_median_s": statistics.median(submit_s) if submit_s else 0.0,
        "wall_s": t_end - t0,
        "children_per_s": tally.terminal / (t_end - t0),
    }


def traced_run(coord: Any, sites: list[str], n: int, timeout_s: float) -> dict[str, Any]:
    """Peak traced allocation while ``n`` tasks are submitted and completed."""
    snap = coord.inspect_federation()
    envs = [ResourceEnvelope(sites=(s,), walltime_s=600) for s in sites]
    tally = Tally()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    for i in range(n):
        coord.submit_task(
            PythonTask(square, (i,)), envs[i % len(envs)], on_event=tally, snapshot=snap
        )
    deadline = time.monotonic() + timeout_s
    while tally.terminal < n and time.monotonic() < deadline:
        time.sleep(0.1)
    cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "tasks": n,
        "finished": tally.terminal,
        "peak_mb": (peak - base) / 1e6,
        "retained_mb": (cur - base) / 1e6,
        "retained_kb_per_task": (cur - base) / 1e3 / n,
    }


def placement_grid(
    sites: list[int], jobs: list[int], repeat: int, console: Console
) -> list[dict[str, Any]]:
    rows = []
    for n_sites in sites:
        for n_jobs in jobs:
            lat = placement_latencies(n_sites, n_jobs, repeat)
            rows.append(
                {
                    "sites": n_sites,
                    "jobs_per_site": n_jobs,
                    "median_ms": statistics.median(lat) * 1000,
                    "p95_ms": quantile(lat, 0.95) * 1000,
                    "first_ms": lat[0] * 1000,
                    "decisions": len(lat),
                }
            )
            console.print(
                f"  placement {n_sites:>3} sites x {n_jobs:>6,} jobs: "
                f"median {rows[-1]['median_ms']:.2f} ms, P95 {rows[-1]['p95_ms']:.2f} ms",
                highlight=False,
            )
    return rows


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--groups", type=int, default=500)
    ap.add_argument("--group-size", type=int, default=3)
    ap.add_argument("--trace-tasks", type=int, default=1000)
    ap.add_argument("--sites", default="", help="comma-separated local sites (default: all)")
    ap.add_argument("--placement-sites", default="4,25,100")
    ap.add_argument("--placement-jobs", default="0,1000,10000")
    ap.add_argument("--placement-repeat", type=int, default=20)
    ap.add_argument("--timeout-s", type=float, default=1800.0, help="per phase")
    ap.add_argument("--policy", default=None, help="placement policy (default: the default, auto)")
    ap.add_argument(
        "--no-store",
        action="store_true",
        help="a coordinator without a store (it keeps every task in memory)",
    )
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--json", type=Path, default=None, help="default: results/load-latest.json")
    ap.add_argument(
        "--only",
        choices=("placement",),
        help="run one section alone: placement (section 4, no local federation needed)",
    )
    args = ap.parse_args(argv)
    if args.only == "placement":
        args.tasks = args.groups = args.trace_tasks = 0
    if args.json is None:  # a partial run does not overwrite the full run's results
        args.json = RESULTS / f"load-{args.only + '-' if args.only else ''}latest.json"
    console = Console()
    bars = not args.no_progress
    out: dict[str, Any] = {
        "command": "bench/load.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "started_at": datetime.now(UTC).isoformat(),
        "cpus": os.cpu_count(),
    }
    if args.tasks or args.groups or args.trace_tasks:
        from federation.deploy.local import LocalSites

        local = LocalSites(sites=[s for s in args.sites.split(",") if s] or None)
        local.up()
        policy = {"policy": args.policy} if args.policy else {}
        scratch = Path(tempfile.mkdtemp(prefix="federation-load-"))  # a store of its own
        coord = local.connect(
            telemetry=False,
            probe_timeout_s=120,
            durable=not args.no_store,
            store_path=scratch / "coordinator.db",
            **policy,
        )
        out["store"] = not args.no_store
        out["policy"] = args.policy or "auto"
        names = [s.name for s in local.specs]
        try:
            if args.tasks:
                console.print(f"[bold]{args.tasks:,} tasks[/bold] over {', '.join(names)}")
                out["tasks"] = run_tasks(coord, names, args.tasks, console, bars, args.timeout_s)
                t = out["tasks"]
                console.print(
                    f"  submitted {t['submitted']:,}, completed {t['completed']:,}, failed "
                    f"{t['failed']:,}, unaccounted {t['unaccounted']:,}; "
                    f"{t['throughput_per_s']:.0f} tasks/s end to end",
                    highlight=False,
                )
            if args.groups:
                console.print(f"[bold]{args.groups:,} groups[/bold] of {args.group_size}")
                out["groups"] = run_groups(
                    coord, args.groups, args.group_size, console, bars, args.timeout_s
                )
                g = out["groups"]
                console.print(
                    f"  groups done {g['groups_done']:,}/{g['groups']:,}; children submitted "
                    f"{g['children_submitted']:,}, completed {g['children_completed']:,}, "
                    f"failed {g['children_failed']:,}, unaccounted {g['unaccounted']:,}",
                    highlight=False,
                )
            if args.trace_tasks:
                console.print(f"[bold]tracemalloc[/bold]: {args.trace_tasks:,} tasks")
                out["tracemalloc"] = traced_run(coord, names, args.trace_tasks, args.timeout_s)
        finally:
            coord.close()
            if local.service is not None:
                local.service.close()
            shutil.rmtree(scratch, ignore_errors=True)
    console.print("[bold]placement latency[/bold]")
    out["placement"] = placement_grid(
        _ints(args.placement_sites), _ints(args.placement_jobs), args.placement_repeat, console
    )
    console.print(summary_table(out))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2))
    console.print(f"written to {args.json}")
    lost = out.get("tasks", {}).get("unaccounted", 0) + out.get("groups", {}).get("unaccounted", 0)
    return 1 if lost else 0


def summary_table(out: dict[str, Any]) -> Table:
    table = Table(title="load")
    table.add_column("measure")
    table.add_column("value", justify="right")
    if t := out.get("tasks"):
        w = t["completion_per_s_by_window"]
        table.add_row(
            "tasks: submitted / completed / failed / unaccounted",
            f"{t['submitted']:,} / {t['completed']:,} / {t['failed']:,} / {t['unaccounted']:,}",
        )
        table.add_row("tasks: end-to-end throughput", f"{t['throughput_per_s']:.0f} tasks/s")
        table.add_row("tasks: submit rate", f"{t['submit_per_s']:.0f} tasks/s")
        if w:
            table.add_row(
                f"tasks: completions/s, first vs last {t['window']:,}",
                f"{w[0]:.0f} -> {w[-1]:.0f}",
            )
        verdict = "within" if t["rss_growth_mb"] < RSS_BUDGET_MB else "OVER"
        table.add_row(
            "coordinator RSS",
            f"{t['rss_start_mb']:.0f} -> {t['rss_end_mb']:.0f} MB: +{t['rss_growth_mb']:.0f} MB "
            f"({t['rss_growth_kb_per_task']:.1f} kB/task; {verdict} the {RSS_BUDGET_MB:.0f} MB "
            "budget)",
        )
        if t["rss_mb_by_window"]:
            table.add_row(
                f"RSS after each {t['window']:,} finished (MB)",
                " ".join(f"{r:.0f}" for r in t["rss_mb_by_window"]),
            )
        table.add_row(
            "handles in memory at the end / released",
            f"{t['handles_in_memory_at_end']:,} / {t['handles_released']:,}",
        )
    if g := out.get("groups"):
        table.add_row(
            "groups: done / submitted",
            f"{g['groups_done']:,} / {g['groups']:,} (x{g['group_size']})",
        )
        table.add_row(
            "groups: children completed / failed / unaccounted",
            f"{g['children_completed']:,} / {g['children_failed']:,} / {g['unaccounted']:,}",
        )
        table.add_row("groups: submit_group median", f"{g['submit_group_median_s'] * 1000:.0f} ms")
        table.add_row("groups: children throughput", f"{g['children_per_s']:.1f} tasks/s")
    if m := out.get("tracemalloc"):
        table.add_row(
            f"tracemalloc, {m['tasks']:,} tasks",
            f"peak {m['peak_mb']:.1f} MB, retained {m['retained_kb_per_task']:.1f} kB/task",
        )
    for row in out.get("placement", []):
        table.add_row(
            f"placement {row['sites']} sites x {row['jobs_per_site']:,} jobs",
            f"median {row['median_ms']:.2f} ms, P95 {row['p95_ms']:.2f} ms",
        )
    return table


if __name__ == "__main__":
    raise SystemExit(main())
