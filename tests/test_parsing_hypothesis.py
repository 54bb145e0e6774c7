"""Damaged real Slurm output is never data (issue 35, part 2).

Every parser is given its real fixtures (``tests/fixtures``, and the shared sample set when
present) cut at any byte, spliced (a line repeated, a line of another fixture inserted or
glued into a line) and mutated (a number made a word, negative, huge or not a whole token;
in JSON a value made ``NaN``, ``Infinity``, ``1e18``, a string, a list, an object or nested
deep). The property: the parser raises :class:`ParseError`, or every record it returns is
the record the undamaged output gives under that name, and a record it leaves out of a
cut output is named in a warning (or the whole output refused). Never a raw exception,
never a changed value.

What no parser can see in principle is left out of the damage or the property, each with a
comment saying why (a valid-looking value replaced by another: a host name's digits, free
text, a JSON string made another string, a line of another record that fits). There is no
expected failure: a finding is fixed in the parser, not listed here.

``FEDERATION_HYPOTHESIS_EXAMPLES`` raises the number of examples per parser (default 40).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_parsing_samples import JSONLIKE_KEYS  # the rivosinc sample's key map

from federation.core.errors import ParseError
from federation.parsing import (
    jobs_from_table,
    parse_delimited,
    parse_format_output,
    parse_sacct_json,
    parse_sacct_parsable,
    parse_scontrol_jobs,
    parse_scontrol_nodes,
    parse_scontrol_partitions,
    parse_sinfo,
    parse_sinfo_json,
    parse_squeue,
    parse_squeue_json,
    parse_squeue_jsonlike,
    parse_squeue_start,
    parse_sshare_json,
)
from federation.parsing.sshare import parse_sshare_text

FIXTURES = Path(__file__).parent / "fixtures"
COPIED = FIXTURES / "slurm_samples"
RECORDED = FIXTURES / "probe_output"
SHARED = Path(
    os.environ.get(
        "FEDERATION_SLURM_SAMPLES", Path(__file__).resolve().parents[2] / "shared" / "slurm-samples"
    )
)
EXAMPLES = int(os.environ.get("FEDERATION_HYPOTHESIS_EXAMPLES", "40"))
PROBE = json.loads((RECORDED / "probetest-22.05.8.json").read_text())
SSHARE_TEXT = (  # sshare --noheader --parsable2, as Slurm 22.05 prints it (test_credit.py)
    "root||||7200000||1.000000||0.000000|\n"
    " root|root|1||0||0.000000|0.000000|0.000000|\n"
    " bbka-delta||1|0.500000|7200000|0.400000|0.400000||1.250000|cpu=600000,mem=9000\n"
    "  bbka-delta|alice|1|0.500000|5400000|0.300000|0.750000|0.625000|0.666667|\n"
    "  bbka-delta|bob|1|0.500000|1800000|0.100000|0.250000|0.875000|2.000000|\n"
)


def _head(text: str, lines: int) -> str:
    """The first ``lines`` lines (a large fixture's head keeps each example fast)."""
    return "".join(text.splitlines(keepends=True)[:lines])


def _complete(text: str) -> str:
    """A stored fixture whose final newline was lost, given back whole."""
    return text if text.endswith("\n") else text + "\n"


def _shared(name: str) -> str | None:
    path = SHARED / name
    return path.read_text(encoding="utf-8") if path.is_file() else None


# --- parsers: text -> (records by name, warnings) ------------------------------------------

Parsed = tuple[dict[Any, Any], list[str]]


def _key(record: Any) -> Any:
    for attrs in (("job_id",), ("name", "parent", "kind"), ("name", "partition"), ("name",)):
        if all(hasattr(record, a) for a in attrs):
            return tuple(getattr(record, a) for a in attrs)
    raise AssertionError(f"no key for {record!r}")


def _value(record: Any) -> Any:
    """What must not change: every field (a partition's raw ``Key=value`` dict aside: it
    holds fields no one reads)."""
    if dataclasses.is_dataclass(record) and hasattr(record, "raw"):
        return dataclasses.replace(record, raw={})  # type: ignore[type-var]
    return record


def _without_free_text(record: Any) -> Any:
    if hasattr(record, "_fields") or dataclasses.is_dataclass(record):
        names = (
            record._fields
            if hasattr(record, "_fields")
            else [f.name for f in dataclasses.fields(record)]
        )
        return _replace(record, **{f: None for f in FREE_TEXT if f in names})
    return record.model_copy(update={f: None for f in FREE_TEXT if f in type(record).model_fields})


def _same(record: Any, want: Any, free_text_may_differ: bool) -> bool:
    """``record`` reads as ``want``; with ``free_text_may_differ``, but for free text (and
    a job's state, which Slurm's pending reason decides: ``JobHeldAdmin`` is held)."""
    if not free_text_may_differ:
        return bool(record == want)
    if getattr(record, "reason", None) != getattr(want, "reason", None):
        record = _replace(record, state=None)
        want = _replace(want, state=None)
    return bool(_without_free_text(record) == _without_free_text(want))


def _replace(record: Any, **kw: Any) -> Any:
    if hasattr(record, "_fields"):  # a NamedTuple
        return record._replace(**{k: v for k, v in kw.items() if k in record._fields})
    if dataclasses.is_dataclass(record):
        return dataclasses.replace(record, **kw)  # type: ignore[type-var]
    return record.model_copy(update=kw)


def _by_key(records: list[Any]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for r in records:
        key = _key(r)
        assert key not in out, f"two records named {key}"
        out[key] = _value(r)
    return out


def _with_warnings(fn: Callable[..., list[Any]], **kw: Any) -> Callable[[str], Parsed]:
    def run(text: str) -> Parsed:
        warnings: list[str] = []
        return _by_key(fn(text, warnings=warnings, **kw)), warnings

    return run


def _strict(fn: Callable[[str], Any]) -> Callable[[str], Parsed]:
    def run(text: str) -> Parsed:
        out = fn(text)
        return _by_key(list(out.values()) if isinstance(out, dict) else out), []

    return run


def _table(fmt: str | None, delimiter: str | None = None) -> Callable[[str], Parsed]:
    def run(text: str) -> Parsed:
        warnings: list[str] = []
        table = parse_format_output(text, fmt) if fmt else parse_delimited(text, delimiter or "|")
        return _by_key(jobs_from_table(table, warnings=warnings)), warnings

    return run


@dataclass(frozen=True)
class Case:
    name: str
    parse: Callable[[str], Parsed]
    text: str
    kind: str  # "text" (line records) or "json"


def _cases() -> list[Case]:
    cases = [
        Case("sinfo", _strict(parse_sinfo), PROBE["sinfo"]["stdout"], "text"),
        Case("squeue", _strict(parse_squeue), PROBE["squeue"]["stdout"], "text"),
        Case("squeue_start", _strict(parse_squeue_start), PROBE["squeue_start"]["stdout"], "text"),
        Case("sshare", _strict(parse_sshare_text), SSHARE_TEXT, "text"),
        Case(
            "scontrol_partition_owens",
            _with_warnings(parse_scontrol_partitions),
            _complete((COPIED / "OSC__owens-scontrol-show-part-o.txt").read_text()),
            "text",
        ),
        Case(
            "scontrol_partition_probe",
            _with_warnings(parse_scontrol_partitions),
            PROBE["scontrol_partition"]["stdout"],
            "text",
        ),
        Case(
            "scontrol_node",
            _with_warnings(parse_scontrol_nodes),
            (RECORDED / "probetest-scontrol-show-node-22.05.8.txt").read_text(),
            "text",
        ),
        Case(
            "scontrol_job_mila",
            _with_warnings(parse_scontrol_jobs),
            # (the stored file lost the blank line scontrol ends its last record with)
            (COPIED / "mila-iqia__mila-scontrol-show-job-pending.txt").read_text() + "\n",
            "text",
        ),
        Case(
            "scontrol_job_probe",
            _with_warnings(parse_scontrol_jobs),
            (RECORDED / "probetest-scontrol-show-job-22.05.8.txt").read_text(),
            "text",
        ),
        Case(
            "sacct_p",
            _with_warnings(parse_sacct_parsable),
            _head((COPIED / "mila-iqia__beluga-sacct-p.txt").read_text(), 150),
            "text",
        ),
        Case(
            "squeue_backslash_t",
            _table(r"%i\t%P\t%j\t%u\t%t\t%M\t%D\t%R"),
            _head((COPIED / "kfuku52__nig-squeue-o-literal-backslash-t.txt").read_text(), 120),
            "text",
        ),
        Case(
            "squeue_deps_reasons",
            _table("%i|%E;%R;%C"),
            (COPIED / "rug-cit-hpc__habrok-squeue-deps-reasons.txt").read_text(),
            "text",
        ),
        Case(
            "squeue_unitsep",
            _table(None, "\x1f"),
            (COPIED / "OSC__cardinal-squeue-O-unitsep.txt").read_text(),
            "text",
        ),
        Case(
            "squeue_jsonlike",
            _with_warnings(parse_squeue_jsonlike, keys=JSONLIKE_KEYS),
            (COPIED / "rivosinc__squeue-o-jsonlike-format.txt").read_text(),
            "text",
        ),
        Case(
            "sinfo_json_2108",
            _with_warnings(parse_sinfo_json),
            (COPIED / "rivosinc__sinfo-json-21.08.5-openapi-v0.0.37.json").read_text(),
            "json",
        ),
        Case(
            "sinfo_json_2302",
            _with_warnings(parse_sinfo_json),
            (COPIED / "rivosinc__sinfo-N-json-23.02.5-dataparser-v0.0.39.json").read_text(),
            "json",
        ),
        Case(
            "slurmrestd_nodes_2511",
            _with_warnings(parse_sinfo_json),
            (COPIED / "rackslab__emulated-slurmrestd-nodes-v0.0.44-25.11.0.json").read_text(),
            "json",
        ),
        Case(
            "squeue_json_2108",
            _strict(parse_squeue_json),
            (COPIED / "rivosinc__squeue-json-21.08.5-openapi-v0.0.37.json").read_text(),
            "json",
        ),
        Case(
            "sacct_json_2108",
            _strict(lambda t: parse_sacct_json(t, include_steps=True)),
            (COPIED / "mila-iqia__cedar-sacct-json-21.08.8.json").read_text(),
            "json",
        ),
    ]
    gizmo = _shared("FredHutch__gizmo-squeue-semicolon-3559jobs.txt")
    if gizmo is not None:
        cases.append(
            Case("squeue_semicolon", _table("%i;%t;%D;%C;%a;%u"), _head(gizmo, 150), "text")
        )
    for name, parse in (
        ("ivolabbe__farnarkle-sinfo-json-24.11.6.json", _with_warnings(parse_sinfo_json)),
        ("ivolabbe__farnarkle-squeue-json-24.11.6.json", _strict(parse_squeue_json)),
        (
            "ivolabbe__farnarkle-sacct-json-24.11.6.json",
            _strict(lambda t: parse_sacct_json(t, include_steps=True)),
        ),
        ("ivolabbe__farnarkle-sshare-json-24.11.6.json", _strict(parse_sshare_json)),
    ):
        text = _shared(name)
        if text is not None:
            if "sacct" in name:  # 1.2 MB: its first jobs keep each example fast
                doc = json.loads(text)
                doc["jobs"] = doc["jobs"][:6]
                text = json.dumps(doc, indent=2)
            cases.append(Case(name.split("-", 1)[1].rsplit(".", 1)[0], parse, text, "json"))
    return cases


CASES = {c.name: c for c in _cases()}
BASELINE = {name: c.parse(c.text) for name, c in CASES.items()}
OTHERS: dict[Any, list[Any]] = {}
for _records, _ in BASELINE.values():
    for _k, _v in _records.items():
        OTHERS.setdefault(_k, []).append(_v)
LINES = [
    ln for c in CASES.values() if c.kind == "text" for ln in c.text.splitlines()[:40] if ln.strip()
]
"""Lines of the text fixtures to splice in. Not blank ones: a line cut at a byte and glued
to nothing is a line whose last value is shortened (``gpu:titanxp`` made ``gpu:titan``),
valid in itself, damage no parser can see (output cut at its end is seen: no final
newline)."""


def test_every_fixture_parses_whole_without_warnings_of_damage() -> None:
    for name, (records, warnings) in BASELINE.items():
        assert records, name
        assert not any("cut" in w or "twice" in w for w in warnings), (name, warnings)


# --- damage -----------------------------------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])(?<!\w-)\d+(?![\w.])")
"""A number standing alone as a value, not the digits of a name: ``cs10`` made ``csx``, or
``pc-cpu-02`` made ``pc-cpu-x`` or ``pc-cpu-02.5``, is another valid host name, damage no
parser can see. (This leaves a date's month and day alone too; its year and times stay.)"""
_JSON_NUMBER = re.compile(r"(?:(?<=: )|(?<=\[)|(?<=, ))\d+(?=[,}\]\s])")
"""A JSON number value. Not digits inside a JSON string: they are text of its own format
(``"gpu:4"`` made ``"gpu:x4"`` is a valid GRES, one GPU of type ``x4``), unseeable."""
FREE_TEXT = ("reason", "name", "job_name")
"""Fields of free text (a pending reason, a job name): a number in them mutated
(``cs[100,101]`` made ``cs[x,101]``, ``run-14`` made ``run-``) is still valid text, damage no
parser can see, so a number mutation is allowed to change them. Every other damage is not."""
NUMBER_DAMAGE = ["x", "-{n}", "{n}x", "x{n}", "99999999999999999999999", "1e9", "{n}.5", ""]
"""What a number becomes: a word, negative, a leading-digit token, huge, a float, gone."""
JSON_DAMAGE = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e18",
    "1e15",
    "-5",
    '"five"',
    "null",
    "[1, 2]",
    '{"a": 1}',
    '{"set": true, "infinite": false, "number": NaN}',
    "[" * 3000 + "]" * 3000,
    "true",
]
"""What a JSON value becomes (``[[[...]]]`` is nested deeper than Python recurses)."""


@st.composite
def damaged(draw: st.DrawFn, case: Case) -> tuple[str, bool, bool]:
    """(damaged text, whether a record it drops must be named: a cut inside a line,
    whether free text may differ and a whole record of another fixture appear: a number
    mutated, a line spliced or glued)."""
    text = case.text
    how = draw(st.sampled_from(["cut", "repeat", "splice", "glue", "number", "value"]))
    if how == "cut":
        k = draw(st.integers(0, len(text) - 1))
        inside = not text[:k].endswith("\n") and bool(text[:k].strip())
        return text[:k], inside, False
    lines = text.splitlines(keepends=True)
    if how == "repeat":
        i = draw(st.integers(0, len(lines) - 1))
        # In multi-line scontrol records a line is repeated where it stands: copied into
        # another record that lacks its key (``TresPerJob=``, ``Reason=``), it makes a valid
        # record with one more field, damage no parser can see.
        multi_line = any(ln[:1] == " " and "=" in ln for ln in lines)
        j = i + 1 if multi_line else draw(st.integers(0, len(lines)))
        return "".join([*lines[:j], lines[i], *lines[j:]]), False, False
    if how == "splice":  # a line of another fixture among these
        j = draw(st.integers(0, len(lines)))
        # (not a Key=value line into multi-line scontrol records: in a record that lacks its
        # key, ``Reason=``, it is a valid field; a record's first line, ``JobId=2 ...``,
        # splits a record in two, the first part valid without its optional last fields,
        # ``TresPerNode=``: damage no parser can see)
        multi_line = any(ln[:1] == " " and "=" in ln for ln in lines)
        pool = [ln for ln in LINES if not (multi_line and "=" in ln)]
        other = draw(st.sampled_from(pool)) + "\n"
        return "".join([*lines[:j], other, *lines[j:]]), False, True
    if how == "glue":  # a line cut at a byte and glued to a line of another fixture
        i = draw(st.integers(0, len(lines) - 1))
        # Not inside a line's first field, its record's name: ``14`` + ``14838525 ...`` is
        # job 1414838525, a valid id, damage no parser can see.
        first = re.search(r"[\s|;\x1f]", lines[i])
        start = first.end() if first else 0
        k = draw(st.integers(min(start, len(lines[i]) - 1), max(start, len(lines[i]) - 2)))
        # In Key=value records, not a line that starts with a Key=: a value cut short and
        # followed by another valid key (``Features=x   OS=Linux``) is valid, unseeable.
        key_value = any(ln.startswith(("PartitionName=", "NodeName=", "JobId=")) for ln in lines)
        pool = [ln for ln in LINES if not (key_value and re.match(r"\s*[A-Za-z][\w/:.()-]*=", ln))]
        other = draw(st.sampled_from(pool))
        # (a line glued to a line of another fixture of the same layout may be a valid line
        # whose free text, a job name or a reason, is the other's: so free text may differ)
        return (
            "".join([*lines[:i], lines[i][:k] + other + "\n", *lines[i + 1 :]]),
            False,
            True,
        )
    if how == "number" or case.kind == "text":
        spans = [
            m.span() for m in (_NUMBER if case.kind == "text" else _JSON_NUMBER).finditer(text)
        ]
        a, b = draw(st.sampled_from(spans))
        new = draw(st.sampled_from(NUMBER_DAMAGE)).format(n=text[a:b])
        return text[:a] + new + text[b:], False, True
    # JSON: a value (a number, a string, true/false/null) replaced
    spans = [
        m.span(1) for m in re.finditer(r':\s*(-?\d[\d.eE+-]*|"[^"\n]*"|true|false|null)', text)
    ]
    a, b = draw(st.sampled_from(spans))
    damage = JSON_DAMAGE
    if text[a] == '"' or text[a:b] == "null":  # a string (or null, "no value" in Slurm's
        # JSON) made another string or null is valid: unseeable
        damage = [d for d in JSON_DAMAGE if d not in ('"five"', "null")]
    return text[:a] + draw(st.sampled_from(damage)) + text[b:], False, False


@pytest.mark.parametrize("name", sorted(CASES))
def test_damaged_output_is_refused_or_read_right(name: str) -> None:
    case = CASES[name]
    whole, _ = BASELINE[name]

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,  # the same examples every run: an expected failure is strict
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(damaged(case))
    def check(damage: tuple[str, bool, bool]) -> None:
        text, must_name, free_text_may_differ = damage
        try:
            records, warnings = case.parse(text)
        except ParseError:
            return
        for key, record in records.items():
            if key not in whole and free_text_may_differ and key in OTHERS:
                # a whole line of another fixture of this format spliced in is a valid
                # record of another cluster, damage no parser can see: it must read as there
                assert any(_same(record, o, True) for o in OTHERS[key]), (name, key, record)
                continue
            assert key in whole, f"{name}: a record {key} that the output does not hold"
            assert _same(record, whole[key], free_text_may_differ), (
                f"{name}: record {key} read wrong: {record}"
            )
        if must_name and len(records) < len(whole):
            assert warnings, f"{name}: {len(whole) - len(records)} records dropped unnamed"

    check()
