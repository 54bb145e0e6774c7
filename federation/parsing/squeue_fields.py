"""The squeue columns and the per-value helpers every ``squeue`` parser shares.

The probe's field list (:data:`SQUEUE_FIELDS`), the aliases of third-party column names
(:data:`COLUMN_ALIASES`), reason codes, GPU counts from TRES and requests, and building
:class:`JobRecord` objects from values already checked (:func:`with_start_time`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from federation.core.errors import ParseError
from federation.core.snapshot import JobRecord
from federation.parsing.common import MAX_COUNT, snippet
from federation.parsing.gres import parse_tres, request_gpus, tres_gpus
from federation.parsing.records import JOBS

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
_COUNT = re.compile(r"(\d+)(?:-\d+|\+)?")
"""A count as squeue prints it: ``8``, a range ``1-2`` (its low end), ``4+``."""


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
    """A count column: the whole token (``8``, ``1-2``, ``4+``) up to :data:`MAX_COUNT`;
    empty and ``N/A`` are None; ``12x``, ``-192`` or ``1e9`` are a :class:`ParseError`,
    never their leading digits."""
    if text is None:
        return None
    if text.isdigit() and text.isascii() and len(text) < 10:
        return int(text)
    t = text.strip()
    if t.lower() in ("n/a", "(null)", "none"):
        return None
    if not t:  # squeue prints a count or N/A: an empty one lost its value
        raise ParseError(f"{what}: empty")
    m = _COUNT.fullmatch(t)
    if m is None or not t.isascii():
        raise ParseError(f"{what}: expected a number, got {snippet(t)}")
    n = int(m.group(1))
    if n > MAX_COUNT:
        raise ParseError(f"{what}: {n} is out of range (at most {MAX_COUNT})")
    return n


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


_ESTIMATED = frozenset({"pending", "requeued"})


TRUSTED_JOB = JOBS


def _trusted_job(data: dict[str, Any]) -> JobRecord:
    """A JobRecord from values this module has already checked (types, ranges, literals).

    Like ``model_construct`` (which is slower than validating here) it skips validation;
    tests compare its results with ``model_validate`` on every fixture.
    """
    return TRUSTED_JOB.mapping(data)


def with_start_time(job: JobRecord, start: datetime | None) -> JobRecord:
    """``job`` with another start time (Slurm's estimate), without re-validating it."""
    data = dict(job.__dict__)
    data["start_time"] = start
    return TRUSTED_JOB.mapping(data)


def count_states(jobs: Iterable[JobRecord]) -> dict[str, int]:
    out: dict[str, int] = {}
    for j in jobs:
        out[j.state] = out.get(j.state, 0) + 1
    return out
