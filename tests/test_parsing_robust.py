"""Third-party Slurm text never loses rows quietly (issue 18, part 7).

Each case starts from a real sample (``tests/fixtures``) and damages or re-renders it the
way outputs from other sites arrived: a truncated ``sacct -p`` line, a node record without
``Partitions=``, squeue's default width-padded columns, bytes instead of text, and inputs
so large and so broken that per-row warnings used to run into the hundreds of thousands.
Each either parses right, or costs the damaged row only (with a capped warning naming its
line), or fails with a :class:`ParseError` naming the line.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from federation.core.errors import ParseError
from federation.parsing.common import ROW_WARNING_CAP, ROW_WARNING_KINDS, RowWarnings
from federation.parsing.sacct import parse_sacct_parsable
from federation.parsing.scontrol import parse_scontrol_nodes, parse_scontrol_records
from federation.parsing.sinfo import parse_sinfo_json
from federation.parsing.squeue import count_states, jobs_from_table, parse_squeue_jsonlike
from federation.parsing.squeue_start import parse_squeue_start_default
from federation.parsing.table import (
    SQUEUE_DEFAULT_FORMAT,
    parse_delimited,
    parse_format_output,
)

FIXTURES = Path(__file__).parent / "fixtures"
SAMPLES = FIXTURES / "slurm_samples"
RECORDED = FIXTURES / "probe_output"

SACCT = (SAMPLES / "mila-iqia__beluga-sacct-p.txt").read_text()  # header + 1944 rows, -p
SACCT_LINES = SACCT.splitlines()
NIG_TSV = (SAMPLES / "kfuku52__nig-squeue-o-literal-backslash-t.txt").read_text()
NIG_FORMAT = r"%i\t%P\t%j\t%u\t%t\t%M\t%D\t%R"  # squeue's default columns, untruncated
NODES_TEXT = (RECORDED / "probetest-scontrol-show-node-22.05.8.txt").read_text()
START_TEXT = (RECORDED / "probetest-squeue-start-22.05.8.txt").read_text()
RESTD_NODES = (SAMPLES / "rackslab__emulated-slurmrestd-nodes-v0.0.44-25.11.0.json").read_text()
START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"  # squeue --start's default


def _text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


# --- 1. sacct -p: one truncated line ------------------------------------------------------


def test_sacct_p_truncated_line_costs_that_row_only() -> None:
    lines = list(SACCT_LINES)
    cut = lines[100]
    lines[100] = cut[:-8]  # ends in the middle of End, without the trailing '|'
    assert not lines[100].endswith("|")
    warnings: list[str] = []
    recs = parse_sacct_parsable(_text(lines), warnings=warnings)
    assert len(recs) == 1943  # not 0: the other rows keep their trailing '|'
    assert len(warnings) == 1
    assert warnings[0].startswith("line 101: no trailing '|': line cut short")
    lost = cut.split("|")[2]
    assert lost not in {r.job_id for r in recs}
    assert {r.job_id for r in recs} == {ln.split("|")[2] for ln in SACCT_LINES[1:]} - {lost}


def test_sacct_p_output_cut_mid_last_line() -> None:
    """Output that stops mid-write: the last line lacks its '|', the rest are intact."""
    text = SACCT.rstrip("\n")
    text = text[: text.rindex("|", 0, len(text) - 1) - 3]
    table = parse_delimited(text, "|")
    assert table.columns[:3] == ["Account", "UID", "JobID"] and len(table.columns) == 7
    assert len(table.rows) == 1943 and table.skipped == 1
    assert table.warnings == [
        f"line 1945: output ends without a newline: last line cut short: {text.splitlines()[-1]!r}"
    ]
    assert table.line_numbers[:2] == [2, 3] and table.line_of(1942) == 1944


def test_trailing_delimiter_without_header_by_majority() -> None:
    columns = SACCT_LINES[0].rstrip("|").split("|")
    body = list(SACCT_LINES[1:])
    body[0] = body[0][:40]  # truncated: no trailing '|'
    table = parse_delimited(_text(body), "|", columns)
    assert len(table.rows) == 1943 and table.skipped == 1
    assert table.warnings[0].startswith("line 1: no trailing '|'")
    assert table.rows[0][2] == SACCT_LINES[2].split("|")[2]


def test_sacct_P_rows_ending_in_an_empty_field_are_not_taken_for_p() -> None:
    """``sacct -P -o Account,JobID,...,End,UID`` (no trailing '|'): steps have no UID, so
    most rows end with '|' (an empty last field), which is not a trailing delimiter.

    A header never has an empty last column, so it decides; without a header the field
    count does (n-1 delimiters is -P, n with a trailing one is -p)."""
    fields = [ln[:-1].split("|") for ln in SACCT_LINES]  # -P
    plain = ["|".join([*f[:1], *f[2:], f[1]]) for f in fields]  # UID moved last
    assert plain[0] == "Account|JobID|JobName|State|Start|End|UID"
    ending = sum(ln.endswith("|") for ln in plain[1:])
    assert ending == 1264 > len(plain) // 2  # the majority end with the delimiter
    recs = parse_sacct_parsable(_text(plain))
    assert len(recs) == 1944 and sum(r.uid is None for r in recs) == 1264
    columns = plain[0].split("|")
    table = parse_delimited(_text(plain[1:]), "|", columns)
    assert len(table.rows) == 1944 and table.skipped == 0
    assert Counter(r[-1] for r in table.rows)[""] == ending


def test_delimited_table_of_another_format_fails_naming_the_line() -> None:
    with pytest.raises(ParseError, match=r"delimited table line 2: no line fits the 7 columns"):
        parse_delimited(SACCT_LINES[0] + "\n" + NIG_TSV, "|")


# --- 2. scontrol show node -o without Partitions= -----------------------------------------


def _one_line_records(text: str) -> list[str]:
    """``scontrol show node`` -> ``scontrol show node -o`` (one record per line)."""
    records = [r for r in re.split(r"\n(?=NodeName=)", text.strip()) if r.strip()]
    return [" ".join(part.strip() for part in r.splitlines() if part.strip()) for r in records]


def test_scontrol_node_o_without_partitions_is_named_not_lost() -> None:
    lines = _one_line_records(NODES_TEXT)
    assert len(lines) == 4 and all("Partitions=" in ln for ln in lines)
    # pc-cpu-02 is DOWN+NOT_RESPONDING: drop its Partitions=, as a spare prints it
    lines[0] = lines[0].replace("Partitions=cpu,all ", "")
    assert "Partitions" not in lines[0] and "State=DOWN" in lines[0]
    warnings: list[str] = []
    nodes = parse_scontrol_nodes(_text(lines), warnings)
    assert [(n.name, n.partition) for n in nodes] == [
        ("pc-cpu-03", "cpu"),
        ("pc-cpu-03", "all"),
        ("pc-gpu-01", "gpu"),
        ("pc-gpu-01", "all"),
        ("pc-gpu-02", "gpu"),
        ("pc-gpu-02", "all"),
    ]
    assert warnings == [
        "scontrol show node record 1 (line 1): node pc-cpu-02 is in no partition; skipped"
    ]


def test_scontrol_node_with_empty_partitions_multiline() -> None:
    text = NODES_TEXT.replace("   Partitions=gpu,all \n", "   Partitions=\n", 1)
    warnings: list[str] = []
    nodes = parse_scontrol_nodes(text, warnings)
    assert sorted({n.name for n in nodes}) == ["pc-cpu-02", "pc-cpu-03", "pc-gpu-02"]
    assert warnings == [
        "scontrol show node record 3 (line 38): node pc-gpu-01 is in no partition; skipped"
    ]


def test_the_json_path_warns_the_same_way() -> None:
    data = json.loads(RESTD_NODES)
    data["nodes"][1]["partitions"] = []  # cn2, DOWN
    warnings: list[str] = []
    nodes = parse_sinfo_json(data, warnings)
    assert len(nodes) == 7 and "cn2" not in {n.name for n in nodes}
    assert warnings == ["sinfo JSON nodes[1]: node cn2 is in no partition; skipped"]


# --- 3. squeue's default width-padded text ------------------------------------------------

DEFAULT_WIDTHS = (18, 9, 8, 8, 2, 10, 6)  # %.18i %.9P %.8j %.8u %.2t %.10M %.6D, then %R


def render_default_bytes(values: list[str]) -> bytes:
    """One line as squeue prints it without -o: each field right-justified, padded and cut
    to its width counted in bytes (``_print_str`` in src/squeue/print.c), then %R whole."""
    cells = [v.encode().rjust(w)[:w] for v, w in zip(values, DEFAULT_WIDTHS, strict=False)]
    return b" ".join(cells) + b" " + values[-1].encode()


def render_default(values: list[str]) -> str:
    return render_default_bytes(values).decode()


HEADER = ["JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES", "NODELIST(REASON)"]
NIG_ROWS = [ln.split("\\t") for ln in NIG_TSV.splitlines()]
DEFAULT_TEXT = _text([render_default(HEADER)] + [render_default(r) for r in NIG_ROWS])


def test_default_squeue_text_parses_every_job() -> None:
    assert DEFAULT_TEXT.splitlines()[0].startswith("             JOBID PARTITION     NAME")
    table = parse_format_output(DEFAULT_TEXT, SQUEUE_DEFAULT_FORMAT)
    assert table.skipped == 0 and table.warnings == []
    warnings: list[str] = []
    jobs = jobs_from_table(table, warnings=warnings)
    assert warnings == [] and len(jobs) == 353
    assert count_states(jobs) == {"pending": 82, "running": 271}
    # the same jobs as the untruncated tab-separated listing of the same queue
    full = jobs_from_table(parse_format_output(NIG_TSV, NIG_FORMAT))
    assert len(full) == 353
    for j, f in zip(jobs, full, strict=True):
        assert f.job_id.startswith(j.job_id) and len(j.job_id) <= 18  # squeue cuts it
        assert (j.state, j.reason, j.nodes, j.node_names) == (
            f.state,
            f.reason,
            f.nodes,
            f.node_names,
        ), j.job_id
        assert f.name is not None and f.name.startswith(j.name or "")
    assert jobs[0].partition == "epyc" and jobs[0].name == "WES_norm"  # squeue cut it
    running = [j for j in jobs if j.state == "running"]
    assert all(j.node_names and len(j.node_names[0]) < 12 for j in running)


def test_default_squeue_name_with_space_and_multibyte() -> None:
    rows = [
        ["14040001", "epyc", "my job", "alice", "R", "1:00", "1", "a018"],
        ["14040002", "epyc", "données", "bob", "PD", "0:00", "2", "(Priority)"],
        ["14040003", "epyc", "日本語の名前", "bob", "R", "2:00", "1", "a019"],
    ]
    raw = b"\n".join([render_default_bytes(HEADER)] + [render_default_bytes(r) for r in rows])
    raw += b"\n"
    assert b" donn\xc3\xa9es " in raw and b" \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa " in raw
    table = parse_format_output(raw, SQUEUE_DEFAULT_FORMAT)
    assert table.skipped == 0
    assert [r[:3] for r in table.rows] == [
        ["14040001", "epyc", "my job"],
        ["14040002", "epyc", "données"],  # 7 characters in 8 bytes: the columns hold
        ["14040003", "epyc", "日本\ufffd"],  # squeue cut the third character in half
    ]
    assert [r[-1] for r in table.rows] == ["a018", "(Priority)", "a019"]
    assert table.warnings == [
        "squeue -o table: output is not UTF-8 from line 4 on; "
        "1 undecodable byte sequence(s) replaced by U+FFFD"
    ]


def test_default_squeue_realigned_or_overflowing_lines_split_at_whitespace() -> None:
    lines = DEFAULT_TEXT.splitlines()
    squeezed = [" ".join(ln.split()) for ln in lines]  # e.g. piped through tr -s ' '
    table = parse_format_output(_text(squeezed), SQUEUE_DEFAULT_FORMAT)
    assert len(table.rows) == 353 and table.skipped == 0
    assert table.rows[0][:2] == ["12672918_[1-4%4]", "epyc"]
    # SLURM_BITSTR_LEN set: a long array job id is printed whole, pushing the line right
    long_id = "14838682_[82-312,400-999]"
    lines[5] = long_id + lines[5][18:]
    table = parse_format_output(_text(lines), SQUEUE_DEFAULT_FORMAT)
    assert table.skipped == 0 and table.rows[4][0] == long_id
    assert table.rows[4][-1] == NIG_ROWS[4][-1]


def test_default_squeue_damaged_line_costs_that_row() -> None:
    lines = DEFAULT_TEXT.splitlines()
    lines[10] = lines[10][:30]  # cut in the NAME column
    warnings: list[str] = []
    jobs = jobs_from_table(parse_format_output(_text(lines), SQUEUE_DEFAULT_FORMAT), 0, warnings)
    assert len(jobs) == 352
    assert len(warnings) == 1 and warnings[0].startswith("line 11: expected 8 fields")
    assert NIG_ROWS[9][0] not in {j.job_id for j in jobs}


def test_real_squeue_start_default_text_cut_at_its_columns() -> None:
    """Real padded output (Slurm 22.05.8): a job name with a space stays one field."""
    table = parse_format_output(START_TEXT, START_FORMAT)
    assert table.skipped == 0 and len(table.rows) == 8
    by_id = {r[0]: r for r in table.rows}
    assert by_id["7_[1-5]"][2] == "name wit" and by_id["7_[1-5]"][-1] == "(Dependency)"
    assert by_id["8"][5:8] == ["2026-12-02T15:50:22", "1", "pc-gpu-01"]
    assert by_id["13"][-1] == "(ReqNodeNotAvail, UnavailableNodes:pc-cpu-03)"


def test_truncated_header_labels_are_still_a_header() -> None:
    fmt = "%.8i %.5P %.2t %R"
    text = "   JOBID PARTI ST NODELIST(REASON)\n14040001  epyc  R a018\n"
    table = parse_format_output(text, fmt)
    assert table.rows == [["14040001", "epyc", "R", "a018"]]


def test_text_of_another_format_fails_naming_the_line() -> None:
    with pytest.raises(ParseError, match=r"squeue -o table line 1: no line fits the 8 columns"):
        parse_format_output("53766662;PD;1;4;acct;user\n" * 3, SQUEUE_DEFAULT_FORMAT)


# --- 4. bytes -------------------------------------------------------------------------------


def test_bytes_parse_like_text() -> None:
    raw = SACCT.encode()
    assert parse_delimited(raw, "|").rows == parse_delimited(SACCT, "|").rows
    assert parse_sacct_parsable(raw) == parse_sacct_parsable(SACCT)
    table = parse_format_output(NIG_TSV.encode(), NIG_FORMAT)
    assert len(table.rows) == 353 and table.warnings == []
    jsonlike = (SAMPLES / "rivosinc__squeue-o-jsonlike-format.txt").read_bytes()
    keys = {"id": "JOBID", "state": "STATE", "p": "PARTITION", "r": "NODELIST(REASON)"}
    assert len(parse_squeue_jsonlike(jsonlike, keys)) == 6
    assert len(parse_squeue_start_default(START_TEXT.encode())) == 8
    assert len(parse_scontrol_nodes(NODES_TEXT.encode())) == 8


def test_undecodable_bytes_are_replaced_with_a_warning_naming_the_line() -> None:
    lines = [ln.encode() for ln in SACCT_LINES]
    fields = lines[3].split(b"|")
    fields[3] = b"r\xe9sum\xe9"  # a job name in Latin-1
    lines[3] = b"|".join(fields)
    warnings: list[str] = []
    recs = parse_sacct_parsable(b"\n".join(lines) + b"\n", warnings=warnings)
    assert len(recs) == 1944  # the row is kept, its name marked
    assert recs[2].job_name == "r\ufffdsum\ufffd"
    assert warnings == [
        "delimited table: output is not UTF-8 from line 4 on; "
        "2 undecodable byte sequence(s) replaced by U+FFFD"
    ]


@pytest.mark.parametrize("value", [None, 42, ["a|b"]])
def test_non_text_is_a_parse_error_not_a_type_error(value: object) -> None:
    for call in (
        lambda: parse_delimited(value, "|"),  # type: ignore[arg-type]
        lambda: parse_format_output(value, NIG_FORMAT),  # type: ignore[arg-type]
        lambda: parse_sacct_parsable(value),  # type: ignore[arg-type]
        lambda: parse_squeue_start_default(value),  # type: ignore[arg-type]
        lambda: parse_scontrol_records(value),  # type: ignore[arg-type]
    ):
        with pytest.raises(ParseError, match="expected text output, got"):
            call()


def test_strict_scontrol_records_name_the_undecodable_line() -> None:
    raw = NODES_TEXT.encode().replace(b"Reason=slurmd", b"Reason=\xffslurmd", 1)
    with pytest.raises(ParseError, match=r"scontrol line 17: output is not UTF-8"):
        parse_scontrol_records(raw)


# --- 5. capped per-row warnings --------------------------------------------------------------


def _summary(k: int) -> str:
    return f"... and {k} more rows like this"


def test_sacct_warnings_are_capped_with_a_summary() -> None:
    body = [  # 19,440 rows, each job id once (a repeated row is a duplicate); every other
        # one cut short
        "|".join([*f[:2], f"{k}{f[2]}", *f[3:]])
        for k in range(10)
        for f in (ln.split("|") for ln in SACCT_LINES[1:])
    ]
    damaged = [ln if i % 2 else ln[:-2] for i, ln in enumerate(body)]
    warnings: list[str] = []
    recs = parse_sacct_parsable(_text([SACCT_LINES[0], *damaged]), warnings=warnings)
    assert len(recs) == 9720
    assert len(warnings) == ROW_WARNING_CAP + 1
    assert warnings[0].startswith("line 2: no trailing '|'")
    assert warnings[-1].startswith(_summary(9720 - ROW_WARNING_CAP))


def test_field_count_warnings_of_any_count_are_one_kind() -> None:
    body = [f"{i}|x" + "|y" * (i % 7) for i in range(3000)]  # 2 to 8 fields
    table = parse_delimited(_text(["A|B|C", *body]), "|")
    assert len(table.rows) == 3000 // 7 + 1 and table.skipped == 3000 - len(table.rows)
    assert len(table.warnings) == ROW_WARNING_CAP + 1
    assert table.warnings[-1] == (
        f"{_summary(table.skipped - ROW_WARNING_CAP)} (expected N fields, got N)"
    )


def test_squeue_row_warnings_are_capped() -> None:
    rows = [[*r[:6], "many", *r[7:]] for r in NIG_ROWS] * 30  # NODES not a number
    text = _text([render_default(HEADER)] + [render_default(r) for r in rows])
    warnings: list[str] = []
    jobs = jobs_from_table(parse_format_output(text, SQUEUE_DEFAULT_FORMAT), 0, warnings)
    assert jobs == []
    assert len(warnings) == ROW_WARNING_CAP + 1
    assert warnings[0] == "squeue line 2 skipped: nodes: expected a number, got 'many'"
    assert warnings[-1] == f"{_summary(353 * 30 - ROW_WARNING_CAP)} (squeue row)"


def test_scontrol_and_sinfo_json_warnings_are_capped() -> None:
    lines = [ln.replace("Partitions=cpu,all ", "") for ln in _one_line_records(NODES_TEXT)]
    many = [ln.replace("pc-cpu-0", f"x{i}-") for i in range(200) for ln in lines[:2]]
    warnings: list[str] = []
    assert parse_scontrol_nodes(_text(many), warnings) == []
    assert len(warnings) == ROW_WARNING_CAP + 1
    assert warnings[-1] == f"{_summary(400 - ROW_WARNING_CAP)} (no partition)"

    data = json.loads(RESTD_NODES)
    spare = copy.deepcopy(data["nodes"][1])
    spare["partitions"] = []
    data["nodes"] = [data["nodes"][0]] + [spare] * 500
    warnings = []
    assert len(parse_sinfo_json(data, warnings)) == 1
    assert len(warnings) == ROW_WARNING_CAP + 1 and warnings[-1].startswith(_summary(450))


def test_squeue_start_default_warnings_are_capped_and_name_real_lines() -> None:
    lines = START_TEXT.splitlines()
    text = _text([lines[0], "", *(["garbage"] * 200), *lines[1:]])
    warnings: list[str] = []
    est = parse_squeue_start_default(text, warnings=warnings)
    assert len(est) == 8
    assert warnings[0].startswith("squeue --start line 3: not in the default format")
    assert warnings[-1] == f"{_summary(200 - ROW_WARNING_CAP)} (not the default format)"


def test_row_warnings_bound_the_kinds_too() -> None:
    notes = RowWarnings(cap=2)
    for i in range(1000):
        notes.add(f"kind {i}", f"row {i}")
    lines = notes.lines()
    assert notes.total == 1000
    assert len(lines) == ROW_WARNING_KINDS + 2 + 1  # one each, two of the rest, a summary
    assert lines[-1] == f"{_summary(1000 - ROW_WARNING_KINDS - 2)} (other)"
