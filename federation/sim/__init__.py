"""Simulated Slurm sites for benchmarks: trace loaders, a virtual-time queue, background load.

``federation.sim.traces`` reads real job logs, ``federation.sim.queue`` simulates one site
(priority FIFO + EASY backfill) and emits the same snapshots a real probe does, and
``federation.sim.load`` turns a trace into background load sized to a site.
"""

from federation.sim.load import BackgroundLoad, PartitionLoad, background_load, replay
from federation.sim.queue import SimJob, SimJobStatus, SimRequestError, SimSite
from federation.sim.traces import (
    Trace,
    TraceFormatError,
    TraceJob,
    default_trace_dir,
    load_alibaba_pods,
    load_swf,
    trace_stats,
)

__all__ = [
    "BackgroundLoad",
    "PartitionLoad",
    "SimJob",
    "SimJobStatus",
    "SimRequestError",
    "SimSite",
    "Trace",
    "TraceFormatError",
    "TraceJob",
    "background_load",
    "default_trace_dir",
    "load_alibaba_pods",
    "load_swf",
    "replay",
    "trace_stats",
]
