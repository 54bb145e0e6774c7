"""Any trace by name or by path: a small reader seam over the trace loaders.

:func:`load_trace` takes a short name of a shared trace (``KTH-SP2``, ``CEA-Curie``,
``ALCF-Theta``, ``Alibaba-GPU``, looked up in the trace folder: ``trace_dir``, else
``$FEDERATION_TRACES``, else ``../shared/traces``) or a path to a file, picks the reader by
the file's *content* (its first 64 KiB, decompressed when it is gzip; the name's extension
plays no part), and returns a display name with the :class:`~federation.sim.trace_model.Trace`.
The display name of a path is its file name without ``.gz`` and then ``.swf``/``.csv``.

Readers (:data:`READERS`; add one with :func:`register_reader`: any object with ``name``,
``sniff(path) -> bool`` and ``load(path) -> Trace``, see :class:`TraceReader`):

* ``swf``: the Standard Workload Format of the Parallel Workloads Archive (``.swf``,
  ``.swf.gz``): ``;`` header comments, then 18 whitespace-separated numbers per job
  (:func:`~federation.sim.swf.load_swf`).
* ``alibaba-pods``: the pod list of Alibaba's cluster-trace-gpu-v2023
  (``openb_pod_list_*.csv``; :func:`~federation.sim.alibaba.load_alibaba_pods`).

**Nodes and cores (ALCF-Theta).** ``TraceJob.procs`` is the SWF processor count and
:mod:`federation.sim.load` sizes a job by its *fraction of the trace's machine*,
``procs / MaxProcs`` (or ``procs / largest job`` when given a bare job list), so the two must
count the same unit. The Cobalt log of ALCF-Theta puts *nodes* in the processor fields and its
header says ``MaxNodes: 4360`` and ``MaxProcs: 4360``; it does not say how many cores a node
has. Theta's nodes are Intel Xeon Phi 7230 (Knights Landing) with 64 cores each (ALCF's
machine description), which :data:`NODE_CORES` records for that file. The SWF reader applies
cores per node from :data:`NODE_CORES` (keyed by the file name without ``.gz``, so it holds
for the short name and for a path to the same file) or from a ``; CoresPerNode: N`` header
line (not part of SWF 2.2; add it to your own log to the same effect):

* when the header's MaxNodes equals MaxProcs (the SWF sign that the field counts nodes), each
  job gets ``nodes`` = the field, ``procs`` = ``cpus`` = field x N, and the header's
  ``MaxProcs`` becomes MaxNodes x N (the file's value is kept as ``MaxProcsInFile``, and
  ``CoresPerNode`` is set), so fractions of the machine, and so the background load, are
  exactly those of the file while core counts and core-seconds are right. ALCF-Theta: a
  128-node job is 8,192 processors of 279,040.
* otherwise the field already counts processors: ``nodes`` = ceil(procs / N).

KTH-SP2 is recorded with 1 (IBM SP2 nodes with one processor each): its jobs then also carry
``cpus``. A log whose header says ``UnixStartTime: 0`` while its submit times are Unix epochs
(ALCF-Theta's) is shifted so that its first submit is 0, ``UnixStartTime`` becoming that epoch,
as the SWF standard has it; order and gaps are unchanged.

**Alibaba pods** are one-node jobs with CPU, memory and GPU requests and *no* requested
walltime; the reader leaves ``requested_walltime_s`` at ``None`` rather than invent one, and
:func:`~federation.sim.load.background_load` gives each pod a Slurm-like time limit (run time
x a seeded factor in [1, 8], rounded up to 10 min ... 48 h, capped at the partition's maximum;
pods that ran longer than that maximum, the trace's long-lived services, are capped and
counted). A pod asking for part of a GPU (``gpu_fraction`` < 1) is sized as a whole GPU there.

**Errors.** A missing file or name is a :class:`TraceNotFoundError`; an empty file, a binary
one (an image, an archive), or text that no reader recognizes is a :class:`NotATraceError`;
a trace without a single usable job (known run time > 0 and a size) is a
:class:`~federation.sim.trace_model.TraceFormatError`, as are damaged files (the loaders name
the line). All are TraceFormatErrors; their messages name the file, say what to do, and list
the known names and the formats read.
"""

from __future__ import annotations

import dataclasses
import difflib
import gzip
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from federation.sim.alibaba import _ALIBABA_COLUMNS, load_alibaba_pods
from federation.sim.swf import load_swf
from federation.sim.trace_files import _is_gzip
from federation.sim.trace_model import Trace, TraceFormatError, TraceJob, default_trace_dir

__all__ = [
    "KNOWN_TRACES",
    "NODE_CORES",
    "READERS",
    "AlibabaPodsReader",
    "NotATraceError",
    "SwfReader",
    "TraceNotFoundError",
    "TraceReader",
    "all_shared_traces",
    "display_name",
    "head_lines",
    "load_trace",
    "reader_for",
    "register_reader",
    "resolve_trace",
]

KNOWN_TRACES: dict[str, str] = {
    "KTH-SP2": "KTH-SP2-1996-2.1-cln.swf.gz",
    "CEA-Curie": "CEA-Curie-2011-2.1-cln.swf.gz",
    "ALCF-Theta": "ALCF-Theta-2023.swf.gz",
    "Alibaba-GPU": "alibaba-openb_pod_list_default.csv",
}
"""Short name -> file in the trace folder (sources and terms: ../shared/traces/PROVENANCE.md)."""

NODE_CORES: dict[str, int] = {
    "ALCF-Theta-2023.swf": 64,  # Cobalt log, processor fields hold KNL nodes of 64 cores
    "KTH-SP2-1996-2.1-cln.swf": 1,  # IBM SP2: one processor per node
}
"""Cores per node of SWF logs the header does not describe, by file name without ``.gz``."""

HEAD_BYTES = 64 * 1024
"""How much of a file (decompressed) readers look at to recognize it."""

_SWF_HEADER_KEYS = frozenset(
    {"Version", "Computer", "Installation", "MaxJobs", "MaxRecords", "MaxNodes", "MaxProcs",
     "UnixStartTime", "StartTime", "EndTime", "Conversion", "Acknowledge", "Preemption"}
)  # fmt: skip
_EPOCH_FLOOR_S = 1e8
"""Submit times above this (1973) under ``UnixStartTime: 0`` are Unix epochs, not offsets."""


class TraceNotFoundError(TraceFormatError):
    """The trace named or pointed at does not exist (or is a folder)."""


class NotATraceError(TraceFormatError):
    """The file exists but is empty, binary, or in no format a reader recognizes."""


class TraceReader(Protocol):
    """One trace format: recognize a file from its first bytes, then load it.

    ``sniff`` must be cheap and must not raise on a file of another format (use
    :func:`head_lines`); ``load`` raises :class:`TraceFormatError` for a damaged file. A
    reader may also have a ``description`` (str), shown in error messages.
    """

    name: str

    def sniff(self, path: Path) -> bool: ...

    def load(self, path: Path) -> Trace: ...


def _read_head(path: Path, limit: int = HEAD_BYTES) -> bytes:
    """The first ``limit`` bytes of the file, decompressed when it is gzip (by its bytes)."""
    try:
        if _is_gzip(path):
            with gzip.open(path, "rb") as g:
                return g.read(limit)
        with path.open("rb") as f:
            return f.read(limit)
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise TraceFormatError(
            path, None, f"damaged gzip data ({err}); the file was not copied completely?"
        ) from err
    except OSError as err:
        raise TraceFormatError(path, None, f"cannot read the file ({err.strerror or err})") from err


def head_lines(path: Path, limit: int = HEAD_BYTES) -> list[str]:
    """The non-blank lines (stripped, decoded) in the first ``limit`` bytes of the file.

    Gzip is decompressed; a line cut by the limit is left out. Raises
    :class:`TraceFormatError` when the file cannot be read or its gzip data is damaged.
    """
    data = _read_head(path, limit)
    lines = data.split(b"\n")
    if len(data) >= limit and len(lines) > 1:
        lines.pop()
    out = []
    for raw in lines:
        text = raw.decode("utf-8", "replace").strip()
        if text:
            out.append(text)
    return out


class SwfReader:
    """Standard Workload Format, with cores per node applied (see the module docstring)."""

    name = "swf"
    description = (
        "swf: Standard Workload Format of the Parallel Workloads Archive (.swf, .swf.gz): "
        "';' header lines, then 18 whitespace-separated numbers per job"
    )

    def sniff(self, path: Path) -> bool:
        try:
            head = head_lines(path)
        except TraceFormatError:
            return False
        body = [ln for ln in head if not ln.startswith(";")]
        if not body:  # header only (so far): SWF if it has SWF header keys
            keys = {ln.lstrip(";").partition(":")[0].strip() for ln in head}
            return bool(keys & _SWF_HEADER_KEYS)
        fields = body[0].split()
        if len(fields) != 18:
            return False
        numeric = 0
        for f in fields:
            try:
                float(f)
                numeric += 1
            except ValueError:
                pass
        return numeric >= 15  # a stray word: SWF still, and the loader names the field

    def load(self, path: Path) -> Trace:
        trace = _epoch_to_offsets(load_swf(path))
        cores = _cores_per_node(path, trace)
        return trace if cores is None else _apply_cores(trace, cores)


class AlibabaPodsReader:
    """The pod list of Alibaba cluster-trace-gpu-v2023."""

    name = "alibaba-pods"
    description = (
        "alibaba-pods: Alibaba cluster-trace-gpu-v2023 pod list (openb_pod_list_*.csv, "
        f"plain or gzip), a CSV with the columns {', '.join(_ALIBABA_COLUMNS)}"
    )

    def sniff(self, path: Path) -> bool:
        try:
            head = head_lines(path)
        except TraceFormatError:
            return False
        if not head:
            return False
        cols = {c.strip() for c in head[0].split(",")}
        return all(c in cols for c in _ALIBABA_COLUMNS)

    def load(self, path: Path) -> Trace:
        return load_alibaba_pods(path)


def _cores_per_node(path: Path, trace: Trace) -> int | None:
    value = trace.header.get("CoresPerNode", "").split()
    if value:
        try:
            n = int(value[0])
        except ValueError:
            raise TraceFormatError(
                path, None, f"header CoresPerNode is not a whole number: {value[0]!r}"
            ) from None
        if n < 1:
            raise TraceFormatError(path, None, f"header CoresPerNode must be >= 1, got {n}")
        return n
    return NODE_CORES.get(path.name.removesuffix(".gz"))


def _apply_cores(trace: Trace, cores: int) -> Trace:
    """Nodes and cores of every job from ``cores`` per node (see the module docstring)."""
    mn, mp = trace.max_nodes, trace.max_procs
    header = dict(trace.header)
    header["CoresPerNode"] = str(cores)
    if mn is not None and mn == mp:  # the processor field counts nodes
        jobs = tuple(
            j if j.procs is None else j._replace(procs=j.procs * cores, nodes=j.procs,
                                                 cpus=float(j.procs * cores))
            for j in trace.jobs
        )  # fmt: skip
        header["MaxProcsInFile"] = header.get("MaxProcs", "")
        header["MaxProcs"] = str(mn * cores)
    else:  # the field counts processors already
        jobs = tuple(
            j if j.procs is None else j._replace(nodes=-(-j.procs // cores), cpus=float(j.procs))
            for j in trace.jobs
        )
    return dataclasses.replace(trace, jobs=jobs, header=header)


def _epoch_to_offsets(trace: Trace) -> Trace:
    """Submit times relative to the first one, when the header's UnixStartTime is 0 but the
    submit times are Unix epochs (ALCF-Theta); otherwise ``trace`` itself."""
    if trace.unix_start_time != 0 or not trace.jobs:
        return trace
    first = min(j.submit_s for j in trace.jobs)
    if first < _EPOCH_FLOOR_S:
        return trace
    jobs = tuple(j._replace(submit_s=j.submit_s - first) for j in trace.jobs)
    header = dict(trace.header)
    header["UnixStartTime"] = str(int(first))
    return dataclasses.replace(trace, jobs=jobs, header=header)


READERS: list[TraceReader] = [SwfReader(), AlibabaPodsReader()]
"""The readers :func:`load_trace` tries, in order (the first whose ``sniff`` is true wins)."""


def register_reader(reader: TraceReader) -> None:
    """Add a reader for another format: tried before the others, replacing one of its name."""
    for i, r in enumerate(READERS):
        if r.name == reader.name:
            del READERS[i]
            break
    READERS.insert(0, reader)


def _formats() -> str:
    return "; ".join(str(getattr(r, "description", r.name)) for r in READERS)


def _help(trace_dir: Path | None) -> str:
    d = trace_dir if trace_dir is not None else default_trace_dir()
    return (
        f"give a path to a trace file or one of the known names {', '.join(KNOWN_TRACES)} "
        f"(looked up in {d}; set FEDERATION_TRACES or pass a trace folder to change it). "
        f"Formats read: {_formats()}. Other formats: "
        "federation.sim.trace_readers.register_reader"
    )


def display_name(path: Path) -> str:
    """The file name without ``.gz`` and then ``.swf`` or ``.csv``."""
    name = path.name.removesuffix(".gz")
    for suffix in (".swf", ".csv"):
        name = name.removesuffix(suffix)
    return name or path.name


def _known(spec: str) -> str | None:
    folded = {k.casefold(): k for k in KNOWN_TRACES}
    return folded.get(spec.strip().casefold())


def resolve_trace(spec: str, trace_dir: Path | None = None) -> tuple[str, Path]:
    """``(display name, path)`` of a trace given by short name or by path.

    A short name (any case) maps to its file in ``trace_dir`` (default:
    :func:`~federation.sim.trace_model.default_trace_dir`) and keeps the short name; a path is
    taken as it is (``~`` expanded) or, when relative and absent, looked up in the trace folder.
    Raises :class:`TraceNotFoundError` when there is no such file.
    """
    folder = trace_dir if trace_dir is not None else default_trace_dir()
    known = _known(spec)
    if known is not None:
        path = folder / KNOWN_TRACES[known]
        if not path.is_file():
            raise TraceNotFoundError(
                path,
                None,
                f"the shared trace {known} is not in {folder}: point FEDERATION_TRACES or the "
                f"trace folder option (--trace-dir) at the folder holding {KNOWN_TRACES[known]} "
                f"(../shared/traces/PROVENANCE.md names its source). Or {_help(trace_dir)}",
            )
        return known, path
    path = Path(spec.strip()).expanduser()
    if not spec.strip():
        raise TraceNotFoundError(path, None, f"empty trace name: {_help(trace_dir)}")
    if not path.exists() and not path.is_absolute() and (folder / path).is_file():
        path = folder / path
    if path.is_dir():
        files = sorted(p.name for p in path.iterdir() if p.is_file())[:8]
        inside = f" (it holds {', '.join(files)})" if files else " (it is empty)"
        raise TraceNotFoundError(
            path, None, f"is a folder{inside}; give one trace file in it. Or {_help(trace_dir)}"
        )
    if not path.is_file():
        close = difflib.get_close_matches(spec.strip(), list(KNOWN_TRACES), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        raise TraceNotFoundError(path, None, f"no such file; {hint}{_help(trace_dir)}")
    return display_name(path), path


_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"%PDF", "a PDF document"),
    (b"PK\x03\x04", "a zip archive (unzip it first)"),
    (b"BZh", "bzip2-compressed (decompress it, or gzip it: gzip is read directly)"),
    (b"\xfd7zXZ\x00", "xz-compressed (decompress it, or gzip it: gzip is read directly)"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed (decompress it, or gzip it: gzip is read directly)"),
    (b"7z\xbc\xaf", "a 7-zip archive (extract it first)"),
    (b"PAR1", "a Parquet file (no reader for it: register one)"),
)


def _diagnose(path: Path, trace_dir: Path | None) -> NotATraceError:
    """Why no reader took ``path``: empty, binary, a CSV of other columns, other text."""
    data = _read_head(path)
    help_ = _help(trace_dir)
    if not data.strip():
        gz = " (it decompresses to nothing)" if data == b"" and _is_gzip(path) else ""
        return NotATraceError(path, None, f"is empty{gz}: there are no jobs in it; {help_}")
    for magic, what in _MAGIC:
        if data.startswith(magic):
            return NotATraceError(path, None, f"is {what}, not a trace; {help_}")
    if b"\x00" in data:
        return NotATraceError(path, None, f"is a binary file, not a trace; {help_}")
    first = next(
        (ln for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()), ""
    ).strip()
    if first.count(",") >= 2 and not first.startswith(";"):  # CSV-like: 3+ columns
        cols = [c.strip() for c in first.split(",")]
        missing = [c for c in _ALIBABA_COLUMNS if c not in cols]
        shown = ", ".join(cols[:12]) + (", ..." if len(cols) > 12 else "")
        return NotATraceError(
            path,
            None,
            f"is a CSV whose columns ({shown}) match no trace format (an Alibaba pod list "
            f"also needs {', '.join(missing)}); not a trace this tool reads: {help_}",
        )
    return NotATraceError(
        path,
        None,
        f"is not a trace this tool reads (first line: {first[:80]!r}); {help_}",
    )


def reader_for(path: Path, trace_dir: Path | None = None) -> TraceReader:
    """The first reader in :data:`READERS` that recognizes ``path``'s content.

    Raises :class:`NotATraceError` (empty, binary, unknown format) when none does, and
    :class:`TraceFormatError` when the file cannot be read.
    """
    data = _read_head(path)  # raises for unreadable files and damaged gzip
    if not data.strip():
        raise _diagnose(path, trace_dir)
    for reader in READERS:
        if reader.sniff(path):
            return reader
    raise _diagnose(path, trace_dir)


def _usable(jobs: Iterable[TraceJob]) -> bool:
    """Whether any job has a known run time > 0 and a size (what background load needs)."""
    return any(
        j.run_s is not None and j.run_s > 0 and bool(j.procs or j.nodes or j.cpus or j.gpus)
        for j in jobs
    )


def load_trace(spec: str, trace_dir: Path | None = None) -> tuple[str, Trace]:
    """``(display name, trace)`` of a trace given by short name or path (see the module
    docstring): the reader is picked by content; errors are :class:`TraceFormatError`."""
    name, path = resolve_trace(spec, trace_dir)
    reader = reader_for(path, trace_dir)
    trace = reader.load(path)
    if not _usable(trace.jobs):
        skipped = ", ".join(f"{k}: {v}" for k, v in trace.skipped.items()) or "none"
        raise TraceFormatError(
            path,
            None,
            f"has no usable job: read as {reader.name}, {trace.records} job record(s), "
            f"{len(trace.jobs)} kept, none with a known run time > 0 and a size "
            f"(skipped: {skipped}); give a trace with finished jobs. Or {_help(trace_dir)}",
        )
    return name, trace


def all_shared_traces(trace_dir: Path | None = None) -> list[str]:
    """The short names of the known traces present in ``trace_dir`` (default: the shared one)."""
    d = trace_dir if trace_dir is not None else default_trace_dir()
    return [n for n, f in KNOWN_TRACES.items() if (d / f).is_file()]
