"""How long the central parsers take on a 50,000-job queue (target: 0.5 s).

    .venv/bin/python bench/bench_parsing.py [--jobs 50000] [--repeat 5]

Prints the best and median wall time of: splitting and parsing the probe's ``squeue`` text
into JobRecords, and building the whole SiteSnapshot (nodes, queue, start estimates,
per-partition aggregation) from a synthetic probe result in the probe's exact format.
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    probe = synthetic_probe(args.jobs)
    text = probe["squeue"]["stdout"]
    print(f"{args.jobs} jobs, {len(text) / 1e6:.1f} MB of squeue output, best of {args.repeat}")
    rows = [
        ("parse_squeue", lambda: parse_squeue(text)),
        ("build_site_snapshot", lambda: build_site_snapshot("bench", probe)),
    ]
    for label, fn in rows:
        times = measure(fn, args.repeat)
        best, median = min(times), statistics.median(times)
        verdict = "ok" if best <= TARGET_S else "SLOWER than target"
        print(
            f"  {label:20s} best {best:.3f} s  median {median:.3f} s  "
            f"({best / args.jobs * 1e6:.1f} us/job)  target {TARGET_S:.1f} s: {verdict}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
