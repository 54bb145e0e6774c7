"""Twin fidelity: the snapshot-built twin's predicted wait against the true simulator.

    python bench/twin_fidelity.py                 # default grid, prints a table
    python bench/twin_fidelity.py --seeds 1       # a quick look

Every background job runs exactly to its time limit, so a Slurm-style twin (empty usage
model: jobs run to their limit) sees everything that matters except future arrivals. Each
hour from ``--from-h`` to ``--to-h`` the site is snapshotted and, for one probe shape per
partition, the twin's wait (``TwinPredictor.wait``) is compared with

* ``truth``: ``SimSite.what_if`` on the true simulator (future arrivals included), and
* ``no-arrivals``: the same with jobs that have not arrived yet ignored
  (``future_arrivals=False``): what a perfect snapshot-only predictor could know.

``node-aware`` is the twin as built from the snapshot (running jobs seeded on the nodes the
snapshot names); ``node-blind`` strips ``node_names`` from the snapshot first, which is the
fallback used for probes that do not report node lists.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import zlib
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from federation.core.envelope import Shape  # noqa: E402
from federation.core.snapshot import SiteSnapshot  # noqa: E402
from federation.core.spec import SiteSpec, load_sites  # noqa: E402
from federation.placement.runtime_model import UsageRatioModel  # noqa: E402
from federation.placement.twin import TwinPredictor  # noqa: E402
from federation.sim.load import background_load  # noqa: E402
from federation.sim.queue import SimJob  # noqa: E402
from federation.sim.traces import default_trace_dir, load_swf  # noqa: E402

TRACES = {"KTH-SP2": "KTH-SP2-1996-2.1-cln.swf.gz", "CEA-Curie": "CEA-Curie-2011-2.1-cln.swf.gz"}
UTIL = {"delta": 1.4, "deltaai": 1.2, "anvil": 1.35, "vista": 1.3}
# (site, partition, cpus, mem_gb, gpus, walltime_s): one probe shape per partition
PROBES = (
    ("delta", "cpu", 16, 32, 0, 3 * 3600),
    ("delta", "gpuA100x4", 8, 32, 1, 2 * 3600),
    ("deltaai", "ghx4", 8, 32, 1, 2 * 3600),
)


def node_counts(spec: SiteSpec) -> dict[str, int]:
    return {p.name: max(2, min(12, round(p.nodes_real / 12))) for p in spec.partitions}


def strip_nodes(snap: SiteSnapshot) -> SiteSnapshot:
    jobs = tuple(j.model_copy(update={"node_names": ()}) for j in snap.jobs)
    return snap.model_copy(update={"jobs": jobs})


@dataclass
class Errors:
    errs: list[float]

    def row(self) -> str:
        e = sorted(abs(x) for x in self.errs)
        n = len(e)
        if not n:
            return "| - | - | - | - |"
        w60 = 100.0 * sum(x <= 60 for x in e) / n
        w600 = 100.0 * sum(x <= 600 for x in e) / n
        return f"| {n} | {w60:.0f} | {w600:.0f} | {statistics.median(e):,.0f} |"


def run(trace_names: list[str], seeds: int, from_h: float, to_h: float) -> str:
    tdir = default_trace_dir()
    specs = {s.name: s for s in load_sites(sorted({p[0] for p in PROBES}))}
    # (probe, twin variant, reference) -> errors
    errs: dict[tuple[str, str, str], list[float]] = {}
    for tname in trace_names:
        trace = load_swf(tdir / TRACES[tname])
        for seed in range(seeds):
            for sname, spec in specs.items():
                load = background_load(
                    spec,
                    trace,
                    target_utilization=UTIL[sname],
                    duration_s=(to_h + 24) * 3600,
                    seed=seed * 7919 + zlib.crc32(sname.encode()) % 1000,
                    nodes=node_counts(spec),
                )
                sim = load.site_for(spec)
                sim.submit_many(replace(j, run_s=j.walltime_s) for j in load.jobs)
                probes = [p for p in PROBES if p[0] == sname]
                t = from_h * 3600
                while t <= to_h * 3600:
                    sim.advance(t)
                    snap = sim.snapshot()
                    now: datetime = snap.taken_at
                    variants = {"node-aware": snap, "node-blind": strip_nodes(snap)}
                    # one predictor per variant: twins are cached per (site, snapshot time)
                    preds = {v: TwinPredictor(specs, UsageRatioModel()) for v in variants}
                    for _, part, cpus, mem, gpus, wall in probes:
                        shape = Shape(
                            site=sname, partition=part, nodes=1, cpus=cpus, mem_gb=mem,
                            gpus=gpus, walltime_s=wall,
                        )  # fmt: skip
                        job = SimJob(
                            partition=part, walltime_s=float(wall), run_s=60.0, nodes=1,
                            cpus_per_node=cpus, mem_mb_per_node=mem * 1024, gpus_per_node=gpus,
                        )  # fmt: skip
                        truth = sim.what_if(job)[0] - t
                        known = sim.what_if(job, future_arrivals=False)[0] - t
                        for vname, s in variants.items():
                            w = preds[vname].wait(shape, s, now, 0.5)
                            key = f"{sname}/{part}"
                            errs.setdefault((key, vname, "truth"), []).append(w - truth)
                            errs.setdefault((key, vname, "no-arrivals"), []).append(w - known)
                    t += 3600.0
    lines = [
        f"# Twin fidelity (Slurm-style twin, jobs run to their limit; traces "
        f"{', '.join(trace_names)}; seeds {seeds}; hourly probes {from_h:g}-{to_h:g} h)",
        "",
        "| partition | twin | reference | probes | within 60 s % | within 10 min % "
        "| median abs error s |",
        "|---|---|---|---|---|---|---|",
    ]
    for (key, vname, ref), e in sorted(errs.items()):
        lines.append(f"| {key} | {vname} | {ref} " + Errors(e).row())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=",".join(TRACES))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--from-h", type=float, default=24.0)
    ap.add_argument("--to-h", type=float, default=48.0)
    args = ap.parse_args(argv)
    print(run(args.traces.split(","), args.seeds, args.from_h, args.to_h))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
