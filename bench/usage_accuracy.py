"""How well the twin predicts waits with each usage model, on the replay's own federation.

    python bench/usage_accuracy.py                          # CEA-Curie busy-window, KTH-SP2 busy
    python bench/usage_accuracy.py --cells KTH-SP2:busy --seeds 2

The background load of ``bench/replay.py`` (same sites, traces, regimes and seeds) runs in
virtual time; every 600 s the usage model learns what ``sacct`` adds, and every 30 minutes
of the measured day each site is probed. For a 1-, 2- and 4-GPU request (a CPU request on
CPU partitions) at every partition, the twin's median wait (16 sampled twins, or with
``--samples 0`` the quantile twin of ``twin``) is compared with the true start
(``SimSite.what_if``: later arrivals and true run times included). Usage models:

* ``site``: finished jobs only, pooled per site (the model before partitions and censoring);
* ``partition``: finished jobs only, per (site, partition) once a partition has 30;
* ``censored``: per site, with the jobs each probe saw running as right-censored
  observations (Kaplan-Meier, :meth:`UsageRatioModel.look`);
* ``both``: per partition and censored (the default).

Printed per cell and model: the share of predictions within 10 minutes and 1 hour of the
truth, the median of log(true / predicted) (0: unbiased; > 0: the twin is optimistic), the
mean absolute log error, and the share of predictions more than 10 minutes too early.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import replay  # noqa: E402
from federation.core.envelope import Shape  # noqa: E402
from federation.placement.runtime_model import UsageRatioModel  # noqa: E402
from federation.placement.twin import TwinPredictor  # noqa: E402
from federation.sim.queue import DEFAULT_EPOCH, SimJob  # noqa: E402
from federation.sim.traces import default_trace_dir, load_swf  # noqa: E402

MODELS = {  # name: (per partition, censored)
    "site": (False, False),
    "partition": (True, False),
    "censored": (False, True),
    "both": (True, True),
}


def measure(trace_name: str, regime: str, seed: int, samples: int = 16) -> dict[str, np.ndarray]:
    """(true wait, predicted wait) pairs per usage model for one cell."""
    trace = load_swf(default_trace_dir() / replay.TRACES[trace_name])
    specs, sims = replay.build_sites(trace, regime, seed, 24.0, 24.0, np.random.default_rng(seed))
    usages = {
        m: UsageRatioModel(min_partition_samples=30 if part else 10**9)
        for m, (part, _) in MODELS.items()
    }
    preds = {m: TwinPredictor(specs, u, samples=samples) for m, u in usages.items()}
    pairs: dict[str, list[tuple[float, float]]] = {m: [] for m in MODELS}
    last = 0.0
    start, end = 24 * 3600.0, 48 * 3600.0
    for t in np.arange(600.0, end, 600.0):
        for name, sim in sims.items():
            sim.advance(float(t))
            for st in sim.finished_since(last):
                if st.start_s is None or st.end_s is None or st.limit_end_s is None:
                    continue
                for u in usages.values():
                    u.observe(
                        name, st.limit_end_s - st.start_s, st.end_s - st.start_s, st.partition
                    )
        last = float(t)
        if t < start or int(t) % 1800:
            continue
        now = DEFAULT_EPOCH + timedelta(seconds=float(t))
        for name, sim in sims.items():
            snap = sim.snapshot()
            for m, (_, censored) in MODELS.items():
                if censored:
                    usages[m].look(snap)
            for p in specs[name].partitions:
                part = next(ps for ps in snap.partitions if ps.partition == p.name)
                for gpus in (1, 2, 4) if p.gpus_per_node else (0,):
                    if gpus > p.gpus_per_node:
                        continue
                    cpus, wall = (8 if gpus else 32), int(min(3 * 3600, p.max_walltime_s))
                    shape = Shape(
                        site=name,
                        partition=p.name,
                        nodes=1,
                        cpus=cpus,
                        mem_gb=32,
                        gpus=gpus,
                        walltime_s=wall,
                    )
                    probe = SimJob(
                        partition=p.name,
                        walltime_s=wall,
                        run_s=wall / 2,
                        cpus_per_node=cpus,
                        mem_mb_per_node=32 * 1024,
                        gpus_per_node=gpus,
                    )
                    ((true_start, _),) = sim.what_if_many([probe])
                    for m, pred in preds.items():
                        mid = pred(shape, part, snap, now)[0]
                        pairs[m].append((true_start - float(t), mid))
    return {m: np.array(v) for m, v in pairs.items()}


def summary(a: np.ndarray) -> dict[str, float]:
    true, pred = a[:, 0], a[:, 1]
    log_ratio = np.log((true + 60.0) / (pred + 60.0))
    return {
        "within 10 min %": 100 * float(np.mean(np.abs(true - pred) <= 600)),
        "within 1 h %": 100 * float(np.mean(np.abs(true - pred) <= 3600)),
        "median log(true/pred)": float(np.median(log_ratio)),
        "mean |log|": float(np.mean(np.abs(log_ratio))),
        "too early %": 100 * float(np.mean(true > pred + 600)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cells", default="CEA-Curie:busy-window,KTH-SP2:busy", help="comma list of trace:regime"
    )
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument(
        "--samples",
        type=int,
        default=16,
        help="sampled twins (16: twin-hedge's and twin-watch's; 0: the quantile twin of twin)",
    )
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    print(
        "| cell | usage model | within 10 min % | within 1 h % | median log(true/pred) "
        "| mean abs log | too early % |"
    )
    print("|---|---|---|---|---|---|---|")
    for cell in args.cells.split(","):
        trace_name, _, regime = cell.partition(":")
        if trace_name not in replay.TRACES or regime not in replay.REGIMES:
            ap.error(
                f"unknown cell {cell!r}: traces {sorted(replay.TRACES)}, "
                f"regimes {sorted(replay.REGIMES)}"
            )
        got: dict[str, list[np.ndarray]] = {m: [] for m in MODELS}
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for m, a in measure(trace_name, regime, seed, args.samples).items():
                got[m].append(a)
        for m in MODELS:
            s = summary(np.concatenate(got[m]))
            print(
                f"| {cell} | {m} | {s['within 10 min %']:.1f} | {s['within 1 h %']:.1f} | "
                f"{s['median log(true/pred)']:+.2f} | {s['mean |log|']:.2f} | "
                f"{s['too early %']:.0f} |"
            )
    last = args.first_seed + args.seeds - 1
    print(
        f"\n({time.monotonic() - t0:.0f} s, seeds {args.first_seed}..{last}, "
        f"{args.samples} samples)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
