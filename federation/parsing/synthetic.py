"""Synthetic probe results in the probe's exact format, for tests and benchmarks.

:func:`synthetic_probe` builds a whole ``probe_slurm`` result (nodes, a queue of any size,
start estimates, partitions) from a deterministic recipe, so the expected snapshot values
can be computed independently of the parsers (:func:`expected_counts`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from federation.parsing.common import RECORD_SEP, UNIT_SEP
from federation.parsing.sinfo import SINFO_FIELDS
from federation.parsing.squeue import SQUEUE_FIELDS
from federation.parsing.squeue_start import START_CODES, START_FIELDS

PARTITIONS = ("cpu", "gpuA100x4", "gpuH100x4")
REASONS = (
    "Priority",
    "Resources",
    "Dependency",
    "QOSMaxJobsPerUserLimit",
    "ReqNodeNotAvail, UnavailableNodes:gpu[001-002]",
)
BASE = datetime(2026, 3, 10, 12, 0, 0, tzinfo=UTC)


def _ts(dt: datetime | None) -> str:
    return "N/A" if dt is None else dt.strftime("%Y-%m-%dT%H:%M:%S")


def is_running(i: int) -> bool:
    return i % 4 == 0


def job_fields(i: int) -> list[str]:
    """The squeue -O fields of synthetic job ``i`` (deterministic)."""
    part = PARTITIONS[i % len(PARTITIONS)]
    running = is_running(i)
    gpus = 0 if part == "cpu" else 1 + i % 4
    gtype = "a100" if part == "gpuA100x4" else "h100"
    nodes = 1 + (i % 7 == 0)
    cpus = 4 * nodes * (1 + i % 8)
    submit = BASE - timedelta(seconds=i)
    start = submit + timedelta(seconds=30) if running else None
    limit_s = 3600 * (1 + i % 48)
    end = start + timedelta(seconds=limit_s) if start else None
    reason = "None" if running else REASONS[i % len(REASONS)]
    job_id = f"{1000000 + i}" if i % 10 else f"{1000000 + i}_[1-{1 + i % 50}]"
    tres = f"cpu={cpus},mem={8 * nodes}G,node={nodes},billing={cpus}"
    if gpus:
        tres += f",gres/gpu={gpus * nodes},gres/gpu:{gtype}={gpus * nodes}"
    days, rem = divmod(limit_s, 86400)
    limit = (f"{days}-" if days else "") + f"{rem // 3600:02d}:{rem % 3600 // 60:02d}:00"
    return [
        job_id,
        part,
        "RUNNING" if running else "PENDING",
        reason,
        f"user{i % 97}",
        f"job {i} | sweep;{i % 5}",
        str(nodes),
        str(cpus),
        str(nodes),
        "8192M",
        f"gres:gpu:{gtype}:{gpus}" if gpus else "N/A",
        "N/A",
        "N/A",
        tres,
        limit,
        _ts(submit),
        _ts(start),
        _ts(end),
        str(4_000_000_000 - i),
    ]


def start_estimate(i: int) -> datetime | None:
    """Slurm's synthetic estimate for pending job ``i`` (every other pending job has one)."""
    if is_running(i) or i % 2:
        return None
    return BASE + timedelta(minutes=i % 1440)


def squeue_output(n_jobs: int) -> str:
    fields_of = job_fields
    return "".join(UNIT_SEP.join(fields_of(i)) + RECORD_SEP + "\n" for i in range(n_jobs))


def squeue_start_output(n_jobs: int) -> str:
    assert len(START_CODES) == 5
    lines = []
    for i in range(n_jobs):
        if is_running(i):
            continue
        f = job_fields(i)
        est = start_estimate(i)
        lines.append(
            UNIT_SEP.join([f[0], f[1], _ts(est), "gpu001" if est else "(null)", f[3]])
            + RECORD_SEP
            + "\n"
        )
    return "".join(lines)


def node_rows() -> list[list[str]]:
    rows = []
    for k in range(1, 9):
        rows.append(
            [
                f"cpu{k:03d}",
                "cpu*",
                "mixed" if k % 2 else "idle",
                "mixed" if k % 2 else "idle",
                f"{64 if k % 2 else 0}/{64 if k % 2 else 128}/0/128",
                "256000",
                "128000" if k % 2 else "0",
                "(null)",
                "gpu:0",
                "x86_64,milan",
                "none",
            ]
        )
    for part, gtype in (("gpuA100x4", "a100"), ("gpuH100x4", "h100")):
        for k in range(1, 5):
            state = "drained*" if k == 4 else "mixed"
            rows.append(
                [
                    f"{gtype}{k:03d}",
                    part,
                    state,
                    "idle+drain+not_responding" if k == 4 else "mixed",
                    "0/0/64/64" if k == 4 else "32/32/0/64",
                    "512000",
                    "0" if k == 4 else "256000",
                    f"{'gpu'}:{gtype}:4(S:0-1)",
                    f"gpu:{gtype}:0(IDX:N/A)" if k == 4 else f"gpu:{gtype}:2(IDX:0-1)",
                    f"x86_64,{gtype}",
                    "bad gpu | ticket 7" if k == 4 else "none",
                ]
            )
    return rows


def scontrol_output() -> str:
    lines = []
    for name, n, cpus, maxt in (
        ("cpu", 8, 1024, "2-00:00:00"),
        ("gpuA100x4", 4, 256, "1-00:00:00"),
        ("gpuH100x4", 4, 256, "UNLIMITED"),
    ):
        lines.append(
            f"PartitionName={name} AllowGroups=ALL Default={'YES' if name == 'cpu' else 'NO'} "
            f"MaxTime={maxt} Nodes=x[1-{n}] State=UP TotalCPUs={cpus} TotalNodes={n} "
            f"TRES=cpu={cpus},node={n}"
        )
    return "\n".join(lines) + "\n"


def _entry(argv: list[str], stdout: str, fields: tuple[str, ...] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "argv": argv,
        "rc": 0,
        "stdout": stdout,
        "stderr": "",
        "duration_s": 0.01,
        "timed_out": False,
        "error": None,
    }
    if fields is not None:
        entry["fields"] = list(fields)
    return entry


def synthetic_probe(n_jobs: int, started_at: datetime = BASE) -> dict[str, Any]:
    """A complete probe result with ``n_jobs`` queued jobs (see :func:`job_fields`)."""
    sinfo = "".join(UNIT_SEP.join(r) + RECORD_SEP + "\n" for r in node_rows())
    return {
        "probe": "slurm",
        "format": 1,
        "started_at": started_at.isoformat(),
        "hostname": "synthetic",
        "utc_offset_s": 0,
        "timeout_s": 20.0,
        "duration_s": 0.05,
        "version": _entry(["sinfo", "--version"], "slurm 23.02.7\n"),
        "sinfo": _entry(["sinfo", "--noheader", "--Node"], sinfo, SINFO_FIELDS),
        "squeue": _entry(["squeue", "--noheader"], squeue_output(n_jobs), SQUEUE_FIELDS),
        "squeue_start": _entry(
            ["squeue", "--noheader", "--start"], squeue_start_output(n_jobs), START_FIELDS
        ),
        "scontrol_partition": _entry(["scontrol", "--oneliner"], scontrol_output()),
    }


def expected_counts(n_jobs: int) -> dict[str, dict[str, Any]]:
    """Per partition: running, pending, reasons, earliest/latest estimate (from the recipe)."""
    out: dict[str, dict[str, Any]] = {
        p: {"running": 0, "pending": 0, "reasons": {}, "starts": []} for p in PARTITIONS
    }
    for i in range(n_jobs):
        part = PARTITIONS[i % len(PARTITIONS)]
        d = out[part]
        if is_running(i):
            d["running"] += 1
            continue
        d["pending"] += 1
        code = REASONS[i % len(REASONS)].split(",")[0]
        d["reasons"][code] = d["reasons"].get(code, 0) + 1
        est = start_estimate(i)
        if est is not None:
            d["starts"].append(est)
    return out
