"""``squeue --start`` -> Slurm's start estimate per pending job.

``squeue --start`` ignores ``-O``, so the probe uses ``-o`` %-codes (:data:`START_CODES`) with
the same 0x1F/0x1E delimiters as its other commands. The default human format
(``JOBID PARTITION NAME USER ST START_TIME NODES SCHEDNODES NODELIST(REASON)``) is read too,
as a third-party format: lines that do not fit are skipped and counted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from federation.core.errors import ParseError
from federation.core.gcpause import gc_paused
from federation.parsing.common import (
    RowWarnings,
    as_text,
    clean,
    cut_line,
    snippet,
    split_records,
)
from federation.parsing.common import job_id as check_job_id
from federation.parsing.states import JOB_STATE_TABLE
from federation.parsing.times import parse_timestamp, zone_suffix

START_CODES: tuple[tuple[str, str], ...] = (
    ("%i", "JobArrayID"),
    ("%P", "Partition"),
    ("%S", "StartTime"),
    ("%Y", "SchedNodes"),
    ("%r", "Reason"),
)
"""The probe's ``squeue --start -o`` codes and the field names it records for them."""
START_FIELDS: tuple[str, ...] = tuple(name for _, name in START_CODES)


class StartEstimate(NamedTuple):
    """Slurm's expected start of one pending job (None when it has no estimate yet)."""

    job_id: str
    partition: str
    start_time: datetime | None
    sched_nodes: str | None = None
    reason: str | None = None


def parse_squeue_start(
    stdout: str, fields: Sequence[str] = START_FIELDS, utc_offset_s: float = 0
) -> dict[str, StartEstimate]:
    """The probe's ``squeue --start`` output -> {job id: estimate}; strict like the probe."""
    fields = tuple(fields)
    try:
        i_id = fields.index("JobArrayID")
        i_start = fields.index("StartTime")
    except ValueError:
        raise ParseError(
            f"squeue --start: probe field list {list(fields)} needs JobArrayID and StartTime"
        ) from None
    i_part = fields.index("Partition") if "Partition" in fields else None
    i_nodes = fields.index("SchedNodes") if "SchedNodes" in fields else None
    i_reason = fields.index("Reason") if "Reason" in fields else None
    out: dict[str, StartEstimate] = {}
    suffix = zone_suffix(utc_offset_s)
    # partitions, nodes, reasons and start times repeat across pending jobs: each distinct
    # text is read once and its value shared (a 50 MB queue holds a million estimates)
    parts: dict[str, str] = {}
    nodes_: dict[str, str | None] = {}
    reasons: dict[str, str | None] = {}
    times: dict[str, datetime | None] = {}
    with gc_paused():
        for n, row in enumerate(split_records(stdout, len(fields), "squeue --start"), start=1):
            job_id = row[i_id]
            if not (job_id.isdigit() and len(job_id) < 10 and job_id.isascii()):
                job_id = job_id.strip()
                if not job_id:
                    raise ParseError(f"squeue --start record {n}: empty job id")
                job_id = check_job_id(job_id, f"squeue --start record {n} JOBID")
            if job_id in out:
                raise ParseError(
                    f"squeue --start record {n}: job {job_id} is listed twice: duplicated output"
                )
            text = row[i_start]
            start = times.get(text, _MISS)
            if start is _MISS:
                try:
                    if text == "N/A":
                        start = None
                    elif len(text) == 19 and not utc_offset_s:
                        start = datetime.fromisoformat(text + suffix)
                    else:
                        start = parse_timestamp(text, utc_offset_s)
                except (ParseError, ValueError, OverflowError) as e:
                    raise ParseError(f"squeue --start record {n} (job {job_id}): {e}") from None
                if len(times) < 100_000:
                    times[text] = start
            part = row[i_part] if i_part is not None else None
            nodes = row[i_nodes] if i_nodes is not None else None
            reason = row[i_reason] if i_reason is not None else None
            out[job_id] = StartEstimate(
                job_id,
                _text(parts, part, str.strip) if part is not None else "",
                start,  # type: ignore[arg-type]
                _text(nodes_, nodes, clean),
                _text(reasons, reason, clean),
            )
    return out


_MISS: Any = object()


def _text(memo: dict[str, Any], text: str | None, read: Callable[[str], Any]) -> Any:
    """``read(text)`` (None for None), once per distinct text."""
    if text is None:
        return None
    hit = memo.get(text, _MISS)
    if hit is _MISS:
        hit = read(text)
        if len(memo) < 100_000:
            memo[text] = hit
    return hit


def parse_squeue_start_default(
    text: str | bytes, utc_offset_s: float = 0, warnings: list[str] | None = None
) -> dict[str, StartEstimate]:
    """Default ``squeue --start`` text (whitespace columns with a header) -> estimates.

    Lines that do not have a job state in the ST column and a timestamp (or N/A) in
    START_TIME are skipped, with a note in ``warnings`` (capped per kind).
    """
    notes = RowWarnings()
    out: dict[str, StartEstimate] = {}
    numbered = [
        (n, ln)
        for n, ln in enumerate(as_text(text, "squeue --start", notes).split("\n"), start=1)
        if ln.strip()
    ]
    cut = cut_line(text) if isinstance(text, str) else None
    if cut is not None and numbered and numbered[-1][0] == cut:
        notes.add(
            "cut",
            f"squeue --start line {cut}: output ends without a newline: last line cut "
            f"short; skipped: {snippet(numbered[-1][1])}",
        )
        numbered = numbered[:-1]
    if numbered and numbered[0][1].split()[:1] == ["JOBID"]:
        numbered = numbered[1:]
    for n, line in numbered:
        parts = line.split(None, 8)
        # JOBID PARTITION NAME USER ST START_TIME NODES SCHEDNODES NODELIST(REASON)
        # NAME may hold spaces: locate ST and START_TIME from the right of NAME.
        st_at = next(
            (
                k
                for k in range(3, len(parts) - 1)
                if parts[k].lower() in JOB_STATE_TABLE and k + 1 < len(parts)
            ),
            None,
        )
        if len(parts) < 6 or st_at is None:
            notes.add(
                "not the default format",
                f"squeue --start line {n}: not in the default format: {snippet(line)}",
            )
            continue
        try:
            start = parse_timestamp(parts[st_at + 1], utc_offset_s)
        except ParseError as e:
            notes.add("bad start time", f"squeue --start line {n}: {e}")
            continue
        tail = line.split(None, st_at + 4)
        if parts[0] in out:
            notes.add(
                "duplicate",
                f"squeue --start line {n}: job {parts[0]} is listed twice: duplicated "
                "output; skipped",
            )
            continue
        out[parts[0]] = StartEstimate(
            job_id=parts[0],
            partition=parts[1],
            start_time=start,
            sched_nodes=clean(tail[st_at + 3]) if len(tail) > st_at + 3 else None,
            reason=clean(tail[st_at + 4].strip().strip("()")) if len(tail) > st_at + 4 else None,
        )
    notes.into(warnings)
    return out
