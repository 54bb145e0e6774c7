"""Trace loaders: SWF and Alibaba pods, their errors, and the real logs in shared/traces."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from federation.core.errors import FederationError
from federation.sim.traces import (
    TraceFormatError,
    TraceJob,
    default_trace_dir,
    iter_swf,
    load_alibaba_pods,
    load_swf,
    trace_stats,
)

HEADER = """; Version: 2.2
; Computer: test machine
; MaxNodes: 8
; MaxProcs: 8
; Partition: 1 batch
;
"""
ROWS = [
    "1 0 10 100 2 -1 -1 2 400 -1 1 7 1 -1 -1 1 -1 -1",
    "2 5 0 -1 1 -1 -1 1 100 -1 0 7 1 -1 -1 1 -1 -1",  # run time unknown: skipped
    "3 9 60 50 -1 -1 -1 -1 100 -1 5 8 1 -1 2 -1 -1 -1",  # size unknown: skipped
    "4 20 -1 30 -1 -1 -1 4 60 2048 5 -1 1 -1 -1 -1 -1 -1",  # requested procs used
    "   5   30   0   0   1  -1  -1   1   -1   -1  1  9  1 -1 -1 1 -1 -1",  # leading blanks
]


def write(tmp_path: Path, name: str, text: str, gz: bool = False) -> Path:
    path = tmp_path / name
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("limit", [None, 100])  # None: the pandas fast path; else streaming
def test_load_swf_fields_header_and_skips(tmp_path: Path, gz: bool, limit: int | None) -> None:
    path = write(tmp_path, "t.swf", HEADER + "\n".join(ROWS) + "\n", gz)
    trace = load_swf(path, limit)
    assert [j.job_id for j in trace] == [1, 4, 5]
    assert trace.skipped == {
        "run time unknown": 1,
        "size unknown (allocated and requested processors <= 0)": 1,
    }
    assert trace.records == 5
    assert (trace.max_nodes, trace.max_procs) == (8, 8)
    assert trace.header["Computer"] == "test machine"
    assert trace.partitions == {1: "batch"}
    first = trace[0]
    assert first == TraceJob(
        job_id=1,
        submit_s=0.0,
        wait_s=10.0,
        run_s=100.0,
        procs=2,
        nodes=2,  # MaxNodes == MaxProcs: procs count nodes
        requested_walltime_s=400.0,
        status="completed",
        partition="batch",
        user=7,
    )
    assert (first.start_s, first.end_s) == (10.0, 110.0)
    fourth = trace[1]
    assert (fourth.procs, fourth.wait_s, fourth.mem_mb, fourth.status) == (
        4,
        None,
        2.0,
        "cancelled",
    )
    assert fourth.user is None and fourth.partition is None
    assert trace[2].requested_walltime_s is None and trace[2].run_s == 0.0


def test_fast_and_streaming_paths_agree(tmp_path: Path) -> None:
    path = write(tmp_path, "t.swf", HEADER + "\n".join(ROWS * 20) + "\n", gz=True)
    fast = load_swf(path)
    slow = load_swf(path, limit=10_000)
    assert fast.jobs == slow.jobs and fast.skipped == slow.skipped
    assert list(iter_swf(path)) == list(fast.jobs)


def test_procs_per_node_and_keep_unknown(tmp_path: Path) -> None:
    text = "; MaxNodes: 2\n; MaxProcs: 64\n" + "\n".join(ROWS) + "\n"
    path = write(tmp_path, "t.swf", text)
    cores = load_swf(path)
    assert cores[0].nodes is None and cores[0].cpus == 2.0
    per_node = load_swf(path, procs_per_node=32, skip_unknown=False)
    assert len(per_node) == 5 and per_node.skipped == {}
    assert [j.nodes for j in per_node] == [1, 1, None, 1, 1]
    assert per_node[1].run_s is None


def test_comment_lines_inside_the_body_are_fine(tmp_path: Path) -> None:
    text = HEADER + ROWS[0] + "\n; a note in the middle\n\n" + ROWS[3] + "\n"
    trace = load_swf(write(tmp_path, "t.swf", text))
    assert [j.job_id for j in trace] == [1, 4]


@pytest.mark.parametrize("limit", [None, 100])
@pytest.mark.parametrize(
    ("bad_row", "problem"),
    [
        ("6 40 0 10 1 -1 -1 1 100 -1 1 7 1 -1 -1 1 -1", "expected 18 whitespace-separated SWF"),
        ("6 40 0 10 1 -1 -1 1 100 -1 1 7 1 -1 -1 1 -1 -1 9", "found 19"),
        ("6 40 0 ten 1 -1 -1 1 100 -1 1 7 1 -1 -1 1 -1 -1", "field 4 (run time) is not a number"),
        ("6 40 0 nan 1 -1 -1 1 100 -1 1 7 1 -1 -1 1 -1 -1", "field 4 (run time) is not a finite"),
    ],
)
def test_malformed_swf_names_file_and_line(
    tmp_path: Path, bad_row: str, problem: str, limit: int | None
) -> None:
    text = HEADER + "\n".join([*ROWS[:2], bad_row, *ROWS[2:]]) + "\n"
    path = write(tmp_path, "bad.swf", text)
    with pytest.raises(TraceFormatError) as info:
        load_swf(path, limit)
    err = info.value
    assert err.line == 9  # 6 header lines, then rows 1, 2 and the bad one
    assert err.path == path
    assert str(path) in str(err) and "line 9" in str(err) and problem in str(err)
    assert isinstance(err, FederationError) and isinstance(err, ValueError)


@pytest.mark.parametrize("limit", [None, 100_000])
def test_truncated_gzip_names_the_line(tmp_path: Path, limit: int | None) -> None:
    rows = "\n".join(f"{i} {i} 0 10 1 -1 -1 1 100 -1 1 7 1 -1 -1 1 -1 -1" for i in range(5000))
    data = gzip.compress((HEADER + rows + "\n").encode())
    path = tmp_path / "cut.swf.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match=r"cut\.swf\.gz: line \d+: truncated gzip") as info:
        load_swf(path, limit)
    assert info.value.line is not None and 6 < info.value.line < 5007
    assert "not copied completely" in str(info.value)


def test_corrupt_gzip_and_missing_file(tmp_path: Path) -> None:
    data = bytearray(gzip.compress((HEADER + "\n".join(ROWS) + "\n").encode()))
    data[20:30] = b"\xff" * 10
    path = tmp_path / "corrupt.swf.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError, match=r"line 1: corrupt gzip data"):
        load_swf(path)
    with pytest.raises(TraceFormatError, match="cannot read the file"):
        load_swf(tmp_path / "nope.swf")


def test_concatenated_gzip_members_are_one_file(tmp_path: Path) -> None:
    path = tmp_path / "two.swf.gz"
    path.write_bytes(
        gzip.compress((HEADER + ROWS[0] + "\n").encode()) + gzip.compress((ROWS[3] + "\n").encode())
    )
    assert [j.job_id for j in load_swf(path)] == [1, 4]


COLUMNS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase"
ALIBABA = f"""{COLUMNS},creation_time,deletion_time,scheduled_time
openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0
openb-pod-0007,6000,12288,2,460,V100M16,BE,Failed,100,400,150
openb-pod-0008,4000,8192,1,1000,,BE,Pending,200,300,
openb-pod-0009,8000,8192,0,0,,Burstable,Succeeded,300,900,310
"""


def test_load_alibaba_pods(tmp_path: Path) -> None:
    trace = load_alibaba_pods(write(tmp_path, "pods.csv", ALIBABA, gz=True))
    assert [j.job_id for j in trace] == [0, 7, 9]
    assert trace.skipped == {"never scheduled": 1}
    pod = trace[1]
    assert (pod.submit_s, pod.wait_s, pod.run_s) == (100.0, 50.0, 250.0)
    assert (pod.cpus, pod.mem_mb, pod.gpus, pod.gpu_fraction) == (6.0, 12288.0, 2, 0.46)
    assert (pod.gpu_type, pod.queue, pod.status, pod.name) == (
        "V100M16",
        "BE",
        "failed",
        "openb-pod-0007",
    )
    assert pod.nodes == 1 and pod.requested_walltime_s is None
    gpu = load_alibaba_pods(write(tmp_path, "pods2.csv", ALIBABA), gpu_only=True)
    assert [j.job_id for j in gpu] == [0, 7]
    assert gpu.skipped == {"never scheduled": 1, "no GPU (gpu_only)": 1}


def test_malformed_alibaba(tmp_path: Path) -> None:
    bad = ALIBABA.replace("openb-pod-0007,6000", "openb-pod-0007,six")
    with pytest.raises(TraceFormatError, match=r"line 3: column 'cpu_milli' is not a number"):
        load_alibaba_pods(write(tmp_path, "a.csv", bad))
    short = ALIBABA.replace(",LS,Running,0,12537496,0", ",LS,Running,0")
    with pytest.raises(TraceFormatError, match=r"line 2: expected 11 comma-separated fields"):
        load_alibaba_pods(write(tmp_path, "b.csv", short))
    with pytest.raises(TraceFormatError, match=r"line 1: .*lacks column\(s\) num_gpu"):
        load_alibaba_pods(write(tmp_path, "c.csv", ALIBABA.replace("num_gpu", "gpus")))


def test_trace_stats(tmp_path: Path) -> None:
    trace = load_swf(write(tmp_path, "t.swf", HEADER + "\n".join(ROWS) + "\n"))
    st = trace_stats(trace)
    assert (st.jobs, st.first_submit_s, st.last_submit_s, st.span_s) == (3, 0.0, 30.0, 30.0)
    assert st.median_run_s == 30.0 and st.median_wait_s == 5.0
    assert st.jobs_with_ratio == 2  # job 5 has no request
    assert st.median_runtime_ratio == pytest.approx((100 / 400 + 30 / 60) / 2)
    assert st.proc_seconds == 2 * 100 + 4 * 30
    assert trace_stats([]).jobs == 0


def test_default_trace_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FEDERATION_TRACES", str(tmp_path))
    assert default_trace_dir() == tmp_path
    monkeypatch.delenv("FEDERATION_TRACES")
    assert default_trace_dir().parts[-2:] == ("shared", "traces")


# -- the real logs (skipped when shared/traces is absent) ---------------------------------------


def real(name: str) -> Path:
    path = default_trace_dir() / name
    if not path.is_file():
        pytest.skip(f"{name} not in {default_trace_dir()} (set FEDERATION_TRACES to its folder)")
    return path


def test_kth_sp2_log() -> None:
    trace = load_swf(real("KTH-SP2-1996-2.1-cln.swf.gz"))  # 28k jobs, 0.1 s
    assert len(trace) == 27_992 and trace.skipped == {}
    assert (trace.max_nodes, trace.max_procs) == (100, 100)
    assert all(j.nodes == j.procs for j in trace.jobs[:100])
    st = trace_stats(trace)
    assert st.median_runtime_ratio == pytest.approx(0.40, abs=0.01)
    assert st.span_s / 86400 == pytest.approx(333, abs=1)


def test_cea_curie_log_prefix_streams() -> None:
    path = real("CEA-Curie-2011-2.1-cln.swf.gz")
    head = load_swf(path, limit=5000)
    assert head.records == 5000
    assert head.header["Installation"] == "CEA Curie Cluster"
    assert head.partitions[10] == "standard"
    assert head[0].nodes is None and head[0].cpus == head[0].procs  # procs are cores here


def test_cea_curie_runtime_ratio() -> None:
    trace = load_swf(real("CEA-Curie-2011-2.1-cln.swf.gz"))  # whole file: about 1 s
    assert trace.records == 312_826
    assert sum(trace.skipped.values()) == 19
    ratio = trace_stats(trace).median_runtime_ratio
    assert ratio is not None and ratio < 0.02


def test_theta_and_alibaba_logs() -> None:
    theta = load_swf(real("ALCF-Theta-2023.swf.gz"), limit=2000)
    assert len(theta) == 2000 and all(j.nodes == j.procs for j in theta)
    pods = load_alibaba_pods(real("alibaba-openb_pod_list_default.csv"), limit=3000)
    assert pods.records == 3000
    assert {j.gpus for j in pods} <= set(range(9))
