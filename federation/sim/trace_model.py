"""The trace data model: one typed record per job, a whole trace with its header, and summaries.

A :class:`Trace` is what every loader (:mod:`federation.sim.swf`, :mod:`federation.sim.alibaba`)
returns: a sequence of :class:`TraceJob` plus the file's header and what was skipped;
:class:`TraceFormatError` is how they report a damaged file; :func:`trace_stats` summarises a
list of jobs; :func:`default_trace_dir` says where the real logs live.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, overload

from federation.core.errors import FederationError

__all__ = [
    "Trace",
    "TraceFormatError",
    "TraceJob",
    "TraceStats",
    "default_trace_dir",
    "trace_stats",
]


class TraceFormatError(FederationError, ValueError):
    """A trace file that cannot be read: wrong field count, non-numeric value, truncated gzip.

    ``path``, ``line`` (1-based, counting header lines; ``None`` when it does not apply) and
    ``problem`` are attributes; the message names all three.
    """

    def __init__(self, path: Path | str, line: int | None, problem: str) -> None:
        self.path = Path(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}: line {line}" if line is not None else str(self.path)
        super().__init__(f"{where}: {problem}")


class TraceJob(NamedTuple):
    """One job of a trace. Times are seconds; ``None`` means the trace does not say.

    ``procs`` is the SWF processor count (allocated, or requested when allocation is unknown):
    cores on CEA-Curie, nodes on KTH-SP2 (one processor per node) and, as :func:`load_swf`
    reads it, ALCF-Theta (the field holds nodes);
    :func:`~federation.sim.trace_readers.load_trace` turns Theta's into cores (64 per node, the
    header's MaxProcs with them). ``nodes`` is filled when the node count is known (header
    MaxNodes equal to MaxProcs, or ``procs_per_node`` given, or a Kubernetes pod: one node).
    ``cpus`` is the core count when known (SWF: ``procs`` unless the field holds nodes and the
    cores per node are unknown; Alibaba: cpu_milli/1000).
    A named tuple: immutable, and cheap enough to build 300,000 of in a fraction of a second.
    """

    job_id: int
    submit_s: float
    wait_s: float | None
    run_s: float | None
    procs: int | None
    nodes: int | None = None
    cpus: float | None = None
    gpus: int = 0
    gpu_fraction: float | None = None
    """Alibaba: the share of each GPU the pod asked for (gpu_milli / 1000)."""
    gpu_type: str | None = None
    mem_mb: float | None = None
    requested_walltime_s: float | None = None
    status: str | None = None
    queue: str | None = None
    partition: str | None = None
    user: int | None = None
    name: str | None = None

    @property
    def start_s(self) -> float | None:
        return None if self.wait_s is None else self.submit_s + self.wait_s

    @property
    def end_s(self) -> float | None:
        start = self.start_s
        return None if start is None or self.run_s is None else start + self.run_s


@dataclass(frozen=True)
class Trace(Sequence[TraceJob]):
    """The jobs of one trace file, with its header and what was skipped."""

    path: Path
    jobs: tuple[TraceJob, ...]
    header: dict[str, str] = field(default_factory=dict)
    """SWF ``; Key: value`` header lines (first occurrence of each key)."""
    partitions: dict[int, str] = field(default_factory=dict)
    """SWF ``; Partition: N name`` header lines."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Reason -> number of jobs left out."""
    records: int = 0
    """Job lines read (kept plus skipped)."""

    @overload
    def __getitem__(self, index: int) -> TraceJob: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[TraceJob]: ...
    def __getitem__(self, index: int | slice) -> TraceJob | Sequence[TraceJob]:
        return self.jobs[index]

    def __len__(self) -> int:
        return len(self.jobs)

    def __iter__(self) -> Iterator[TraceJob]:
        return iter(self.jobs)

    def _header_int(self, key: str) -> int | None:
        value = self.header.get(key, "").split()
        try:
            return int(float(value[0])) if value else None
        except ValueError:
            return None

    @property
    def max_nodes(self) -> int | None:
        return self._header_int("MaxNodes")

    @property
    def max_procs(self) -> int | None:
        return self._header_int("MaxProcs")

    @property
    def unix_start_time(self) -> int | None:
        return self._header_int("UnixStartTime")


@dataclass(frozen=True, slots=True)
class TraceStats:
    """Summary of a list of trace jobs (see :func:`trace_stats`)."""

    jobs: int
    first_submit_s: float
    last_submit_s: float
    span_s: float
    median_run_s: float | None
    median_wait_s: float | None
    median_runtime_ratio: float | None
    """Median of run time / requested walltime over jobs with both known (> 0 request)."""
    jobs_with_ratio: int
    proc_seconds: float
    """Sum of procs x run time over jobs with both known."""


def default_trace_dir() -> Path:
    """``$FEDERATION_TRACES`` if set, else ``shared/traces`` beside the repository."""
    env = os.environ.get("FEDERATION_TRACES")
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[2].parent / "shared" / "traces"


def trace_stats(jobs: Sequence[TraceJob]) -> TraceStats:
    """Count, submit span, medians and the median run/requested-walltime ratio of ``jobs``."""
    if not jobs:
        return TraceStats(0, 0.0, 0.0, 0.0, None, None, None, 0, 0.0)
    submits = [j.submit_s for j in jobs]
    runs = [j.run_s for j in jobs if j.run_s is not None]
    waits = [j.wait_s for j in jobs if j.wait_s is not None]
    ratios = [
        j.run_s / j.requested_walltime_s
        for j in jobs
        if j.run_s is not None and j.requested_walltime_s
    ]
    work = sum(j.procs * j.run_s for j in jobs if j.procs is not None and j.run_s is not None)
    first, last = min(submits), max(submits)
    return TraceStats(
        jobs=len(jobs),
        first_submit_s=first,
        last_submit_s=last,
        span_s=last - first,
        median_run_s=statistics.median(runs) if runs else None,
        median_wait_s=statistics.median(waits) if waits else None,
        median_runtime_ratio=statistics.median(ratios) if ratios else None,
        jobs_with_ratio=len(ratios),
        proc_seconds=float(work),
    )
