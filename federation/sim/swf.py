"""The SWF loader: Standard Workload Format logs of the Parallel Workloads Archive.

:func:`load_swf` parses the numeric body in one go with pandas' C parser and falls back to
:func:`iter_swf`, which streams the file line by line and names the offending line of an
irregular file. Both turn each 18-field line into a :class:`~federation.sim.trace_model.TraceJob`
by the same rules (processor counts as nodes or cores, unknown run times and sizes skipped).
"""

from __future__ import annotations

import contextlib
import io
import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from federation.core.gcpause import gc_paused
from federation.sim.trace_files import _iter_lines, _read_all
from federation.sim.trace_model import Trace, TraceFormatError, TraceJob

__all__ = ["SWF_FIELDS", "iter_swf", "load_swf"]

SWF_FIELDS: tuple[str, ...] = (
    "job id",
    "submit time",
    "wait time",
    "run time",
    "allocated processors",
    "average cpu time",
    "used memory",
    "requested processors",
    "requested time",
    "requested memory",
    "status",
    "user id",
    "group id",
    "executable",
    "queue",
    "partition",
    "preceding job",
    "think time",
)
"""The 18 SWF fields, in file order (1-based in the SWF standard, 0-based here)."""

_SWF_STATUS = {
    0: "failed",
    1: "completed",
    2: "partial",
    3: "partial",
    4: "partial",
    5: "cancelled",
}


@dataclass
class _SwfOptions:
    procs_are_nodes: bool
    procs_per_node: int | None
    skip_unknown: bool
    partitions: dict[int, str]


def _parse_header_line(line: str, header: dict[str, str], partitions: dict[int, str]) -> None:
    body = line.lstrip(";").strip()
    if ":" not in body:
        return
    key, _, value = body.partition(":")
    key, value = key.strip(), value.strip()
    if not key or " " in key:
        return
    if key == "Partition":
        num, _, pname = value.partition(" ")
        with contextlib.suppress(ValueError):
            partitions.setdefault(int(num), pname.strip() or num)
        return
    header.setdefault(key, value)


def _swf_job(v: Sequence[float], opts: _SwfOptions, skipped: Counter[str]) -> TraceJob | None:
    run = v[3]
    procs_f = v[4] if v[4] > 0 else v[7]
    if opts.skip_unknown:
        if run < 0:
            skipped["run time unknown"] += 1
            return None
        if procs_f <= 0:
            skipped["size unknown (allocated and requested processors <= 0)"] += 1
            return None
    procs = int(procs_f) if procs_f > 0 else None
    nodes: int | None = None
    cpus: float | None = float(procs) if procs is not None else None
    if procs is not None:
        if opts.procs_per_node:
            nodes = -(-procs // opts.procs_per_node)
        elif opts.procs_are_nodes:
            nodes = procs
            cpus = None
    part_num = int(v[15])
    queue_num = int(v[14])
    status = int(v[10])
    user = int(v[11])
    return TraceJob(
        job_id=int(v[0]),
        submit_s=float(v[1]),
        wait_s=float(v[2]) if v[2] >= 0 else None,
        run_s=float(run) if run >= 0 else None,
        procs=procs,
        nodes=nodes,
        cpus=cpus,
        mem_mb=float(v[9]) / 1024.0 if v[9] > 0 else None,
        requested_walltime_s=float(v[8]) if v[8] > 0 else None,
        status=_SWF_STATUS.get(status, str(status)) if status >= 0 else None,
        queue=str(queue_num) if queue_num >= 0 else None,
        partition=opts.partitions.get(part_num, str(part_num)) if part_num >= 0 else None,
        user=user if user >= 0 else None,
    )


def iter_swf(
    path: Path | str,
    *,
    procs_are_nodes: bool | None = None,
    procs_per_node: int | None = None,
    skip_unknown: bool = True,
    header: dict[str, str] | None = None,
    partitions: dict[int, str] | None = None,
    skipped: Counter[str] | None = None,
) -> Iterator[TraceJob]:
    """Stream an SWF file (gzip or plain) job by job; see :func:`load_swf` for the options.

    ``header``, ``partitions`` and ``skipped``, when given, are filled as the file is read
    (header lines precede the jobs in every PWA file).
    """
    p = Path(path)
    hdr = header if header is not None else {}
    parts = partitions if partitions is not None else {}
    skips = skipped if skipped is not None else Counter()
    opts: _SwfOptions | None = None
    for lineno, raw in _iter_lines(p):
        s = raw.strip()
        if not s:
            continue
        if s[:1] == b";":
            _parse_header_line(s.decode("utf-8", "replace"), hdr, parts)
            continue
        if opts is None:
            opts = _swf_options(hdr, parts, procs_are_nodes, procs_per_node, skip_unknown)
        fields = s.split()
        if len(fields) != 18:
            raise TraceFormatError(
                p, lineno, f"expected 18 whitespace-separated SWF fields, found {len(fields)}"
            )
        try:
            values = [float(x) for x in fields]
        except ValueError:
            for i, x in enumerate(fields):
                try:
                    float(x)
                except ValueError:
                    raise TraceFormatError(
                        p,
                        lineno,
                        f"field {i + 1} ({SWF_FIELDS[i]}) is not a number: "
                        f"{x.decode('utf-8', 'replace')!r}",
                    ) from None
            raise  # pragma: no cover - float() failed on the list but not on any item
        if any(math.isnan(x) or math.isinf(x) for x in values):
            bad = next(i for i, x in enumerate(values) if math.isnan(x) or math.isinf(x))
            raise TraceFormatError(
                p, lineno, f"field {bad + 1} ({SWF_FIELDS[bad]}) is not a finite number"
            )
        job = _swf_job(values, opts, skips)
        if job is not None:
            yield job


def _swf_options(
    header: dict[str, str],
    partitions: dict[int, str],
    procs_are_nodes: bool | None,
    procs_per_node: int | None,
    skip_unknown: bool,
) -> _SwfOptions:
    if procs_are_nodes is None:
        mn, mp = header.get("MaxNodes", "").split(), header.get("MaxProcs", "").split()
        procs_are_nodes = bool(mn and mp and mn[0] == mp[0])
    return _SwfOptions(procs_are_nodes, procs_per_node, skip_unknown, dict(partitions))


def load_swf(
    path: Path | str,
    limit: int | None = None,
    *,
    procs_are_nodes: bool | None = None,
    procs_per_node: int | None = None,
    skip_unknown: bool = True,
) -> Trace:
    """Load an SWF file (gzip or plain; detected from the bytes, not the name).

    ``limit``: stop after this many job lines (kept or skipped), streaming only what is needed.
    ``procs_are_nodes``: the processor field counts nodes (default: when the header's MaxNodes
    equals MaxProcs, as for KTH-SP2 and ALCF-Theta); then ``TraceJob.nodes = procs``.
    ``procs_per_node``: derive ``nodes = ceil(procs / procs_per_node)`` instead.
    ``skip_unknown``: leave out (and count) jobs with unknown run time or size.
    """
    p = Path(path)
    if limit is None:
        fast = _load_swf_fast(p, procs_are_nodes, procs_per_node, skip_unknown)
        if fast is not None:
            return fast
    header: dict[str, str] = {}
    partitions: dict[int, str] = {}
    skipped: Counter[str] = Counter()
    jobs: list[TraceJob] = []
    it = iter_swf(
        p,
        procs_are_nodes=procs_are_nodes,
        procs_per_node=procs_per_node,
        skip_unknown=skip_unknown,
        header=header,
        partitions=partitions,
        skipped=skipped,
    )
    with gc_paused():
        for job in it:
            jobs.append(job)
            if limit is not None and len(jobs) + sum(skipped.values()) >= limit:
                break
    return Trace(
        path=p,
        jobs=tuple(jobs),
        header=header,
        partitions=partitions,
        skipped=dict(skipped),
        records=len(jobs) + sum(skipped.values()),
    )


def _load_swf_fast(
    p: Path, procs_are_nodes: bool | None, procs_per_node: int | None, skip_unknown: bool
) -> Trace | None:
    """Whole-file parse through pandas; ``None`` when anything is irregular (caller re-reads)."""
    data = _read_all(p)
    header: dict[str, str] = {}
    partitions: dict[int, str] = {}
    pos = 0
    n = len(data)
    while pos < n:  # header block: ';' lines and blank lines at the top
        end = data.find(b"\n", pos)
        end = n if end < 0 else end
        s = data[pos:end].strip()
        if s and s[:1] != b";":
            break
        if s:
            _parse_header_line(s.decode("utf-8", "replace"), header, partitions)
        pos = end + 1
    body = data[pos:]
    if not body.strip():
        return Trace(path=p, jobs=(), header=header, partitions=partitions)
    try:
        import pandas as pd
    except ImportError:  # the [sim] extra is not installed: the plain parser reads it
        return None
    try:
        df = pd.read_csv(
            io.BytesIO(body),
            sep=r"\s+",
            header=None,
            names=list(range(18)),
            index_col=False,
            dtype=np.float64,
            engine="c",
        )
    except (ValueError, pd.errors.ParserError):
        return None
    a = df.to_numpy(dtype=np.float64)
    if a.ndim != 2 or a.shape[1] != 18 or not np.isfinite(a).all():
        return None
    opts = _swf_options(header, partitions, procs_are_nodes, procs_per_node, skip_unknown)
    skipped: Counter[str] = Counter()
    run = a[:, 3]
    procs_f = np.where(a[:, 4] > 0, a[:, 4], a[:, 7])
    keep = np.ones(len(a), dtype=bool)
    if skip_unknown:
        bad_run = run < 0
        bad_size = (procs_f <= 0) & ~bad_run
        if bad_run.any():
            skipped["run time unknown"] = int(bad_run.sum())
        if bad_size.any():
            skipped["size unknown (allocated and requested processors <= 0)"] = int(bad_size.sum())
        keep = ~(bad_run | bad_size)
    a = a[keep]
    procs_f = procs_f[keep]
    jobs = _swf_jobs_from_array(a, procs_f, opts)
    return Trace(
        path=p,
        jobs=jobs,
        header=header,
        partitions=partitions,
        skipped=dict(skipped),
        records=int(keep.size),
    )


def _swf_jobs_from_array(
    a: np.ndarray, procs_f: np.ndarray, opts: _SwfOptions
) -> tuple[TraceJob, ...]:
    """Vectorised twin of :func:`_swf_job` (same rules, same results)."""
    n = len(a)
    procs_i = procs_f.astype(np.int64)
    has_procs = procs_f > 0
    procs_l: list[int | None] = [
        p if h else None for p, h in zip(procs_i.tolist(), has_procs.tolist(), strict=True)
    ]
    if opts.procs_per_node:
        ppn = opts.procs_per_node
        nodes_l: list[int | None] = [None if p is None else -(-p // ppn) for p in procs_l]
        cpus_l: list[float | None] = [None if p is None else float(p) for p in procs_l]
    elif opts.procs_are_nodes:
        nodes_l = procs_l
        cpus_l = [None] * n
    else:
        nodes_l = [None] * n
        cpus_l = [None if p is None else float(p) for p in procs_l]

    def opt(col: np.ndarray, ok: np.ndarray) -> list[float | None]:
        return [v if k else None for v, k in zip(col.tolist(), ok.tolist(), strict=True)]

    wait_l = opt(a[:, 2], a[:, 2] >= 0)
    run_l = opt(a[:, 3], a[:, 3] >= 0)
    mem_l = opt(a[:, 9] / 1024.0, a[:, 9] > 0)
    req_l = opt(a[:, 8], a[:, 8] > 0)
    status_map: dict[int, str | None] = {}
    status_l: list[str | None] = []
    for s in a[:, 10].astype(np.int64).tolist():
        if s not in status_map:
            status_map[s] = _SWF_STATUS.get(s, str(s)) if s >= 0 else None
        status_l.append(status_map[s])
    queue_l = [str(q) if q >= 0 else None for q in a[:, 14].astype(np.int64).tolist()]
    part_map: dict[int, str | None] = {}
    part_l: list[str | None] = []
    for q in a[:, 15].astype(np.int64).tolist():
        if q not in part_map:
            part_map[q] = opts.partitions.get(q, str(q)) if q >= 0 else None
        part_l.append(part_map[q])
    user_l = [u if u >= 0 else None for u in a[:, 11].astype(np.int64).tolist()]
    ids = a[:, 0].astype(np.int64).tolist()
    submits = a[:, 1].tolist()
    make = TraceJob._make
    none = [None] * n
    zeros = [0] * n
    rows = zip(
        ids,
        submits,
        wait_l,
        run_l,
        procs_l,
        nodes_l,
        cpus_l,
        zeros,  # gpus
        none,  # gpu_fraction
        none,  # gpu_type
        mem_l,
        req_l,
        status_l,
        queue_l,
        part_l,
        user_l,
        none,  # name
        strict=True,
    )
    with gc_paused():
        return tuple(map(make, rows))
