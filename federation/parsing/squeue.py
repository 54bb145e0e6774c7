"""``squeue`` -> :class:`JobRecord`.

Sources:

* the probe's own text (``squeue --noheader --noconvert --Format`` with :data:`SQUEUE_FIELDS`,
  0x1F/0x1E delimited), parsed strictly and fast (50,000 jobs well under a second);
* ``squeue --json`` (21.08 openapi v0.0.37 through data_parser v0.0.4x);
* third-party text: any table of squeue columns (:func:`jobs_from_table`, with tables from
  :mod:`federation.parsing.table`), and the "JSON-like" ``-o '{"id": %A, ...}'`` lines some
  exporters use (:func:`parse_squeue_jsonlike`). Malformed lines there are skipped and
  counted in ``warnings``.

Per-job conventions: ``mem_mb`` is memory per node (the job's TRES ``mem`` divided by its
nodes when known, else ``MinMemory``); ``gpus`` is the job's total GPU count, from its TRES
(``gres/gpu=``) or its request (per job, per node x nodes, per task x tasks).
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

from pydantic import ValidationError

from federation.core.errors import ParseError
from federation.core.snapshot import JobRecord
from federation.parsing.common import (
    clean,
    json_int,
    json_number,
    json_objects,
    json_str,
    snippet,
    split_records,
)
from federation.parsing.gres import parse_tres, request_gpus, tres_gpus
from federation.parsing.hostlist import expand_hostlist
from federation.parsing.states import parse_job_state
from federation.parsing.table import Table
from federation.parsing.times import (
    epoch,
    parse_duration,
    parse_memory,
    parse_timestamp,
    zone_suffix,
)

SQUEUE_FIELDS: tuple[str, ...] = (
    "JobArrayID",
    "Partition",
    "State",
    "Reason",
    "UserName",
    "Name",
    "NumNodes",
    "NumCPUs",
    "NumTasks",
    "MinMemory",
    "tres-per-node",
    "tres-per-job",
    "tres-per-task",
    "tres-alloc",
    "TimeLimit",
    "SubmitTime",
    "StartTime",
    "EndTime",
    "PriorityLong",
)
"""The probe's original ``squeue -O`` fields, in order: the default for a recorded probe
that names no field list."""

SQUEUE_FIELDS_NODES: tuple[str, ...] = (*SQUEUE_FIELDS, "NodeList")
"""The probe's ``squeue -O`` fields today: :data:`SQUEUE_FIELDS` plus the nodes each running
job holds (``JobRecord.node_names``), which a queue twin needs to reproduce fragmentation."""
_PROBE_FIELDS = frozenset({SQUEUE_FIELDS, SQUEUE_FIELDS_NODES})
_NO_NODES = frozenset({"pending", "requeued", "held"})
"""States whose node list is not an allocation (empty, or the nodes asked for)."""

# squashed column name (upper case, no space/_/-) -> canonical key
COLUMN_ALIASES: dict[str, str] = {
    "JOBARRAYID": "job_id",
    "JOBID": "job_id",
    "ID": "job_id",
    "PARTITION": "partition",
    "STATE": "state",
    "ST": "state",
    "STATECOMPACT": "state",
    "REASON": "reason",
    "NODELIST(REASON)": "nodelist_reason",
    "USER": "user",
    "USERNAME": "user",
    "NAME": "name",
    "JOBNAME": "name",
    "NODES": "nodes",
    "NUMNODES": "nodes",
    "CPUS": "cpus",
    "NUMCPUS": "cpus",
    "TASKS": "tasks",
    "NUMTASKS": "tasks",
    "MINMEMORY": "min_memory",
    "MEM": "min_memory",
    "TRESPERNODE": "tres_per_node",
    "GRES": "tres_per_node",
    "TRESPERJOB": "tres_per_job",
    "TRESPERTASK": "tres_per_task",
    "TRESALLOC": "tres_alloc",
    "TRES": "tres_alloc",
    "TIMELIMIT": "time_limit",
    "SUBMITTIME": "submit_time",
    "STARTTIME": "start_time",
    "ENDTIME": "end_time",
    "PRIORITYLONG": "priority",
    "PRIORITY": "priority",
    "NODELIST": "node_list",
}
_KEYS = (
    "job_id",
    "partition",
    "state",
    "reason",
    "nodelist_reason",
    "user",
    "name",
    "nodes",
    "cpus",
    "tasks",
    "min_memory",
    "tres_per_node",
    "tres_per_job",
    "tres_per_task",
    "tres_alloc",
    "time_limit",
    "submit_time",
    "start_time",
    "end_time",
    "priority",
    "node_list",
)
_LEADING_INT = re.compile(r"\s*(\d+)")


def squash(name: str) -> str:
    return name.strip().upper().replace("_", "").replace("-", "").replace(" ", "")


def canonical_index(columns: Sequence[str]) -> dict[str, int]:
    """Canonical key -> column index (first occurrence wins; unknown columns ignored).

    A long ``STATE`` column is preferred over the compact ``ST`` when both are present.
    """
    idx: dict[str, int] = {}
    for i, col in enumerate(columns):
        key = COLUMN_ALIASES.get(squash(col))
        if key is None:
            continue
        if key == "state" and "state" in idx and squash(col) == "STATE":
            idx[key] = i
        idx.setdefault(key, i)
    return idx


_REASON_CODES: dict[str, str] = {}
_REASON_SPLIT = re.compile(r"[,(]")


def reason_code(reason: str | None) -> str | None:
    """The reason's code for counting: ``ReqNodeNotAvail, UnavailableNodes:...`` ->
    ``ReqNodeNotAvail``; a sentence-like reason is kept whole."""
    if reason is None:
        return None
    hit = _REASON_CODES.get(reason)
    if hit is not None:
        return hit
    head = _REASON_SPLIT.split(reason, maxsplit=1)[0].strip()
    code = head if head and " " not in head else reason
    if len(_REASON_CODES) < 10_000:
        _REASON_CODES[reason] = code
    return code


def _strip_parens(text: str) -> str:
    t = text.strip()
    while len(t) >= 2 and t[0] == "(" and t[-1] == ")":
        t = t[1:-1].strip()
    return t


def _int(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    t = text.strip()
    if not t or t.lower() in ("n/a", "(null)", "none"):
        return None
    if t.isdigit():
        return int(t)
    m = _LEADING_INT.match(t)  # "1-2" (node range), "4+"
    if m:
        return int(m.group(1))
    try:
        return int(float(t))
    except ValueError:
        raise ParseError(f"{what}: expected a number, got {snippet(t)}") from None


def _gpus(
    tres_alloc: str | None,
    per_job: str | None,
    per_node: str | None,
    per_task: str | None,
    nodes: int,
    tasks: int | None,
) -> tuple[int, str | None, dict[str, str]]:
    tres = parse_tres(tres_alloc) if tres_alloc and "=" in tres_alloc else {}
    total, gtype = tres_gpus(tres) if tres else (0, None)
    req_type: str | None = None
    if per_job:
        n, req_type = request_gpus(per_job)
        total = total or n
    if per_node:
        n, t = request_gpus(per_node)
        total = total or n * max(1, nodes)
        req_type = req_type or t
    if per_task:
        n, t = request_gpus(per_task)
        total = total or n * max(1, tasks or 1)
        req_type = req_type or t
    return total, gtype or req_type, tres


_NO_VALUE = ("", "N/A", "(null)", "None")


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while building many acyclic records (it would rescan them all
    several times over; reference counting frees them as usual)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


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
        self._keys = tuple(self.idx)
        self._values = itemgetter(*self.idx.values())

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
        if len(text) == 19 and text[10] == "T":  # the common case, parsed inline
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

    def _build(self, row: Sequence[str]) -> JobRecord:
        values = self._values(row)
        cell = dict(
            zip(self._keys, values if isinstance(values, tuple) else (values,), strict=True)
        ).get
        job_id = cell("job_id", "").strip()
        if not job_id:
            raise ParseError("empty job id")
        state, reason = self._state_reason(cell("state"), cell("reason"), cell("nodelist_reason"))
        nodes = _int(cell("nodes"), "nodes")
        nodes = 1 if nodes is None else nodes
        cpus = _int(cell("cpus"), "cpus")
        tasks = _int(cell("tasks"), "tasks")
        gpus, gpu_type, mem_mb = self._resources(
            (
                cell("tres_alloc"),
                cell("tres_per_job"),
                cell("tres_per_node"),
                cell("tres_per_task"),
                nodes,
                tasks,
            )
        )
        if mem_mb is None:
            mem_mb = self._memory(cell("min_memory"))
        name = cell("name")
        if name is not None:
            name = name.strip() or None
        user = cell("user")
        priority_text = cell("priority")
        priority = None
        if priority_text is not None:
            p = priority_text.strip()
            if p.isdigit():
                priority = int(p)
        part = cell("partition")
        node_list = cell("node_list")
        if node_list is None and state not in _NO_NODES:  # %R: node names once running
            nr = cell("nodelist_reason")
            if nr is not None and not nr.strip().startswith("("):
                node_list = nr
        data: dict[str, Any] = {
            "job_id": job_id,
            "partition": part.strip() if part is not None else "",
            "state": state,
            "reason": reason,
            "user": clean(user),
            "name": name,
            "nodes": nodes,
            "cpus": 1 if cpus is None else cpus,
            "mem_mb": mem_mb,
            "gpus": gpus,
            "gpu_type": gpu_type,
            "time_limit_s": self._duration(cell("time_limit")),
            "submit_time": self._time(cell("submit_time")),
            "start_time": self._time(cell("start_time")),
            "end_time": self._time(cell("end_time")),
            "priority": priority,
            "node_names": self._nodes(node_list.strip() if node_list else None, state),
        }
        try:
            return JobRecord.model_validate(data)
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(x) for x in first["loc"])
            raise ParseError(f"field {loc}: {first['msg']}") from None


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
        rows = split_records(stdout, len(fields), "squeue")
        if fields in _PROBE_FIELDS:
            return _fast_probe_jobs(rows, builder, est)
        build = builder.build
        for n, row in enumerate(rows, start=1):
            try:
                job = build(row, n)
            except ParseError as e:
                raise ParseError(f"{e} (record starts {snippet(row[0])})") from None
            if job.state in _ESTIMATED:
                start = est.get(job.job_id)
                if start is not None and start != job.start_time:
                    job = with_start_time(job, start)
            out.append(job)
    return out


_ESTIMATED = frozenset({"pending", "requeued"})


_JOB_FIELDS = frozenset(JobRecord.model_fields)


def _trusted_job(data: dict[str, Any]) -> JobRecord:
    """A JobRecord from values this module has already checked (types, ranges, literals).

    Like ``model_construct`` (which is slower than validating here) it skips validation;
    tests compare its results with ``model_validate`` on every fixture.
    """
    obj = JobRecord.__new__(JobRecord)
    object.__setattr__(obj, "__dict__", data)
    object.__setattr__(obj, "__pydantic_fields_set__", set(_JOB_FIELDS))
    object.__setattr__(obj, "__pydantic_extra__", None)
    object.__setattr__(obj, "__pydantic_private__", None)
    return obj


def with_start_time(job: JobRecord, start: datetime | None) -> JobRecord:
    """``job`` with another start time (Slurm's estimate), without re-validating it."""
    data = dict(job.__dict__)
    data["start_time"] = start
    return _trusted_job(data)


def _fast_probe_jobs(
    rows: list[list[str]], b: _Builder, estimates: Mapping[str, datetime | None]
) -> list[JobRecord]:
    """Probe rows (:data:`SQUEUE_FIELDS`, optionally with ``NodeList`` last) -> JobRecords by
    tuple unpacking (the 50k-job path).

    Every value is checked here (integers are digit strings, states come from the table,
    times are aware datetimes), so records are built without pydantic's second pass.
    """
    validate = _trusted_job
    state_reason, resources, memory = b._state_reason, b._resources, b._memory
    duration, ts, hosts = b._duration, b._time, b._nodes
    width = len(SQUEUE_FIELDS)
    out: list[JobRecord] = []
    append = out.append
    n = 0
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
            state, reason = state_reason(st, rsn, None)
            nodes = int(nn) if nn.isdigit() else (_int(nn, "NumNodes") or 1)
            cpus = int(nc) if nc.isdigit() else (_int(nc, "NumCPUs") or 1)
            tasks = int(nt) if nt.isdigit() else _int(nt, "NumTasks")
            gpus, gpu_type, mem_mb = resources((ta, tpj, tpn, tpt, nodes, tasks))
            if mem_mb is None:
                mem_mb = memory(mm)
            data = {
                "job_id": job_id,
                "partition": part,
                "state": state,
                "reason": reason,
                "user": user or None,
                "name": name or None,
                "nodes": nodes,
                "cpus": cpus,
                "mem_mb": mem_mb,
                "gpus": gpus,
                "gpu_type": gpu_type,
                "time_limit_s": duration(tl),
                "submit_time": ts(sub),
                "start_time": (estimates.get(job_id) or ts(start))
                if estimates and state in _ESTIMATED
                else ts(start),
                "end_time": ts(end),
                "priority": int(prio) if prio.isdigit() else None,
                "node_names": hosts(node_list, state) if node_list else (),
            }
            append(validate(data))
    except ParseError as e:
        raise ParseError(
            f"squeue record {n}: {e} (record starts {snippet(rows[n - 1][0])})"
        ) from None
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise ParseError(
            f"squeue record {n}: field {loc}: {first['msg']} "
            f"(record starts {snippet(rows[n - 1][0])})"
        ) from None
    return out


def jobs_from_table(
    table: Table, utc_offset_s: float = 0, warnings: list[str] | None = None
) -> list[JobRecord]:
    """Third-party squeue text already split into a :class:`Table` -> JobRecords.

    Rows whose values do not parse are skipped; ``warnings`` collects the table's own
    skipped lines and these.
    """
    builder = _Builder(table.columns, utc_offset_s)
    notes = [] if warnings is None else warnings
    notes.extend(table.warnings)
    out: list[JobRecord] = []
    for n, row in enumerate(table.rows, start=1):
        try:
            out.append(builder.build(row, f"row {n}"))
        except ParseError as e:
            notes.append(f"skipped: {e}")
    return out


def parse_squeue_jsonlike(
    text: str,
    keys: Mapping[str, str],
    utc_offset_s: float = 0,
    warnings: list[str] | None = None,
) -> list[JobRecord]:
    """Lines like ``{"id": 26515966, "state": "RUNNING", "r": "(Priority)"}`` -> JobRecords.

    ``keys`` maps each JSON key to a squeue column name (``{"id": "JOBID", "p": "PARTITION",
    "r": "NODELIST(REASON)"}``). ``#`` comment lines are ignored; lines that are not valid
    JSON (e.g. an unquoted ``%C`` that printed ``xx``) are skipped and counted.
    """
    notes = [] if warnings is None else warnings
    columns = list(keys.values())
    table = Table(columns=columns)
    for n, line in enumerate(text.split("\n"), start=1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            obj = json.loads(s)
        except json.JSONDecodeError as e:
            table.skip(n, f"not JSON ({e.msg})", s)
            continue
        if not isinstance(obj, dict):
            table.skip(n, "not a JSON object", s)
            continue
        table.rows.append(["" if obj.get(k) is None else str(obj.get(k)) for k in keys])
    return jobs_from_table(table, utc_offset_s, notes)


# --- JSON -------------------------------------------------------------------------------


def _json_job_id(j: Mapping[str, Any]) -> str:
    job_id = json_int(j.get("job_id"))
    if job_id is None:
        raise ParseError("squeue JSON: job without job_id")
    array_job = json_int(j.get("array_job_id")) or 0
    if array_job:
        task = json_int(j.get("array_task_id"))
        if task is not None:
            return f"{array_job}_{task}"
        spec = json_str(j.get("array_task_string"))
        if spec:
            return f"{array_job}_[{spec}]"
    return str(job_id)


def _json_job(j: Mapping[str, Any], where: str) -> JobRecord:
    raw_state = j.get("job_state")
    reason = json_str(j.get("state_reason"))
    state = parse_job_state(
        [str(s) for s in raw_state] if isinstance(raw_state, list) else json_str(raw_state),
        reason,
    )
    nodes = json_int(j.get("node_count")) or 1
    cpus = json_int(j.get("cpus"))
    tasks = json_int(j.get("tasks"))
    tres_text = json_str(j.get("tres_alloc_str")) or json_str(j.get("tres_req_str"))
    gpus, gpu_type, tres = _gpus(
        tres_text,
        json_str(j.get("tres_per_job")),
        json_str(j.get("tres_per_node")),
        json_str(j.get("tres_per_task")),
        nodes,
        tasks,
    )
    mem_mb: int | None = None
    per_node = json_int(j.get("memory_per_node"))
    per_cpu = json_int(j.get("memory_per_cpu"))
    if "mem" in tres:
        total_mem, _ = parse_memory(tres["mem"])
        if total_mem is not None:
            mem_mb = total_mem // max(1, nodes)
    elif per_node:
        mem_mb = per_node
    elif per_cpu and cpus:
        mem_mb = per_cpu * cpus // max(1, nodes)
    limit = j.get("time_limit")
    limit_min = json_number(limit)
    priority = json_int(j.get("priority"))
    data: dict[str, Any] = {
        "job_id": _json_job_id(j),
        "partition": json_str(j.get("partition")) or "",
        "state": state,
        "reason": reason,
        "user": json_str(j.get("user_name")),
        "name": json_str(j.get("name")),
        "nodes": nodes,
        "cpus": 1 if cpus is None else cpus,
        "mem_mb": mem_mb,
        "gpus": gpus,
        "gpu_type": gpu_type,
        "time_limit_s": None if limit_min is None else int(limit_min * 60),
        "submit_time": epoch(json_number(j.get("submit_time"))),
        "start_time": epoch(json_number(j.get("start_time"))),
        "end_time": epoch(json_number(j.get("end_time"))),
        "priority": priority,
        "node_names": ()
        if state in _NO_NODES
        else tuple(expand_hostlist(json_str(j.get("nodes")))),
    }
    try:
        return JobRecord.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise ParseError(f"{where}: field {loc}: {first['msg']}") from None


def parse_squeue_json(
    source: str | bytes | Mapping[str, Any], warnings: list[str] | None = None
) -> list[JobRecord]:
    """``squeue --json`` (any version) -> JobRecords (times in UTC from epoch seconds)."""
    jobs = json_objects(source, "squeue JSON")
    return [_json_job(j, f"squeue JSON jobs[{i}]") for i, j in enumerate(jobs)]


def count_states(jobs: Iterable[JobRecord]) -> dict[str, int]:
    out: dict[str, int] = {}
    for j in jobs:
        out[j.state] = out.get(j.state, 0) + 1
    return out
