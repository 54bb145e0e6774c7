"""The Alibaba GPU pod loader: the pod list of cluster-trace-gpu-v2023 as one-node jobs.

:func:`load_alibaba_pods` reads an ``openb_pod_list_*.csv`` (gzip or plain) and turns each pod
into a :class:`~federation.sim.trace_model.TraceJob` (creation, scheduling and deletion times;
CPU, memory and GPU shares), skipping and counting pods that never ran.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from pathlib import Path

from federation.sim.trace_files import _iter_lines
from federation.sim.trace_model import Trace, TraceFormatError, TraceJob

__all__ = ["load_alibaba_pods"]

_ALIBABA_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)


def load_alibaba_pods(
    path: Path | str, limit: int | None = None, *, gpu_only: bool = False
) -> Trace:
    """Load an Alibaba ``openb_pod_list_*.csv`` (gzip or plain).

    Each pod becomes a one-node :class:`TraceJob`: ``submit_s`` = creation time, ``wait_s`` =
    scheduled - creation, ``run_s`` = deletion - scheduled, ``cpus`` = cpu_milli / 1000,
    ``gpus`` = num_gpu, ``gpu_fraction`` = gpu_milli / 1000, ``gpu_type`` = gpu_spec (often
    empty), ``queue`` = QoS, ``status`` = pod phase (lower case). The trace has no requested
    walltimes. Pods never scheduled, or without a deletion time, are skipped and counted.
    ``gpu_only`` also skips (and counts) pods with no GPU. ``limit`` caps the rows read.
    """
    p = Path(path)
    skipped: Counter[str] = Counter()
    jobs: list[TraceJob] = []
    rows = 0
    lines = _iter_lines(p)
    header_line: list[str] | None = None
    idx: dict[str, int] = {}
    for lineno, raw in lines:
        text = raw.decode("utf-8", "replace").rstrip("\r")
        if not text.strip():
            continue
        row = next(csv.reader([text]))
        if header_line is None:
            header_line = [c.strip() for c in row]
            missing = [c for c in _ALIBABA_COLUMNS if c not in header_line]
            if missing:
                raise TraceFormatError(
                    p,
                    lineno,
                    f"not an Alibaba pod list: header lacks column(s) {', '.join(missing)}",
                )
            idx = {c: header_line.index(c) for c in _ALIBABA_COLUMNS}
            continue
        if len(row) != len(header_line):
            raise TraceFormatError(
                p, lineno, f"expected {len(header_line)} comma-separated fields, found {len(row)}"
            )
        rows += 1
        job = _alibaba_job(p, lineno, row, idx, skipped, gpu_only, rows)
        if job is not None:
            jobs.append(job)
        if limit is not None and rows >= limit:
            break
    if header_line is None:
        raise TraceFormatError(p, 1, "empty file: no CSV header")
    return Trace(path=p, jobs=tuple(jobs), skipped=dict(skipped), records=rows)


def _alibaba_job(
    p: Path,
    lineno: int,
    row: list[str],
    idx: dict[str, int],
    skipped: Counter[str],
    gpu_only: bool,
    rownum: int,
) -> TraceJob | None:
    def num(col: str, required: bool = True) -> float | None:
        text = row[idx[col]].strip()
        if not text:
            if required:
                raise TraceFormatError(p, lineno, f"column {col!r} is empty")
            return None
        try:
            v = float(text)
        except ValueError:
            raise TraceFormatError(p, lineno, f"column {col!r} is not a number: {text!r}") from None
        if not math.isfinite(v):
            raise TraceFormatError(p, lineno, f"column {col!r} is not a finite number: {text!r}")
        return v

    cpu = num("cpu_milli")
    mem = num("memory_mib")
    ngpu = num("num_gpu")
    gmilli = num("gpu_milli")
    created = num("creation_time")
    deleted = num("deletion_time", required=False)
    scheduled = num("scheduled_time", required=False)
    assert cpu is not None and mem is not None and ngpu is not None and gmilli is not None
    assert created is not None
    if gpu_only and ngpu <= 0:
        skipped["no GPU (gpu_only)"] += 1
        return None
    if scheduled is None:
        skipped["never scheduled"] += 1
        return None
    if deleted is None:
        skipped["no deletion time (run time unknown)"] += 1
        return None
    name = row[idx["name"]].strip()
    tail = name.rsplit("-", 1)[-1]
    spec = row[idx["gpu_spec"]].strip()
    return TraceJob(
        job_id=int(tail) if tail.isdigit() else rownum,
        submit_s=created,
        wait_s=max(0.0, scheduled - created),
        run_s=max(0.0, deleted - scheduled),
        procs=None,
        nodes=1,
        cpus=cpu / 1000.0,
        gpus=int(ngpu),
        gpu_fraction=gmilli / 1000.0 if ngpu > 0 else None,
        gpu_type=spec or None,
        mem_mb=mem,
        status=row[idx["pod_phase"]].strip().lower() or None,
        queue=row[idx["qos"]].strip() or None,
        name=name or None,
    )
