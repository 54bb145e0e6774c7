"""Replay benchmark: placement policies on a simulated four-site federation under real load.

    python bench/replay.py                                   # KTH-SP2, CEA-Curie; light, busy
    python bench/replay.py --traces all --seeds 6 --jobs 2   # every trace (docs/placement.md)
    python bench/replay.py --traces my-site.swf.gz --regimes busy  # your own site's log
    python bench/replay.py --seeds 1 --hours 6               # a quick look

Four sites shaped like the paper's (Delta, DeltaAI, Anvil, Vista: partitions, GPU types and
per-node counts from federation/sites_data/*/site.yaml, node counts scaled down), each a
Slurm-like queue in virtual time (priority FIFO with EASY backfill, federation.sim.queue)
loaded with jobs replayed from a real log, scaled to each site's size and a target
utilization. ``--traces`` takes names (KTH-SP2, CEA-Curie, ALCF-Theta, Alibaba-GPU, found in
../shared/traces or $FEDERATION_TRACES), paths to Standard Workload Format files (.swf,
.swf.gz, as the Parallel Workloads Archive publishes them) or Alibaba pod lists, or ``all``;
other formats plug in through ``federation.sim.trace_readers``. KTH-SP2 and CEA-Curie are the
traces the placement was developed on; every other trace is held out, and no parameter is set
per trace.

Every 30 virtual minutes a round of three probe tasks (CPU preparation, single-GPU inference,
DDP training) is placed by every policy through the real placement code, each policy in its
own world (``bench/replay_cell.py``, ``federation.sim.world``): its copies are jobs in the
queues it placed them in, seen by backfill and by every other job, until they start or are
cancelled. The coordinator sees a copy's start at its next look (``--seen-every-s``, a real
site's ``job_check_s``) and cancels the others then; a copy that started meanwhile ran as a
duplicate and is charged. A world without tasks gives the background jobs' own waits, so the
extra wait the tasks and copies cause them is reported (bg delay s/task). Hedging policies buy
copies from a budget (``--budget``, 1.2 copies per task).

The oracle plays every feasible (site, partition, shape) forward from the policy's own queue
state (``SimSite.what_if``). Predictors see what a real coordinator sees: snapshots up to a
probe interval old, requested walltimes of background jobs, how long *finished* jobs ran
(sacct) and how long the running ones have run so far (squeue), the runtimes of earlier probe
tasks once they have ended, and a datasheet prior of GPU speed; not true runtimes, runtime
noise, or start delays. The report (``bench/replay_report.py``) judges the ``--judge`` policy
per seed against best-feasible and writes markdown and JSON (``bench/results/replay.*``).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.replay_cell import Cell, run_cell  # noqa: E402
from bench.replay_report import render, render_compact, write  # noqa: E402
from bench.replay_setup import (  # noqa: E402
    POLICIES,
    REGIMES,
    SITES,
    WORKLOADS,
    CellOptions,
    build_sites,
    node_counts,
    true_runtime,
)
from federation.placement.policies import Watch  # noqa: E402
from federation.sim.trace_model import TraceFormatError, TraceJob  # noqa: E402
from federation.sim.trace_readers import all_shared_traces, load_trace  # noqa: E402

TRACES = {"KTH-SP2": "KTH-SP2-1996-2.1-cln.swf.gz", "CEA-Curie": "CEA-Curie-2011-2.1-cln.swf.gz"}
"""The traces the placement was developed on (the default grid); every other shared trace
(``--traces all``) is held out."""

__all__ = [
    "POLICIES",
    "REGIMES",
    "SITES",
    "TRACES",
    "WORKLOADS",
    "build_sites",
    "main",
    "node_counts",
    "true_runtime",
]


@lru_cache(maxsize=4)
def _trace(spec: str, trace_dir: str | None) -> tuple[str, list[TraceJob]]:
    name, trace = load_trace(spec, Path(trace_dir) if trace_dir else None)
    return name, list(trace.jobs)


def _cell(job: tuple[str, str | None, str, int, CellOptions, str]) -> Cell:
    spec, tdir, regime, seed, opts, judged = job
    name, jobs = _trace(spec, tdir)
    oracle_of = judged if judged in opts.policies else None
    return run_cell(name, jobs, regime, seed, opts, oracle_of)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--traces",
        default=",".join(TRACES),
        help="comma list of trace names (KTH-SP2, CEA-Curie, ALCF-Theta, Alibaba-GPU), paths "
        "to .swf/.swf.gz/Alibaba pod-list files, or 'all' (every trace in the trace folder)",
    )
    ap.add_argument("--trace-dir", type=Path, default=None, help="default: ../shared/traces")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first..first+seeds-1")
    ap.add_argument("--regimes", default="light,busy", help=f"comma list of {sorted(REGIMES)}")
    ap.add_argument("--policies", default=",".join(POLICIES), help="comma list of policies")
    ap.add_argument("--judge", default="auto", help="the policy judged against targets")
    ap.add_argument("--hours", type=float, default=24.0, help="virtual hours of probe rounds")
    ap.add_argument("--warmup-h", type=float, default=24.0)
    ap.add_argument("--probe-interval-s", type=float, default=120.0)
    ap.add_argument(
        "--seen-every-s",
        type=float,
        default=60.0,
        help="how often the coordinator looks for a copy's start (a site's job_check_s); "
        "copies that start before the look beside the winner run as duplicates until then",
    )
    ap.add_argument(
        "--budget",
        type=float,
        default=1.2,
        help="hedging policies: copies per task at most on average (0: no budget)",
    )
    ap.add_argument("--max-copies", type=int, default=2, help="twin-hedge: copies at most")
    ap.add_argument("--twin-samples", type=int, default=16, help="sampled twins (hedging)")
    ap.add_argument(
        "--twin-single-samples", type=int, default=0, help="twin: sampled twins (0: quantile)"
    )
    ap.add_argument("--watch-max-copies", type=int, default=Watch.max_copies)
    ap.add_argument("--watch-every-s", type=float, default=Watch.every_s)
    ap.add_argument("--watch-overdue-s", type=float, default=Watch.overdue_s)
    ap.add_argument("--watch-margin-s", type=float, default=Watch.margin_s)
    ap.add_argument("--runtime-prior", choices=("datasheet", "none"), default="datasheet")
    ap.add_argument("--runtime-optimism", type=float, default=0.05)
    ap.add_argument(
        "--own-jobs",
        choices=("on", "off"),
        default="on",
        help="decisions see the copies shipped since their snapshot (off: as before)",
    )
    ap.add_argument(
        "--late-board",
        choices=("on", "off"),
        default="on",
        help="twin policies charge a request the lateness of their own queued copies",
    )
    ap.add_argument("--jobs", type=int, default=1, help="cells run in parallel processes")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "replay.md")
    ap.add_argument(
        "--also-seeds",
        type=int,
        default=0,
        help="also report the first N seeds alone, from the same cells (to <out>-seeds-A-B.md)",
    )
    args = ap.parse_args(argv)
    tdir = str(args.trace_dir) if args.trace_dir else None
    specs = args.traces.split(",")
    if specs == ["all"]:
        specs = all_shared_traces(args.trace_dir)
        if not specs:
            print("no traces found: pass --trace-dir or set FEDERATION_TRACES", file=sys.stderr)
            return 2
    bad_regimes = [r for r in args.regimes.split(",") if r not in REGIMES]
    if bad_regimes:
        print(f"unknown regime(s) {bad_regimes}: use {sorted(REGIMES)}", file=sys.stderr)
        return 2
    for spec in specs:  # fail before any cell runs
        try:
            _trace(spec, tdir)
        except TraceFormatError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    opts = CellOptions(
        hours=args.hours,
        warmup_h=args.warmup_h,
        probe_interval_s=args.probe_interval_s,
        seen_every_s=args.seen_every_s,
        policies=tuple(args.policies.split(",")),
        max_copies=args.max_copies,
        twin_samples=args.twin_samples,
        single_samples=args.twin_single_samples,
        watch=Watch(
            every_s=args.watch_every_s,
            overdue_s=args.watch_overdue_s,
            margin_s=args.watch_margin_s,
            max_copies=args.watch_max_copies,
        ),
        budget=args.budget or None,
        runtime_prior=args.runtime_prior == "datasheet",
        runtime_optimism=args.runtime_optimism,
        own_jobs=args.own_jobs == "on",
        late_board=args.late_board == "on",
    )
    jobs = [
        (spec, tdir, regime, seed, opts, args.judge)
        for spec in specs
        for regime in args.regimes.split(",")
        for seed in range(args.first_seed, args.first_seed + args.seeds)
    ]
    t0 = time.monotonic()
    cells: list[Cell] = []
    with ProcessPoolExecutor(max_workers=args.jobs) if args.jobs > 1 else _Inline() as pool:
        for i, cell in enumerate(pool.map(_cell, jobs), 1):
            cells.append(cell)
            print(
                f"  [{i}/{len(jobs)}] {cell.trace} {cell.regime} seed {cell.seed}: "
                f"{len(cell.outcomes['oracle'])} tasks, util {cell.utilization}, "
                f"{cell.seconds:.1f} s",
                flush=True,
            )
    header = (
        f"traces {','.join(sorted({c.trace for c in cells}))}; seeds {args.first_seed}.."
        f"{args.first_seed + args.seeds - 1}; {args.hours:g} h of rounds after "
        f"{args.warmup_h:g} h warm-up; probe interval {args.probe_interval_s:g} s; starts seen "
        f"every {args.seen_every_s:g} s; copies occupy queues; hedge budget "
        f"{args.budget or 'none'} copies/task; twin samples {args.twin_single_samples} (twin) "
        f"/ {args.twin_samples} (hedging); watch every {args.watch_every_s:g} s, overdue "
        f"{args.watch_overdue_s:g} s, margin {args.watch_margin_s:g} s, max copies "
        f"{args.watch_max_copies}; runtime prior {args.runtime_prior}; own jobs {args.own_jobs}; "
        f"late board {args.late_board}"
    )
    elapsed = time.monotonic() - t0
    _report(cells, elapsed, header, args.judge, opts.budget, args.out)
    if 0 < args.also_seeds < args.seeds:
        last = args.first_seed + args.also_seeds - 1
        some = [c for c in cells if c.seed <= last]
        sub = header.replace(
            f"seeds {args.first_seed}..{args.first_seed + args.seeds - 1}",
            f"seeds {args.first_seed}..{last} (of the run over {args.seeds} seeds)",
        )
        out = args.out.with_name(f"{args.out.stem}-seeds-{args.first_seed}-{last}.md")
        _report(some, elapsed, sub, args.judge, opts.budget, out)
    return 0


def _report(
    cells: list[Cell], elapsed: float, header: str, judge: str, budget: float | None, out: Path
) -> None:
    text, data = render(cells, elapsed, header, judge, budget)
    text += "\n\n## Summary (the table in docs/placement.md)\n\n" + render_compact(data)
    print(text)
    write(out, text, data)


class _Inline:
    """``map`` in this process (``--jobs 1``), with the executor's context manager."""

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def map(self, fn, items):  # type: ignore[no-untyped-def]
        return map(fn, items)


if __name__ == "__main__":
    raise SystemExit(main())
