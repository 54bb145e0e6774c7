"""The fast paths of the parsers read the same as the slow ones (issue 35, part 3).

50 MB of Slurm output parses in a few seconds because the parsers read lines lazily, take
whole chunks of well-formed lines and whole well-formed scontrol records at once, reuse
the record of a row that repeats another but for its job id, and build records from
values they checked without pydantic's second pass. Each shortcut has a plain path it
stands for; these tests hold the two to the same records, line numbers and warnings, on
the real fixtures, damaged, and with chunks small enough that every boundary case occurs.
``bench/parse_size.py`` measures the speed.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

import federation.parsing.lines as lines_module
import federation.parsing.scontrol_records as scontrol_records
from federation.core.errors import ParseError
from federation.core.snapshot import JobRecord, NodeRecord
from federation.parsing import (
    jobs_from_table,
    parse_delimited,
    parse_format_output,
    parse_sacct_parsable,
    parse_scontrol_jobs,
    parse_scontrol_nodes,
    parse_scontrol_partitions,
    parse_sinfo,
    parse_squeue,
)
from federation.parsing.common import iter_lines
from federation.parsing.sacct import AcctRecord
from federation.parsing.squeue import _MAKE_JOB, _Builder
from federation.parsing.table import Table
from federation.parsing.table_jobs import TableJobs

FIXTURES = Path(__file__).parent / "fixtures"
SAMPLES = FIXTURES / "slurm_samples"
RECORDED = FIXTURES / "probe_output"
SACCT = (SAMPLES / "mila-iqia__beluga-sacct-p.txt").read_text()
NIG = (SAMPLES / "kfuku52__nig-squeue-o-literal-backslash-t.txt").read_text()
NIG_FORMAT = r"%i\t%P\t%j\t%u\t%t\t%M\t%D\t%R"
UNITSEP = (SAMPLES / "OSC__cardinal-squeue-O-unitsep.txt").read_text()
HABROK = (SAMPLES / "rug-cit-hpc__habrok-squeue-deps-reasons.txt").read_text()
NODES = (RECORDED / "probetest-scontrol-show-node-22.05.8.txt").read_text()
JOBS = (RECORDED / "probetest-scontrol-show-job-22.05.8.txt").read_text()
MILA_JOBS = (SAMPLES / "mila-iqia__mila-scontrol-show-job-pending.txt").read_text() + "\n"
OWENS = (SAMPLES / "OSC__owens-scontrol-show-part-o.txt").read_text()


def _damaged(text: str) -> list[str]:
    """``text`` and the ways it arrives damaged or re-rendered: blank, comment and
    whitespace lines among its lines, CRLF, a line cut, doubled or with a separator more,
    its final newline lost."""
    lines = text.splitlines(keepends=True)
    mid = len(lines) // 2
    out = [text, text.replace("\n", "\r\n"), text.rstrip("\n"), text + "\n\n"]
    for extra in ("\n", "   \n", "# a comment\n", "  # another\n", "\t\n", "\r\n"):
        out.append("".join([*lines[:mid], extra, *lines[mid:]]))
    out.append("".join([*lines[:mid], lines[mid][: len(lines[mid]) // 2] + "\n", *lines[mid:]]))
    out.append("".join([*lines[:mid], lines[mid], *lines[mid:]]))
    for sep in ("|", ";", "\x1f", "\\t", " "):
        if sep in lines[mid]:
            out.append("".join([*lines[:mid], lines[mid].replace(sep, sep * 2, 1), *lines[mid:]]))
    return out


def _table_view(table: Table) -> tuple[Any, ...]:
    return (table.columns, table.rows, table.line_numbers, table.skipped, table.warnings)


def _outcome(parse: Any, text: str) -> Any:
    try:
        return ("ok", parse(text))
    except ParseError as e:
        return ("error", str(e))


TABLES = [
    (lambda t: parse_delimited(t, "|"), SACCT),
    (lambda t: parse_delimited(t, "\x1f"), UNITSEP),
    (lambda t: parse_format_output(t, NIG_FORMAT), NIG),
    (lambda t: parse_format_output(t, "%i|%E;%R;%C"), HABROK),
    (lambda t: parse_format_output(t, "<%i;%t;%D>"), "<1;R;2>\n<2;PD;1>\n3;R;1\n<4;R>\n<5;R;1>\n"),
]


# --- lines read lazily, tables kept as lines ----------------------------------------------


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 100])
def test_lines_read_a_chunk_at_a_time_are_the_lines(chunk: int) -> None:
    for text in ["", "\n", "a", "a\n", "\n\na\nbb\n\nccc", "x\r\ny\n", SACCT[:5000]]:
        assert list(iter_lines(text, chunk)) == text.split("\n")


@pytest.mark.parametrize("chunk", [1, 5, 64, 4096])
@pytest.mark.parametrize("case", range(len(TABLES)))
def test_a_table_read_in_chunks_is_the_table_read_at_once(
    case: int, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks of well-formed lines are taken whole, others line by line: whatever the
    chunk size, the rows, their lines, the skipped lines and the warnings are the same."""
    parse, text = TABLES[case]
    for damaged in _damaged(text):
        whole = _outcome(lambda t: _table_view(parse(t)), damaged)
        monkeypatch.setattr(lines_module, "LINE_CHUNK", chunk)
        assert _outcome(lambda t: _table_view(parse(t)), damaged) == whole
        monkeypatch.undo()


def test_a_table_kept_as_lines_reads_like_a_list_of_rows() -> None:
    text = "JOBID;ST\n1;R\n\n# x\n2;PD\n3;R;extra\n4;R\n"
    lazy, listed = parse_delimited(text, ";"), parse_delimited(text, ";")
    assert listed.rows == [["1", "R"], ["2", "PD"], ["4", "R"]]  # (makes the list)
    assert lazy.row_count == 3 and "rows=3" in repr(lazy)
    assert [lazy.row(i) for i in range(3)] == listed.rows
    assert [lazy.line_of(i) for i in range(3)] == listed.line_numbers == [2, 5, 7]
    assert lazy.row_lines() == [2, 5, 7]
    assert list(lazy.numbered_rows()) == list(zip([2, 5, 7], listed.rows, strict=True))
    assert lazy.dicts() == [
        {"JOBID": "1", "ST": "R"},
        {"JOBID": "2", "ST": "PD"},
        {"JOBID": "4", "ST": "R"},
    ]
    assert lazy.skipped == 1 and lazy.warnings == ["line 6: expected 2 fields, got 3: '3;R;extra'"]
    lazy.rows.append(["5", "R"])  # a table's rows are a list once asked for
    assert lazy.row_count == 4 and lazy.row(3) == ["5", "R"] and lazy.line_of(3) == 4
    built = Table(columns=["A"], rows=[["x"], ["y"]])
    assert list(built.numbered_rows()) == [(1, ["x"]), (2, ["y"])] and built.row_lines() == [1, 2]


# --- records built from checked values ----------------------------------------------------


def _records() -> list[Any]:
    data = json.loads((RECORDED / "probetest-22.05.8.json").read_text())
    out: list[Any] = []
    out += parse_sinfo(data["sinfo"]["stdout"])
    out += parse_squeue(data["squeue"]["stdout"])
    out += parse_scontrol_nodes(NODES)
    out += parse_scontrol_jobs(JOBS) + parse_scontrol_jobs(MILA_JOBS)
    out += jobs_from_table(parse_format_output(NIG, NIG_FORMAT))
    out += jobs_from_table(parse_delimited(UNITSEP, "\x1f"))
    return out


def test_records_built_without_validation_equal_validated_ones() -> None:
    records = _records()
    assert {type(r) for r in records} == {JobRecord, NodeRecord}
    for r in records:
        again = type(r).model_validate(r.model_dump())
        assert again == r and r == again and repr(again) == repr(r)
        assert pickle.loads(pickle.dumps(r)) == r
        assert r.model_copy() == r
    job = next(r for r in records if isinstance(r, JobRecord))
    changed = job.model_copy(update={"cpus": job.cpus + 1})
    assert changed.cpus == job.cpus + 1 and changed.model_fields_set == job.model_fields_set
    with pytest.raises(Exception, match="frozen"):
        job.cpus = 3  # type: ignore[misc]


def test_a_row_that_repeats_another_but_for_its_id_reads_as_built() -> None:
    """Rows with the same values but the job id are copies of the first's record: each
    equals the record built from its own row."""
    body = "".join(
        f"{i};{'PD' if i % 3 else 'R'};1;{i % 4 + 1};acct;u{i % 2}\n" for i in range(1, 60)
    )
    table = parse_format_output("JOBID;ST;NODES;CPUS;ACCOUNT;USER\n" + body, "%i;%t;%D;%C;%a;%u")
    builder = _Builder(table.columns)
    jobs = jobs_from_table(table)
    assert [j.job_id for j in jobs] == [str(i) for i in range(1, 60)]
    assert jobs == [_MAKE_JOB(builder._values(row)) for _, row in table.numbered_rows()]
    assert jobs[4].user == "u1" and jobs[4].cpus == 2 and jobs[3].state == "pending"


def test_duplicates_in_a_table_are_named_with_their_first_line() -> None:
    text = "JOBID;ST\n1;R\n2x;R\n3;R\n1;R\n3;PD\n"
    warnings: list[str] = []
    jobs = jobs_from_table(parse_delimited(text, ";"), warnings=warnings)
    assert [j.job_id for j in jobs] == ["1", "3"]
    assert any(w.startswith("squeue line 3 skipped:") for w in warnings)
    assert (
        "squeue line 5 skipped: job 1 is listed twice (first on line 2): duplicated output"
        in warnings
    )
    assert (
        "squeue line 6 skipped: job 3 is listed twice (first on line 4): duplicated output"
        in warnings
    )


def test_table_jobs_read_as_the_list_of_their_records() -> None:
    """Kept as one record per kind and a job id per row, a table's jobs read (by index,
    slice, iteration, equality) as the list of the records built row by row, with every
    id as written (plain numbers kept as numbers, the others as text)."""
    ids = ["7", "0", "007", "7_1", "12_[1-3%2]", "4294967294", "8", "7_2", " 9 "]
    body = "".join(f"{j};{'R' if k % 3 else 'PD'};1;2;a;u\n" for k, j in enumerate(ids))
    table = parse_format_output("JOBID;ST;NODES;CPUS;ACCOUNT;USER\n" + body, "%i;%t;%D;%C;%a;%u")
    builder = _Builder(table.columns)
    built = [_MAKE_JOB(builder._values(row)) for _, row in table.numbered_rows()]
    jobs = jobs_from_table(table)
    assert isinstance(jobs, TableJobs) and len(jobs) == len(ids) and jobs.kinds == 2
    assert jobs == built and built == jobs and list(jobs) == built and jobs == jobs
    assert [j.job_id for j in jobs] == [j.strip() for j in ids]
    assert [jobs[i] for i in range(-len(ids), len(ids))] == built + built
    assert jobs[1:6:2] == built[1:6:2] and jobs[::-1] == built[::-1]
    assert jobs != built[:-1] and jobs != [*built[:-1], built[0]] and jobs != tuple(built)
    assert jobs + built == built + jobs == built * 2
    assert pickle.loads(pickle.dumps(jobs)) == built
    with pytest.raises(IndexError):
        jobs[len(ids)]


def test_duplicate_odd_job_ids_are_named_as_written() -> None:
    text = "JOBID;ST\n7_1;R\n007;R\n7;R\n7_1;PD\n007;R\n0007;R\n"
    warnings: list[str] = []
    jobs = jobs_from_table(parse_delimited(text, ";"), warnings=warnings)
    assert [j.job_id for j in jobs] == ["7_1", "007", "7", "0007"]
    assert warnings == [
        "squeue line 5 skipped: job 7_1 is listed twice (first on line 2): duplicated output",
        "squeue line 6 skipped: job 007 is listed twice (first on line 3): duplicated output",
    ]


def test_sacct_records_built_directly_equal_dataclass_built_ones() -> None:
    records = parse_sacct_parsable(SACCT)
    assert len(records) == 1944
    for r in records[:300]:
        assert dataclasses.replace(r) == r == AcctRecord(**dataclasses.asdict(r))
        assert pickle.loads(pickle.dumps(r)) == r
    with pytest.raises(dataclasses.FrozenInstanceError):
        records[0].job_id = "x"  # type: ignore[misc]


# --- scontrol: whole records and lines of Key=value words ---------------------------------


SCONTROL = [
    (parse_scontrol_nodes, NODES),
    (parse_scontrol_jobs, JOBS),
    (parse_scontrol_jobs, MILA_JOBS),
    (parse_scontrol_partitions, OWENS + "\n"),
]


def _scontrol_damaged(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    out = _damaged(text)
    for i in range(1, min(len(lines), 40), 3):
        line = lines[i]
        out.append("".join([*lines[:i], line.replace("=", '="', 1), *lines[i + 1 :]]))
        out.append("".join([*lines[:i], line.lstrip(), *lines[i + 1 :]]))
        out.append("".join([*lines[:i], "   NtasksPerTRES:0\n", *lines[i:]]))
        out.append("".join([*lines[:i], line.rstrip("\n") + " Extra=1 Extra=2\n", *lines[i + 1 :]]))
        out.append("".join([*lines[:i], line.replace(" ", "\t", 1), *lines[i + 1 :]]))
        out.append("".join([*lines[:i], line, line, *lines[i + 1 :]]))
    return out


@pytest.mark.parametrize("case", range(len(SCONTROL)))
def test_scontrol_records_read_whole_read_as_line_by_line(
    case: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record read at once (all its lines ``Key=value``, nothing odd) and one read line
    by line give the same records and the same warnings; so do a line of single-word
    pairs split with str methods and the same line split by the key regex."""
    parse, text = SCONTROL[case]

    def run(t: str) -> Any:
        warnings: list[str] = []
        return parse(t, warnings=warnings), warnings

    for damaged in _scontrol_damaged(text):
        fast = _outcome(run, damaged)
        monkeypatch.setattr(scontrol_records, "_whole", lambda block, share: None)
        assert _outcome(run, damaged) == fast
        monkeypatch.setattr(scontrol_records, "_PAIR", scontrol_records.re.compile(r"(?!)"))
        assert _outcome(run, damaged) == fast
        monkeypatch.undo()


def test_a_node_listed_twice_names_its_first_line() -> None:
    """sinfo keeps the (node, partition) pairs it has seen in a set: the first line of a
    repeated pair is found when one is met."""
    stdout = json.loads((RECORDED / "probetest-22.05.8.json").read_text())["sinfo"]["stdout"]
    records = [r + "\x1e\n" for r in stdout.split("\x1e\n") if r]
    text = "".join([*records, records[1]])
    node = records[1].split("\x1f")[0].strip()
    with pytest.raises(
        ParseError,
        match=rf"sinfo line {len(records) + 1}: node {node} .* "
        r"is listed twice \(first on line 2\)",
    ):
        parse_sinfo(text)
