"""``squeue`` -> :class:`JobRecord`.

Sources:

* the probe's own text (``squeue --noheader --noconvert --Format`` with :data:`SQUEUE_FIELDS`,
  0x1F/0x1E delimited), parsed strictly and fast (50,000 jobs well under a second);
* ``squeue --json`` (21.08 openapi v0.0.37 through data_parser v0.0.4x), in
  :mod:`federation.parsing.squeue_json`;
* third-party text: any table of squeue columns (:func:`jobs_from_table`, with tables from
  :mod:`federation.parsing.table`), and the "JSON-like" ``-o '{"id": %A, ...}'`` lines some
  exporters use (:func:`parse_squeue_jsonlike`). Malformed lines there are skipped and
  counted in ``warnings``.

Per-job conventions: ``mem_mb`` is memory per node (the job's TRES ``mem`` divided by its
nodes when known, else ``MinMemory``); ``gpus`` is the job's total GPU count, from its TRES
(``gres/gpu=``) or its request (per job, per node x nodes, per task x tasks).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

from federation.core.errors import ParseError
from federation.core.gcpause import gc_paused
from federation.core.snapshot import JobRecord
from federation.parsing.common import (
    NAME,
    RowWarnings,
    as_text,
    clean,
    cut_line,
    snippet,
    split_records,
    whole,
)
from federation.parsing.common import job_id as check_job_id
from federation.parsing.hostlist import expand_hostlist
from federation.parsing.squeue_fields import (
    _ESTIMATED,
    _KEYS,
    _NO_NODES,
    _NO_VALUE,
    _PROBE_FIELDS,
    COLUMN_ALIASES,
    SQUEUE_FIELDS,
    SQUEUE_FIELDS_NODES,
    TRUSTED_JOB,
    _gpus,
    _int,
    _strip_parens,
    canonical_index,
    count_states,
    reason_code,
    squash,
    with_start_time,
)
from federation.parsing.squeue_json import parse_squeue_json
from federation.parsing.states import parse_job_state
from federation.parsing.table import CUT, Table
from federation.parsing.table_jobs import TableJobs
from federation.parsing.times import (
    ISO_TIME,
    parse_duration,
    parse_memory,
    parse_timestamp,
    zone_suffix,
)

__all__ = [
    "COLUMN_ALIASES",
    "SQUEUE_FIELDS",
    "SQUEUE_FIELDS_NODES",
    "canonical_index",
    "count_states",
    "gc_paused",
    "jobs_from_table",
    "parse_squeue",
    "parse_squeue_json",
    "parse_squeue_jsonlike",
    "reason_code",
    "squash",
    "with_start_time",
]


class _Builder:
    """Turns rows of strings under known columns into JobRecords (shared by all text paths).

    Values that repeat across a queue (states, TRES and request strings, time limits,
    timestamps of array tasks) are parsed once per distinct string: 50,000 jobs parse in a
    fraction of a second.
    """

    def __init__(self, columns: Sequence[str], utc_offset_s: float = 0) -> None:
        self.idx = canonical_index(columns)
        if "job_id" not in self.idx:
            raise ParseError(f"squeue: no job id column among {list(columns)}")
        self.offset = utc_offset_s
        self._state: dict[tuple[str | None, str | None], tuple[str, str | None]] = {}
        self._res: dict[tuple[Any, ...], tuple[int, str | None, int | None]] = {}
        self._dur: dict[str, int | None] = {}
        self._suffix = zone_suffix(utc_offset_s)
        self._utc = not utc_offset_s
        self._mem: dict[str, int | None] = {}
        self._hosts: dict[str, tuple[str, ...]] = {}
        self._users: dict[str, str | None] = {}
        self._texts: dict[str, str] = {}
        # every canonical key's value in a row (the None appended to the row when absent)
        self._cells = itemgetter(*(self.idx.get(k, len(columns)) for k in _KEYS))
        self._id = self.idx["job_id"]
        others = [i for i in range(len(columns)) if i != self._id]
        # a row but for its job id, as a key (-> the values of all other fields)
        self._others: Callable[[Sequence[str]], Any] = (
            itemgetter(*others) if others else (lambda row: ())
        )
        self._rows: dict[Any, int] | None = {}  # a row but for its id -> its record
        self._misses = 0

    def _state_reason(
        self, raw_state: str | None, raw_reason: str | None, nodelist_reason: str | None
    ) -> tuple[str, str | None]:
        key = (
            raw_state,
            raw_reason if nodelist_reason is None else f"{raw_reason}\0{nodelist_reason}",
        )
        hit = self._state.get(key)
        if hit is not None:
            return hit
        reason = clean(raw_reason)
        state: str = parse_job_state(raw_state.strip() if raw_state is not None else None, reason)
        if reason is None and nodelist_reason is not None and state != "running":
            nr = nodelist_reason.strip()
            if nr.startswith("("):  # %R: "(Reason)" while pending, node names once running
                if not nr.endswith(")"):
                    raise ParseError(f"NODELIST(REASON) {snippet(nr)} is cut: no closing ')'")
                reason = clean(_strip_parens(nr))
                state = parse_job_state(raw_state or "PENDING", reason)
            elif raw_state is None and clean(nr) is not None:
                state = "running"
        result = (state, reason)
        if len(self._state) < 100_000:
            self._state[key] = result
        return result

    def _resources(
        self, key: tuple[str | None, str | None, str | None, str | None, int, int | None]
    ) -> tuple[int, str | None, int | None]:
        """(GPUs, GPU type, memory per node from TRES) for one job, cached per request."""
        hit = self._res.get(key)
        if hit is not None:
            return hit
        nodes, tasks = key[4], key[5]
        gpus, gpu_type, tres = _gpus(
            clean(key[0]), clean(key[1]), clean(key[2]), clean(key[3]), nodes, tasks
        )
        mem_mb: int | None = None
        if "mem" in tres:
            total_mem, _ = parse_memory(tres["mem"])
            if total_mem is not None:
                mem_mb = total_mem // max(1, nodes)
        result = (gpus, gpu_type, mem_mb)
        if len(self._res) < 100_000:
            self._res[key] = result
        return result

    def _duration(self, text: str | None) -> int | None:
        if text is None:
            return None
        hit = self._dur.get(text, -1)
        if hit != -1:
            return hit
        value = parse_duration(text)
        self._dur[text] = value
        return value

    def _time(self, text: str | None) -> datetime | None:
        if text is None or text in _NO_VALUE:
            return None
        if len(text) == 19 and ISO_TIME.fullmatch(text):  # the common case, parsed inline
            try:
                dt = datetime.fromisoformat(text + self._suffix)
            except ValueError:
                pass
            else:
                return dt if self._utc else dt.astimezone(UTC)
        return parse_timestamp(text, self.offset)

    def _memory(self, text: str | None) -> int | None:
        if text is None:
            return None
        hit = self._mem.get(text, -1)
        if hit != -1:
            return hit
        value, _ = parse_memory(text)
        self._mem[text] = value
        return value

    def _nodes(self, text: str | None, state: str) -> tuple[str, ...]:
        """The nodes a job holds (a Slurm host list), cached per distinct list."""
        if not text or state in _NO_NODES:
            return ()
        hit = self._hosts.get(text)
        if hit is None:
            hit = tuple(expand_hostlist(text))
            if len(self._hosts) < 100_000:
                self._hosts[text] = hit
        return hit

    def build(self, row: Sequence[str], where: str | int) -> JobRecord:
        """One row -> JobRecord; ``where`` (a label or a record number) names it in errors."""
        try:
            return self._build(row)
        except ParseError as e:
            label = f"squeue record {where}" if isinstance(where, int) else where
            raise ParseError(f"{label}: {e}") from None

    def _user(self, text: str | None) -> str | None:
        if text is None:
            return None
        if text in self._users:
            return self._users[text]
        name = _name(text)
        if len(self._users) < 100_000:
            self._users[text] = name
        return name

    def _text(self, text: str) -> str:
        """``text`` stripped, one string object per distinct value (partitions, names)."""
        hit = self._texts.get(text)
        if hit is None:
            hit = text.strip()
            if len(self._texts) < 100_000:
                self._texts[text] = hit
        return hit

    def _build(self, row: Sequence[str]) -> JobRecord:
        return _MAKE_JOB(self._values(row))

    def remember(self, row: Sequence[str], kind: int) -> JobRecord:
        """:meth:`_build`, its record kept as record ``kind`` of a :class:`TableJobs`,
        the one the rows that repeat this row's values but for the job id are like
        (:func:`jobs_from_table`; given up when few rows repeat)."""
        job = _MAKE_JOB(self._values(row))
        cache = self._rows
        if cache is not None:
            self._misses += 1
            if len(cache) < 20_000:
                cache[self._others(row)] = kind
            elif self._misses > 2 * len(cache):
                self._rows = None  # rows that do not repeat: stop looking them up
        return job

    def _values(self, row: Sequence[str]) -> tuple[Any, ...]:
        """The value of every JobRecord field of one row, in order, each checked."""
        (
            job_id,
            part,
            raw_state,
            raw_reason,
            nodelist_reason,
            user,
            name,
            nodes_text,
            cpus_text,
            tasks_text,
            min_memory,
            per_node,
            per_job,
            per_task,
            alloc,
            time_limit,
            submit,
            start,
            end,
            priority_text,
            node_list,
        ) = self._cells((*row, None))
        job_id = job_id.strip()
        if not job_id:
            raise ParseError("empty job id")
        job_id = check_job_id(job_id, "JOBID")
        state, reason = self._state_reason(raw_state, raw_reason, nodelist_reason)
        nodes = _int(nodes_text, "nodes")
        nodes = 1 if nodes is None else nodes
        cpus = _int(cpus_text, "cpus")
        tasks = _int(tasks_text, "tasks")
        gpus, gpu_type, mem_mb = self._resources((alloc, per_job, per_node, per_task, nodes, tasks))
        if mem_mb is None:
            mem_mb = self._memory(min_memory)
        if name is not None:
            name = self._text(name) or None
        priority = None if priority_text is None else _priority(priority_text)
        if node_list is None and state not in _NO_NODES:  # %R: node names once running
            nr = nodelist_reason
            if nr is not None and not nr.strip().startswith("("):
                node_list = nr
        # every value is checked (whole numbers in range, states from the table, aware
        # datetimes, names): no second pass through pydantic (the 50 MB path)
        return (
            job_id,
            self._text(part) if part is not None else "",  # partition
            state,
            reason,
            self._user(user),
            name,
            nodes,
            1 if cpus is None else cpus,
            mem_mb,
            gpus,
            gpu_type,
            self._duration(time_limit),  # time_limit_s
            self._time(submit),
            self._time(start),
            self._time(end),
            priority,
            self._nodes(node_list.strip() if node_list else None, state),  # node_names
        )


_MAKE_JOB = TRUSTED_JOB.values
"""A JobRecord from the values of its fields, in order (job_id, partition, state, reason,
user, name, nodes, cpus, mem_mb, gpus, gpu_type, time_limit_s, submit_time, start_time,
end_time, priority, node_names)."""


def _name(text: str | None) -> str | None:
    """A user name: one token (``ywang2rrg|3074329|...`` is a line glued into it)."""
    v = clean(text)
    if v is None or NAME.fullmatch(v) is not None:
        return v
    raise ParseError(f"user: {snippet(v)} is not a user name")


def _priority(text: str) -> int | None:
    """PriorityLong: a whole number up to 2**63, or None for ``N/A`` and empty."""
    if text.isdigit() and text.isascii() and len(text) < 19:
        return int(text)
    if not text.strip():  # squeue prints a number or N/A: an empty one lost its value
        raise ParseError("priority: empty")
    return None if clean(text) is None else whole(text, "priority")


def _once(seen: dict[str, int], job_id: str, n: int) -> str | None:
    """Why record ``n`` repeats an earlier one (duplicated output), or None."""
    first = seen.setdefault(job_id, n)
    if first == n:
        return None
    return f"job {job_id} is listed twice (first as record {first}): duplicated output"


def parse_squeue(
    stdout: str,
    fields: Sequence[str] = SQUEUE_FIELDS,
    utc_offset_s: float = 0,
    start_estimates: Mapping[str, datetime | None] | None = None,
) -> list[JobRecord]:
    """The probe's ``squeue -O`` output -> JobRecords; ParseError naming the line otherwise.

    ``fields`` is the field list the probe recorded (:data:`SQUEUE_FIELDS_NODES` today;
    :data:`SQUEUE_FIELDS` for probes recorded before node lists; any other order works too).

    ``start_estimates`` ({job id: time}, from ``squeue --start``) replaces the start time
    of pending jobs that have one.
    """
    fields = tuple(fields)
    est = start_estimates or {}
    builder = _Builder(fields, utc_offset_s)
    for need in ("job_id", "partition", "state"):
        if need not in builder.idx:
            raise ParseError(f"squeue: probe field list {list(fields)} has no {need} column")
    out: list[JobRecord] = []
    with gc_paused():
        rows: Iterable[list[str]] = split_records(stdout, len(fields), "squeue")
        if fields in _PROBE_FIELDS:
            return _fast_probe_jobs(rows, builder, est)
        build = builder.build
        seen: dict[str, int] = {}
        for n, row in enumerate(rows, start=1):
            try:
                job = build(row, n)
            except ParseError as e:
                raise ParseError(f"{e} (record starts {snippet(row[0])})") from None
            if (dup := _once(seen, job.job_id, n)) is not None:
                raise ParseError(f"squeue record {n}: {dup}")
            if job.state in _ESTIMATED:
                start = est.get(job.job_id)
                if start is not None and start != job.start_time:
                    job = with_start_time(job, start)
            out.append(job)
    return out


def _fast_probe_jobs(
    rows: Iterable[list[str]], b: _Builder, estimates: Mapping[str, datetime | None]
) -> list[JobRecord]:
    """Probe rows (:data:`SQUEUE_FIELDS`, optionally with ``NodeList`` last) -> JobRecords by
    tuple unpacking (the 50k-job path).

    Every value is checked here (integers are digit strings, states come from the table,
    times are aware datetimes), so records are built without pydantic's second pass.
    """
    make = _MAKE_JOB
    state_reason, resources, memory = b._state_reason, b._resources, b._memory
    duration, ts, hosts, user_name = b._duration, b._time, b._nodes, b._user
    width = len(SQUEUE_FIELDS)
    out: list[JobRecord] = []
    append = out.append
    seen: dict[str, int] = {}
    n = 0
    row: list[str] = [""]
    try:
        for row in rows:
            n += 1
            node_list = row[width] if len(row) > width else ""
            (
                job_id,
                part,
                st,
                rsn,
                user,
                name,
                nn,
                nc,
                nt,
                mm,
                tpn,
                tpj,
                tpt,
                ta,
                tl,
                sub,
                start,
                end,
                prio,
            ) = row[:width]
            if not job_id:
                raise ParseError("empty job id")
            if not (job_id.isdigit() and len(job_id) < 10):
                job_id = check_job_id(job_id, "JobArrayID")
            if job_id in seen and (dup := _once(seen, job_id, n)):
                raise ParseError(dup)
            seen[job_id] = n
            state, reason = state_reason(st, rsn, None)
            nodes = _int(nn, "NumNodes") or 1
            cpus = _int(nc, "NumCPUs") or 1
            tasks = _int(nt, "NumTasks")
            gpus, gpu_type, mem_mb = resources((ta, tpj, tpn, tpt, nodes, tasks))
            if mem_mb is None:
                mem_mb = memory(mm)
            append(
                make(
                    (
                        job_id,
                        part,
                        state,
                        reason,
                        user_name(user) if user else None,
                        name or None,
                        nodes,
                        cpus,
                        mem_mb,
                        gpus,
                        gpu_type,
                        duration(tl),
                        ts(sub),
                        (estimates.get(job_id) or ts(start))
                        if estimates and state in _ESTIMATED
                        else ts(start),
                        ts(end),
                        _priority(prio),
                        hosts(node_list, state) if node_list else (),
                    )
                )
            )
    except ParseError as e:
        raise ParseError(f"squeue record {n}: {e} (record starts {snippet(row[0])})") from None
    return out


def jobs_from_table(
    table: Table, utc_offset_s: float = 0, warnings: list[str] | None = None
) -> TableJobs:
    """Third-party squeue text already split into a :class:`Table` -> JobRecords.

    Rows whose values do not parse are skipped (that row only); ``warnings`` collects the
    table's own skipped lines and these, capped per kind (:class:`RowWarnings`). A job
    listed twice is kept once, from its first line. The records come as a
    :class:`TableJobs`: each row checked now, its record built when read.
    """
    builder = _Builder(table.columns, utc_offset_s)
    notes = RowWarnings()
    out = TableJobs()
    add, add_like = out.add, out.add_like
    failed: set[int] = set()  # the lines of rows that did not parse
    others, i_id = builder._others, builder._id
    cache = builder._rows
    with gc_paused():
        for line, row in table.numbered_rows():
            try:
                like = None if cache is None else cache.get(others(row))
                if like is None:
                    add(builder.remember(row, out.kinds))
                    cache = builder._rows
                    continue
                # a row like an earlier one but for its job id: that record, its id changed
                job_id = row[i_id]
                if not (job_id.isdigit() and len(job_id) < 10 and job_id.isascii()):
                    job_id = _job_id(job_id)
                add_like(like, job_id)
            except ParseError as e:
                notes.add("squeue row", f"squeue line {line} skipped: {e}")
                failed.add(line)
        if twice := out.repeats():  # a job listed twice: which lines?
            out.drop_repeats(twice, [n for n in table.row_lines() if n not in failed], notes)
    if warnings is not None:
        warnings.extend(table.warnings)
        notes.into(warnings)
    return out


def _job_id(text: str) -> str:
    job_id = text.strip()
    if not job_id:
        raise ParseError("empty job id")
    return check_job_id(job_id, "JOBID")


def parse_squeue_jsonlike(
    text: str | bytes,
    keys: Mapping[str, str],
    utc_offset_s: float = 0,
    warnings: list[str] | None = None,
) -> TableJobs:
    """Lines like ``{"id": 26515966, "state": "RUNNING", "r": "(Priority)"}`` -> JobRecords.

    ``keys`` maps each JSON key to a squeue column name (``{"id": "JOBID", "p": "PARTITION",
    "r": "NODELIST(REASON)"}``). ``#`` comment lines are ignored; lines that are not valid
    JSON (e.g. an unquoted ``%C`` that printed ``xx``) are skipped and counted.
    """
    columns = list(keys.values())
    table = Table(columns=columns)
    raw = as_text(text, "squeue JSON-like lines", table.notes)
    cut = cut_line(raw)
    for n, line in enumerate(raw.split("\n"), start=1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if n == cut:
            table.skip(n, CUT, s)
            continue
        try:
            obj = json.loads(s)
        except json.JSONDecodeError as e:
            table.skip(n, f"not JSON ({e.msg})", s)
            continue
        except RecursionError:
            table.skip(n, "JSON nested too deep", s)
            continue
        if not isinstance(obj, dict):
            table.skip(n, "not a JSON object", s)
            continue
        odd = next((k for k in keys if not isinstance(obj.get(k), str | int | None)), None)
        if odd is not None or any(isinstance(obj.get(k), bool) for k in keys):
            table.skip(n, f"field {odd} is not a string or a whole number", s)
            continue
        table.rows.append(["" if obj.get(k) is None else str(obj.get(k)) for k in keys])
        table.line_numbers.append(n)
    return jobs_from_table(table, utc_offset_s, warnings)
