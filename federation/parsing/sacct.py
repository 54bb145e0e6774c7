"""``sacct`` (accounting) -> :class:`AcctRecord` per job and step.

Text: ``sacct -p``/``-P`` (``|``-delimited, ``-p`` adds a trailing ``|``) with a header, or
``-n`` with an explicit column list. JSON: ``sacct --json`` from 21.08 (openapi dbv0.0.37)
to data_parser v0.0.4x (states as arrays, numbers as ``{set, infinite, number}``).
States go through :func:`federation.parsing.states.parse_job_state` (``CANCELLED by 123``
is ``cancelled``). Malformed text lines are skipped and counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from operator import itemgetter
from typing import Any

from federation.core.errors import ParseError
from federation.core.gcpause import gc_paused
from federation.core.snapshot import JobStateName
from federation.parsing.common import (
    MAX_COUNT,
    RowWarnings,
    clean,
    field_errors,
    json_int,
    json_name,
    json_objects,
    json_str,
    whole,
)
from federation.parsing.common import job_id as check_job_id
from federation.parsing.gres import parse_tres
from federation.parsing.states import parse_job_state
from federation.parsing.table import Table, parse_delimited
from federation.parsing.times import epoch, parse_duration, parse_timestamp


@dataclass(frozen=True)
class AcctRecord:
    """One accounting row: a job (``is_step`` False) or one of its steps."""

    job_id: str
    state: JobStateName
    state_raw: str
    job_name: str | None = None
    account: str | None = None
    user: str | None = None
    uid: int | None = None
    partition: str | None = None
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    elapsed_s: int | None = None
    time_limit_s: int | None = None
    alloc_tres: dict[str, str] = field(default_factory=dict)
    exit_code: str | None = None

    @property
    def is_step(self) -> bool:
        """``123.batch``, ``123.extern``, ``123.0`` are steps; ``123`` and ``123_4`` jobs."""
        return "." in self.job_id

    @property
    def parent_job_id(self) -> str:
        return self.job_id.split(".", 1)[0]


_ACCT_FIELDS = tuple(f.name for f in fields(AcctRecord))

_COLS = {
    "JOBID": "job_id",
    "JOBNAME": "job_name",
    "STATE": "state",
    "ACCOUNT": "account",
    "USER": "user",
    "UID": "uid",
    "PARTITION": "partition",
    "SUBMIT": "submit",
    "START": "start",
    "END": "end",
    "ELAPSED": "elapsed",
    "TIMELIMIT": "timelimit",
    "ALLOCTRES": "alloc_tres",
    "EXITCODE": "exit_code",
}


_FIELDS = (
    "job_id",
    "job_name",
    "state",
    "account",
    "user",
    "uid",
    "partition",
    "submit",
    "start",
    "end",
    "elapsed",
    "timelimit",
    "alloc_tres",
    "exit_code",
)


def parse_sacct_parsable(
    text: str | bytes,
    columns: Sequence[str] | None = None,
    *,
    delimiter: str = "|",
    utc_offset_s: float = 0,
    warnings: list[str] | None = None,
) -> list[AcctRecord]:
    """``sacct -p``/``-P`` text -> records (header line unless ``columns`` is given).

    A damaged line or row is skipped (that one only); ``warnings`` says which, capped per
    kind (:class:`RowWarnings`). Row by row, each distinct time, state and name read once.
    """
    table = parse_delimited(text, delimiter, columns)
    notes = RowWarnings()
    idx: dict[str, int] = {}
    for i, col in enumerate(table.columns):
        key = _COLS.get(col.strip().upper())
        if key is not None:
            idx.setdefault(key, i)
    if "job_id" not in idx or "state" not in idx:
        raise ParseError(f"sacct: need JobID and State columns, got {table.columns}")
    out: list[AcctRecord] = []
    with gc_paused():
        twice = _sacct_rows(table, idx, _Values(utc_offset_s), notes, out)
    if twice:  # two rows of one id that differ: one is damaged, and which is unknowable
        for j, at in twice.items():
            notes.add(
                "id twice",
                f"sacct lines {', '.join(map(str, at))} skipped: {j} is listed twice with "
                "different fields (a damaged or spliced line?)",
            )
        out = [r for r in out if r.job_id not in twice]
    if warnings is not None:
        warnings.extend(table.warnings)
        notes.into(warnings)
    return out


def _sacct_rows(
    table: Table, idx: dict[str, int], v: _Values, notes: RowWarnings, out: list[AcctRecord]
) -> dict[str, list[int]]:
    """The records of ``table``'s rows, appended to ``out``; the ids listed twice with
    different fields, with their lines."""
    pick = itemgetter(*(idx.get(k, len(table.columns)) for k in _FIELDS))  # absent: None
    has_uid = "uid" in idx
    i_id, i_submit = idx["job_id"], idx.get("submit")
    # (job id, submit) of every row (its first row is kept by the table): one id submitted at
    # two times is two jobs (a controller that lost its state hands ids out again)
    seen: set[object] = set()
    first_of: dict[object, int] | None = None  # key -> its first row, made at a first repeat
    lines: dict[str, list[int]] = {}  # job id -> lines of rows that differ
    append, text, state_of, uid_of = out.append, v.text, v.state, v.uid
    time_of, duration_of = v.time, v.duration
    for n, (line_no, row) in enumerate(table.numbered_rows()):
        key: object = row[i_id] if i_submit is None else (row[i_id], row[i_submit])
        if key in seen:
            if first_of is None:
                first_of = _first_rows(table, n, i_id, i_submit)
            first = first_of[key]
            if table.row(first) == row:  # sacct lists a requeued job again, never all equal
                notes.add(
                    "duplicate",
                    f"sacct line {line_no} skipped: the same row as line "
                    f"{table.line_of(first)}: duplicated output",
                )
                continue
            lines.setdefault(row[i_id].strip(), [table.line_of(first)]).append(line_no)
        else:
            seen.add(key)
            if first_of is not None:
                first_of[key] = n
        (
            job_id,
            job_name,
            state_text,
            account,
            user,
            uid,
            partition,
            submit,
            start,
            end,
            elapsed,
            timelimit,
            alloc_tres,
            exit_code,
        ) = pick((*row, None))
        try:
            state, raw_state = state_of(state_text)
            uid_text = clean(uid)
            if has_uid and (uid_text is None) != ("." in job_id):
                raise ParseError(  # sacct prints a UID for every job and none for a step
                    f"UID: {'empty for a job' if uid_text is None else 'given for a step'}"
                )
            append(
                _acct(
                    check_job_id(job_id, "JobID", steps=True),
                    state,
                    raw_state,
                    text(job_name),
                    text(account),
                    text(user),
                    None if uid_text is None else uid_of(uid_text),
                    text(partition),
                    time_of(submit),
                    time_of(start),
                    time_of(end),
                    duration_of(elapsed),
                    duration_of(timelimit),
                    parse_tres(alloc_tres) if alloc_tres else {},
                    text(exit_code),
                )
            )
        except ParseError as e:
            notes.add("sacct row", f"sacct line {line_no} skipped: {e}")
    return lines


def _acct(*values: Any) -> AcctRecord:
    """An AcctRecord from the value of every field, in order, without the frozen
    dataclass's ``__init__`` (an ``object.__setattr__`` per field: a third of the time
    of 50 MB of rows); equal to one made by it."""
    record = object.__new__(AcctRecord)
    record.__dict__.update(zip(_ACCT_FIELDS, values, strict=True))
    return record


def _first_rows(table: Table, n: int, i_id: int, i_submit: int | None) -> dict[object, int]:
    """(job id, submit) -> the first of ``table``'s first ``n`` rows that has it."""
    first: dict[object, int] = {}
    for i, (_, row) in enumerate(table.numbered_rows()):
        if i >= n:
            break
        first.setdefault(row[i_id] if i_submit is None else (row[i_id], row[i_submit]), i)
    return first


_MISS: Any = object()


class _Values:
    """The values of sacct's columns, each distinct text read once (states, names, times
    and durations repeat across jobs and their steps; the results are shared)."""

    __slots__ = ("_durations", "_states", "_texts", "_times", "_uids", "offset")
    LIMIT = 100_000

    def __init__(self, utc_offset_s: float) -> None:
        self.offset = utc_offset_s
        self._texts: dict[str | None, str | None] = {}
        self._states: dict[str, tuple[JobStateName, str]] = {}
        self._times: dict[str | None, datetime | None] = {}
        self._durations: dict[str | None, int | None] = {}
        self._uids: dict[str, int] = {}

    def text(self, value: str | None) -> str | None:
        hit = self._texts.get(value, _MISS)
        if hit is _MISS:
            hit = clean(value)
            if len(self._texts) < self.LIMIT:
                self._texts[value] = hit
        return hit  # type: ignore[no-any-return]

    def state(self, value: str) -> tuple[JobStateName, str]:
        hit = self._states.get(value)
        if hit is None:
            raw = value.strip()
            hit = (parse_job_state(raw), raw)
            if len(self._states) < self.LIMIT:
                self._states[value] = hit
        return hit

    def time(self, value: str | None) -> datetime | None:
        hit = self._times.get(value, _MISS)
        if hit is _MISS:
            hit = parse_timestamp(value, self.offset)
            if len(self._times) < self.LIMIT:
                self._times[value] = hit
        return hit  # type: ignore[no-any-return]

    def duration(self, value: str | None) -> int | None:
        hit = self._durations.get(value, _MISS)
        if hit is _MISS:
            hit = parse_duration(value)
            if len(self._durations) < self.LIMIT:
                self._durations[value] = hit
        return hit  # type: ignore[no-any-return]

    def uid(self, value: str) -> int:
        hit = self._uids.get(value)
        if hit is None:
            hit = whole(value, "UID", MAX_COUNT)
            if len(self._uids) < self.LIMIT:
                self._uids[value] = hit
        return hit


NO_VAL64 = -2
"""Slurm's NO_VAL64 (0xfffffffffffffffe) read as a signed int64: a TRES it did not count."""


def _tres_list(items: Any, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    if items is None:
        return out
    if not isinstance(items, list):
        raise ParseError(f"{where}: expected a TRES list, got {type(items).__name__}")
    for t in items:
        if not isinstance(t, Mapping):
            raise ParseError(f"{where}: expected TRES objects, got {type(t).__name__}")
        kind = json_str(t.get("type"), f"{where} type") or ""
        name = json_str(t.get("name"), f"{where} {kind} name")
        key = f"{kind}/{name}" if name else kind
        if t.get("count") == NO_VAL64:  # Slurm's "not counted" (energy without a plugin)
            continue
        if t.get("count") is None:  # Slurm writes every TRES with its count
            raise ParseError(f"{where} {key or '?'}: no count")
        count = json_int(t.get("count"), f"{where} {key or '?'} count")
        if kind and count is not None:
            out[key.lower()] = str(count)
    return out


def _state(value: Any) -> tuple[JobStateName, str]:
    if isinstance(value, Mapping):
        value = value.get("current")
    if not (
        value is None
        or isinstance(value, str)
        or (isinstance(value, list) and all(isinstance(v, str) for v in value))
    ):
        raise ParseError(f"state: expected a name or a list of names, got {value!r}"[:120])
    if isinstance(value, list):
        raw = "+".join(str(v) for v in value)
        return parse_job_state([str(v) for v in value]), raw
    raw = str(value) if value is not None else ""
    return parse_job_state(raw), raw


def _json_job_id(j: Mapping[str, Any], where: str) -> str:
    job_id = json_int(j.get("job_id"), f"{where} job_id", MAX_COUNT)
    if job_id is None:
        raise ParseError(f"{where}: job without job_id")
    array = j.get("array")
    if isinstance(array, Mapping):
        array_job = json_int(array.get("job_id"), f"{where} array.job_id", MAX_COUNT) or 0
        task = json_int(array.get("task_id"), f"{where} array.task_id", MAX_COUNT)
        if array_job and task is not None:
            return f"{array_job}_{task}"
    return str(job_id)


def _obj(block: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """A nested object (``{}`` when absent); a present value of another type is damage."""
    value = block.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ParseError(f"{where}: {key} is {type(value).__name__}, expected an object")
    return value


def _time(t: Mapping[str, Any], key: str, where: str) -> datetime | None:
    what = f"{where} time.{key}"
    if key in t and t[key] is None:  # Slurm writes 0 for no time, never null
        raise ParseError(f"{what}: null where a time belongs")
    return epoch(json_int(t.get(key), what), what)  # Slurm's epoch times are whole


def parse_sacct_json(
    source: str | bytes | Mapping[str, Any], *, include_steps: bool = False
) -> list[AcctRecord]:
    """``sacct --json`` -> one record per job (and per step with ``include_steps``).

    A value of the wrong type or out of range is a :class:`ParseError` naming the job and
    field (``sacct JSON jobs[3] time.start``); a job listed twice (same id and submit
    time) is duplicated output and refused.
    """
    jobs = json_objects(source, "sacct JSON")
    out: list[AcctRecord] = []
    seen: dict[tuple[str, datetime | None], int] = {}
    for i, j in enumerate(jobs):
        where = f"sacct JSON jobs[{i}]"
        with field_errors(where):
            records = _json_records(j, where, include_steps)
        key = (records[0].job_id, records[0].submit_time)
        first = seen.setdefault(key, i)
        if first != i:
            raise ParseError(
                f"{where}: job {key[0]} is listed twice (first as jobs[{first}]): duplicated output"
            )
        out.extend(records)
    return out


_JOB_KEYS = ("job_id", "state", "time")
_TIME_KEYS = ("elapsed", "start", "end", "submission")
"""What every sacct ``--json`` job holds since 21.08: one missing is damaged output."""


def _need(block: Mapping[str, Any], keys: tuple[str, ...], where: str) -> None:
    for key in keys:
        if key not in block:
            raise ParseError(f"{where}: no {key!r}: damaged output")


def _json_records(j: Mapping[str, Any], where: str, include_steps: bool) -> list[AcctRecord]:
    _need(j, _JOB_KEYS, where)
    t = _obj(j, "time", where)
    _need(t, _TIME_KEYS, f"{where} time")
    state, raw = _state(j.get("state"))
    limit = json_int(t.get("limit"), f"{where} time.limit", MAX_COUNT)
    tres = _obj(j, "tres", where)
    assoc = _obj(j, "association", where)
    job_id = _json_job_id(j, where)
    out = [
        AcctRecord(
            job_id=job_id,
            state=state,
            state_raw=raw,
            job_name=json_str(j.get("name"), f"{where} name"),
            account=json_name(j.get("account"), f"{where} account"),
            user=json_name(j.get("user"), f"{where} user")
            or json_name(assoc.get("user"), f"{where} association.user"),
            partition=json_name(j.get("partition"), f"{where} partition"),
            submit_time=_time(t, "submission", where),
            start_time=_time(t, "start", where),
            end_time=_time(t, "end", where),
            elapsed_s=json_int(t.get("elapsed"), f"{where} time.elapsed"),
            time_limit_s=None if limit is None else limit * 60,
            alloc_tres=_tres_list(tres.get("allocated"), f"{where} tres.allocated"),
        )
    ]
    if not include_steps:
        return out
    steps = j.get("steps")
    if steps is None:
        return out
    if not isinstance(steps, list):
        raise ParseError(f"{where}: steps is {type(steps).__name__}, expected a list")
    for k, s in enumerate(steps):
        swhere = f"{where} steps[{k}]"
        if not isinstance(s, Mapping):
            raise ParseError(f"{swhere}: expected an object")
        step = _obj(s, "step", swhere)
        st = _obj(s, "time", swhere)
        _need(st, _TIME_KEYS[:3], f"{swhere} time")
        sid = step.get("id")
        if isinstance(sid, Mapping):  # 21.08: {"job_id": 1, "step_id": "batch"}
            sjob, sstep = sid.get("job_id"), sid.get("step_id")
            if sjob is not None:
                sjob = json_int(sjob, f"{swhere} step.id.job_id", MAX_COUNT)
            if not isinstance(sstep, str | int) or isinstance(sstep, bool):
                raise ParseError(f"{swhere}: step.id.step_id is {type(sstep).__name__}")
            sid = f"{job_id if sjob is None else sjob}.{sstep}"
        elif sid is not None and not isinstance(sid, str):
            raise ParseError(f"{swhere}: step.id is {type(sid).__name__}, expected a string")
        sstate, sraw = _state(s.get("state"))
        stres = _obj(s, "tres", swhere)
        out.append(
            AcctRecord(
                job_id=check_job_id(str(sid), f"{swhere} step.id", steps=True)
                if sid
                else f"{job_id}.?",
                state=sstate,
                state_raw=sraw,
                job_name=json_str(step.get("name"), f"{swhere} step.name"),
                start_time=_time(st, "start", swhere),
                end_time=_time(st, "end", swhere),
                elapsed_s=json_int(st.get("elapsed"), f"{swhere} time.elapsed"),
                alloc_tres=_tres_list(stres.get("allocated"), f"{swhere} tres.allocated"),
            )
        )
    return out


def state_counts(records: Iterable[AcctRecord], *, jobs_only: bool = True) -> dict[str, int]:
    """Records per state (jobs only by default: steps have their own states)."""
    c: Counter[str] = Counter(r.state for r in records if not (jobs_only and r.is_step))
    return dict(c)
