"""Streaming loaders for real HPC job logs: SWF (Parallel Workloads Archive) and Alibaba pods.

Every loader returns a :class:`Trace`: a sequence of :class:`TraceJob` (one typed record per
job, times in seconds relative to the trace's own start) plus the file's header and a count of
the jobs it skipped and why. Problems in the file raise :class:`TraceFormatError`, which names
the file, the line and what was wrong.

Skipping (counted in :attr:`Trace.skipped`, never silent):

* SWF: jobs whose run time is unknown (``-1``) and jobs whose size is unknown (allocated *and*
  requested processors ``<= 0``), when ``skip_unknown`` is true (the default). Jobs with a
  zero run time (mostly cancelled before starting) are kept; they are valid records.
* Alibaba: pods that were never scheduled (no ``scheduled_time``) and pods without a deletion
  time (run time unknown).

Speed: :func:`load_swf` decompresses the whole file with :mod:`zlib` and parses the numeric
body with pandas' C parser (CEA-Curie, 312,826 jobs: about 0.5 s). When that fast path meets
anything irregular it re-reads the file line by line, which either finds the offending line
and raises, or (comment lines in the middle of the body, say) returns the same records.

The loaders live in :mod:`federation.sim.swf` and :mod:`federation.sim.alibaba`, the records
and summaries in :mod:`federation.sim.trace_model`, and the byte and line reading they share
in :mod:`federation.sim.trace_files`; this module gathers their public names. To load a
trace by short name or by path, with the format picked from the file's content, use
:func:`load_trace` (:mod:`federation.sim.trace_readers`, where other formats plug in).
"""

from federation.sim.alibaba import load_alibaba_pods
from federation.sim.swf import SWF_FIELDS, iter_swf, load_swf
from federation.sim.trace_model import (
    Trace,
    TraceFormatError,
    TraceJob,
    TraceStats,
    default_trace_dir,
    trace_stats,
)
from federation.sim.trace_readers import (
    KNOWN_TRACES,
    READERS,
    NotATraceError,
    TraceNotFoundError,
    TraceReader,
    all_shared_traces,
    load_trace,
    register_reader,
    resolve_trace,
)

__all__ = [
    "KNOWN_TRACES",
    "READERS",
    "SWF_FIELDS",
    "NotATraceError",
    "Trace",
    "TraceFormatError",
    "TraceJob",
    "TraceNotFoundError",
    "TraceReader",
    "TraceStats",
    "all_shared_traces",
    "default_trace_dir",
    "iter_swf",
    "load_alibaba_pods",
    "load_swf",
    "load_trace",
    "register_reader",
    "resolve_trace",
    "trace_stats",
]
