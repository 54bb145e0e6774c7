"""Any trace by name or path: the reader is picked by content, and bad files say what to do."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from federation.sim.trace_model import Trace, TraceFormatError, TraceJob, default_trace_dir
from federation.sim.trace_readers import (
    KNOWN_TRACES,
    READERS,
    all_shared_traces,
    load_trace,
    register_reader,
    resolve_trace,
)

SWF = """; Version: 2.2
; MaxNodes: 100
; MaxProcs: 400
1 0 10 3600 16 -1 -1 16 7200 -1 1 1 1 -1 1 -1 -1 -1
2 60 0 120 4 -1 -1 4 600 -1 1 2 1 -1 1 -1 -1 -1
3 120 5 -1 8 -1 -1 8 600 -1 0 2 1 -1 1 -1 -1 -1
"""

POD_COLUMNS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)
PODS = (
    POD_COLUMNS
    + """
p1,8000,32768,1,1000,V100M32,LS,Running,100,5000,160
p2,4000,16384,0,0,,BE,Running,200,900,260
p3,4000,16384,2,1000,,LS,Pending,300,,
"""
)


def test_an_swf_file_is_read_by_content_plain_or_gzipped(tmp_path: Path) -> None:
    plain = tmp_path / "site-log.txt"  # the name says nothing: the content does
    plain.write_text(SWF)
    name, trace = load_trace(str(plain))
    assert name == "site-log.txt" and [j.job_id for j in trace.jobs] == [1, 2]
    assert trace.skipped  # the job with an unknown run time, counted
    packed = tmp_path / "mine.swf.gz"
    packed.write_bytes(gzip.compress(SWF.encode()))
    name, again = load_trace(str(packed))
    assert name == "mine" and again.jobs == trace.jobs


def test_an_alibaba_pod_list_is_read_as_one_node_jobs(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(PODS)
    name, trace = load_trace(str(path))
    assert name == "pods" and len(trace.jobs) == 2  # p3 never ran: skipped and counted
    assert trace.jobs[0].gpus == 1 and trace.jobs[0].run_s == 4840


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "is empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary file"),
        (b"hello, this is a note\nnot a trace\n", "not a trace this tool reads"),
        (b"a,b,c\n1,2,3\n", "not a trace this tool reads"),
        (b"; MaxProcs: 10\n1 0 0 -1 -1 -1 -1 -1 -1 -1 0 1 1 -1 1 -1 -1 -1\n", "no usable job"),
    ],
)
def test_a_file_that_is_not_a_trace_is_a_clear_error(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "x.swf"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError) as err:
        load_trace(str(path))
    assert problem in str(err.value) and str(path) in str(err.value)


def test_missing_files_and_names_say_where_to_look(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="KTH-SP2, CEA-Curie"):
        resolve_trace(str(tmp_path / "nope.swf"))
    with pytest.raises(TraceFormatError, match="FEDERATION_TRACES"):
        resolve_trace("KTH-SP2", tmp_path)
    with pytest.raises(TraceFormatError, match="is a folder"):
        resolve_trace(str(tmp_path))
    assert all_shared_traces(tmp_path) == []


def test_another_format_plugs_in_through_a_reader(tmp_path: Path) -> None:
    class OneLine:
        name = "one-line"

        def sniff(self, head: list[str]) -> bool:
            return head[0].startswith("JOBS ")

        def load(self, path: Path) -> Trace:
            n = int(path.read_text().split()[1])
            return Trace(path, tuple(TraceJob(i, float(i), 0.0, 60.0, 1) for i in range(n)))

    path = tmp_path / "custom.log"
    path.write_text("JOBS 3\n")
    register_reader(OneLine())
    try:
        _, trace = load_trace(str(path))
        assert len(trace.jobs) == 3
    finally:
        READERS.pop(0)


SHARED = default_trace_dir()


@pytest.mark.parametrize("name", sorted(KNOWN_TRACES))
def test_every_shared_trace_loads_by_name(name: str) -> None:
    if not (SHARED / KNOWN_TRACES[name]).exists():
        pytest.skip(
            f"{KNOWN_TRACES[name]} is not in {SHARED} (the public traces are not in the repo)"
        )
    got, trace = load_trace(name)
    assert got == name and len(trace.jobs) > 5000
    if name in ("KTH-SP2", "ALCF-Theta"):  # header MaxNodes == MaxProcs: sizes are nodes
        assert all(j.nodes == j.procs for j in trace.jobs[:100])
