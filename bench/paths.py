"""The two paths to the sites, side by side: a probe round and a tiny task through each.

    .venv/bin/python bench/paths.py               # 5 rounds, sites local and vista
    .venv/bin/python bench/paths.py --rounds 10 --site local

``embedded``: the offline service's shortcuts (it tells the coordinator when a job starts
and cancels on the endpoint). ``cloud``: exactly what a deployment on real endpoints has,
through the strict stand-in of the Globus Compute service (CloudSite: endpoint status,
Python and payload checks; starts read from ``squeue`` of the task's tagged job). Both
reach the same endpoint daemons and Slurm clusters, in alternating order each round (ABBA),
so the ratio is measured under the same load. Per round and path:

1. probe round: ``inspect_federation`` over the sites (a probe function on each endpoint);
2. tiny task: a shell task ``true`` on one site, submit to result (a Slurm job each time);
3. start seen: the task's ``task.started`` event minus its Slurm job's start (``sacct``),
   i.e. how late the coordinator learns a start on each path.

Needs the local federation (brought up if it is not). Writes
``bench/results/paths-latest.json`` and prints a table with the cloud/embedded ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from federation.core.envelope import ResourceEnvelope  # noqa: E402
from federation.core.tasks import ShellTask  # noqa: E402
from federation.deploy.local import PATHS, LocalSites  # noqa: E402
from federation.runtime.coordinator import Coordinator  # noqa: E402

RESULTS = ROOT / "bench" / "results"
MEASURES = ("probe_round_s", "tiny_task_s", "start_seen_late_s")


def _job_start(local: LocalSites, site: str, job_id: str) -> float | None:
    """The Slurm job's start time (epoch seconds) from accounting, once it is recorded."""
    for _ in range(40):
        out = local.slurm.run(site, ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "Start"])
        text = out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""
        if text and text not in ("Unknown", "None"):
            return datetime.fromisoformat(text).timestamp()
        time.sleep(0.25)
    return None


def one_round(coord: Coordinator, local: LocalSites, site: str) -> dict[str, float | None]:
    t0 = time.perf_counter()
    snap = coord.inspect_federation()
    probe_s = time.perf_counter() - t0
    bad = [s.site for s in snap.sites if not s.health.reachable]
    if bad:
        raise RuntimeError(f"unreachable on {local.path}: {bad}")
    env = ResourceEnvelope(sites=(site,), cpus_min=1, mem_gb_min=1, walltime_s=120)
    t1 = time.perf_counter()
    h = coord.submit_task(ShellTask(command="true"), env)
    r = coord.get_result(h, timeout_s=300)
    task_s = time.perf_counter() - t1
    if r.status != "completed":
        raise RuntimeError(f"tiny task failed on {local.path}: {r.error}")
    late: float | None = None
    for _ in range(60):  # the cloud path may learn the job id just after the end
        r = coord.get_result(h)
        if r.slurm_job_id:
            break
        time.sleep(0.25)
    started = next((e for e in coord.history(h.id) if e.kind == "task.started"), None)
    if r.slurm_job_id and started is not None:
        job_start = _job_start(local, site, r.slurm_job_id)
        if job_start is not None:
            late = started.at.timestamp() - job_start
    return {"probe_round_s": probe_s, "tiny_task_s": task_s, "start_seen_late_s": late}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--site", action="append", help="sites to include (default local, vista)")
    args = p.parse_args(argv)
    sites = args.site or ["local", "vista"]
    console = Console()
    paths = {path: LocalSites(sites=sites, path=path) for path in PATHS}
    next(iter(paths.values())).up()
    coords = {path: ls.connect(telemetry=False, probe_timeout_s=120) for path, ls in paths.items()}
    samples: dict[str, dict[str, list[float]]] = {p: {m: [] for m in MEASURES} for p in PATHS}
    try:
        for path, coord in coords.items():  # warm up: engines started, functions registered
            one_round(coord, paths[path], sites[0])
        for i in range(args.rounds):
            order = list(PATHS) if i % 2 == 0 else list(reversed(PATHS))
            for path in order:
                got = one_round(coords[path], paths[path], sites[i % len(sites)])
                for m, v in got.items():
                    if v is not None:
                        samples[path][m].append(v)
                console.print(
                    f"round {i + 1} {path:<8} "
                    + "  ".join(
                        f"{m}={v:.2f}" if v is not None else f"{m}=n/a" for m, v in got.items()
                    )
                )
    finally:
        for coord in coords.values():
            coord.close()
        for ls in paths.values():
            ls.close()
    med: dict[str, dict[str, float | None]] = {
        p: {m: statistics.median(v) if v else None for m, v in ms.items()}
        for p, ms in samples.items()
    }
    table = Table(title=f"Two paths to the sites ({args.rounds} rounds, ABBA, medians)")
    table.add_column("measure")
    for path in PATHS:
        table.add_column(path, justify="right")
    table.add_column("cloud / embedded", justify="right")
    for m in MEASURES:
        a, b = med["embedded"][m], med["cloud"][m]
        ratio = f"{b / a:.2f}x" if a and b else "n/a"
        table.add_row(m, *(f"{x:.2f} s" if x is not None else "n/a" for x in (a, b)), ratio)
    console.print(table)
    RESULTS.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "when": datetime.now().isoformat(timespec="seconds"),
        "rounds": args.rounds,
        "sites": sites,
        "medians": med,
        "samples": samples,
    }
    (RESULTS / "paths-latest.json").write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
