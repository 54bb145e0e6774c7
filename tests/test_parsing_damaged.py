"""Slurm outputs other projects' fixtures hold (Slurm 23-26), damaged or odd (issue 25): each
gives a correct row, or a ParseError / capped warning naming the line and field; never a
silently wrong row and never a raw exception type."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from federation.core.errors import ParseError
from federation.parsing import (
    jobs_from_table,
    parse_format_output,
    parse_sacct_json,
    parse_scontrol_nodes,
    parse_sinfo_json,
    parse_squeue_json,
    parse_sshare_json,
)
from federation.parsing.sshare import parse_sshare_text
from federation.parsing.table import SQUEUE_DEFAULT_FORMAT

WIDTHS = (18, 9, 8, 8, 2, 10, 6)
HEADER = ["JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES", "NODELIST(REASON)"]


def _default_line(values: list[str]) -> str:
    """One line as squeue prints it without -o (fields right-justified and cut to width)."""
    cells = [v.rjust(w)[:w] for v, w in zip(values, WIDTHS, strict=False)]
    return " ".join(cells) + " " + values[-1]


def test_sshare_text_rawshares_parent_is_a_row_without_shares() -> None:
    """``RawShares`` is ``parent`` for a user whose share comes from its account
    (fairshare=parent): a row with no shares of its own, not a refused allocation."""
    text = (
        "oz030||100|0.500000|4242|0.100000|0.100000||1.000000|cpu=6000\n"
        " oz030|ilabbe|parent|0.500000|4242|0.100000|0.100000|0.750000|inf|\n"
    )
    rows = parse_sshare_text(text)
    assert [(r.name, r.kind, r.shares) for r in rows] == [
        ("oz030", "association", 100),
        ("ilabbe", "user", None),
    ]
    assert rows[1].parent == "oz030" and rows[1].usage == 4242


def test_a_damaged_default_squeue_line_is_skipped_with_a_warning_not_shifted() -> None:
    good = ["4242", "epyc", "train", "alice", "R", "1:00", "1", "a022"]
    text = "\n".join(
        [
            _default_line(HEADER),
            _default_line(good),
            # a damaged line: an extra word after the job id shifts every later column
            "4243 EXTRA epyc train alice R 1:00 1 a022",
        ]
    )
    text += "\n"  # squeue ends its output with a newline (without, the last line is cut)
    warnings: list[str] = []
    jobs = jobs_from_table(parse_format_output(text, SQUEUE_DEFAULT_FORMAT), warnings=warnings)
    assert [(j.job_id, j.partition, j.state) for j in jobs] == [("4242", "epyc", "running")]
    assert any("line 3" in w and "ST" in w for w in warnings), warnings


def test_sshare_json_with_errors_is_refused_like_the_other_json_parsers() -> None:
    doc: dict[str, Any] = json.loads(_sshare_doc())
    assert parse_sshare_json(doc)  # without errors it parses
    doc["errors"] = [{"error": "Unable to query associations", "error_number": 1}]
    with pytest.raises(ParseError, match="errors"):
        parse_sshare_json(doc)


def _sshare_doc(**row: Any) -> str:
    base = {"name": "alice", "type": ["USER"], "parent": "acct", "usage": 10}
    return json.dumps({"shares": {"shares": [base | row]}, "errors": []})


@pytest.mark.parametrize(
    "doc",
    [
        _sshare_doc(usage=float("inf")),
        _sshare_doc(usage={"set": True, "infinite": False, "number": float("nan")}),
        _sshare_doc(type=[1, 2]),
        _sshare_doc(fairshare=5, tres=[1]),
    ],
    ids=["usage-Infinity", "usage-NaN", "type-ints", "wrong-shapes"],
)
def test_sshare_json_odd_values_give_a_row_or_a_parse_error(doc: str) -> None:
    try:
        rows = parse_sshare_json(doc)
    except ParseError as e:
        assert "shares[0]" in str(e)
        return
    assert len(rows) == 1 and rows[0].name == "alice"


def _squeue_doc(**job: Any) -> str:
    base = {"job_id": 7, "partition": "cpu", "job_state": ["RUNNING"], "user_name": "alice"}
    return json.dumps({"jobs": [base | job], "errors": []})


@pytest.mark.parametrize(
    "doc",
    [
        _squeue_doc(submit_time=float("inf")),
        _squeue_doc(submit_time={"set": True, "infinite": False, "number": float("inf")}),
        _squeue_doc(partition=5),
        _squeue_doc(node_count="many", cpus=[1]),
    ],
    ids=["submit-Infinity", "submit-number-Infinity", "partition-int", "wrong-types"],
)
def test_squeue_json_odd_values_give_a_row_or_a_parse_error(doc: str) -> None:
    try:
        jobs = parse_squeue_json(doc)
    except ParseError as e:
        assert "jobs[0]" in str(e)
        return
    assert len(jobs) == 1 and jobs[0].job_id == "7"


def _sinfo_doc(**node: Any) -> str:
    base = {"name": "n1", "state": ["IDLE"], "cpus": 8, "partitions": ["cpu"], "real_memory": 1000}
    return json.dumps({"nodes": [base | node], "errors": []})  # slurmrestd /nodes, per node


@pytest.mark.parametrize(
    "doc",
    [
        _sinfo_doc(cpus=float("inf")),
        _sinfo_doc(partitions=5),
        _sinfo_doc(features=5),
    ],
    ids=["cpus-Infinity", "partitions-int", "features-int"],
)
def test_sinfo_json_odd_values_give_a_row_a_warning_or_a_parse_error(doc: str) -> None:
    warnings: list[str] = []
    try:
        nodes = parse_sinfo_json(doc, warnings=warnings)
    except ParseError as e:
        assert "n1" in str(e) or "nodes[0]" in str(e)
        return
    assert all(n.name == "n1" for n in nodes)
    if not nodes:
        assert warnings, "a node dropped without a word"


def test_scontrol_node_line_with_a_stray_word_skips_the_node_and_warns() -> None:
    text = "NodeName=at137 EXTRA Arch=x86_64 CPUTot=8 CPUAlloc=0 RealMemory=1000 "
    text += "AllocMem=0 Gres=(null) AvailableFeatures=(null) State=IDLE Partitions=cpu\n"
    warnings: list[str] = []
    try:
        nodes = parse_scontrol_nodes(text, warnings=warnings)
    except ParseError as e:
        assert "NodeName" in str(e) and "line 1" in str(e)
        return
    assert nodes == []  # not read as "at137": which of the words is the name is unknown
    assert any("EXTRA" in w and "skipped" in w for w in warnings), warnings


def test_scontrol_node_line_cut_inside_a_value_is_not_taken_at_its_word() -> None:
    whole = "NodeName=at137 Arch=x86_64 CPUTot=8 CPUAlloc=0 RealMemory=1000 State=IDLE "
    cut = whole + "Partitions=cpu,deb"  # the line ends mid-value: no newline, output cut
    warnings: list[str] = []
    try:
        nodes = parse_scontrol_nodes(cut, warnings=warnings)
    except ParseError as e:
        assert "line 1" in str(e)
        return
    assert "deb" not in {n.partition for n in nodes}, nodes


# --- fuzzed: any value in any field of a JSON record ---------------------------------------

ODD_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["set", "infinite", "number", "name", "value", "count"]),
            inner,
            max_size=3,
        )
    ),
    max_leaves=6,
)
"""Values a JSON field may hold, non-finite numbers (``Infinity``, ``NaN``) included."""
TRICKY: list[Any] = [
    float("inf"),
    float("-inf"),
    float("nan"),
    {"set": True, "infinite": False, "number": float("inf")},
    [1, 2],
    ["RUNNING", 5],
    5,
    "five",
    {},
    [],
    None,
    2**80,
]
"""Values other projects' fixtures showed break a parser, tried first."""

SACCT_JOB = {
    "job_id": 7,
    "name": "x",
    "state": {"current": ["COMPLETED"]},
    "time": {"elapsed": 5, "start": 1700000000, "end": 1700000005, "submission": 1699999990},
    "partition": "cpu",
    "account": "acct",
    "user": "alice",
    "exit_code": {"status": ["SUCCESS"], "return_code": 0},
    "tres": {"allocated": [{"type": "cpu", "count": 1}]},
}
RECORDS: dict[str, tuple[Any, str, dict[str, Any]]] = {
    "sshare": (
        parse_sshare_json,
        "shares",
        {"name": "alice", "type": ["USER"], "parent": "acct", "usage": 10, "shares": 1},
    ),
    "squeue": (
        parse_squeue_json,
        "jobs",
        {"job_id": 7, "partition": "cpu", "job_state": ["RUNNING"], "user_name": "alice"},
    ),
    "sinfo": (
        parse_sinfo_json,
        "nodes",
        {"name": "n1", "state": ["IDLE"], "cpus": 8, "partitions": ["cpu"], "real_memory": 9},
    ),
    "sacct": (parse_sacct_json, "jobs", SACCT_JOB),
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.sampled_from(sorted(RECORDS)),
    field=st.sampled_from(sorted({k for _, _, rec in RECORDS.values() for k in rec})),
    value=st.sampled_from(TRICKY) | ODD_VALUES,
)
def test_json_parsers_answer_any_field_value_with_rows_or_a_parse_error(
    which: str, field: str, value: Any
) -> None:
    parse, key, record = RECORDS[which]
    doc = {key: [record | {field: value}], "errors": []}
    if which == "sshare":
        doc = {"shares": {"shares": doc[key]}, "errors": []}
    text = json.dumps(doc)  # allow_nan: Infinity and NaN, as some Slurm builds print them
    try:
        rows = parse(text)
    except ParseError:
        return
    assert isinstance(rows, list)
