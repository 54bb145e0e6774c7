"""Every real Slurm sample is parsed, with known values asserted.

Permissively licensed samples are copied under ``tests/fixtures/slurm_samples/`` (see its
PROVENANCE.md); the ones without a licence are read from the shared sample set
(``../shared/slurm-samples`` or ``$FEDERATION_SLURM_SAMPLES``) and skipped when it is absent.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from federation.parsing.gres import UNTYPED, gpus_by_type, parse_tres
from federation.parsing.sacct import parse_sacct_json, parse_sacct_parsable, state_counts
from federation.parsing.scontrol import (
    parse_scontrol_jobs,
    parse_scontrol_partitions,
    partition_node_count,
)
from federation.parsing.sinfo import parse_sinfo_json
from federation.parsing.squeue import (
    count_states,
    jobs_from_table,
    parse_squeue_json,
    parse_squeue_jsonlike,
)
from federation.parsing.sshare import parse_sshare_json
from federation.parsing.table import parse_delimited, parse_format_output

COPIED = Path(__file__).parent / "fixtures" / "slurm_samples"
SHARED = Path(
    os.environ.get(
        "FEDERATION_SLURM_SAMPLES", Path(__file__).resolve().parents[2] / "shared" / "slurm-samples"
    )
)
UNLICENSED = (
    "FredHutch__gizmo-squeue-semicolon-3559jobs.txt",
    "ivolabbe__farnarkle-sinfo-json-24.11.6.json",
    "ivolabbe__farnarkle-squeue-json-24.11.6.json",
    "ivolabbe__farnarkle-sacct-json-24.11.6.json",
    "ivolabbe__farnarkle-sshare-json-24.11.6.json",
)


def copied(name: str) -> str:
    return (COPIED / name).read_text(encoding="utf-8")


def shared(name: str) -> str:
    path = SHARED / name
    if not path.is_file():
        pytest.skip(
            f"{name} has no licence, so it is not copied into the repository; it is read from "
            f"{SHARED} (set FEDERATION_SLURM_SAMPLES), which does not have it"
        )
    return path.read_text(encoding="utf-8")


TESTED: set[str] = set()


def covers(*names: str) -> None:
    TESTED.update(names)


# --- sinfo JSON ---------------------------------------------------------------------------

covers("rivosinc__sinfo-json-21.08.5-openapi-v0.0.37.json")


def test_sinfo_json_2108_openapi_v0037() -> None:
    nodes = parse_sinfo_json(copied("rivosinc__sinfo-json-21.08.5-openapi-v0.0.37.json"))
    assert len(nodes) == 4
    assert {n.partition for n in nodes} == {"hw"}
    assert Counter(n.state for n in nodes) == {"mixed": 1, "idle": 1, "allocated": 1, "down": 1}
    cs2 = nodes[0]
    assert cs2.name == "cs2.example.company.com"
    assert (cs2.cpus_total, cs2.cpus_alloc) == (64, 4)
    assert (cs2.mem_mb_total, cs2.mem_mb_alloc) == (500000, 114688)
    assert cs2.gpus_total_by_type == {} and cs2.reason is None
    assert sum(n.cpus_total for n in nodes) == 256


covers("rivosinc__sinfo-N-json-23.02.5-dataparser-v0.0.39.json")


def test_sinfo_json_2302_data_parser_v0039() -> None:
    warnings: list[str] = []
    (node,) = parse_sinfo_json(
        copied("rivosinc__sinfo-N-json-23.02.5-dataparser-v0.0.39.json"), warnings
    )
    assert (node.name, node.partition, node.state) == ("localhost", "debug", "allocated")
    assert (node.cpus_total, node.cpus_alloc, node.mem_mb_total, node.mem_mb_alloc) == (1, 1, 1, 1)
    assert warnings == []


covers("rackslab__emulated-slurmrestd-nodes-v0.0.44-25.11.0.json")


def test_slurmrestd_nodes_2511_v0044() -> None:
    nodes = parse_sinfo_json(copied("rackslab__emulated-slurmrestd-nodes-v0.0.44-25.11.0.json"))
    assert [n.name for n in nodes] == [f"cn{i}" for i in range(1, 5)] + [
        f"gpu{i}" for i in range(1, 5)
    ]
    by = {n.name: n for n in nodes}
    assert (by["cn1"].state, by["cn1"].state_flags, by["cn1"].reason) == (
        "drained",
        ("drain",),
        "ECC memory error",
    )
    assert (by["cn2"].state, by["cn2"].reason) == ("down", "CPU dead")
    assert (by["cn3"].state, by["cn3"].cpus_alloc, by["cn3"].mem_mb_alloc) == (
        "allocated",
        64,
        32768,
    )
    assert (by["cn4"].state, by["cn4"].cpus_alloc) == ("mixed", 46)
    gpus: Counter[str] = Counter()
    for n in nodes:
        gpus.update(n.gpus_total_by_type)
    assert gpus == {"h100": 8, UNTYPED: 8}
    assert {n.partition for n in nodes} == {"normal", "gpu"}
    assert not by["cn1"].usable and not by["cn2"].usable and by["gpu1"].usable


covers("ivolabbe__farnarkle-sinfo-json-24.11.6.json")


def test_sinfo_json_2411_grouped_v0042() -> None:
    text = shared("ivolabbe__farnarkle-sinfo-json-24.11.6.json")
    warnings: list[str] = []
    nodes = parse_sinfo_json(text, warnings)
    assert len(nodes) == 462  # node-slots: a node in two partitions counts twice
    assert len({n.name for n in nodes}) == 322
    assert Counter(n.partition for n in nodes) == {
        "milan": 158,
        "skylake": 118,
        "skylake-gpu": 118,
        "milan-c": 22,
        "milan-gpu": 22,
        "trevor": 20,
        "datamover": 4,
    }
    assert Counter(n.state for n in nodes) == {
        "mixed": 257,
        "allocated": 189,
        "idle": 10,
        "reserved": 4,
        "drained": 2,
    }
    gpus: dict[str, Counter[str]] = {}
    cpus: Counter[str] = Counter()
    for n in nodes:
        gpus.setdefault(n.partition, Counter()).update(n.gpus_total_by_type)
        cpus[n.partition] += n.cpus_total
    assert gpus["skylake"] == {"p100": 230, "v100": 4}
    assert gpus["milan-gpu"] == {"a100": 88} and gpus["milan"] == {}
    # cross-check against each partition's own configured TRES in the same file
    data = json.loads(text)
    for rec in data["sinfo"]:
        part = rec["partition"]
        tres = parse_tres(part["tres"]["configured"])
        assert cpus[part["name"]] == int(tres["cpu"]), part["name"]
        assert sum(gpus[part["name"]].values()) == int(tres.get("gres/gpu", 0)), part["name"]
    dave30 = next(n for n in nodes if n.name == "dave30")
    assert dave30.state == "drained" and dave30.reason == "HW_cpu2"
    assert "not_responding" in dave30.state_flags
    # grouped records approximate per-node memory/GPU use, and say so
    assert len(warnings) == 51 and "approximated" in warnings[0]


# --- squeue -------------------------------------------------------------------------------

covers("rivosinc__squeue-json-21.08.5-openapi-v0.0.37.json")


def test_squeue_json_2108() -> None:
    run, pend = parse_squeue_json(copied("rivosinc__squeue-json-21.08.5-openapi-v0.0.37.json"))
    assert (run.job_id, run.partition, run.state, run.user) == (
        "26515966",
        "hw-l",
        "running",
        "bkd",
    )
    assert (run.cpus, run.nodes, run.mem_mb, run.time_limit_s) == (1, 1, 64000, 30240 * 60)
    assert run.start_time == datetime.fromtimestamp(1684114921, tz=UTC)
    assert run.priority == 1013
    # the second job is in the {set, infinite, number} shape, an array with a pending range
    assert (pend.job_id, pend.state, pend.reason) == ("58948420_[1-10]", "pending", "Dependency")
    assert (pend.mem_mb, pend.time_limit_s, pend.start_time) == (131072, 1439 * 60, None)


covers("ivolabbe__farnarkle-squeue-json-24.11.6.json")


def test_squeue_json_2411() -> None:
    jobs = parse_squeue_json(shared("ivolabbe__farnarkle-squeue-json-24.11.6.json"))
    assert count_states(jobs) == {"running": 2}
    big = jobs[0]
    assert (big.job_id, big.partition, big.nodes, big.cpus) == ("9685110", "milan", 12, 768)
    assert big.mem_mb == 2048 * 768 // 12  # mem per CPU x CPUs / nodes
    assert big.time_limit_s == 720 * 60 and big.gpus == 0
    assert big.end_time == datetime.fromtimestamp(1771114985, tz=UTC)


covers("FredHutch__gizmo-squeue-semicolon-3559jobs.txt")


def test_squeue_semicolon_header_3559_jobs() -> None:
    stored = shared("FredHutch__gizmo-squeue-semicolon-3559jobs.txt")
    # the file lost squeue's final newline: as stored, its last line may be cut, so it is
    # skipped with a warning naming it; the complete output (newline restored) has them all
    assert not stored.endswith("\n")
    cut = parse_format_output(stored, "%i;%t;%D;%C;%a;%u")
    assert len(cut.rows) == 3558 and cut.skipped == 1
    assert cut.warnings == [
        "line 3560: output ends without a newline: last line cut short: "
        "'53666919;R;1;1;luebeck_g;hazelton'"
    ]
    text = stored + "\n"
    table = parse_format_output(text, "%i;%t;%D;%C;%a;%u")
    assert table.skipped == 0
    jobs = jobs_from_table(table)
    assert len(jobs) == 3559
    assert count_states(jobs) == {"pending": 2739, "running": 820}
    assert sum(j.cpus for j in jobs) == 11476
    assert (jobs[0].job_id, jobs[0].user, jobs[0].cpus) == ("53766662", "ndesarka", 4)
    # the same file read as a plain ';' table with its header
    plain = parse_delimited(text, ";")
    assert plain.columns == ["JOBID", "ST", "NODES", "CPUS", "ACCOUNT", "USER"]
    assert len(plain.rows) == 3559


covers("OSC__cardinal-squeue-O-unitsep.txt")


def test_squeue_O_unit_separator() -> None:
    table = parse_delimited(copied("OSC__cardinal-squeue-O-unitsep.txt"), "\x1f")
    assert len(table.columns) == 50 and table.columns[-1] == "TRES_PER_NODE"
    # the first job's line carries one field more than the header: skipped, counted
    assert table.skipped == 1 and table.warnings[0].startswith("line 2: expected 50 fields")
    warnings: list[str] = []
    jobs = jobs_from_table(table, warnings=warnings)
    assert [j.job_id for j in jobs] == ["6787542", "6769365", "6783828"]
    assert count_states(jobs) == {"running": 2, "timeout": 1}
    to = jobs[2]
    assert (to.partition, to.reason, to.time_limit_s, to.mem_mb) == (
        "quick",
        "TimeLimit",
        7200,
        9216,
    )
    assert to.submit_time == datetime(2026, 3, 10, 14, 25, 42, tzinfo=UTC)
    assert jobs[0].priority == 1000500185 and jobs[0].user == "crokosky"


covers("kfuku52__nig-squeue-o-literal-backslash-t.txt")


def test_squeue_literal_backslash_t() -> None:
    text = copied("kfuku52__nig-squeue-o-literal-backslash-t.txt")
    assert "\\t" in text and "\t" not in text
    table = parse_format_output(text, r"%i\t%P\t%j\t%u\t%t\t%M\t%D\t%R")
    assert table.skipped == 0
    jobs = jobs_from_table(table)
    assert len(jobs) == 353
    assert count_states(jobs) == {"pending": 82, "running": 271}
    first = jobs[0]
    assert (first.job_id, first.partition, first.name) == ("12672918_[1-4%4]", "epyc", "WES_normal")
    assert first.reason == "DependencyNeverSatisfied"
    reasons = Counter(j.reason for j in jobs if j.state == "pending")
    assert reasons["Priority"] == 54 and reasons["Dependency"] == 15
    parts = Counter(j.partition for j in jobs)
    assert parts["epyc"] == 251 and parts["medium,rome,epyc"] == 3
    assert sum(j.nodes for j in jobs) == 355


covers("rug-cit-hpc__habrok-squeue-deps-reasons.txt")


def test_squeue_mixed_separators_deps_reasons() -> None:
    table = parse_format_output(
        copied("rug-cit-hpc__habrok-squeue-deps-reasons.txt"), "%i|%E;%R;%C"
    )
    jobs = jobs_from_table(table)
    assert len(jobs) == 10 and table.skipped == 0
    # no state column: %R tells pending "(Reason)" from running node names
    assert count_states(jobs) == {"pending": 7, "running": 3}
    assert Counter(j.reason for j in jobs if j.state == "pending") == {
        "Dependency": 3,
        "Priority": 3,
        "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority "
        "partitions": 1,
    }
    assert jobs[0].cpus == 384 and sum(j.cpus for j in jobs) == 1306
    assert jobs[5].job_id == "8322514_33" and jobs[5].state == "running"
    assert table.dicts()[0]["DEPENDENCY"] == "afterany:7219440(unfulfilled)"


covers("rivosinc__squeue-o-jsonlike-format.txt")

JSONLIKE_KEYS = {
    "a": "ACCOUNT",
    "id": "JOBID",
    "end_time": "END_TIME",
    "u": "USER",
    "state": "STATE",
    "p": "PARTITION",
    "cpu": "CPUS",
    "mem": "MIN_MEMORY",
    "array_id": "ARRAY_TASK_ID",
    "r": "NODELIST(REASON)",
}


def test_squeue_jsonlike_with_malformed_lines() -> None:
    warnings: list[str] = []
    jobs = parse_squeue_jsonlike(
        copied("rivosinc__squeue-o-jsonlike-format.txt"), JSONLIKE_KEYS, warnings=warnings
    )
    assert [j.job_id for j in jobs] == [
        "26515966",
        "50580016",
        "51447051",
        "51447052",
        "51447053",
        "18804",
    ]
    assert count_states(jobs) == {"running": 2, "pending": 4}
    assert len(warnings) == 2  # the two "cpu": xx lines; the # comment is not a warning
    assert warnings[0].startswith("line 8: not JSON") and warnings[1].startswith("line 9")
    assert jobs[3].reason == "ReqNodeNotAvail, UnavailableNodes:cs[100,101,102]"
    assert jobs[1].mem_mb == 64000  # "62.50G"
    assert jobs[5].cpus == 24 and jobs[5].reason == "Priority"
    assert jobs[0].end_time == datetime(2023, 9, 21, 0, 21, 42, tzinfo=UTC)
    assert jobs[2].end_time is None  # "N/A"


# --- scontrol -----------------------------------------------------------------------------

covers("OSC__owens-scontrol-show-part-o.txt")


def test_scontrol_partitions_owens() -> None:
    stored = copied("OSC__owens-scontrol-show-part-o.txt")
    # the file lost scontrol's final newline: as stored, its last record may be cut, so it
    # is skipped with a warning; the complete output (newline restored) has all 15
    warnings: list[str] = []
    assert [p.name for p in parse_scontrol_partitions(stored, warnings)][-1] == "systems"
    assert len(warnings) == 1 and "PartitionName='dynamic'" in warnings[0], warnings
    parts = {p.name: p for p in parse_scontrol_partitions(stored + "\n")}
    assert len(parts) == 15
    batch = parts["batch"]
    assert (batch.state, batch.default, batch.max_time_s) == ("inactive", True, 7 * 86400)
    assert (batch.total_nodes, batch.total_cpus, batch.gpus_by_type) == (810, 23000, {"p100": 154})
    assert partition_node_count(batch) == 810  # also the size of its Nodes= host list
    assert len(batch.raw["DenyAccounts"].split(",")) == 40
    assert batch.tres["license/abaqus@osc"] == "350"
    assert parts["systems"].max_time_s is None  # UNLIMITED
    assert parts["quick"].total_nodes == 2 and parts["dynamic"].total_nodes == 0
    assert sum(p.gpus_by_type.get("p100", 0) for p in parts.values()) == 154 * 7
    assert Counter(p.state for p in parts.values()) == {"up": 14, "inactive": 1}


covers("kfuku52__nig-scontrol-show-partition-o-24.05.2.txt")


def test_scontrol_partitions_nig_2405() -> None:
    parts = parse_scontrol_partitions(copied("kfuku52__nig-scontrol-show-partition-o-24.05.2.txt"))
    assert [p.name for p in parts][:3] == ["login", "epyc", "short"] and len(parts) == 11
    by = {p.name: p for p in parts}
    assert by["login"].state == "inactive"
    assert by["epyc"].default and by["epyc"].max_time_s == 124 * 86400
    assert by["short"].max_time_s == 3600 and by["short"].default_time_s == 3600
    assert sum(partition_node_count(p) for p in parts) == 33
    assert sum(p.total_cpus or 0 for p in parts) == 4721


covers("mila-iqia__mila-scontrol-show-job-pending.txt")


def test_scontrol_show_job_pending() -> None:
    stored = copied("mila-iqia__mila-scontrol-show-job-pending.txt")
    # scontrol closes each record with a blank line; the file lost the last one, so as
    # stored its last record may be cut (skipped, with a warning): given back whole here
    warnings: list[str] = []
    assert len(parse_scontrol_jobs(stored, warnings=warnings)) == 1 and len(warnings) == 1
    held, pend = parse_scontrol_jobs(stored + "\n")
    assert (held.job_id, held.state, held.reason, held.user) == (
        "1",
        "held",
        "JobHeldAdmin",
        "nobody",
    )
    assert (held.gpus, held.gpu_type, held.mem_mb, held.time_limit_s) == (
        1,
        "titanxp",
        2048,
        604800,
    )
    assert held.submit_time == datetime(2020, 12, 15, 16, 44, 8, tzinfo=UTC)
    assert held.start_time is None  # StartTime=Unknown
    assert pend.state == "pending" and pend.priority == 121777
    assert pend.reason == "ReqNodeNotAvail,_UnavailableNodes:node8,nodek4,nodep[1-2],nodex3"
    assert (pend.cpus, pend.gpus, pend.gpu_type, pend.mem_mb) == (10, 1, "a100", 40960)
    assert pend.start_time is None  # StartTime="None"


# --- sacct and sshare ---------------------------------------------------------------------

covers("mila-iqia__beluga-sacct-p.txt")


def test_sacct_parsable_beluga() -> None:
    warnings: list[str] = []
    recs = parse_sacct_parsable(copied("mila-iqia__beluga-sacct-p.txt"), warnings=warnings)
    assert len(recs) == 1944 and warnings == []
    jobs = [r for r in recs if not r.is_step]
    assert len(jobs) == 680
    assert state_counts(recs) == {
        "completed": 417,
        "running": 94,
        "timeout": 69,
        "failed": 46,
        "pending": 32,
        "cancelled": 21,
        "out_of_memory": 1,
    }
    assert state_counts(recs, jobs_only=False) == {
        "completed": 1381,
        "running": 282,
        "failed": 92,
        "cancelled": 83,
        "timeout": 69,
        "pending": 32,
        "out_of_memory": 5,
    }
    assert (
        Counter(r.state_raw for r in jobs if r.state == "cancelled")["CANCELLED by 3060080"] == 11
    )
    first = recs[0]
    assert (first.job_id, first.account, first.uid) == ("19090543", "rrg-bengioy-ad_gpu", 3093349)
    assert (
        first.start_time == datetime(2021, 6, 8, 9, 34, 51, tzinfo=UTC) and first.end_time is None
    )
    assert recs[1].job_id == "19090543.batch" and recs[1].parent_job_id == "19090543"


covers("mila-iqia__cedar-sacct-json-21.08.8.json")


def test_sacct_json_2108() -> None:
    a, b = parse_sacct_json(copied("mila-iqia__cedar-sacct-json-21.08.8.json"))
    assert (a.job_id, a.state, a.partition, a.user) == ("1_7", "node_fail", "partition1", "nobody")
    assert (b.job_id, b.state, b.elapsed_s, b.time_limit_s) == ("2_0", "requeued", 86307, 86400)
    assert a.alloc_tres["gres/gpu"] == "1" and a.alloc_tres["mem"] == "40960"
    assert b.end_time == datetime.fromtimestamp(1680215981, tz=UTC) and a.end_time is None


covers("ivolabbe__farnarkle-sacct-json-24.11.6.json")


def test_sacct_json_2411() -> None:
    text = shared("ivolabbe__farnarkle-sacct-json-24.11.6.json")
    jobs = parse_sacct_json(text)
    assert len(jobs) == 42
    assert state_counts(jobs) == {
        "completed": 18,
        "cancelled": 11,
        "failed": 8,
        "out_of_memory": 2,
        "running": 2,
        "timeout": 1,
    }
    everything = parse_sacct_json(text, include_steps=True)
    steps = [r for r in everything if r.is_step]
    assert len(steps) == 102 and len(everything) == 144
    assert steps[0].job_id == "9641651.batch" and steps[0].elapsed_s == 8
    assert jobs[0].alloc_tres["cpu"] == "32" and jobs[0].time_limit_s == 172800


covers("ivolabbe__farnarkle-sshare-json-24.11.6.json")


def test_sshare_json_2411() -> None:
    root, user = parse_sshare_json(shared("ivolabbe__farnarkle-sshare-json-24.11.6.json"))
    assert (root.name, root.kind, root.usage) == ("root", "association", 11138768942)
    assert root.shares is None  # {"set": false}
    assert (user.name, user.kind, user.parent, user.shares) == ("ilabbe", "user", "oz030", 1)
    assert user.fairshare_factor == pytest.approx(0.5206949412365867)
    assert user.shares_normalized == 0.5


# --- coverage of the sample set -------------------------------------------------------------


def test_every_sample_has_a_test() -> None:
    copied_names = {p.name for p in COPIED.iterdir() if p.name != "PROVENANCE.md"}
    assert copied_names | set(UNLICENSED) == TESTED
    assert not copied_names & set(UNLICENSED), "unlicensed samples must not be copied"
    if SHARED.is_dir():
        names = {p.name for p in SHARED.iterdir()} - {"PROVENANCE.md", "SHA256SUMS"}
        assert names == TESTED, f"untested samples: {sorted(names - TESTED)}"


def test_gres_strings_of_every_sinfo_sample_parse() -> None:
    for name in (
        "rivosinc__sinfo-json-21.08.5-openapi-v0.0.37.json",
        "rackslab__emulated-slurmrestd-nodes-v0.0.44-25.11.0.json",
    ):
        for node in json.loads(copied(name))["nodes"]:
            gpus_by_type(node["gres"])
            gpus_by_type(node["gres_used"])
