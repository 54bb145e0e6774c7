"""``scontrol show partition|job|node`` (one-line ``-o`` or multi-line) -> records.

Each record is ``Key=value`` tokens. Values may hold spaces (``Reason=Not responding [slurm@
...]``, ``OS=Linux 6.1.0 #1 SMP``), ``=`` (``TRES=cpu=1,mem=2G``) or nothing (``AllocTRES=``);
a value runs to the next ``Key=`` that follows whitespace. Multi-line records start at an
unindented line beginning with the record's first key (``JobId=``, ``NodeName=``...);
indented, blank and whitespace-only lines continue the record, so a ``Reason=`` after a
whitespace-only line stays with its node. Lines with no ``Key=`` at all (22.05 prints
``NtasksPerTRES:0``) are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import ValidationError

from federation.core.errors import ParseError
from federation.core.snapshot import JobRecord, NodeRecord
from federation.parsing.common import (
    MAX_COUNT,
    NAME,
    RowWarnings,
    as_text,
    clean,
    cut_line,
    field_errors,
    snippet,
    whole,
)
from federation.parsing.common import job_id as check_job_id
from federation.parsing.gres import UNTYPED, gpus_by_type, parse_tres, request_gpus, tres_gpus
from federation.parsing.hostlist import count_hosts
from federation.parsing.scontrol_keys import (
    JOB_KEYS,
    MAY_BE_EMPTY,
    NODE_KEYS,
    ONE_WORD,
    PARTITION_KEYS,
)
from federation.parsing.states import parse_job_state, parse_node_state
from federation.parsing.times import (
    UNLIMITED_WORDS,
    is_unlimited,
    parse_duration,
    parse_memory,
    parse_timestamp,
)

_KEY = re.compile(r"(?:(?<=\s)|^)([A-Za-z][A-Za-z0-9_/:.()\[\]-]*)=")

_JOB_STATE = re.compile(r"[A-Za-z_]{1,64}")
_NODE_STATE = re.compile(r"[A-Za-z_+*~#!%$@^-]{1,200}")
_NAME = re.compile(r"[\w.+-]{1,256}")
"""A partition or node name: no space, ``=``, ``,`` or ``|``."""

PartitionStateName = Literal["up", "down", "drain", "inactive", "unknown"]


def _tokens(line: str) -> list[tuple[str, str]]:
    parts = _KEY.split(line)  # [before, key, value, key, value, ...]: one pass in C
    out = []
    for key, raw in zip(parts[1::2], parts[2::2], strict=True):
        value = raw.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        out.append((key, value))
    return out


def parse_scontrol_records(
    text: str | bytes, warnings: list[str] | None = None, required: tuple[str, ...] = ()
) -> list[dict[str, str]]:
    """Every record in ``scontrol show ...`` output as ``{key: value}`` (values stripped).

    Output that ends without a newline was cut: its last value is dropped, with a note in
    ``warnings``. Raises :class:`ParseError` when the output has non-empty lines but no
    ``Key=value``, or is bytes that are not UTF-8 (naming the line).
    """
    return list(_records(text, warnings, required))


def _records(
    text: str | bytes, warnings: list[str] | None, required: tuple[str, ...]
) -> Iterator[dict[str, str]]:
    """:func:`parse_scontrol_records`, lazily (its notes reach ``warnings`` at the end)."""
    notes = RowWarnings()
    for _, rec in _checked_records(as_text(text, "scontrol"), notes, required):
        yield rec
    notes.into(warnings)


def _checked_records(
    raw: str, notes: RowWarnings, required: tuple[str, ...] = ()
) -> Iterator[tuple[int, dict[str, str]]]:
    """:func:`_numbered_records`, without the records that are damaged (a line that is not
    ``Key=value``, a key given twice with two values, a control character, one of
    ``required`` missing) and without the last record when the output was cut: it ends
    without a newline, or (multi-line records, which scontrol closes with a blank line)
    without the blank line after the last record. Such a record may have lost values or
    whole lines, so it is dropped with a note naming it, not read with defaults."""
    multi_line = any(line[:1] in (" ", "\t") for line in raw.split("\n", 64)[1:])
    end = raw.rstrip(" \t\r")
    cut = cut_line(raw) is not None or (multi_line and not end.endswith("\n\n"))
    last: tuple[int, dict[str, str], str | None] | None = None
    for numbered in _numbered_records(raw):  # lazily, one record behind (the last: cut?)
        if last is not None and (checked := _checked(last, notes, required)) is not None:
            yield checked
        last = numbered
    if last is None:
        return
    if not cut:
        if (checked := _checked(last, notes, required)) is not None:
            yield checked
    else:
        line, rec, _ = last
        first = next(iter(rec.items()), ("?", "?"))
        notes.add(
            "cut",
            f"scontrol line {line}: output ends without "
            f"{'a blank line after its last record' if multi_line else 'a newline'} (cut "
            f"short?); the record {first[0]}={snippet(first[1])} there is not trusted and "
            "skipped",
        )


def _checked(
    numbered: tuple[int, dict[str, str], str | None],
    notes: RowWarnings,
    required: tuple[str, ...],
) -> tuple[int, dict[str, str]] | None:
    """The record, or None (with a note) when it is damaged."""
    line, rec, damage = numbered
    if required and required[0] not in rec:
        raise ParseError(f"scontrol line {line}: no {required[0]}= key")
    missing = next((k for k in required if not rec.get(k) and k not in MAY_BE_EMPTY), None)
    if damage is None and missing is not None:
        damage = f"no value for {missing}= (a line or a value lost?)"
    spaced = next((k for k in ONE_WORD if " " in rec.get(k, "")), None)
    if damage is None and spaced is not None:
        damage = f"{spaced}={snippet(rec[spaced])} is more than one word"
    if damage is not None:
        first = next(iter(rec.items()), ("?", "?"))
        notes.add(
            "damaged record",
            f"scontrol line {line}: record {first[0]}={snippet(first[1])} skipped: {damage}",
        )
        return None
    return line, rec


_KEYLESS = re.compile(r"\s*[A-Za-z]\w*:\S*\s*")
"""A line without ``Key=`` that scontrol prints (22.05: ``NtasksPerTRES:0``)."""


def _numbered_records(text: str) -> Iterator[tuple[int, dict[str, str], str | None]]:
    """The records with the line each starts on and the damage found in it, if any; each
    as soon as the next one starts (``records`` holds the current one only)."""
    records: list[tuple[int, dict[str, str], str | None]] = []
    head: str | None = None
    current: dict[str, str] | None = None
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        toks = _tokens(line)
        if not toks:
            if current is None:
                raise ParseError(
                    f"scontrol line {n}: expected Key=value records, got {snippet(line)}"
                )
            if _KEYLESS.fullmatch(line) is None:
                _damage(records, f"line {n} is not Key=value: {snippet(line)}")
            continue
        first_key = toks[0][0]
        starts = not line[:1].isspace() and line.lstrip().startswith(first_key + "=")
        if head is None:
            if not starts:
                raise ParseError(f"scontrol line {n}: record does not start with Key=: {line!r}")
            head = first_key
        if starts and first_key == head:
            current = {}
            if records:
                yield records.pop()
            records.append((n, current, None))
        elif starts and not line[:1].isspace():
            raise ParseError(
                f"scontrol line {n}: a {first_key}= line among {head}= records (spliced "
                f"output?): {snippet(line)}"
            )
        elif not line.lstrip().startswith(first_key + "="):
            _damage(records, f"line {n} starts with words that are not Key=value")
        if f" {head}=" in line:  # a line glued to the start of another record
            _damage(records, f"line {n} holds a second {head}=")
        if "\x1f" in line or "\x1e" in line or "\t" in line:
            _damage(records, f"line {n} holds a control character")
        assert current is not None
        for k, v in toks:
            if current.setdefault(k, v) != v:
                _damage(records, f"{k}= twice, as {snippet(current[k], 30)} and {snippet(v, 30)}")
    yield from records


def _damage(records: list[tuple[int, dict[str, str], str | None]], what: str) -> None:
    """Mark the current (last) record damaged, keeping the first damage found."""
    n, rec, damage = records[-1]
    if damage is None:
        records[-1] = (n, rec, what)


# --- partitions --------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionInfo:
    """What ``scontrol show partition`` says about one partition."""

    name: str
    state: PartitionStateName
    max_time_s: int | None
    """None when unlimited (``MaxTime=UNLIMITED``)."""
    default: bool = False
    total_nodes: int | None = None
    total_cpus: int | None = None
    nodes: str | None = None
    default_time_s: int | None = None
    gpus_by_type: dict[str, int] = field(default_factory=dict)
    tres: dict[str, str] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict, repr=False)


_PART_STATES: dict[str, PartitionStateName] = {
    "up": "up",
    "down": "down",
    "drain": "drain",
    "inactive": "inactive",
}


def _opt_int(value: str | None, what: str = "value") -> int | None:
    """A whole number, None when absent, null-like or a word (``UNLIMITED``, ``N/A``); a
    token that starts with a digit but is not all digits (``30x96101``) is damage."""
    v = clean(value)
    if v is None or v.lower() in UNLIMITED_WORDS:
        return None
    return whole(v, what)


def _count(value: str | None, what: str, default: int) -> int:
    """A count field (``CPUTot=8``); a missing one gives ``default``, a damaged one
    (``-192``, ``30x96101``) a :class:`ParseError`, never its leading digits."""
    v = clean(value)
    if v is None:
        return default
    return whole(v, what)


def partition_from_record(rec: dict[str, str], where: str = "scontrol") -> PartitionInfo:
    name = clean(rec.get("PartitionName"))
    if name is None:
        raise ParseError(f"{where}: record without PartitionName: {snippet(str(rec))}")
    if _NAME.fullmatch(name) is None:
        raise ParseError(f"{where}: {snippet(name)} is not a partition name")
    state = _PART_STATES.get((rec.get("State") or "").strip().lower(), "unknown")
    max_time = rec.get("MaxTime")
    try:
        max_time_s = (
            None if max_time is None or is_unlimited(max_time) else parse_duration(max_time)
        )
        default_time_s = parse_duration(rec.get("DefaultTime"))
    except ParseError as e:
        raise ParseError(f"{where} partition {name}: {e}") from None
    nodes = clean(rec.get("Nodes"))
    if nodes is not None:
        try:
            count_hosts(nodes)  # a damaged host list is not the partition's nodes
        except ParseError as e:
            raise ParseError(f"{where} partition {name} Nodes: {e}") from None
    tres = parse_tres(rec.get("TRES"))
    gpus: dict[str, int] = {}
    for key, val in tres.items():
        if key.startswith("gres/gpu:") and val.isdigit():
            gpus[key.split(":", 1)[1]] = int(val)
    if not gpus:
        total, _ = tres_gpus(tres)
        if total:
            gpus[UNTYPED] = total
    return PartitionInfo(
        name=name,
        state=state,
        max_time_s=max_time_s,
        default=(rec.get("Default") or "").upper() == "YES",
        total_nodes=_opt_int(rec.get("TotalNodes"), f"{where} TotalNodes"),
        total_cpus=_opt_int(rec.get("TotalCPUs"), f"{where} TotalCPUs"),
        nodes=nodes,
        default_time_s=default_time_s,
        gpus_by_type=gpus,
        tres=tres,
        raw=rec,  # (the record is its own: not copied)
    )


def parse_scontrol_partitions(
    text: str | bytes, warnings: list[str] | None = None
) -> list[PartitionInfo]:
    """``scontrol show partition [-o]`` -> one :class:`PartitionInfo` per partition.

    A partition listed twice is duplicated output: a :class:`ParseError` naming it.
    """
    records = _records(text, warnings, PARTITION_KEYS)
    out = []
    seen: dict[str, int] = {}
    for n, rec in enumerate(records, start=1):
        where = f"scontrol show partition record {n}"
        if "PartitionName" not in rec:
            raise ParseError(f"{where}: no PartitionName= key")
        with field_errors(where):
            info = partition_from_record(rec, where)
        _once(seen, info.name, n, f"{where}: partition")
        out.append(info)
    return out


def _once(seen: dict[str, int], key: str, n: int, what: str) -> None:
    """Refuse a second record of the same name (duplicated output would count twice)."""
    first = seen.setdefault(key, n)
    if first != n:
        raise ParseError(f"{what} {key} is listed twice (first as record {first})")


def partition_node_count(info: PartitionInfo) -> int:
    """Nodes in the partition: TotalNodes, else the expanded Nodes= host list."""
    if info.total_nodes is not None:
        return info.total_nodes
    return count_hosts(info.nodes)


# --- jobs --------------------------------------------------------------------------------


_RANGE = re.compile(r"(\d+)(?:-\d+)?")


def _low_of_range(value: str | None, what: str, default: int) -> int:
    """``NumNodes=1`` or a range ``1-2`` -> its low end; anything else is damage."""
    v = clean(value)
    if v is None:
        return default
    m = _RANGE.fullmatch(v)
    if m is None:
        raise ParseError(f"{what}: expected a number or a range N-M, got {snippet(v)}")
    return whole(m.group(1), what, MAX_COUNT)


def _user(value: str | None) -> str | None:
    v = clean(value)
    if v is None:
        return None
    return v.split("(", 1)[0] or None


def job_from_record(rec: dict[str, str], utc_offset_s: float = 0, where: str = "") -> JobRecord:
    """One ``scontrol show job`` record -> :class:`JobRecord` (same conventions as squeue)."""
    job_id = clean(rec.get("JobId"))
    if job_id is None:
        raise ParseError(f"{where}: record without JobId")
    array_job, array_task = clean(rec.get("ArrayJobId")), clean(rec.get("ArrayTaskId"))
    if array_job and array_task:
        job_id = f"{array_job}_{array_task if array_task.isdigit() else '[' + array_task + ']'}"
    job_id = check_job_id(job_id, "JobId")
    reason = clean(rec.get("Reason"))
    if _JOB_STATE.fullmatch(rec.get("JobState", "")) is None:
        raise ParseError(f"{where}: JobState={snippet(rec.get('JobState', ''))} is no state")
    state = parse_job_state(clean(rec.get("JobState")), reason)
    nodes = _low_of_range(rec.get("NumNodes"), f"{where} NumNodes", 1)  # "1" or "1-2"
    cpus = _low_of_range(rec.get("NumCPUs"), f"{where} NumCPUs", 1)
    tasks = _opt_int(rec.get("NumTasks"), f"{where} NumTasks")
    tres = parse_tres(rec.get("TRES") or rec.get("ReqTRES") or rec.get("AllocTRES"))
    gpus, gpu_type = tres_gpus(tres)
    for key, mult in (("TresPerJob", 1), ("TresPerNode", nodes), ("TresPerTask", tasks or 1)):
        n, t = request_gpus(rec.get(key))
        if n and not gpus:
            gpus = n * mult
        gpu_type = gpu_type or t
    mem_mb: int | None = None
    if "mem" in tres:
        total, _ = parse_memory(tres["mem"])
        mem_mb = None if total is None else total // max(1, nodes)
    elif clean(rec.get("MinMemoryNode")):
        mem_mb, _ = parse_memory(rec["MinMemoryNode"])
    elif clean(rec.get("MinMemoryCPU")):
        per_cpu, _ = parse_memory(rec["MinMemoryCPU"])
        mem_mb = None if per_cpu is None else per_cpu * cpus // max(1, nodes)
    priority = _opt_int(rec.get("Priority"), f"{where} Priority")

    def ts(key: str) -> datetime | None:
        return parse_timestamp(rec.get(key), utc_offset_s)

    user = _user(rec.get("UserId"))
    partition = clean(rec.get("Partition")) or ""
    bad = next((w for w in (user, *partition.split(",")) if w and not NAME.fullmatch(w)), None)
    if bad is not None:
        raise ParseError(f"{where} job {job_id}: {snippet(bad)} is not a user or partition name")
    data: dict[str, Any] = {
        "job_id": job_id,
        "partition": partition,
        "state": state,
        "reason": reason,
        "user": user,
        "name": clean(rec.get("JobName")),
        "nodes": nodes,
        "cpus": cpus,
        "mem_mb": mem_mb,
        "gpus": gpus,
        "gpu_type": gpu_type,
        "time_limit_s": parse_duration(rec.get("TimeLimit")),
        "submit_time": ts("SubmitTime"),
        "start_time": ts("StartTime"),
        "end_time": ts("EndTime"),
        "priority": priority,
    }
    try:
        return JobRecord.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise ParseError(f"{where} job {job_id}: field {loc}: {first['msg']}") from None


def parse_scontrol_jobs(
    text: str | bytes, utc_offset_s: float = 0, warnings: list[str] | None = None
) -> list[JobRecord]:
    """``scontrol show job [-o]`` -> JobRecords; a job listed twice is a ParseError."""
    out = []
    seen: dict[str, int] = {}
    for n, rec in enumerate(_records(text, warnings, JOB_KEYS), start=1):
        where = f"scontrol show job record {n}"
        if "JobId" not in rec:
            raise ParseError(f"{where}: no JobId= key")
        with field_errors(where):
            job = job_from_record(rec, utc_offset_s, where)
        _once(seen, job.job_id, n, f"{where}: job")
        out.append(job)
    return out


# --- nodes -------------------------------------------------------------------------------

_REASON_STAMP = re.compile(r"\s*\[[^\[\]]*@[^\[\]]*\]\s*$")


def nodes_from_record(
    rec: dict[str, str], where: str = "", warnings: RowWarnings | None = None
) -> list[NodeRecord]:
    """One ``scontrol show node`` record -> a :class:`NodeRecord` per partition it is in.

    GPUs in use come from ``AllocTRES`` (``gres/gpu:a100=1``), totals from ``Gres``; the
    ``[user@time]`` stamp is dropped from ``Reason``. A node in no partition (no or an
    empty ``Partitions=``: a DOWN node, a spare) has no record in a snapshot, whose nodes
    are per partition: it is skipped with a note in ``warnings``, as the JSON path does.
    """
    name = clean(rec.get("NodeName"))
    if name is None:
        raise ParseError(f"{where}: record without NodeName")
    if _NAME.fullmatch(name) is None:
        raise ParseError(f"{where}: {snippet(name)} is not a node name")
    if _NODE_STATE.fullmatch(rec.get("State", "")) is None:
        raise ParseError(f"{where} node {name}: State={snippet(rec.get('State', ''))} is no state")
    state, flags = parse_node_state(clean(rec.get("State")))
    cpus_total = _count(rec.get("CPUTot"), f"{where} CPUTot", 0)
    cpus_alloc = _count(rec.get("CPUAlloc"), f"{where} CPUAlloc", 0)
    alloc_tres = parse_tres(rec.get("AllocTRES"))
    used: dict[str, int] = {}
    for key, val in alloc_tres.items():
        if key.startswith("gres/gpu:") and val.isdigit():
            used[key.split(":", 1)[1]] = int(val)
    if not used and clean(rec.get("GresUsed")):
        used = gpus_by_type(rec["GresUsed"])
    if not used:
        n, _ = tres_gpus(alloc_tres)
        if n:
            used[UNTYPED] = n
    reason = clean(rec.get("Reason"))
    if reason is not None:
        reason = _REASON_STAMP.sub("", reason) or None
    feats = clean(rec.get("AvailableFeatures"))
    features = tuple(f for f in (feats or "").split(",") if f)
    parts = [p for p in (clean(rec.get("Partitions")) or "").split(",") if p]
    bad = next((w for w in (*features, *parts) if _NAME.fullmatch(w) is None), None)
    if bad is not None:
        raise ParseError(f"{where} node {name}: {snippet(bad)} is not a feature or partition")
    if not parts and warnings is not None:
        warnings.add("no partition", f"{where}: node {name} is in no partition; skipped")
    out = []
    for part in parts:
        data = {
            "name": name,
            "partition": part,
            "state": state,
            "state_flags": flags,
            "reason": reason,
            "cpus_total": cpus_total,
            "cpus_alloc": cpus_alloc,
            "mem_mb_total": _count(rec.get("RealMemory"), f"{where} RealMemory", 0),
            "mem_mb_alloc": _count(rec.get("AllocMem"), f"{where} AllocMem", 0),
            "gpus_total_by_type": gpus_by_type(rec.get("Gres")),
            "gpus_alloc_by_type": used,
            "features": features,
        }
        try:
            out.append(NodeRecord.model_validate(data))
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(x) for x in first["loc"])
            raise ParseError(f"{where} node {name}: field {loc}: {first['msg']}") from None
    return out


def parse_scontrol_nodes(text: str | bytes, warnings: list[str] | None = None) -> list[NodeRecord]:
    """``scontrol show node [-o]`` -> NodeRecords (one per node and partition).

    ``warnings`` (if given) names the nodes skipped for being in no partition and any
    undecodable bytes, capped per kind (:class:`RowWarnings`).
    """
    notes = RowWarnings()
    out: list[NodeRecord] = []
    raw = as_text(text, "scontrol show node", notes)
    seen: dict[str, int] = {}
    for n, (line, rec) in enumerate(_checked_records(raw, notes, NODE_KEYS), start=1):
        where = f"scontrol show node record {n} (line {line})"
        if "NodeName" not in rec:
            raise ParseError(f"{where}: no NodeName= key")
        stray = next((k for k in _ONE_WORD_NODE_KEYS if len(rec.get(k, "").split()) > 1), None)
        if stray is not None:  # a word glued into a one-word value: which part is right?
            rest = rec[stray].split(None, 1)[1]
            notes.add(
                f"{stray} stray words",
                f"{where}: node {snippet(rec['NodeName'].split()[0] or '?')} skipped: "
                f"{stray}={snippet(rec[stray])} has stray words {snippet(rest)}",
            )
            continue
        with field_errors(where):
            out.extend(nodes_from_record(rec, where, notes))
        _once(seen, rec["NodeName"], n, f"{where}: node")
    notes.into(warnings)
    return out


_ONE_WORD_NODE_KEYS = (
    "NodeName",
    "State",
    "Partitions",
    "CPUTot",
    "CPUAlloc",
    "RealMemory",
    "AllocMem",
    "Gres",
    "GresUsed",
    "AllocTRES",
    "CfgTRES",
)
"""Node fields whose value is one word: further words before the next key are damage."""
