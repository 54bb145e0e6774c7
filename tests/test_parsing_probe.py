"""The probe function and the snapshot builder: recorded 22.05 outputs, fake Slurm commands,
garbage and truncated output, and a generated queue of 50,000 jobs."""

from __future__ import annotations

import copy
import inspect
import json
import os
import re
import shutil
import stat
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from federation.core.errors import ParseError, ProbeError
from federation.core.snapshot import FederationSnapshot, JobRecord
from federation.parsing.common import RECORD_SEP, UNIT_SEP
from federation.parsing.scontrol import parse_scontrol_jobs, parse_scontrol_nodes
from federation.parsing.sinfo import SINFO_FIELDS, parse_sinfo, parse_sinfo_json
from federation.parsing.snapshot_builder import build_site_snapshot, unreachable_snapshot
from federation.parsing.squeue import (
    SQUEUE_FIELDS,
    SQUEUE_FIELDS_NODES,
    _Builder,
    parse_squeue,
    parse_squeue_json,
)
from federation.parsing.squeue_start import (
    START_FIELDS,
    parse_squeue_start,
    parse_squeue_start_default,
)
from federation.parsing.synthetic import BASE, PARTITIONS, expected_counts, synthetic_probe
from functions.probes import probe_slurm

RECORDED = Path(__file__).parent / "fixtures" / "probe_output"
T = datetime(2026, 12, 2, tzinfo=UTC)


def recorded(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RECORDED / name).read_text())
    return data


def at(hh: int, mm: int, ss: int) -> datetime:
    return T.replace(hour=hh, minute=mm, second=ss)


# --- recorded on Slurm 22.05.8 ------------------------------------------------------------


@pytest.fixture(scope="module")
def probetest() -> dict[str, Any]:
    return recorded("probetest-22.05.8.json")


def test_recorded_probe_nodes(probetest: dict[str, Any]) -> None:
    nodes = parse_sinfo(probetest["sinfo"]["stdout"], probetest["sinfo"]["fields"])
    assert len(nodes) == 11  # 5 nodes, several in two or three partitions
    by = {(n.name, n.partition): n for n in nodes}
    down = by["pc-cpu-02", "cpu"]
    assert (down.state, down.state_flags, down.reason) == (
        "down",
        ("not_responding",),
        "slurmd not started",
    )
    drained = by["pc-cpu-03", "cpu"]
    assert (drained.state, drained.reason) == ("drained", "disk|failure; see ticket #42")
    draining = by["pc-gpu-02", "gpu"]
    assert (draining.state, draining.cpus_alloc, draining.cpus_total) == ("draining", 6, 16)
    assert draining.gpus_alloc_by_type == {"a100": 4} and not draining.usable
    mixed = by["pc-gpu-01", "gpu"]
    assert mixed.gpus_total_by_type == {"a100": 2, "v100": 1}
    assert mixed.gpus_alloc_by_type == {"a100": 1}
    assert (mixed.cpus_alloc, mixed.mem_mb_total, mixed.mem_mb_alloc) == (10, 64000, 23192)
    assert mixed.features == ("x86_64", "a100", "v100")
    assert mixed.gpus_free() == 2 and mixed.gpus_free("v100") == 1
    assert by["pc-cpu-01", "cpu"].gpus_total_by_type == {}  # Gres=(null), GresUsed=gpu:0


def test_recorded_probe_jobs(probetest: dict[str, Any]) -> None:
    jobs = {j.job_id: j for j in parse_squeue(probetest["squeue"]["stdout"])}
    assert len(jobs) == 13
    assert Counter(j.state for j in jobs.values()) == {"running": 5, "pending": 7, "held": 1}
    gpu = jobs["2"]
    assert (gpu.name, gpu.gpus, gpu.gpu_type, gpu.mem_mb) == ("gpu run|with pipe", 1, "a100", 8192)
    assert (gpu.start_time, gpu.end_time) == (at(13, 50, 22), at(15, 50, 22))
    assert (jobs["4"].gpus, jobs["4"].gpu_type) == (2, None)  # --gpus=2: tres-per-job
    assert (jobs["8"].gpus, jobs["8"].gpu_type) == (2, "a100")  # --gpus-per-task x 2 tasks
    assert jobs["8"].mem_mb == 2000  # --mem-per-cpu=1000 x 2 CPUs
    assert (jobs["5"].nodes, jobs["5"].cpus, jobs["5"].mem_mb) == (2, 16, 15000)
    assert jobs["7_[1-5]"].reason == "Dependency" and jobs["7_[1-5]"].name == "name with spaces"
    assert jobs["6"].reason == "JobHeldUser" and jobs["6"].priority == 0
    assert jobs["11"].partition == "gpu,cpu"
    assert jobs["13"].reason == "ReqNodeNotAvail, UnavailableNodes:pc-cpu-03"
    assert jobs["9"].time_limit_s == 4 * 3600 and jobs["7_[1-5]"].time_limit_s == 600
    starts = parse_squeue_start(probetest["squeue_start"]["stdout"])
    assert starts["8"].start_time == at(15, 50, 22) and starts["8"].sched_nodes == "pc-gpu-01"
    assert starts["5"].start_time is None and len(starts) == 8


def test_recorded_probe_snapshot(probetest: dict[str, Any]) -> None:
    now = datetime.fromisoformat(probetest["started_at"]) + timedelta(seconds=12)
    snap = build_site_snapshot("probetest", probetest, now=now)
    assert snap.health.reachable and snap.health.probe_age_s == pytest.approx(12)
    assert snap.health.warnings == () and snap.slurm_version == "22.05.8"
    assert snap.taken_at == datetime.fromisoformat(probetest["started_at"])
    assert [p.partition for p in snap.partitions] == ["cpu", "gpu", "all", "debug"]
    cpu, gpu, all_, debug = snap.partitions
    assert cpu.default and cpu.state == "up" and cpu.max_time_s == 2 * 86400
    assert cpu.nodes_by_state == {"mixed": 1, "down": 1, "drained": 1}
    assert (cpu.cpus_total, cpu.cpus_alloc, cpu.cpus_idle, cpu.cpus_unavailable) == (24, 4, 4, 16)
    assert (cpu.jobs_running, cpu.jobs_pending, cpu.jobs_held) == (1, 4, 1)
    assert cpu.pending_reasons == {
        "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority "
        "partitions": 1,
        "Dependency": 1,
        "ReqNodeNotAvail": 1,
        "JobHeldUser": 1,
        "BadConstraints": 1,
    }
    # job 11 is pending in gpu,cpu; Slurm plans it on pc-gpu-01, so its estimate is gpu's
    assert cpu.earliest_pending_start is None and cpu.latest_pending_start is None
    assert gpu.gpus_total_by_type == {"a100": 6, "v100": 1}
    assert gpu.gpus_alloc_by_type == {"a100": 5} and gpu.gpus_idle_by_type == {"a100": 1, "v100": 1}
    assert (gpu.cpus_total, gpu.cpus_alloc, gpu.cpus_idle, gpu.cpus_unavailable) == (32, 16, 6, 10)
    assert (gpu.mem_gb_total, gpu.mem_gb_alloc) == (125.0, 42.648)
    assert (gpu.jobs_running, gpu.jobs_pending) == (3, 3)
    assert (gpu.earliest_pending_start, gpu.latest_pending_start) == (at(15, 50, 22), at(16, 0, 0))
    assert all_.max_time_s is None and all_.nodes_total == 5 and all_.jobs_running == 1
    assert debug.state == "down" and debug.pending_reasons == {"PartitionDown": 1}
    frame = FederationSnapshot(taken_at=now, sites=(snap,)).partitions_frame()
    assert list(frame["gpus_total"]) == [0, 7, 7, 0]


def test_recorded_probe_of_an_idle_federation_site() -> None:
    snap = build_site_snapshot("delta", recorded("delta-22.05.8.json"))
    assert [(p.partition, p.nodes_total, p.cpus_total, p.cpus_idle) for p in snap.partitions] == [
        ("cpu", 2, 256, 256),
        ("gpuA100x4", 2, 128, 128),
        ("gpuA40x4", 2, 128, 128),
    ]
    assert snap.partition("gpuA100x4").gpus_total_by_type == {"a100": 8}  # type: ignore[union-attr]
    assert snap.partition("gpuA40x4").gpus_idle_by_type == {"a40": 8}  # type: ignore[union-attr]
    assert all(n.state == "idle" for n in snap.nodes) and snap.jobs == ()
    assert snap.partition("cpu").mem_gb_total == 512.0  # type: ignore[union-attr]


def test_recorded_probe_without_slurm_conf_is_a_clear_probe_error() -> None:
    probe = recorded("noconf-22.05.8.json")
    assert probe["sinfo"]["rc"] == 1 and probe["version"]["rc"] == 1
    with pytest.raises(ProbeError, match=r"rc=1: sinfo: error: resolve_ctls_from_dns_srv"):
        build_site_snapshot("x", probe)


def test_recorded_json_agrees_with_the_probe_text(probetest: dict[str, Any]) -> None:
    text_nodes = parse_sinfo(probetest["sinfo"]["stdout"])
    json_nodes = parse_sinfo_json((RECORDED / "probetest-sinfo-json-22.05.8.json").read_text())
    assert len(json_nodes) == len(text_nodes) == 11
    assert sorted(json_nodes, key=lambda n: (n.name, n.partition)) == sorted(
        text_nodes, key=lambda n: (n.name, n.partition)
    ), "sinfo --json and the probe's sinfo -O disagree"
    text_jobs = {j.job_id: j for j in parse_squeue(probetest["squeue"]["stdout"])}
    json_jobs = {
        j.job_id: j
        for j in parse_squeue_json((RECORDED / "probetest-squeue-json-22.05.8.json").read_text())
    }
    assert set(json_jobs) == set(text_jobs)
    for jid, j in json_jobs.items():
        t = text_jobs[jid]
        assert (j.state, j.partition, j.nodes, j.cpus, j.gpus) == (
            t.state,
            t.partition,
            t.nodes,
            t.cpus,
            t.gpus,
        ), jid
        assert (j.mem_mb, j.time_limit_s, j.submit_time) == (
            t.mem_mb,
            t.time_limit_s,
            t.submit_time,
        )


def test_recorded_scontrol_agrees_with_the_probe_text(probetest: dict[str, Any]) -> None:
    jobs = parse_scontrol_jobs((RECORDED / "probetest-scontrol-show-job-22.05.8.txt").read_text())
    text_jobs = {j.job_id: j for j in parse_squeue(probetest["squeue"]["stdout"])}
    assert {j.job_id for j in jobs} == set(text_jobs)
    for j in jobs:
        t = text_jobs[j.job_id]
        assert (j.state, j.partition, j.gpus, j.mem_mb, j.time_limit_s) == (
            t.state,
            t.partition,
            t.gpus,
            t.mem_mb,
            t.time_limit_s,
        ), j.job_id
    nodes = parse_scontrol_nodes(
        (RECORDED / "probetest-scontrol-show-node-22.05.8.txt").read_text()
    )
    assert [(n.name, n.state) for n in nodes if n.partition != "all"] == [
        ("pc-cpu-02", "down"),
        ("pc-cpu-03", "drained"),
        ("pc-gpu-01", "mixed"),
        ("pc-gpu-02", "draining"),
    ]
    assert nodes[2].reason == "disk|failure; see ticket #42"  # [root@...] stamp dropped


def test_recorded_default_squeue_start() -> None:
    warnings: list[str] = []
    est = parse_squeue_start_default(
        (RECORDED / "probetest-squeue-start-22.05.8.txt").read_text(), warnings=warnings
    )
    assert warnings == [] and len(est) == 8
    assert est["8"].start_time == at(15, 50, 22) and est["8"].sched_nodes == "pc-gpu-01"
    assert est["11"].partition == "gpu,cpu" and est["11"].start_time == at(16, 0, 0)
    assert est["7_[1-5]"].start_time is None and est["7_[1-5]"].reason == "Dependency"
    assert est["13"].reason == "ReqNodeNotAvail, UnavailableNodes:pc-cpu-03"


# --- garbage, truncation and failures ---------------------------------------------------------


def _with(probe: dict[str, Any], name: str, **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(probe)
    out[name].update(changes)
    return out


def test_garbage_probe_names_the_line() -> None:
    garbage = {"sinfo": {"rc": 0, "stdout": "\x00\x01 not sinfo at all", "stderr": ""}}
    with pytest.raises(ParseError, match="sinfo line 1: NUL byte"):
        build_site_snapshot("x", garbage)


@pytest.mark.parametrize(
    ("command", "mangle", "needle"),
    [
        ("sinfo", lambda s: s[: len(s) * 3 // 5], r"sinfo line \d+: record not closed by 0x1E"),
        ("sinfo", lambda s: s.replace(UNIT_SEP, "", 1), "sinfo line 1: expected 11 fields"),
        (
            "sinfo",
            lambda s: s.replace("64000", "64GB", 1),
            r"sinfo line 8: Memory: expected a whole number, got '64GB'",
        ),
        ("sinfo", lambda s: s.replace("4/4/0/8", "4/4/8", 1), "sinfo line 1: CPUsState '4/4/8'"),
        (
            "sinfo",
            lambda s: "NODELIST NODES PARTITION STATE\nn1 1 cpu* idle\n",
            "sinfo line 1: record not closed by 0x1E",
        ),
        ("squeue", lambda s: s[:-40], r"squeue line 1[0-9]: record not closed"),
        (
            "squeue",
            lambda s: s.replace(f"{UNIT_SEP}2026-12-02T13:50:22", f"{UNIT_SEP}13:50 Dec 2", 1),
            r"squeue record 1: timestamp '13:50 Dec 2'",
        ),
        (
            "squeue",
            lambda s: s.replace(
                f"{UNIT_SEP}multipart{UNIT_SEP}1{UNIT_SEP}8",
                f"{UNIT_SEP}multipart{UNIT_SEP}1{UNIT_SEP}eight",
                1,
            ),
            r"squeue record 1: NumCPUs: expected a number, got 'eight'",
        ),
        ("squeue_start", lambda s: s.rstrip("\n")[:-3], r"squeue --start line 8: record not"),
        ("scontrol_partition", lambda s: "garbage\n" + s, "scontrol line 1: expected Key=value"),
    ],
)
def test_mangled_output_is_a_parse_error_naming_the_line(
    probetest: dict[str, Any], command: str, mangle: Callable[[str], str], needle: str
) -> None:
    bad = _with(probetest, command, stdout=mangle(probetest[command]["stdout"]))
    with pytest.raises(ParseError, match=needle):
        build_site_snapshot("x", bad)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda p: p.pop("squeue"), "probe result has no 'squeue' command"),
        (
            lambda p: p["squeue"].update(rc=1, stderr="squeue: error: Invalid user: bob\n"),
            r"`squeue --noheader --noconvert` exited with rc=1: squeue: error: Invalid user",
        ),
        (
            lambda p: p["sinfo"].update(rc=None, timed_out=True, duration_s=20.0),
            r"`sinfo --noheader --Node` timed out after 20.0 s",
        ),
        (
            lambda p: p["scontrol_partition"].update(rc=None, error="command not found: scontrol"),
            "did not run: command not found: scontrol",
        ),
        (lambda p: p.update(format=2), "probe format 2 is not supported"),
        (lambda p: p.pop("started_at"), "no 'started_at' timestamp"),
        (lambda p: p["sinfo"].update(stdout=""), "`sinfo` listed no nodes"),
        (lambda p: p["squeue"].update(stdout=None), "stdout is NoneType"),
        (lambda p: p["sinfo"].update(fields=["NodeList"]), "probe field list"),
    ],
)
def test_failed_commands_are_probe_errors(
    probetest: dict[str, Any], change: Callable[[dict[str, Any]], object], needle: str
) -> None:
    bad = copy.deepcopy(probetest)
    change(bad)
    with pytest.raises(ProbeError, match=needle):
        build_site_snapshot("x", bad)


def test_not_a_dict_is_a_probe_error() -> None:
    with pytest.raises(ProbeError, match="expected a dict"):
        build_site_snapshot("x", [1, 2])  # type: ignore[arg-type]


def test_optional_commands_only_warn(probetest: dict[str, Any]) -> None:
    bad = copy.deepcopy(probetest)
    bad["squeue_start"].update(rc=1, stderr="squeue: error: slurm_load_jobs error\n")
    bad["version"].update(rc=None, error="command not found: sinfo")
    snap = build_site_snapshot("x", bad)
    assert snap.slurm_version is None and len(snap.health.warnings) == 2
    assert "no start estimates" in snap.health.warnings[0]
    # estimates then come from squeue's own StartTime of pending jobs
    assert snap.partition("gpu").earliest_pending_start == at(15, 50, 22)  # type: ignore[union-attr]


def test_unreachable_snapshot() -> None:
    snap = unreachable_snapshot("vista", "probe timed out after 30 s", now=T)
    assert (snap.site, snap.taken_at, snap.partitions) == ("vista", T, ())
    assert not snap.health.reachable and snap.health.error == "probe timed out after 30 s"
    assert snap.health.probe_age_s == 0


# --- the probe function itself, against fake Slurm commands ------------------------------------

SCRIPTS = {
    "sinfo": """case "$*" in
  *--version*) exec /bin/cat "$FAKE/version.out" ;;
  *StateComplete*) if [ -f "$FAKE/old" ]; then
      echo 'sinfo: error: Invalid node format specification: StateComplete' >&2; exit 1; fi
      exec /bin/cat "$FAKE/sinfo.out" ;;
  *) exec /bin/cat "$FAKE/sinfo_old.out" ;;
esac""",
    "squeue": """/usr/bin/env > "$FAKE/squeue.env"
case "$*" in
  *--start*) exec /bin/cat "$FAKE/start.out" ;;
  *NodeList*) if [ -f "$FAKE/slow" ]; then exec /bin/sleep 30; fi
      exec /bin/cat "$FAKE/squeue_nodes.out" ;;
  *) exec /bin/cat "$FAKE/squeue.out" ;;
esac""",
    "scontrol": 'exec /bin/cat "$FAKE/scontrol.out"',
}


def recorded_node_lists() -> dict[str, str]:
    """Job id -> NodeList in the recorded ``scontrol show job`` (empty while pending)."""
    text = (RECORDED / "probetest-scontrol-show-job-22.05.8.txt").read_text()
    return dict(re.findall(r"^JobId=(\d+) .*?^ +NodeList=(\S*)", text, re.M | re.S))


@pytest.fixture
def fake_slurm(
    tmp_path: Path, probetest: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """sinfo/squeue/scontrol scripts on PATH that print the recorded 22.05 outputs."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in SCRIPTS.items():
        script = bindir / name
        script.write_text("#!/bin/sh\n" + body + "\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    outputs = {
        "version.out": probetest["version"]["stdout"],
        "sinfo.out": probetest["sinfo"]["stdout"],
        "squeue.out": probetest["squeue"]["stdout"],
        "start.out": probetest["squeue_start"]["stdout"],
        "scontrol.out": probetest["scontrol_partition"]["stdout"],
    }
    # what an old sinfo without StateComplete prints for the reduced field list
    i = SINFO_FIELDS.index("StateComplete")
    rows = [r.split(UNIT_SEP) for r in probetest["sinfo"]["stdout"].split(RECORD_SEP + "\n") if r]
    outputs["sinfo_old.out"] = "".join(
        UNIT_SEP.join(r[:i] + r[i + 1 :]) + RECORD_SEP + "\n" for r in rows
    )
    # what squeue prints for today's field list: the recorded queue plus each job's NodeList
    # (as the recorded scontrol show job of the same queue has it)
    outputs["squeue_nodes.out"] = "".join(
        r + UNIT_SEP + recorded_node_lists().get(r.split(UNIT_SEP)[0], "") + RECORD_SEP + "\n"
        for r in probetest["squeue"]["stdout"].split(RECORD_SEP + "\n")
        if r
    )
    for name, text in outputs.items():
        (tmp_path / name).write_text(text)
    monkeypatch.setenv("FAKE", str(tmp_path))
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setenv("SQUEUE_USERS", "nobody")  # would filter the queue if passed on
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")  # would break timestamps
    yield tmp_path


def test_probe_runs_and_its_output_builds_the_same_snapshot(
    fake_slurm: Path, probetest: dict[str, Any]
) -> None:
    raw = probe_slurm(timeout_s=10)
    for name in ("version", "sinfo", "squeue", "squeue_start", "scontrol_partition"):
        entry = raw[name]
        assert isinstance(entry, dict)
        assert (entry["rc"], entry["timed_out"], entry["error"]) == (0, False, None), name
        out = (fake_slurm / "squeue_nodes.out").read_text() if name == "squeue" else None
        assert entry["stdout"] == (out or probetest[name]["stdout"]), name
        assert isinstance(entry["duration_s"], float) and entry["stderr"] == ""
    assert raw["probe"] == "slurm" and raw["format"] == 1
    assert raw["hostname"] and isinstance(raw["utc_offset_s"], int)
    started = datetime.fromisoformat(str(raw["started_at"]))
    assert started.tzinfo is not None and abs(datetime.now(UTC) - started) < timedelta(seconds=30)
    ours = build_site_snapshot("probetest", raw)
    theirs = build_site_snapshot("probetest", probetest)  # recorded before NodeList
    assert ours.partitions == theirs.partitions
    assert [j.model_copy(update={"node_names": ()}) for j in ours.jobs] == list(theirs.jobs)
    assert all(not j.node_names for j in theirs.jobs)
    held = {j.job_id: j.node_names for j in ours.jobs if j.node_names}
    assert held == {
        "1": ("pc-cpu-01",),
        "2": ("pc-gpu-01",),
        "3": ("pc-gpu-02",),
        "4": ("pc-gpu-02",),
        "10": ("pc-gpu-01",),
    }
    assert {j.job_id for j in ours.jobs if j.state == "running"} == set(held)
    # the environment Slurm saw: filters dropped, ISO timestamps forced
    env = (fake_slurm / "squeue.env").read_text()
    assert "SQUEUE_USERS" not in env and "SLURM_TIME_FORMAT=standard" in env


def test_probe_field_lists_match_the_parsers(fake_slurm: Path) -> None:
    raw = probe_slurm(timeout_s=10)
    sinfo, squeue, start = raw["sinfo"], raw["squeue"], raw["squeue_start"]
    assert isinstance(sinfo, dict) and isinstance(squeue, dict) and isinstance(start, dict)
    assert tuple(sinfo["fields"]) == SINFO_FIELDS
    assert tuple(squeue["fields"]) == SQUEUE_FIELDS_NODES
    assert tuple(start["fields"]) == START_FIELDS
    fmt = sinfo["argv"][-1]
    # every -O field has an explicit empty width: "Name:" + separator, or it is truncated
    assert fmt.split(",") == [f"{f}:{UNIT_SEP}" for f in SINFO_FIELDS[:-1]] + [
        f"{SINFO_FIELDS[-1]}:{RECORD_SEP}"
    ]
    assert "--start" in start["argv"] and "--format" in start["argv"]  # --start ignores -O


def test_probe_is_self_contained_when_shipped_by_source(fake_slurm: Path) -> None:
    from globus_compute_sdk.serialize import ComputeSerializer
    from globus_compute_sdk.serialize.concretes import DillCodeSource, PureSourceTextInspect

    for strategy in (PureSourceTextInspect(), DillCodeSource()):
        serde = ComputeSerializer(strategy_code=strategy)
        fn = serde.deserialize(serde.serialize(probe_slurm))
        raw = fn(5.0)
        assert raw["sinfo"]["rc"] == 0 and raw["sinfo"]["stdout"], type(strategy).__name__
    # and with nothing but builtins around it
    namespace: dict[str, Any] = {"__builtins__": __builtins__}
    exec(compile(inspect.getsource(probe_slurm), "<shipped>", "exec"), namespace)
    assert namespace["probe_slurm"](5.0)["squeue"]["rc"] == 0


def test_probe_records_missing_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    raw = probe_slurm(timeout_s=5)
    for name in ("version", "sinfo", "squeue", "squeue_start", "scontrol_partition"):
        entry = raw[name]
        assert isinstance(entry, dict) and entry["rc"] is None
        assert str(entry["error"]).startswith("command not found:"), name
    with pytest.raises(ProbeError, match="did not run: command not found: sinfo"):
        build_site_snapshot("x", raw)


def test_probe_records_a_timeout_and_keeps_the_rest(fake_slurm: Path) -> None:
    (fake_slurm / "slow").touch()
    begin = time.monotonic()
    raw = probe_slurm(timeout_s=1.5)
    assert time.monotonic() - begin < 8
    squeue = raw["squeue"]
    assert isinstance(squeue, dict)
    assert squeue["timed_out"] is True and squeue["rc"] is None
    assert "timed out after" in str(squeue["error"])
    sinfo = raw["sinfo"]
    assert isinstance(sinfo, dict) and sinfo["rc"] == 0 and sinfo["stdout"]
    with pytest.raises(ProbeError, match="`squeue --noheader --noconvert` timed out"):
        build_site_snapshot("x", raw)


def test_probe_falls_back_when_state_complete_is_unknown(fake_slurm: Path) -> None:
    (fake_slurm / "old").touch()
    raw = probe_slurm(timeout_s=10)
    sinfo = raw["sinfo"]
    assert isinstance(sinfo, dict) and "StateComplete" not in sinfo["fields"]
    assert "Invalid node format" in sinfo["first_attempt"]["stderr"]
    snap = build_site_snapshot("x", raw)
    assert "StateComplete unsupported" in snap.health.warnings[0]
    nodes = {(n.name, n.partition): n for n in snap.nodes}
    assert nodes["pc-cpu-02", "cpu"].state_flags == ("not_responding",)  # from "down*"
    assert nodes["pc-gpu-02", "gpu"].state == "draining"


def test_probe_compresses_a_huge_queue(fake_slurm: Path) -> None:
    big = synthetic_probe(30_000)["squeue"]["stdout"]
    big = big.replace(RECORD_SEP + "\n", UNIT_SEP + RECORD_SEP + "\n")  # empty NodeList
    assert len(big) > 4_000_000
    (fake_slurm / "squeue_nodes.out").write_text(big)
    raw = probe_slurm(timeout_s=30)
    squeue = raw["squeue"]
    assert isinstance(squeue, dict) and squeue["stdout"] == "" and squeue["stdout_zlib_b64"]
    assert len(str(squeue["stdout_zlib_b64"])) < len(big) / 4
    snap = build_site_snapshot("x", raw)
    assert len(snap.jobs) == 30_000


# --- a generated queue of 50,000 jobs -----------------------------------------------------------


@pytest.fixture(scope="module")
def big_probe() -> dict[str, Any]:
    return synthetic_probe(50_000)


def test_fifty_thousand_jobs_are_parsed_correctly(big_probe: dict[str, Any]) -> None:
    snap = build_site_snapshot("big", big_probe, now=BASE + timedelta(seconds=3))
    assert len(snap.jobs) == 50_000 and snap.health.probe_age_s == 3
    assert Counter(j.state for j in snap.jobs) == {"running": 12_500, "pending": 37_500}
    expected = expected_counts(50_000)
    assert [p.partition for p in snap.partitions] == list(PARTITIONS)
    for p in snap.partitions:
        e = expected[p.partition]
        assert (p.jobs_running, p.jobs_pending) == (e["running"], e["pending"]), p.partition
        assert p.pending_reasons == e["reasons"], p.partition
        assert p.earliest_pending_start == min(e["starts"]), p.partition
        assert p.latest_pending_start == max(e["starts"]), p.partition
    a100 = snap.partition("gpuA100x4")
    assert a100 is not None
    assert a100.gpus_total_by_type == {"a100": 16} and a100.gpus_alloc_by_type == {"a100": 6}
    assert a100.nodes_by_state == {"mixed": 3, "drained": 1} and a100.cpus_unavailable == 64
    j = snap.jobs[70]  # i = 70: an array job on 2 nodes with 3 GPUs each (see synthetic.py)
    assert (j.job_id, j.partition, j.state, j.nodes, j.cpus) == (
        "1000070_[1-21]",
        "gpuA100x4",
        "pending",
        2,
        56,
    )
    assert (j.gpus, j.gpu_type, j.mem_mb, j.time_limit_s) == (6, "a100", 8192, 23 * 3600)
    assert j.name == "job 70 | sweep;0" and j.submit_time == BASE - timedelta(seconds=70)
    assert j.start_time == BASE + timedelta(minutes=70) and j.reason == "Priority"
    r = snap.jobs[4]
    assert (r.state, r.start_time) == ("running", BASE + timedelta(seconds=26))
    assert r.end_time == BASE + timedelta(seconds=26, hours=5)


def test_fast_path_equals_the_generic_path(big_probe: dict[str, Any]) -> None:
    text = big_probe["squeue"]["stdout"]
    records = text.split(RECORD_SEP + "\n")[:3000]
    head = "".join(r + RECORD_SEP + "\n" for r in records)
    fast = parse_squeue(head)
    builder = _Builder(SQUEUE_FIELDS)
    rows = [r.split(UNIT_SEP) for r in records]
    assert fast == [builder.build(r, n) for n, r in enumerate(rows, start=1)]
    # records built without pydantic's second pass equal validated ones
    for j in fast[:500]:
        assert JobRecord.model_validate(j.model_dump()) == j
    # a reordered field list takes the generic path and gives the same jobs
    order = list(reversed(SQUEUE_FIELDS))
    swapped = "".join(UNIT_SEP.join(reversed(r)) + RECORD_SEP + "\n" for r in rows)
    assert parse_squeue(swapped, order) == fast


# --- a live local cluster, when one is up ----------------------------------------------------


def _local_confs() -> list[Path]:
    home = Path(os.environ.get("FEDERATION_HOME", Path.home() / ".federation"))
    return sorted(home.glob("slurm/sites/*/etc/slurm.conf"))


def test_probe_against_a_running_local_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("sinfo") is None:
        pytest.skip("Slurm client commands are not installed")
    for conf in _local_confs():
        env = {**os.environ, "SLURM_CONF": str(conf)}
        try:
            ok = (
                subprocess.run(
                    ["sinfo", "-h", "-o", "%P"],
                    env=env,
                    capture_output=True,
                    timeout=5,
                    check=False,
                ).returncode
                == 0
            )
        except subprocess.TimeoutExpired:
            ok = False
        if ok:
            break
    else:
        pytest.skip("no local Slurm cluster is up (federation sites up)")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    snap = build_site_snapshot(conf.parents[1].name, probe_slurm(timeout_s=15))
    assert snap.health.reachable and snap.slurm_version and snap.slurm_version[:2].isdigit()
    assert snap.partitions and all(p.nodes_total > 0 for p in snap.partitions)
    assert sum(p.cpus_total for p in snap.partitions) > 0


def test_node_lists_of_running_jobs(probetest: dict[str, Any]) -> None:
    rows = [r for r in probetest["squeue"]["stdout"].split(RECORD_SEP + "\n") if r]
    lists = {"10": "pc-gpu-[01-02]", "1": "pc-cpu-01,pc-gpu-03", "5": "pc-cpu-[01-02]"}
    text = "".join(
        r + UNIT_SEP + lists.get(r.split(UNIT_SEP)[0], "") + RECORD_SEP + "\n" for r in rows
    )
    fast = parse_squeue(text, SQUEUE_FIELDS_NODES)
    by_id = {j.job_id: j for j in fast}
    assert by_id["10"].node_names == ("pc-gpu-01", "pc-gpu-02")
    assert by_id["1"].node_names == ("pc-cpu-01", "pc-gpu-03")
    assert by_id["5"].node_names == ()  # pending: a node list there is no allocation
    # the old field list (recorded probes) still parses, with no node names
    old = parse_squeue(probetest["squeue"]["stdout"], SQUEUE_FIELDS)
    assert [j.model_copy(update={"node_names": ()}) for j in fast] == old
    # the generic path (another field order) agrees with the fast one
    order = list(reversed(SQUEUE_FIELDS_NODES))
    swapped = "".join(
        UNIT_SEP.join(reversed(r.split(UNIT_SEP))) + RECORD_SEP + "\n"
        for r in text.split(RECORD_SEP + "\n")
        if r
    )
    assert parse_squeue(swapped, order) == fast
    with pytest.raises(ParseError, match="record 1"):
        parse_squeue(text.replace("pc-gpu-[01-02]", "pc-gpu-[01-"), SQUEUE_FIELDS_NODES)
