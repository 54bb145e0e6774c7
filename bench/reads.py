"""Result reads of finished tasks answer from what is known; accounting comes per site per look.

    .venv/bin/python bench/reads.py                  # 30 tiny tasks on local and vista
    .venv/bin/python bench/reads.py --tasks 60 --site local --site vista --site delta

On a durable coordinator (``local.connect(durable=True)``, a fresh store), it runs
``--tasks`` tiny tasks (``functions.workloads.square``) spread over the sites, waits for
every one to finish, then reads each result once with ``get_result`` (timed, one read per
task) before any accounting has arrived: a read ships nothing, so it costs what reading the
handle and its events costs. It then waits for every task's ``task.accounted`` event
(the accountant's looks: one ``sacct`` request per site per look, in the background) and
counts the accounting requests per site. Before the accountant, each such read shipped a
``sacct`` function to the task's site under the SDK's request limit: ~4.2 s per read.

Needs the local federation (brought up if it is not). Prints P50/P95 of the reads, their
total, the requests per site and how long the accounting took; writes
``bench/results/reads-latest.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from federation.core.envelope import ResourceEnvelope  # noqa: E402
from federation.core.tasks import PythonTask  # noqa: E402
from federation.deploy.local import LocalSites  # noqa: E402
from functions.workloads import square  # noqa: E402

RESULTS = ROOT / "bench" / "results"
TOTAL_TARGET_S = 3.0
P95_TARGET_S = 0.020


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=30)
    p.add_argument("--site", action="append", help="sites to use (default local, vista)")
    p.add_argument("--accounting-timeout", type=float, default=300.0)
    args = p.parse_args(argv)
    sites = args.site or ["local", "vista"]
    console = Console()
    local = LocalSites(sites=sites)
    local.up()
    with tempfile.TemporaryDirectory(prefix="bench-reads-") as tmp:
        coord = local.connect(
            durable=True,
            store_path=Path(tmp) / "coordinator.db",
            telemetry=False,
            probe_timeout_s=120,
        )
        try:
            doc = _run(console, coord, sites, args.tasks, args.accounting_timeout)
        finally:
            coord.close()
            local.close()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "reads-latest.json").write_text(json.dumps(doc, indent=2))
    ok = doc["reads_total_s"] < TOTAL_TARGET_S and doc["read_p95_s"] < P95_TARGET_S
    return 0 if ok and doc["accounted"] == args.tasks else 1


def _run(
    console: Console, coord: Any, sites: list[str], n: int, timeout_s: float
) -> dict[str, Any]:
    envs = {
        s: ResourceEnvelope(sites=(s,), cpus_min=1, mem_gb_min=1, walltime_s=300) for s in sites
    }
    t0 = time.monotonic()
    handles = [
        coord.submit_task(PythonTask(square, (i,)), envs[sites[i % len(sites)]]) for i in range(n)
    ]
    failed = [h.id for h in handles if coord.get_result(h, timeout_s=600).status != "completed"]
    ran_s = time.monotonic() - t0
    console.print(f"{n} tasks on {sites} finished in {ran_s:.1f} s ({len(failed)} failed)")
    before = sum(1 for h in handles if h.accounting is not None)
    reads = []
    for h in handles:
        r0 = time.perf_counter()
        coord.get_result(h)
        reads.append(time.perf_counter() - r0)
    a0 = time.monotonic()
    accounted = 0
    for h in handles:
        left = max(0.0, timeout_s - (time.monotonic() - a0))
        acct = coord.accountant.wait(h, timeout_s=left)
        accounted += acct is not None and acct.complete
    accounting_s = time.monotonic() - a0
    looks = list(coord.accountant.looks)
    per_site = {s: coord.accountant.requests.get(s, 0) for s in sites}
    p50 = statistics.median(reads)
    p95 = statistics.quantiles(reads, n=20)[-1]
    table = Table(title=f"{n} result reads of finished tasks (durable coordinator)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("target", justify="right")
    table.add_row("read P50", f"{p50 * 1000:.2f} ms", "")
    table.add_row("read P95", f"{p95 * 1000:.2f} ms", f"< {P95_TARGET_S * 1000:.0f} ms")
    table.add_row(f"{n} reads together", f"{sum(reads):.3f} s", f"< {TOTAL_TARGET_S:.0f} s")
    table.add_row("accounting present at the read", f"{before} of {n}", "")
    table.add_row("accounted (complete) after", f"{accounted} of {n}, {accounting_s:.1f} s", "")
    for s in sites:
        asked = [len(lk.task_ids) for lk in looks if lk.site == s]
        table.add_row(f"accounting requests, {s}", f"{per_site[s]} (tasks per look {asked})", "")
    console.print(table)
    return {
        "when": datetime.now().isoformat(timespec="seconds"),
        "tasks": n,
        "sites": sites,
        "failed": failed,
        "tasks_ran_s": round(ran_s, 2),
        "read_p50_s": p50,
        "read_p95_s": p95,
        "reads_total_s": sum(reads),
        "reads_s": reads,
        "accounting_present_at_read": before,
        "accounted": accounted,
        "accounting_s": round(accounting_s, 2),
        "accounting_requests_per_site": per_site,
        "looks": [
            {
                "site": lk.site,
                "at": lk.at.isoformat(),
                "tasks": len(lk.task_ids),
                "jobs": list(lk.job_ids),
                "seconds": lk.seconds,
                "error": lk.error,
            }
            for lk in looks
        ],
        "look_s": coord.accountant.look_s,
        "settle_s": coord.accountant.settle_s,
    }


if __name__ == "__main__":
    raise SystemExit(main())
