"""``squeue --json`` (21.08 openapi v0.0.37 through data_parser v0.0.4x) -> :class:`JobRecord`."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from federation.core.errors import ParseError
from federation.core.snapshot import JobRecord
from federation.parsing.common import (
    MAX_COUNT,
    field_errors,
    json_int,
    json_name,
    json_objects,
    json_str,
)
from federation.parsing.common import (
    job_id as check_job_id,
)
from federation.parsing.hostlist import expand_hostlist
from federation.parsing.squeue_fields import _NO_NODES, _gpus
from federation.parsing.states import parse_job_state
from federation.parsing.times import epoch, parse_memory

__all__ = ["parse_squeue_json"]


def _json_job_id(j: Mapping[str, Any], where: str) -> str:
    job_id = json_int(j.get("job_id"), f"{where} job_id", MAX_COUNT)
    if job_id is None:
        raise ParseError(f"{where}: job without job_id")
    array_job = json_int(j.get("array_job_id"), f"{where} array_job_id", MAX_COUNT) or 0
    if array_job:
        task = json_int(j.get("array_task_id"), f"{where} array_task_id", MAX_COUNT)
        if task is not None:
            return f"{array_job}_{task}"
        spec = json_str(j.get("array_task_string"), f"{where} array_task_string")
        if spec:
            return check_job_id(f"{array_job}_[{spec}]", f"{where} array_task_string")
    return str(job_id)


def _time(j: Mapping[str, Any], key: str, where: str) -> datetime | None:
    if key in j and j[key] is None:  # Slurm writes 0 for no time, never null
        raise ParseError(f"{where} {key}: null where a time belongs")
    return epoch(json_int(j.get(key), f"{where} {key}"), f"{where} {key}")  # whole seconds


def _json_job(j: Mapping[str, Any], where: str) -> JobRecord:
    raw_state = j.get("job_state")
    if isinstance(raw_state, list) and not all(isinstance(s, str) for s in raw_state):
        raise ParseError(f"{where} job_state: expected names, got {raw_state!r}"[:120])
    reason = json_str(j.get("state_reason"), f"{where} state_reason")
    state = parse_job_state(
        [str(s) for s in raw_state] if isinstance(raw_state, list) else json_str(raw_state),
        reason,
    )
    nodes = json_int(j.get("node_count"), f"{where} node_count", MAX_COUNT) or 1
    cpus = json_int(j.get("cpus"), f"{where} cpus", MAX_COUNT)
    tasks = json_int(j.get("tasks"), f"{where} tasks", MAX_COUNT)
    tres_text = json_str(j.get("tres_alloc_str"), f"{where} tres_alloc_str") or json_str(
        j.get("tres_req_str"), f"{where} tres_req_str"
    )
    gpus, gpu_type, tres = _gpus(
        tres_text,
        json_str(j.get("tres_per_job"), f"{where} tres_per_job"),
        json_str(j.get("tres_per_node"), f"{where} tres_per_node"),
        json_str(j.get("tres_per_task"), f"{where} tres_per_task"),
        nodes,
        tasks,
    )
    mem_mb: int | None = None
    per_node = json_int(j.get("memory_per_node"), f"{where} memory_per_node")
    per_cpu = json_int(j.get("memory_per_cpu"), f"{where} memory_per_cpu")
    if "mem" in tres:
        total_mem, _ = parse_memory(tres["mem"])
        if total_mem is not None:
            mem_mb = total_mem // max(1, nodes)
    elif per_node:
        mem_mb = per_node
    elif per_cpu and cpus:
        mem_mb = per_cpu * cpus // max(1, nodes)
    limit_min = json_int(j.get("time_limit"), f"{where} time_limit", MAX_COUNT)
    priority = json_int(j.get("priority"), f"{where} priority")
    data: dict[str, Any] = {
        "job_id": _json_job_id(j, where),
        "partition": json_name(j.get("partition"), f"{where} partition") or "",
        "state": state,
        "reason": reason,
        "user": json_name(j.get("user_name"), f"{where} user_name"),
        "name": json_str(j.get("name"), f"{where} name"),
        "nodes": nodes,
        "cpus": 1 if cpus is None else cpus,
        "mem_mb": mem_mb,
        "gpus": gpus,
        "gpu_type": gpu_type,
        "time_limit_s": None if limit_min is None else limit_min * 60,
        "submit_time": _time(j, "submit_time", where),
        "start_time": _time(j, "start_time", where),
        "end_time": _time(j, "end_time", where),
        "priority": priority,
        "node_names": ()
        if state in _NO_NODES
        else tuple(expand_hostlist(json_name(j.get("nodes"), f"{where} nodes"))),
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
    out: list[JobRecord] = []
    seen: dict[str, int] = {}
    for i, j in enumerate(jobs):
        where = f"squeue JSON jobs[{i}]"
        with field_errors(where):
            job = _json_job(j, where)
        first = seen.setdefault(job.job_id, i)
        if first != i:
            raise ParseError(
                f"{where}: job {job.job_id} is listed twice (first as jobs[{first}]): "
                "duplicated output"
            )
        out.append(job)
    return out
