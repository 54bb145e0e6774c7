"""What a decision of the default placement (``auto``) costs, beside ``earliest-start``.

    .venv/bin/python bench/auto_decisions.py
    .venv/bin/python bench/auto_decisions.py --bursts 30,100,200 --rounds 3

``bench/perf.py`` times the snapshot policy; this times ``auto`` itself, as a coordinator
runs it (:class:`~federation.placement.learned.LearnedPlacement` after one look at the
snapshot, its twins per site):

* **first decision on a new snapshot** (every site's twin built), at 4 sites x 1,000 queued
  jobs and at 100 sites x 10,000 (targets: 50 ms and 500 ms);
* ``auto`` as a new deployment runs it (no finished job seen: one twin per partition) and
  ``auto (learned)`` after 200 finished jobs per site (two quantile twins per partition);
  both hedge, as a coordinator whose sites can withdraw a copy does;
* **a burst placed from one snapshot**: each decision sees the ones before it as pending
  jobs of ours (:func:`~federation.placement.overlay.with_own_jobs`, as
  ``Coordinator.submit_task`` does), alternating a CPU and a GPU envelope; decisions per
  second after the first (target: at least 100).

Each figure is measured for both policies in the same run, rounds alternating, and the
median round is reported with the ratio. Writes ``bench/results/auto-decisions-latest.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.perf import CPU_ENVELOPE, GPU_ENVELOPE, synthetic_federation  # noqa: E402
from federation.placement.decide import place  # noqa: E402
from federation.placement.learned import LearnedPlacement  # noqa: E402
from federation.placement.overlay import with_own_jobs  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def _policy(name: str, specs: Any, snap: Any) -> Any:
    if name.startswith("auto"):
        learned = LearnedPlacement(specs, hedge=True)  # the default where copies can go
        learned.look(snap)
        if name == "auto (learned)":  # 200 finished jobs seen per site: two quantile twins
            rng = random.Random(1)
            for site in snap.sites:
                for j in site.jobs[:200]:
                    limit = float(j.time_limit_s or 3600)
                    learned.usage.observe(site.site, limit, limit * rng.random(), j.partition)
        return learned.policy
    return name


def burst(name: str, n_sites: int, jobs: int, n: int) -> dict[str, float]:
    """``n`` decisions from one fresh snapshot: the first one's seconds, and the rate of
    the others (decisions per second)."""
    specs, snap, now = synthetic_federation(n_sites, jobs)
    policy = _policy(name, specs, snap)
    shipped: list[Any] = []
    times: list[float] = []
    for i in range(n):
        env = CPU_ENVELOPE if i % 2 == 0 else GPU_ENVELOPE
        at = now + timedelta(milliseconds=10 * (i + 1))
        seen = with_own_jobs(snap, shipped)
        t0 = time.perf_counter()
        d = place(env, specs, seen, policy=policy, now=at)
        times.append(time.perf_counter() - t0)
        shipped += [(c.shape, at) for c in (d.chosen, *d.hedges)]  # as a coordinator notes
    rest = times[1:]
    return {
        "first_s": times[0],
        "rate_per_s": len(rest) / sum(rest) if rest else 0.0,
        "median_s": statistics.median(rest) if rest else times[0],
        "p95_s": sorted(rest)[int(0.95 * (len(rest) - 1))] if rest else times[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bursts", default="30,100", help="burst sizes at 4 sites x 1,000 jobs")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    cases = [(4, 1_000, int(n)) for n in args.bursts.split(",")] + [(100, 10_000, 3)]
    out: list[dict[str, Any]] = []
    for n_sites, jobs, n in cases:
        runs: dict[str, list[dict[str, float]]] = {
            "auto": [],
            "auto (learned)": [],
            "earliest-start": [],
        }
        for _ in range(args.rounds):
            for name in runs:
                runs[name].append(burst(name, n_sites, jobs, n))
        row: dict[str, Any] = {"sites": n_sites, "jobs_per_site": jobs, "burst": n}
        for name, rs in runs.items():
            for k in ("first_s", "rate_per_s", "median_s", "p95_s"):
                row[f"{name}:{k}"] = statistics.median(r[k] for r in rs)
        out.append(row)
    table = Table(title="auto's decisions beside earliest-start's (median of rounds)")
    for col in ("sites x jobs", "burst", "policy", "first decision", "then", "median", "p95"):
        table.add_column(col)
    for row in out:
        for name in runs:
            table.add_row(
                f"{row['sites']} x {row['jobs_per_site']:,}",
                str(row["burst"]),
                name,
                f"{1000 * row[f'{name}:first_s']:.0f} ms",
                f"{row[f'{name}:rate_per_s']:.0f}/s",
                f"{1000 * row[f'{name}:median_s']:.1f} ms",
                f"{1000 * row[f'{name}:p95_s']:.1f} ms",
            )
    Console().print(table)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "auto-decisions-latest.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
