"""Any trace by name or path: the reader is picked by content, and bad files say what to do."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from federation.core.spec import load_sites
from federation.sim import trace_readers
from federation.sim.load import WALLTIME_LADDER_S, background_load
from federation.sim.trace_model import Trace, TraceFormatError, TraceJob, default_trace_dir
from federation.sim.trace_readers import (
    KNOWN_TRACES,
    NODE_CORES,
    NotATraceError,
    TraceNotFoundError,
    all_shared_traces,
    load_trace,
    reader_for,
    register_reader,
    resolve_trace,
)
from federation.sim.traces import load_swf

SWF = """; Version: 2.2
; Computer: test machine
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
p-0001,8000,32768,1,1000,V100M32,LS,Running,100,5000,160
p-0002,4000,16384,0,0,,BE,Running,200,900,260
p-0003,4000,16384,2,1000,,LS,Pending,300,,
"""
)

# A Cobalt-style log: the processor fields hold nodes (MaxNodes == MaxProcs), epoch submits.
THETA_LIKE = """; UnixStartTime: 0
; MaxNodes: 4360
; MaxProcs: 4360
1 1693547500 3725 7329 144 -1 -1 144 10800 -1 0 0 -1 -1 -1 -1 -1 0
2 1693556600 7642 10847 128 -1 -1 128 10800 -1 0 0 -1 -1 -1 -1 -1 0
3 1693546600 10 600 2560 -1 -1 2560 3600 -1 0 0 -1 -1 -1 -1 -1 0
"""

KNOWN = ", ".join(KNOWN_TRACES)


def write(tmp_path: Path, name: str, data: str | bytes, gz: bool = False) -> Path:
    raw = data.encode() if isinstance(data, str) else data
    path = tmp_path / name
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


@pytest.fixture
def readers(monkeypatch: pytest.MonkeyPatch) -> list[trace_readers.TraceReader]:
    """A private copy of the reader registry, restored after the test."""
    copy = list(trace_readers.READERS)
    monkeypatch.setattr(trace_readers, "READERS", copy)
    return copy


@pytest.mark.parametrize("gz", [False, True])
def test_an_swf_file_is_read_by_content_plain_or_gzipped(tmp_path: Path, gz: bool) -> None:
    path = write(tmp_path, "site-log.txt", SWF, gz)  # the name says nothing: the content does
    assert reader_for(path).name == "swf"
    name, trace = load_trace(str(path))
    assert name == "site-log.txt"
    assert [j.job_id for j in trace] == [1, 2]
    assert trace.skipped == {"run time unknown": 1}
    assert trace[0].procs == 16 and trace[0].cpus == 16.0 and trace[0].nodes is None
    assert trace[0].requested_walltime_s == 7200.0 and trace.header["Computer"] == "test machine"


@pytest.mark.parametrize(
    ("file", "shown"),
    [("mine.swf.gz", "mine"), ("mine.swf", "mine"), ("pods.csv", "pods"), ("x.csv.gz", "x")],
)
def test_the_display_name_drops_gz_swf_and_csv(tmp_path: Path, file: str, shown: str) -> None:
    path = write(tmp_path, file, PODS if "csv" in file else SWF, file.endswith(".gz"))
    assert resolve_trace(str(path)) == (shown, path)
    assert load_trace(str(path))[0] == shown


@pytest.mark.parametrize("gz", [False, True])
def test_an_alibaba_pod_list_is_read_as_one_node_jobs(tmp_path: Path, gz: bool) -> None:
    path = write(tmp_path, "openb_pod_list_x.csv", PODS, gz)
    assert reader_for(path).name == "alibaba-pods"
    name, trace = load_trace(str(path))
    assert name == "openb_pod_list_x"
    assert [j.job_id for j in trace] == [1, 2]
    assert trace.skipped == {"never scheduled": 1}
    first = trace[0]
    assert (first.nodes, first.gpus, first.cpus, first.run_s, first.wait_s) == (1, 1, 8.0, 4840, 60)
    assert first.requested_walltime_s is None  # the trace has none; background load sets one


def test_alibaba_pods_make_background_load_with_slurm_like_limits(tmp_path: Path) -> None:
    rows = [POD_COLUMNS]
    for i in range(300):  # a pod a minute, 1-2 GPUs or none, runs of 2 min to 3 h
        gpus = (0, 1, 1, 2)[i % 4]
        run = 120 + (i * 397) % 10_800
        rows.append(f"p-{i:04d},4000,16384,{gpus},{1000 * bool(gpus)},,LS,Running,"
                    f"{60 * i},{60 * i + 5 + run},{60 * i + 5}")  # fmt: skip
    _, trace = load_trace(str(write(tmp_path, "pods.csv", "\n".join(rows) + "\n")))
    spec = load_sites(["delta"])[0]
    load = background_load(spec, trace, target_utilization=0.5, duration_s=6 * 3600, seed=1)
    assert load.jobs and {p.partition for p in load.partitions} == {p.name for p in spec.partitions}
    caps = {p.name: p.max_walltime_s for p in spec.partitions}
    for j in load.jobs:
        assert j.run_s <= j.walltime_s <= caps[j.partition]
        assert j.walltime_s in WALLTIME_LADDER_S or j.walltime_s in (caps[j.partition], j.run_s)


def test_a_log_whose_processors_are_nodes_gets_cores_per_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the shared file's name, in a folder of our own: the documented 64 cores per KNL node
    path = write(tmp_path, KNOWN_TRACES["ALCF-Theta"], THETA_LIKE, gz=True)
    name, trace = load_trace("ALCF-Theta", tmp_path)
    assert name == "ALCF-Theta" and NODE_CORES["ALCF-Theta-2023.swf"] == 64
    assert [(j.nodes, j.procs, j.cpus) for j in trace] == [
        (144, 9216, 9216.0), (128, 8192, 8192.0), (2560, 163840, 163840.0),
    ]  # fmt: skip
    assert (trace.max_nodes, trace.max_procs) == (4360, 4360 * 64)
    assert trace.header["MaxProcsInFile"] == "4360" and trace.header["CoresPerNode"] == "64"
    # epoch submit times under "UnixStartTime: 0" become offsets from the first submit
    assert [j.submit_s for j in trace] == [900.0, 10_000.0, 0.0]
    assert trace.unix_start_time == 1693546600
    # a path to the same file is read the same way
    assert load_trace(str(path))[1].jobs == trace.jobs
    # and the fraction of the machine each job asks for, what background load uses, is kept
    raw = load_swf(path)
    for a, b in zip(raw, trace, strict=True):
        assert a.procs is not None and b.procs is not None and raw.max_procs and trace.max_procs
        assert a.procs / raw.max_procs == b.procs / trace.max_procs


def with_cores(text: str, cores: str) -> str:
    return text.replace("; MaxNodes", f"; CoresPerNode: {cores}\n; MaxNodes")


def test_a_cores_per_node_header_line_works_for_any_log(tmp_path: Path) -> None:
    trace = load_trace(str(write(tmp_path, "cobalt.swf", with_cores(THETA_LIKE, "8"))))[1]
    assert [(j.nodes, j.procs) for j in trace][:2] == [(144, 1152), (128, 1024)]
    # MaxProcs = 4 x MaxNodes: the field counts processors already; nodes are derived
    trace = load_trace(str(write(tmp_path, "cores.swf", with_cores(SWF, "4"))))[1]
    assert [(j.nodes, j.procs) for j in trace] == [(4, 16), (1, 4)] and trace.max_procs == 400
    bad = write(tmp_path, "bad.swf", with_cores(SWF, "many"))
    with pytest.raises(TraceFormatError, match="CoresPerNode is not a whole number"):
        load_trace(str(bad))


def _message(path: Path, trace_dir: Path | None = None) -> str:
    with pytest.raises(TraceFormatError) as err:
        load_trace(str(path), trace_dir)
    return str(err.value)


@pytest.mark.parametrize(
    ("content", "gz", "error", "problem"),
    [
        (b"", False, NotATraceError, "is empty"),
        (b"", True, NotATraceError, "is empty (it decompresses to nothing)"),
        (b"\n  \n", False, NotATraceError, "is empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00", False, NotATraceError, "PNG image"),
        (b"BZh91AY&SY", False, NotATraceError, "bzip2-compressed"),
        (b"abc\x00\x01\x02", False, NotATraceError, "binary file"),
        (b"hello, this is a note\nnot a trace\n", False, NotATraceError, "not a trace this"),
        (b"a,b,c\n1,2,3\n", False, NotATraceError, "is a CSV whose columns (a, b, c)"),
        (b"Dear diary\nnothing here\n", False, NotATraceError, "first line: 'Dear diary'"),
        (b"sn,cpu_milli,memory_mib,gpu,model\nn-1,64000,262144,2,P100\n", False,
         NotATraceError, "columns (sn, cpu_milli, memory_mib, gpu, model) match no trace"),
        (b"1 2 3\n", False, NotATraceError, "not a trace this tool reads"),
        (b"; Version: 2.2\n; MaxProcs: 10\n", False, TraceFormatError, "has no usable job"),
        (b"; MaxProcs: 10\n1 0 0 -1 4 -1 -1 4 -1 -1 0 1 1 -1 1 -1 -1 -1\n", True,
         TraceFormatError, "skipped: run time unknown: 1"),
        (b"; MaxProcs: 10\n1 0 0 0 4 -1 -1 4 -1 -1 5 1 1 -1 1 -1 -1 -1\n", False,
         TraceFormatError, "none with a known run time > 0"),
        (POD_COLUMNS.encode() + b"\np-1,1000,10,0,0,,BE,Pending,5,,\n", False,
         TraceFormatError, "skipped: never scheduled: 1"),
    ],
)  # fmt: skip
def test_a_file_that_is_not_a_usable_trace_is_a_clear_error(
    tmp_path: Path, content: bytes, gz: bool, error: type[Exception], problem: str
) -> None:
    path = write(tmp_path, "x.swf" + ".gz" * gz, content, gz)
    with pytest.raises(error) as err:
        load_trace(str(path))
    message = str(err.value)
    assert message.startswith(f"{path}: ") and problem in message
    assert KNOWN in message and "Standard Workload Format" in message  # names and formats
    assert "Alibaba cluster-trace-gpu-v2023 pod list" in message
    assert "register_reader" in message


def test_damaged_files_name_the_line(tmp_path: Path) -> None:
    body = SWF.replace("2 60 0 120", "2 60 zero 120")
    assert "field 3 (wait time) is not a number: 'zero'" in _message(write(tmp_path, "a.swf", body))
    packed = gzip.compress((SWF * 2000).encode())
    cut = write(tmp_path, "cut.swf.gz", packed[: len(packed) // 2])
    assert "truncated gzip stream" in _message(cut)
    assert "damaged gzip data" in _message(write(tmp_path, "bad.gz", b"\x1f\x8b" + b"junk" * 9))


def test_missing_files_and_names_say_where_to_look(tmp_path: Path) -> None:
    with pytest.raises(TraceNotFoundError) as err:
        resolve_trace(str(tmp_path / "nope.swf"))
    assert "no such file" in str(err.value) and KNOWN in str(err.value)
    assert "Standard Workload Format" in str(err.value)
    with pytest.raises(TraceNotFoundError, match=r"did you mean KTH-SP2\?"):
        load_trace("KTH-SP3", tmp_path)
    with pytest.raises(TraceNotFoundError, match="FEDERATION_TRACES") as err:
        resolve_trace("KTH-SP2", tmp_path)
    assert f"is not in {tmp_path}" in str(err.value) and KNOWN_TRACES["KTH-SP2"] in str(err.value)
    write(tmp_path, "a.swf", SWF)
    with pytest.raises(TraceNotFoundError, match=r"is a folder \(it holds a.swf\)"):
        resolve_trace(str(tmp_path))
    with pytest.raises(TraceNotFoundError, match="empty trace name"):
        resolve_trace("  ")
    assert all_shared_traces(tmp_path) == []
    assert issubclass(TraceNotFoundError, TraceFormatError)


def test_names_ignore_case_and_bare_file_names_are_found_in_the_trace_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, KNOWN_TRACES["KTH-SP2"], SWF, gz=True)
    assert resolve_trace("kth-sp2", tmp_path) == ("KTH-SP2", path)
    monkeypatch.setenv("FEDERATION_TRACES", str(tmp_path))
    assert resolve_trace("KTH-SP2") == ("KTH-SP2", path)
    monkeypatch.chdir(tmp_path.parent)
    assert resolve_trace(KNOWN_TRACES["KTH-SP2"]) == ("KTH-SP2-1996-2.1-cln", path)
    assert all_shared_traces() == ["KTH-SP2"]


def test_another_format_plugs_in_through_a_reader(
    tmp_path: Path, readers: list[trace_readers.TraceReader]
) -> None:
    class OneLine:
        name = "one-line"
        description = "one-line: 'JOBS n'"

        def sniff(self, path: Path) -> bool:
            head = trace_readers.head_lines(path)
            return bool(head) and head[0].startswith("JOBS ")

        def load(self, path: Path) -> Trace:
            n = int(path.read_text().split()[1])
            return Trace(path, tuple(TraceJob(i, float(i), 0.0, 60.0, 1) for i in range(n)))

    path = write(tmp_path, "custom.log", "JOBS 3\n")
    with pytest.raises(NotATraceError):
        load_trace(str(path))
    register_reader(OneLine())
    register_reader(OneLine())  # the same name again replaces it
    assert [r.name for r in readers] == ["one-line", "swf", "alibaba-pods"]
    name, trace = load_trace(str(path))
    assert (name, len(trace)) == ("custom.log", 3)
    assert "one-line: 'JOBS n'" in _message(write(tmp_path, "other.txt", "nothing\n"))
    assert load_trace(str(write(tmp_path, "t.swf", SWF)))[1][0].job_id == 1  # swf still read


SHARED = default_trace_dir()


@pytest.mark.parametrize("name", list(KNOWN_TRACES))
def test_every_shared_trace_loads_by_name(name: str) -> None:
    if not (SHARED / KNOWN_TRACES[name]).is_file():
        pytest.skip(f"{KNOWN_TRACES[name]} is not in {SHARED} (the public traces are not in git)")
    got, trace = load_trace(name)
    assert got == name and len(trace) > 1000
    assert name in all_shared_traces()
    jobs = trace.jobs[:200]
    if name == "ALCF-Theta":  # nodes in the file, 64-core KNL nodes: procs are cores
        assert trace.max_procs == 64 * 4360 and trace.max_nodes == 4360
        assert all(j.nodes and j.procs == 64 * j.nodes and j.cpus == j.procs for j in jobs)
        assert min(j.submit_s for j in trace) == 0.0
    elif name == "KTH-SP2":  # one processor per node
        assert all(j.nodes == j.procs and j.cpus == j.procs for j in jobs)
    elif name == "CEA-Curie":  # processors are cores; nodes are not known per job
        assert trace.max_procs == 93312 and all(j.cpus == j.procs for j in jobs)
    else:  # Alibaba: one-node pods, no requested walltime
        assert all(j.nodes == 1 and j.requested_walltime_s is None for j in jobs)
        assert sum(j.gpus > 0 for j in trace) > 1000
