"""How long the central parsers take on a 50,000-job queue (target: 0.5 s).

    .venv/bin/python bench/bench_parsing.py [--jobs 50000] [--repeat 5]

Prints the best and median wall time of: splitting and parsing the probe's ``squeue`` text
into JobRecords, and building the whole SiteSnapshot (nodes, queue, start estimates,
per-partition aggregation) from a synthetic probe result in the probe's exact format.
:func:`parse_times` is the measurement itself; ``bench/perf.py`` reports it too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

from federation.parsing.snapshot_builder import build_site_snapshot
from federation.parsing.squeue import parse_squeue
from federation.parsing.synthetic import synthetic_probe

TARGET_S = 0.5


def measure(fn: Callable[[], object], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def parse_times(n_jobs: int = 50_000, repeat: int = 5) -> dict[str, list[float]]:
    """Wall times (s) of ``parse_squeue`` and ``build_site_snapshot`` on ``n_jobs`` jobs.

    Also checks the parsers saw every job, so a fast wrong answer cannot pass as a result.
    """
    probe = synthetic_probe(n_jobs)
    text = probe["squeue"]["stdout"]
    jobs = parse_squeue(text)
    if len(jobs) != n_jobs:
        raise AssertionError(f"parse_squeue returned {len(jobs)} jobs, expected {n_jobs}")
    snap = build_site_snapshot("bench", probe)
    if len(snap.jobs) != n_jobs:
        raise AssertionError(f"snapshot holds {len(snap.jobs)} jobs, expected {n_jobs}")
    return {
        "parse_squeue": measure(lambda: parse_squeue(text), repeat),
        "build_site_snapshot": measure(lambda: build_site_snapshot("bench", probe), repeat),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    size_mb = len(synthetic_probe(args.jobs)["squeue"]["stdout"]) / 1e6
    print(f"{args.jobs} jobs, {size_mb:.1f} MB of squeue output, best of {args.repeat}")
    for label, times in parse_times(args.jobs, args.repeat).items():
        best, median = min(times), statistics.median(times)
        verdict = "ok" if best <= TARGET_S else "SLOWER than target"
        print(
            f"  {label:20s} best {best:.3f} s  median {median:.3f} s  "
            f"({best / args.jobs * 1e6:.1f} us/job)  target {TARGET_S:.1f} s: {verdict}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
