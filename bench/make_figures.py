"""Run a few tasks on the local federation and write the docs' figures (docs/img).

    .venv/bin/python bench/make_figures.py [--out docs/img] [--no-load]

Brings the local sites up (idempotent), fills ``local``'s CPU partition and Delta's A100
partition (with one job waiting) using short background jobs (1-minute time limits, 30-40 s
of work) so queues and predictions are not trivially zero, probes the federation every few
seconds while a handful of tasks run through
:class:`~federation.interfaces.jupyter.executor.FederatedExecutor`,
then writes:

- ``capacity.png``: idle vs total GPUs and CPUs and pending jobs per site over the run;
- ``timeline.png``: each task queued -> running -> completed/failed, colored by site (each
  site has one colour in every figure: ``federation.interfaces.plots.site_colour``);
- ``predicted_vs_actual.png``: predicted wait vs actual queue wait per task.

Takes about a minute. Background jobs are named ``fed-figures`` and cancelled at the end.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

from federation.core.envelope import ResourceEnvelope
from federation.deploy.local import LocalSites
from federation.interfaces.jupyter.executor import FederatedExecutor, TaskFuture
from federation.interfaces.plots import plot_capacity, plot_predicted_vs_actual, plot_timeline
from federation.runtime.events import Event
from functions.workloads import fail_with

TAG = "fed-figures"
ROOT = Path(__file__).resolve().parents[1]

# (site, partition, extra sbatch args, count, seconds of work); time limit 1 minute each
LOAD = (
    ("local", "debug", ["--cpus-per-task=8", "--mem=4G"], 2, 30),
    ("delta", "gpuA100x4", ["--gres=gpu:a100:4", "--cpus-per-task=16", "--mem=8G"], 3, 40),
)


# Task functions shipped by value; their names and docstrings draft their envelopes.
def tokenize_corpus() -> dict[str, object]:
    """Tokenize and shard the corpus: CPU data preparation."""
    from functions.workloads import report_allocation

    return report_allocation(1.0)


def embed_documents() -> dict[str, object]:
    """Inference: embed documents with a model on one GPU."""
    from functions.workloads import report_allocation

    return report_allocation(2.0)


def train_ddp() -> dict[str, object]:
    """Distributed data-parallel training."""
    from functions.workloads import report_allocation

    return report_allocation(3.0)


def summarize_shard(i: int) -> dict[str, object]:
    """Summarize one shard (small generic task)."""
    from functions.workloads import report_allocation

    return report_allocation(1.0) | {"shard": i}


def load_background(local: LocalSites) -> int:
    n = 0
    for site, part, extra, count, work_s in LOAD:
        for _ in range(count):
            res = local.slurm.run(
                site,
                [
                    "sbatch",
                    "--parsable",
                    f"--job-name={TAG}",
                    f"--partition={part}",
                    "--time=00:01:00",
                    "--output=/dev/null",
                    *extra,
                    f"--wrap=sleep {work_s}",
                ],
            )
            if res.returncode != 0:
                raise RuntimeError(f"sbatch on {site} failed: {res.stderr.strip()}")
            n += 1
    return n


def clear_background(local: LocalSites) -> None:
    for spec in local.specs:
        local.slurm.run(spec.name, ["scancel", f"--name={TAG}"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    ap.add_argument("--no-load", action="store_true", help="no background jobs")
    ap.add_argument("--probe-every-s", type=float, default=3.0)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    local = LocalSites()
    print("up:", local.up())
    coord = local.connect(probe_timeout_s=60)
    began = datetime.now(UTC)
    stop = threading.Event()

    def sample() -> None:  # telemetry for the capacity figure
        while not stop.is_set():
            coord.inspect_federation()
            stop.wait(args.probe_every_s)

    def show(ev: Event) -> None:
        print(f"  {ev.at:%H:%M:%S}  {ev.kind:<15} {ev.site or '-':<8} {ev.detail}", flush=True)

    try:
        coord.inspect_federation()
        time.sleep(args.probe_every_s)
        if not args.no_load:
            clear_background(local)
            print("background jobs:", load_background(local))
            time.sleep(2)  # let Slurm start them before the first placement
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        futs: list[TaskFuture] = []
        with FederatedExecutor(coord, snapshot_max_age_s=0) as ex:

            def submit(how: str, fut: Future[Any]) -> None:
                assert isinstance(fut, TaskFuture)  # an in-process executor's
                fut.add_event_callback(show)
                wait = fut.placement.predicted_wait_s
                print(f"{fut.label} ({how}): {fut.placement}, predicted wait {wait:.0f} s")
                futs.append(fut)

            submit("drafted from docstring", ex.submit(tokenize_corpus))
            submit("drafted from docstring", ex.submit(embed_documents))
            submit("drafted from docstring", ex.submit(train_ddp))
            pinned = ResourceEnvelope(sites=("local",), partitions=("debug",), walltime_s=600)
            for i in range(2):
                submit("pinned to local/debug", ex.submit(summarize_shard, i, envelope=pinned))
            submit(
                "fails on purpose",
                ex.submit(fail_with, "input has 0 rows", envelope=ResourceEnvelope(walltime_s=300)),
            )
            for f in futs:
                f.exception(timeout=600)
        time.sleep(2 * args.probe_every_s)  # capacity after the tasks
    finally:
        stop.set()
        if not args.no_load:
            clear_background(local)
    # a last few snapshots with the background gone
    for _ in range(2):
        coord.inspect_federation()
        time.sleep(args.probe_every_s)
    tel = coord.telemetry
    frame = tel.frame(since=began) if tel is not None else None
    results = [f.manifest() for f in futs]
    outputs = {
        "capacity.png": plot_capacity(frame) if frame is not None else None,
        "timeline.png": plot_timeline(results),
        "predicted_vs_actual.png": plot_predicted_vs_actual(results),
    }
    for name, fig in outputs.items():
        if fig is None:
            continue
        path = args.out / name
        fig.savefig(path, dpi=110)
        print("wrote", path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    for r in results:
        wait = "-" if r.queue_wait_s is None else f"{r.queue_wait_s:.1f}"
        print(
            f"  {r.label:<18} {r.status:<9} {r.site}/{r.partition:<10} "
            f"predicted {r.decision.chosen.predicted_wait_s:6.1f} s  actual {wait} s"
        )
    coord.close()
    if local.service is not None:
        local.service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
