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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, Literal

from federation.core.errors import ParseError
from federation.core.gcpause import gc_paused
from federation.core.snapshot import JobRecord, NodeRecord, NodeStateName
from federation.parsing.common import (
    MAX_COUNT,
    NAME,
    RowWarnings,
    as_text,
    clean,
    field_errors,
    snippet,
    whole,
)
from federation.parsing.common import job_id as check_job_id
from federation.parsing.gres import UNTYPED, gpus_by_type, parse_tres, request_gpus, tres_gpus
from federation.parsing.hostlist import count_hosts
from federation.parsing.records import JOBS, NODES
from federation.parsing.scontrol_keys import (
    JOB_KEYS,
    NODE_KEYS,
    PARTITION_KEYS,
)
from federation.parsing.scontrol_records import checked_records, read_records
from federation.parsing.states import parse_job_state, parse_node_state
from federation.parsing.times import (
    UNLIMITED_WORDS,
    is_unlimited,
    parse_duration,
    parse_memory,
    parse_timestamp,
)

_JOB_STATE = re.compile(r"[A-Za-z_]{1,64}")
_NODE_STATE = re.compile(r"[A-Za-z_+*~#!%$@^-]{1,200}")
_NAME = re.compile(r"[\w.+-]{1,256}")
"""A partition or node name: no space, ``=``, ``,`` or ``|``."""

PartitionStateName = Literal["up", "down", "drain", "inactive", "unknown"]


def parse_scontrol_records(
    text: str | bytes, warnings: list[str] | None = None, required: tuple[str, ...] = ()
) -> list[dict[str, str]]:
    """Every record in ``scontrol show ...`` output as ``{key: value}`` (values stripped).

    Output that ends without a newline was cut: its last value is dropped, with a note in
    ``warnings``. Raises :class:`ParseError` when the output has non-empty lines but no
    ``Key=value``, or is bytes that are not UTF-8 (naming the line).
    """
    return list(read_records(text, warnings, required, {}))


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


def partition_from_record(
    rec: dict[str, str], where: str = "scontrol", memo: dict[Any, Any] | None = None
) -> PartitionInfo:
    """One ``scontrol show partition`` record -> :class:`PartitionInfo`. ``memo`` (a dict
    kept across records) reads each distinct time, host list and TRES once."""
    name = clean(rec.get("PartitionName"))
    if name is None:
        raise ParseError(f"{where}: record without PartitionName: {snippet(str(rec))}")
    if _NAME.fullmatch(name) is None:
        raise ParseError(f"{where}: {snippet(name)} is not a partition name")
    memo = {} if memo is None else memo
    state = _PART_STATES.get((rec.get("State") or "").strip().lower(), "unknown")
    max_time, default_time = rec.get("MaxTime"), rec.get("DefaultTime")
    times = memo.get(("times", max_time, default_time))
    if times is None:
        try:
            times = (
                None if max_time is None or is_unlimited(max_time) else parse_duration(max_time),
                parse_duration(default_time),
            )
        except ParseError as e:
            raise ParseError(f"{where} partition {name}: {e}") from None
        memo[("times", max_time, default_time)] = times
    max_time_s, default_time_s = times
    nodes = clean(rec.get("Nodes"))
    if nodes is not None and ("nodes", nodes) not in memo:
        try:
            count_hosts(nodes)  # a damaged host list is not the partition's nodes
        except ParseError as e:
            raise ParseError(f"{where} partition {name} Nodes: {e}") from None
        memo[("nodes", nodes)] = True
    raw_tres = rec.get("TRES")
    hit = memo.get(("tres", raw_tres))
    if hit is None:
        hit = memo[("tres", raw_tres)] = _partition_tres(raw_tres)
    tres, gpus = dict(hit[0]), dict(hit[1])  # (dicts of its own, their strings shared)
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


def _partition_tres(text: str | None) -> tuple[dict[str, str], dict[str, int]]:
    """A partition's TRES and its GPUs by type."""
    tres = parse_tres(text)
    gpus: dict[str, int] = {}
    for key, val in tres.items():
        if key.startswith("gres/gpu:") and val.isdigit():
            gpus[key.split(":", 1)[1]] = int(val)
    if not gpus:
        total, _ = tres_gpus(tres)
        if total:
            gpus[UNTYPED] = total
    return tres, gpus


def parse_scontrol_partitions(
    text: str | bytes, warnings: list[str] | None = None
) -> list[PartitionInfo]:
    """``scontrol show partition [-o]`` -> one :class:`PartitionInfo` per partition.

    A partition listed twice is duplicated output: a :class:`ParseError` naming it.
    """
    records = read_records(text, warnings, PARTITION_KEYS, {})
    out = []
    seen: dict[str, int] = {}
    memo: dict[Any, Any] = {}
    with gc_paused():
        for n, rec in enumerate(records, start=1):
            where = f"scontrol show partition record {n}"
            if "PartitionName" not in rec:
                raise ParseError(f"{where}: no PartitionName= key")
            if len(memo) > 100_000:
                memo.clear()
            with field_errors(where):
                info = partition_from_record(rec, where, memo)
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
_MISS: Any = object()


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
    return _JobReader(utc_offset_s).read(rec, where)


class _Memo:
    """Values read from repeated texts, each ``(kind, text)`` once, up to ``LIMIT`` kept."""

    LIMIT = 100_000

    def __init__(self) -> None:
        self.memo: dict[tuple[str, str | None], Any] = {}

    def _get(self, kind: str, text: str | None, make: Callable[[], Any]) -> Any:
        key = (kind, text)
        hit = self.memo.get(key, _MISS)
        if hit is _MISS:
            hit = make()  # (a failure raises, and is not kept)
            if len(self.memo) < self.LIMIT:
                self.memo[key] = hit
        return hit


class _JobReader(_Memo):
    """:func:`job_from_record` for many records: each distinct state, TRES, request,
    time and name is read once."""

    def __init__(self, utc_offset_s: float = 0) -> None:
        super().__init__()
        self.offset = utc_offset_s

    def _time(self, text: str | None) -> datetime | None:
        return self._get("time", text, lambda: parse_timestamp(text, self.offset))  # type: ignore[no-any-return]

    def read(self, rec: dict[str, str], where: str = "") -> JobRecord:
        job_id = clean(rec.get("JobId"))
        if job_id is None:
            raise ParseError(f"{where}: record without JobId")
        array_job, array_task = clean(rec.get("ArrayJobId")), clean(rec.get("ArrayTaskId"))
        if array_job and array_task:
            task = array_task if array_task.isdigit() else "[" + array_task + "]"
            job_id = f"{array_job}_{task}"
        job_id = check_job_id(job_id, "JobId")
        raw_state, raw_reason = rec.get("JobState", ""), rec.get("Reason")

        def state_of() -> tuple[str, str | None]:
            reason = clean(raw_reason)
            if _JOB_STATE.fullmatch(raw_state) is None:
                raise ParseError(f"{where}: JobState={snippet(raw_state)} is no state")
            return parse_job_state(clean(raw_state), reason), reason

        state, reason = self._get("state", f"{raw_state}\0{raw_reason}", state_of)
        nodes = _low_of_range(rec.get("NumNodes"), f"{where} NumNodes", 1)  # "1" or "1-2"
        cpus = _low_of_range(rec.get("NumCPUs"), f"{where} NumCPUs", 1)
        tasks = _opt_int(rec.get("NumTasks"), f"{where} NumTasks")
        raw_tres = rec.get("TRES") or rec.get("ReqTRES") or rec.get("AllocTRES")
        tres = self._get("tres", raw_tres, lambda: parse_tres(raw_tres))
        gpus, gpu_type = self._get("gpus", raw_tres, lambda: tres_gpus(tres))
        for key, mult in (("TresPerJob", 1), ("TresPerNode", nodes), ("TresPerTask", tasks or 1)):
            raw = rec.get(key)
            n, t = (0, None) if raw is None else self._get("req", raw, partial(request_gpus, raw))
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
        raw_user, raw_partition = rec.get("UserId"), rec.get("Partition")

        def names() -> tuple[str | None, str]:
            user = _user(raw_user)
            partition = clean(raw_partition) or ""
            bad = next(
                (w for w in (user, *partition.split(",")) if w and not NAME.fullmatch(w)), None
            )
            if bad is not None:
                raise ParseError(
                    f"{where} job {job_id}: {snippet(bad)} is not a user or partition name"
                )
            return user, partition

        user, partition = self._get("names", f"{raw_user}\0{raw_partition}", names)
        raw_limit = rec.get("TimeLimit")
        # every value is checked (whole numbers, states from the table, aware datetimes,
        # names): no second pass through pydantic; tests compare with validated records
        return _MAKE_JOB(
            (
                job_id,
                partition,
                state,
                reason,
                user,
                clean(rec.get("JobName")),  # name
                nodes,
                cpus,
                mem_mb,
                gpus,
                gpu_type,
                self._get("limit", raw_limit, lambda: parse_duration(raw_limit)),
                self._time(rec.get("SubmitTime")),
                self._time(rec.get("StartTime")),
                self._time(rec.get("EndTime")),
                priority,
                (),  # node_names
            )
        )


_MAKE_JOB = JOBS.values


def parse_scontrol_jobs(
    text: str | bytes, utc_offset_s: float = 0, warnings: list[str] | None = None
) -> list[JobRecord]:
    """``scontrol show job [-o]`` -> JobRecords; a job listed twice is a ParseError."""
    out = []
    seen: dict[str, int] = {}
    read = _JobReader(utc_offset_s).read
    with gc_paused():
        for n, rec in enumerate(read_records(text, warnings, JOB_KEYS), start=1):
            where = f"scontrol show job record {n}"
            if "JobId" not in rec:
                raise ParseError(f"{where}: no JobId= key")
            with field_errors(where):
                job = read(rec, where)
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
    return _NodeReader().read(rec, where, warnings)


class _NodeReader(_Memo):
    """:func:`nodes_from_record` for many records: each distinct state, GRES, TRES,
    reason, feature and partition list is read once (nodes repeat them)."""

    def read(
        self, rec: dict[str, str], where: str = "", warnings: RowWarnings | None = None
    ) -> list[NodeRecord]:
        name = clean(rec.get("NodeName"))
        if name is None:
            raise ParseError(f"{where}: record without NodeName")
        if _NAME.fullmatch(name) is None:
            raise ParseError(f"{where}: {snippet(name)} is not a node name")
        raw_state = rec.get("State")

        def state_of() -> tuple[NodeStateName, tuple[str, ...]]:
            if _NODE_STATE.fullmatch(raw_state or "") is None:
                raise ParseError(
                    f"{where} node {name}: State={snippet(raw_state or '')} is no state"
                )
            return parse_node_state(clean(raw_state))

        state, flags = self._get("state", raw_state, state_of)
        cpus_total = _number(rec.get("CPUTot"), f"{where} CPUTot")
        cpus_alloc = _number(rec.get("CPUAlloc"), f"{where} CPUAlloc")
        alloc_text, used_text = rec.get("AllocTRES"), rec.get("GresUsed")
        used = dict(
            self._get(
                "used",
                f"{alloc_text}\0{used_text}",
                lambda: _gpus_in_use(alloc_text, used_text),
            )
        )
        raw_reason = rec.get("Reason")
        reason = self._get("reason", raw_reason, lambda: _reason(raw_reason))
        raw_features, raw_parts = rec.get("AvailableFeatures"), rec.get("Partitions")
        features, parts = self._get(
            "names",
            f"{raw_features}\0{raw_parts}",
            lambda: _features_and_partitions(raw_features, raw_parts, f"{where} node {name}"),
        )
        if not parts:
            if warnings is not None:
                warnings.add("no partition", f"{where}: node {name} is in no partition; skipped")
            return []
        mem_total = _number(rec.get("RealMemory"), f"{where} RealMemory")
        mem_alloc = _number(rec.get("AllocMem"), f"{where} AllocMem")
        raw_gres = rec.get("Gres")
        gres = self._get("gres", raw_gres, lambda: gpus_by_type(raw_gres))
        # every value is checked (whole numbers, states from the table, names): no second
        # pass through pydantic (the 50 MB path); tests compare with validated records
        return [
            _MAKE_NODE(
                (
                    name,
                    part,
                    state,
                    flags,
                    reason,
                    cpus_total,
                    cpus_alloc,
                    mem_total,
                    mem_alloc,
                    dict(gres),  # (a dict of its own per record)
                    used if i == 0 else dict(used),
                    features,
                )
            )
            for i, part in enumerate(parts)
        ]


_MAKE_NODE = NODES.values
"""A NodeRecord from the values of its fields, in order (name, partition, state,
state_flags, reason, cpus_total, cpus_alloc, mem_mb_total, mem_mb_alloc,
gpus_total_by_type, gpus_alloc_by_type, features)."""


def _number(value: str | None, what: str) -> int:
    """:func:`_count` with default 0, the common case (digits) inline."""
    if value is not None and value.isdigit() and len(value) < 19 and value.isascii():
        return int(value)
    return _count(value, what, 0)


def _gpus_in_use(alloc_text: str | None, used_text: str | None) -> dict[str, int]:
    alloc_tres = parse_tres(alloc_text)
    used: dict[str, int] = {}
    for key, val in alloc_tres.items():
        if key.startswith("gres/gpu:") and val.isdigit():
            used[key.split(":", 1)[1]] = int(val)
    if not used and clean(used_text):
        used = gpus_by_type(used_text)
    if not used:
        n, _ = tres_gpus(alloc_tres)
        if n:
            used[UNTYPED] = n
    return used


def _reason(text: str | None) -> str | None:
    reason = clean(text)
    if reason is not None:
        reason = _REASON_STAMP.sub("", reason) or None
    return reason


def _features_and_partitions(
    raw_features: str | None, raw_parts: str | None, where: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    feats = clean(raw_features)
    features = tuple(f for f in (feats or "").split(",") if f)
    parts = tuple(p for p in (clean(raw_parts) or "").split(",") if p)
    bad = next((w for w in (*features, *parts) if _NAME.fullmatch(w) is None), None)
    if bad is not None:
        raise ParseError(f"{where}: {snippet(bad)} is not a feature or partition")
    return features, parts


def parse_scontrol_nodes(text: str | bytes, warnings: list[str] | None = None) -> list[NodeRecord]:
    """``scontrol show node [-o]`` -> NodeRecords (one per node and partition).

    ``warnings`` (if given) names the nodes skipped for being in no partition and any
    undecodable bytes, capped per kind (:class:`RowWarnings`).
    """
    notes = RowWarnings()
    out: list[NodeRecord] = []
    raw = as_text(text, "scontrol show node", notes)
    seen: dict[str, int] = {}
    read = _NodeReader().read
    with gc_paused():
        for n, (line, rec) in enumerate(checked_records(raw, notes, NODE_KEYS), start=1):
            where = f"scontrol show node record {n} (line {line})"
            if "NodeName" not in rec:
                raise ParseError(f"{where}: no NodeName= key")
            stray = _stray(rec)
            if stray is not None:  # a word glued into a one-word value: which part is right?
                rest = rec[stray].split(None, 1)[1]
                notes.add(
                    f"{stray} stray words",
                    f"{where}: node {snippet(rec['NodeName'].split()[0] or '?')} skipped: "
                    f"{stray}={snippet(rec[stray])} has stray words {snippet(rest)}",
                )
                continue
            with field_errors(where):
                out.extend(read(rec, where, notes))
            _once(seen, rec["NodeName"], n, f"{where}: node")
    notes.into(warnings)
    return out


def _stray(rec: dict[str, str]) -> str | None:
    """The first one-word node field that holds several words, or None."""
    values = list(map(rec.get, _ONE_WORD_NODE_KEYS, _NO_VALUES))
    if not any(map(_HAS_SPACE, values)):
        return None
    return next(
        (k for k, v in zip(_ONE_WORD_NODE_KEYS, values, strict=True) if len(v.split()) > 1), None
    )


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

_NO_VALUES = ("",) * len(_ONE_WORD_NODE_KEYS)
_HAS_SPACE = re.compile(r"\s").search
