"""Unit tests of the small parsers: GRES, states, times, host lists, tables, scontrol records."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from federation.core.errors import ParseError
from federation.parsing.gres import (
    UNTYPED,
    gpus_by_type,
    parse_gres_entries,
    parse_tres,
    request_gpus,
    tres_gpus,
)
from federation.parsing.hostlist import count_hosts, expand_hostlist, split_top
from federation.parsing.scontrol import (
    parse_scontrol_jobs,
    parse_scontrol_nodes,
    parse_scontrol_partitions,
    parse_scontrol_records,
)
from federation.parsing.squeue import reason_code
from federation.parsing.states import parse_job_state, parse_node_state
from federation.parsing.table import format_columns, parse_delimited, parse_format_output
from federation.parsing.times import (
    is_unlimited,
    parse_duration,
    parse_memory,
    parse_memory_mb,
    parse_timestamp,
)

# --- GRES -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gres", "expected"),
    [
        ("gpu:a100:4", {"a100": 4}),
        ("gpu:a100:4(S:0-1)", {"a100": 4}),
        ("gpu:a100:2(IDX:0-1,3)", {"a100": 2}),
        ("gpu:8", {UNTYPED: 8}),
        ("gpu:(null):5", {UNTYPED: 5}),
        ("gpu:(null):5(S:0)", {UNTYPED: 5}),
        ("gpu:a100:2,gpu:v100:1", {"a100": 2, "v100": 1}),
        ("gpu:a100:2(S:0),gpu:a100:2(S:1)", {"a100": 4}),
        ("gpu:1g.10gb:7", {"1g.10gb": 7}),
        ("gpu:h100:4(S:0-1),mps:400", {"h100": 4}),
        ("mps:100", {}),
        ("tmp:300G", {}),
        ("gpu:p100:2(S:0-1),tmp:1860G", {"p100": 2}),
        ("gpu:a100:no_consume:4", {"a100": 4}),
        ("gpu:no_consume:2", {UNTYPED: 2}),
        ("gpu:tesla", {"tesla": 1}),
        ("gpu", {UNTYPED: 1}),
        ("gpu:0", {}),
        ("gpu:a100:0(IDX:N/A)", {}),
        ("gpu:a100:1(IDX:0),gpu:v100:0(IDX:N/A)", {"a100": 1}),
        ("(null)", {}),
        ("", {}),
        (None, {}),
        ("license:abaqus@osc:x", {}),
    ],
)
def test_gpus_by_type(gres: str | None, expected: dict[str, int]) -> None:
    assert gpus_by_type(gres) == expected


def test_gres_entries_keep_non_gpu_counts() -> None:
    assert parse_gres_entries("gpu:a100:4(S:0-1),tmp:300G,mps:100") == [
        ("gpu", "a100", 4),
        ("tmp", None, 300 * 1024**3),
        ("mps", None, 100),
    ]


@pytest.mark.parametrize("bad", ["gpu:a100:x4", "gpu:a100:4(S:0-1", "gpu:a100:4,:3"])
def test_bad_gres_names_the_entry(bad: str) -> None:
    with pytest.raises(ParseError, match="GRES"):
        gpus_by_type(bad)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("gres:gpu:a100:4", (4, "a100")),  # 22.05
        ("gres/gpu:a100:4", (4, "a100")),  # 23.02+
        ("gres/gpu:2", (2, None)),
        ("gpu:titanxp:1", (1, "titanxp")),
        ("gres/gpu=2", (2, None)),
        ("gres/gpu:a100:1,gres/gpu:v100:1", (2, None)),
        ("gres:tmp:10G", (0, None)),
        ("N/A", (0, None)),
        (None, (0, None)),
    ],
)
def test_request_gpus(spec: str | None, expected: tuple[int, str | None]) -> None:
    assert request_gpus(spec) == expected


def test_tres_gpus() -> None:
    tres = parse_tres("cpu=23000,mem=120391880M,node=810,gres/gpu=154,gres/gpu:p100=154")
    assert tres["mem"] == "120391880M"
    assert tres_gpus(tres) == (154, "p100")
    assert tres_gpus(parse_tres("cpu=4,gres/gpu:a100=1,gres/gpu:v100=2")) == (3, None)
    assert tres_gpus(parse_tres("cpu=4,mem=8G")) == (0, None)
    assert parse_tres("") == {} and parse_tres("(null)") == {}


# --- states -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "state", "flags"),
    [
        ("idle", "idle", ()),
        ("mixed-", "mixed", ("planned",)),
        ("drained*", "drained", ("not_responding", "drain")),
        ("draining@", "draining", ("reboot_requested", "drain")),
        ("IDLE+DRAIN", "drained", ("drain",)),
        ("idle+drain", "drained", ("drain",)),
        ("allocated+drain", "draining", ("drain",)),
        ("mixed+drain", "draining", ("drain",)),
        ("down+not_responding", "down", ("not_responding",)),
        ("down*", "down", ("not_responding",)),
        ("allocated+", "allocated", ("completing",)),
        ("idle~", "idle", ("powered_down",)),
        ("idle$", "maint", ("maint",)),
        ("MIXED+PLANNED", "mixed", ("planned",)),
        ("IDLE+PLANNED", "planned", ("planned",)),
        ("IDLE+RESERVED", "reserved", ("reserved",)),
        ("IDLE+RESERVED+DRAIN", "drained", ("reserved", "drain")),
        ("DOWN+RESERVED+DRAIN+NOT_RESPONDING", "drained", ("reserved", "drain", "not_responding")),
        ("maint", "maint", ()),
        ("fail", "down", ()),
        ("failing*", "draining", ("not_responding", "fail")),
        ("inval", "down", ("invalid_reg",)),
        ("future", "down", ()),
        ("plnd", "planned", ()),
        ("drng", "draining", ("drain",)),
        ("alloc", "allocated", ()),
        ("mix", "mixed", ()),
        ("resv", "reserved", ()),
        ("comp", "completing", ()),
        ("idle+completing", "completing", ("completing",)),
        ("unk*", "unknown", ("not_responding",)),
        ("IDLE+DYNAMIC_NORM", "idle", ("dynamic_norm",)),
        ("teleporting", "unknown", ("teleporting",)),
        ("", "unknown", ()),
    ],
)
def test_node_states(raw: str, state: str, flags: tuple[str, ...]) -> None:
    assert parse_node_state(raw) == (state, flags)


def test_node_states_from_json_shapes() -> None:
    assert parse_node_state(["IDLE", "DRAIN"]) == ("drained", ("drain",))
    assert parse_node_state(["MIXED", "PLANNED"]) == ("mixed", ("planned",))
    assert parse_node_state(["ALLOCATED", "COMPLETING"]) == ("allocated", ("completing",))
    assert parse_node_state("down", ["DRAIN"]) == ("drained", ("drain",))  # 21.08 state_flags
    assert parse_node_state("mixed", ["DRAIN"]) == ("draining", ("drain",))
    assert parse_node_state(None) == ("unknown", ())
    assert parse_node_state(["WEIRD", "DRAIN"]) == ("drained", ("weird", "drain"))


@pytest.mark.parametrize(
    ("raw", "reason", "state"),
    [
        ("PENDING", None, "pending"),
        ("PD", "Priority", "pending"),
        ("PD", "JobHeldUser", "held"),
        ("PENDING", "JobHeldAdmin", "held"),
        ("R", None, "running"),
        ("RUNNING", "None", "running"),
        ("CG", None, "completing"),
        ("CF", None, "configuring"),
        ("S", None, "suspended"),
        ("TO", None, "timeout"),
        ("OOM", None, "out_of_memory"),
        ("OUT_OF_MEMORY", None, "out_of_memory"),
        ("NODE_FAIL", None, "node_fail"),
        ("CANCELLED by 3060080", None, "cancelled"),
        ("CANCELLED+", None, "cancelled"),
        ("REQUEUED", None, "requeued"),
        ("REQUEUE_HOLD", None, "held"),
        ("SPECIAL_EXIT", None, "failed"),
        ("BOOT_FAIL", None, "boot_fail"),
        ("DEADLINE", None, "deadline"),
        ("PREEMPTED", None, "preempted"),
        ("RESIZING", None, "resizing"),
        ("STAGE_OUT", None, "completing"),
        ("XYZ", None, "unknown"),
        ("", None, "unknown"),
    ],
)
def test_job_states(raw: str, reason: str | None, state: str) -> None:
    assert parse_job_state(raw, reason) == state


def test_job_states_from_json_arrays() -> None:
    assert parse_job_state(["RUNNING"]) == "running"
    assert parse_job_state(["RUNNING", "COMPLETING"]) == "completing"
    assert parse_job_state(["PENDING", "REQUEUED"]) == "requeued"
    assert parse_job_state(["PENDING", "REQUEUE_HOLD"]) == "held"
    assert parse_job_state([]) == "unknown"
    assert parse_job_state(None) == "unknown"


def test_reason_codes_for_counting() -> None:
    assert reason_code("ReqNodeNotAvail, UnavailableNodes:cs[100,101]") == "ReqNodeNotAvail"
    assert reason_code("ReqNodeNotAvail,_UnavailableNodes:node8") == "ReqNodeNotAvail"
    assert reason_code("Priority") == "Priority"
    sentence = "Nodes required for job are DOWN, DRAINED or reserved"
    assert reason_code(sentence) == sentence
    assert reason_code(None) is None


# --- times and memory ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1-00:00:00", 86400),
        ("7-00:00:00", 604800),
        ("124-00:00:00", 124 * 86400),
        ("2:00:00", 7200),
        ("00:30:00", 1800),
        ("35:16", 35 * 60 + 16),  # MM:SS
        ("10:00", 600),
        ("0:00", 0),
        ("1-12", 36 * 3600),  # D-HH
        ("1-12:30", 36 * 3600 + 1800),  # D-HH:MM
        ("90", 5400),  # bare minutes
        ("00:00:01.5", 1),
        ("UNLIMITED", None),
        ("INFINITE", None),
        ("INVALID", None),
        ("N/A", None),
        ("NONE", None),
        ("", None),
        (None, None),
    ],
)
def test_durations(text: str | None, seconds: int | None) -> None:
    assert parse_duration(text) == seconds


def test_unlimited_is_told_apart() -> None:
    assert is_unlimited("UNLIMITED") and is_unlimited("infinite")
    assert not is_unlimited("INVALID") and not is_unlimited(None)


@pytest.mark.parametrize("bad", ["1-xx:00:00", "ab:cd", "1:2:3:4:5", "x-1"])
def test_bad_durations_raise(bad: str) -> None:
    with pytest.raises(ParseError, match="duration"):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("text", "mb", "per"),
    [
        ("4000M", 4000, None),
        ("1G", 1024, None),
        ("62.50G", 64000, None),
        ("4000Mn", 4000, "node"),
        ("4000Mc", 4000, "cpu"),
        ("2T", 2 * 1024 * 1024, None),
        ("512K", 0, None),
        ("15000", 15000, None),
        ("0", 0, None),
        ("N/A", None, None),
        ("", None, None),
    ],
)
def test_memory(text: str, mb: int | None, per: str | None) -> None:
    assert parse_memory(text) == (mb, per)
    assert parse_memory_mb(text) == mb


def test_bad_memory_raises() -> None:
    with pytest.raises(ParseError, match="memory 'lots'"):
        parse_memory("lots")


def test_timestamps() -> None:
    assert parse_timestamp("2026-03-10T12:34:51") == datetime(2026, 3, 10, 12, 34, 51, tzinfo=UTC)
    # the cluster's local time, one hour east of UTC
    assert parse_timestamp("2026-03-10T12:34:51", 3600) == datetime(
        2026, 3, 10, 11, 34, 51, tzinfo=UTC
    )
    assert parse_timestamp("2026-03-10T12:34:51", -5 * 3600) == datetime(
        2026, 3, 10, 17, 34, 51, tzinfo=UTC
    )
    assert parse_timestamp("2026-03-10T12:34:51+02:00") == datetime(
        2026, 3, 10, 10, 34, 51, tzinfo=UTC
    )
    for none in ("Unknown", "N/A", "None", "(null)", "0", "", None):
        assert parse_timestamp(none) is None
    with pytest.raises(ParseError, match="timestamp 'yesterday'"):
        parse_timestamp("yesterday")


# --- host lists -----------------------------------------------------------------------------


def test_hostlists() -> None:
    assert expand_hostlist("o[0002-0004,0008],gpu1") == ["o0002", "o0003", "o0004", "o0008", "gpu1"]
    assert expand_hostlist("a[1-2]b[3-4]") == ["a1b3", "a1b4", "a2b3", "a2b4"]
    assert expand_hostlist("(null)") == [] and expand_hostlist("") == []
    assert count_hosts("dave[4,31,40-42,57,68,73,119,132,305-306]") == 12
    assert split_top("a[1,2],b(x,y),c") == ["a[1,2]", "b(x,y)", "c"]
    with pytest.raises(ParseError, match="bad range"):
        expand_hostlist("n[5-1]")
    with pytest.raises(ParseError, match="unbalanced"):
        expand_hostlist("n[1-3")


# --- generic tables ---------------------------------------------------------------------------


def test_delimited_with_trailing_delimiter_and_bad_line() -> None:
    text = "A|B|C|\n1|x|y|\n2|only|\n3|p|q|\n"
    t = parse_delimited(text, "|")
    assert t.columns == ["A", "B", "C"]
    assert t.rows == [["1", "x", "y"], ["3", "p", "q"]]
    assert t.skipped == 1 and "line 3" in t.warnings[0]
    assert t.dicts()[1] == {"A": "3", "B": "p", "C": "q"}


def test_delimited_with_explicit_columns() -> None:
    t = parse_delimited("1;PD\n2;R\n", ";", ["JOBID", "ST"])
    assert t.rows == [["1", "PD"], ["2", "R"]] and t.skipped == 0


def test_format_columns() -> None:
    assert format_columns("%i;%t|%.10D") == (["JOBID", "ST", "NODES"], ["", ";", "|", ""])
    assert format_columns(r"%i\t%P") == (["JOBID", "PARTITION"], ["", r"\t", ""])
    assert format_columns("%.18i %9P %R") == (
        ["JOBID", "PARTITION", "NODELIST(REASON)"],
        ["", " ", " ", ""],
    )
    with pytest.raises(ValueError, match="no separator"):
        parse_format_output("1 2\n", "%i%t")


def test_format_output_mixed_separators() -> None:
    t = parse_format_output("1|afterok:2;(Dependency);4\n5|(null);node1;8\nbroken\n", "%i|%E;%R;%C")
    assert t.columns == ["JOBID", "DEPENDENCY", "NODELIST(REASON)", "CPUS"]
    assert t.rows == [["1", "afterok:2", "(Dependency)", "4"], ["5", "(null)", "node1", "8"]]
    assert t.skipped == 1


# --- scontrol records -------------------------------------------------------------------------

NODE_TEXT = """NodeName=n1 Arch=x86_64 CoresPerSocket=16
   CPUAlloc=8 CPUTot=32 CPULoad=1.00
   AvailableFeatures=a100,ib
   Gres=gpu:a100:4(S:0-1)
   OS=Linux 5.14.0-362.el9.x86_64 #1 SMP PREEMPT_DYNAMIC Wed Sep 13 2023
   RealMemory=512000 AllocMem=64000 FreeMem=400000 Sockets=2 Boards=1
   State=MIXED+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1
   Partitions=gpu,all
   CfgTRES=cpu=32,mem=500G,billing=32,gres/gpu=4
   AllocTRES=cpu=8,mem=62.50G,gres/gpu=2,gres/gpu:a100=2
   \t
   Reason=Kernel upgrade, see ticket 1234 [root@2024-01-01T10:00:00]

NodeName=n2 Arch=x86_64
   CPUAlloc=0 CPUTot=32
   AvailableFeatures=(null)
   Gres=(null)
   RealMemory=256000 AllocMem=0
   State=IDLE
   Partitions=cpu
   AllocTRES=
   Reason=

"""


def test_scontrol_records_keep_spaces_and_empties() -> None:
    recs = parse_scontrol_records(NODE_TEXT)
    assert len(recs) == 2
    assert recs[0]["OS"] == "Linux 5.14.0-362.el9.x86_64 #1 SMP PREEMPT_DYNAMIC Wed Sep 13 2023"
    # the Reason= after the whitespace-only line stays with n1
    assert recs[0]["Reason"] == "Kernel upgrade, see ticket 1234 [root@2024-01-01T10:00:00]"
    assert recs[0]["AllocTRES"] == "cpu=8,mem=62.50G,gres/gpu=2,gres/gpu:a100=2"
    assert recs[1]["AllocTRES"] == "" and recs[1]["Reason"] == ""


def test_scontrol_nodes() -> None:
    nodes = parse_scontrol_nodes(NODE_TEXT)
    assert [(n.name, n.partition) for n in nodes] == [("n1", "gpu"), ("n1", "all"), ("n2", "cpu")]
    n1 = nodes[0]
    assert (n1.state, n1.state_flags) == ("draining", ("drain",))
    assert n1.reason == "Kernel upgrade, see ticket 1234"
    assert (n1.cpus_total, n1.cpus_alloc, n1.mem_mb_total, n1.mem_mb_alloc) == (
        32,
        8,
        512000,
        64000,
    )
    assert n1.gpus_total_by_type == {"a100": 4} and n1.gpus_alloc_by_type == {"a100": 2}
    assert nodes[2].reason is None and nodes[2].gpus_total_by_type == {}


def test_scontrol_one_liner_partition() -> None:
    text = (
        "PartitionName=gpu AllowGroups=ALL Default=NO MaxTime=2-00:00:00 DefaultTime=01:00:00 "
        "Nodes=g[01-04] State=DRAIN TotalCPUs=256 TotalNodes=4 "
        "TRES=cpu=256,mem=2000G,node=4,gres/gpu=16,gres/gpu:h100=16\n"
        "PartitionName=big MaxTime=UNLIMITED Nodes=(null) State=UP TotalCPUs=0 TotalNodes=0 "
        "TRES=cpu=0\n"
    )
    gpu, big = parse_scontrol_partitions(text)
    assert (gpu.name, gpu.state, gpu.max_time_s, gpu.default_time_s) == (
        "gpu",
        "drain",
        172800,
        3600,
    )
    assert gpu.gpus_by_type == {"h100": 16} and gpu.total_nodes == 4
    assert (big.max_time_s, big.nodes, big.total_nodes) == (None, None, 0)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("this is not scontrol output\n", "scontrol line 1: expected Key=value"),
        ("   indented=first\n", "does not start with Key="),
    ],
)
def test_scontrol_garbage(text: str, needle: str) -> None:
    with pytest.raises(ParseError, match=needle):
        parse_scontrol_records(text)


def test_scontrol_wrong_record_kind() -> None:
    with pytest.raises(ParseError, match="no PartitionName= key"):
        parse_scontrol_partitions("JobId=1 JobName=x\n")
    with pytest.raises(ParseError, match="no JobId= key"):
        parse_scontrol_jobs("PartitionName=x State=UP\n")
