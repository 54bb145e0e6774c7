"""Any trace by name or by path: a small reader seam over the trace loaders.

``load_trace(spec)`` takes a short name of a shared trace (``KTH-SP2``, ``CEA-Curie``,
``ALCF-Theta``, ``Alibaba-GPU``, looked up in the trace folder: ``$FEDERATION_TRACES`` or
``../shared/traces``) or a path to a file, picks the reader by the file's *content* (not its
name), and returns the trace with a display name. Readers:

* ``swf``: the Parallel Workloads Archive's Standard Workload Format (``.swf``, ``.swf.gz``):
  ``;`` header comments, then 18 whitespace-separated numeric fields per job
  (:func:`~federation.sim.swf.load_swf`). When the header's MaxNodes equals MaxProcs the
  processor field counts nodes (KTH-SP2: one processor per node; ALCF-Theta, whose Cobalt
  log holds nodes there), and each job keeps its node count.
* ``alibaba-pods``: the pod list of Alibaba's cluster-trace-gpu-v2023
  (``openb_pod_list_*.csv``): one-node pods with CPU, memory and GPU requests
  (:func:`~federation.sim.alibaba.load_alibaba_pods`). It has no requested walltimes; the
  background loader gives each pod a Slurm-like limit from its run time
  (:mod:`federation.sim.load`).

Other formats plug in with :func:`register_reader` (an object with ``name``, ``sniff(head)``
and ``load(path)``). A file no reader recognizes, an empty file, or one without a usable job
is a :class:`~federation.sim.trace_model.TraceFormatError` that says what was expected.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from federation.sim.alibaba import load_alibaba_pods
from federation.sim.swf import load_swf
from federation.sim.trace_files import _iter_lines
from federation.sim.trace_model import Trace, TraceFormatError, default_trace_dir

__all__ = [
    "KNOWN_TRACES",
    "READERS",
    "TraceReader",
    "all_shared_traces",
    "load_trace",
    "register_reader",
    "resolve_trace",
]

KNOWN_TRACES = {
    "KTH-SP2": "KTH-SP2-1996-2.1-cln.swf.gz",
    "CEA-Curie": "CEA-Curie-2011-2.1-cln.swf.gz",
    "ALCF-Theta": "ALCF-Theta-2023.swf.gz",
    "Alibaba-GPU": "alibaba-openb_pod_list_default.csv",
}
"""Short names of the public traces (see ../shared/traces/PROVENANCE.md for sources)."""

_HEAD_LINES = 64


class TraceReader(Protocol):
    """One trace format: recognize it from the first lines, then load it."""

    name: str

    def sniff(self, head: list[str]) -> bool:
        """Whether the file's first non-empty lines (decoded) are this format."""
        ...

    def load(self, path: Path) -> Trace: ...


class SwfReader:
    name = "swf"

    def sniff(self, head: list[str]) -> bool:
        body = [ln for ln in head if not ln.lstrip().startswith(";")]
        if not body:  # only header comments so far: SWF if they look like its header
            return any(ln.lstrip().startswith(";") and ":" in ln for ln in head)
        fields = body[0].split()
        if len(fields) != 18:
            return False
        try:
            [float(f) for f in fields]
        except ValueError:
            return False
        return True

    def load(self, path: Path) -> Trace:
        return load_swf(path)


class AlibabaPodsReader:
    name = "alibaba-pods"
    _needed = ("name", "num_gpu", "creation_time", "scheduled_time", "deletion_time")

    def sniff(self, head: list[str]) -> bool:
        if not head:
            return False
        cols = {c.strip().lower() for c in head[0].split(",")}
        return all(c in cols for c in self._needed)

    def load(self, path: Path) -> Trace:
        return load_alibaba_pods(path)


READERS: list[TraceReader] = [SwfReader(), AlibabaPodsReader()]


def register_reader(reader: TraceReader) -> None:
    """Add a reader for another format (tried before the built-in ones)."""
    READERS.insert(0, reader)


def _trace_dir(trace_dir: Path | None) -> Path:
    return trace_dir if trace_dir is not None else default_trace_dir()


def resolve_trace(spec: str, trace_dir: Path | None = None) -> tuple[str, Path]:
    """``(display name, path)`` of a trace given by short name or by path."""
    if spec in KNOWN_TRACES:
        path = _trace_dir(trace_dir) / KNOWN_TRACES[spec]
        if not path.exists():
            raise TraceFormatError(
                path,
                None,
                f"trace {spec!r} not found in {path.parent}: pass --trace-dir or set "
                "FEDERATION_TRACES to the folder holding it",
            )
        return spec, path
    path = Path(os.path.expanduser(spec))
    if not path.exists():
        raise TraceFormatError(
            path,
            None,
            f"no such trace file; give a path to a trace file or one of the names "
            f"{', '.join(KNOWN_TRACES)}",
        )
    if path.is_dir():
        raise TraceFormatError(path, None, "is a folder; give a trace file in it")
    name = path.name
    for suffix in (".gz", ".swf", ".csv"):
        name = name.removesuffix(suffix)
    return name, path


def _head(path: Path) -> list[str]:
    head: list[str] = []
    for _, raw in _iter_lines(path):
        if b"\x00" in raw:
            raise TraceFormatError(path, None, "is a binary file, not a trace")
        text = raw.decode("utf-8", "replace").strip()
        if text:
            head.append(text)
        if len(head) >= _HEAD_LINES:
            break
    return head


def load_trace(spec: str, trace_dir: Path | None = None) -> tuple[str, Trace]:
    """Load a trace by short name or path, with the reader its content calls for."""
    name, path = resolve_trace(spec, trace_dir)
    head = _head(path)
    if not head:
        raise TraceFormatError(path, None, "is empty")
    for reader in READERS:
        if reader.sniff(head):
            trace = reader.load(path)
            if not trace.jobs:
                skipped = ", ".join(f"{k}: {v}" for k, v in trace.skipped.items()) or "none"
                raise TraceFormatError(
                    path, None, f"has no usable job ({reader.name} format; skipped: {skipped})"
                )
            return name, trace
    formats = ", ".join(r.name for r in READERS)
    raise TraceFormatError(
        path,
        None,
        f"is not a trace this tool reads (formats: {formats}; SWF is the Parallel Workloads "
        "Archive's Standard Workload Format: ';' header lines, then 18 numbers per job); "
        "add a reader with federation.sim.trace_readers.register_reader",
    )


def all_shared_traces(trace_dir: Path | None = None) -> list[str]:
    """The short names of the known traces present in the trace folder."""
    d = _trace_dir(trace_dir)
    return [n for n, f in KNOWN_TRACES.items() if (d / f).exists()]
