"""DataFrames that read well in a notebook: partitions, events, tasks and envelopes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from federation.core.envelope import ResourceEnvelope, envelope_rows
from federation.core.snapshot import FederationSnapshot
from federation.interfaces.service.models import TaskStatus
from federation.placement.drafting import EnvelopeDraft
from federation.runtime.events import Event
from federation.runtime.handles import TaskHandle, TaskResult

__all__ = ["envelope_frame", "envelope_rows", "events_frame", "partitions_table", "tasks_frame"]


def _utc_naive(series: pd.Series) -> pd.Series:
    s = pd.to_datetime(series, utc=True)
    return s.dt.tz_convert(None).dt.floor("ms")


def partitions_table(snap: FederationSnapshot) -> pd.DataFrame:
    """``partitions_frame`` with readable column names and units, indexed by site/partition."""
    rows = []
    for s in snap.sites:
        status = "ok" if s.health.reachable else f"down: {s.health.error}"
        for p in s.partitions:
            gt = sum(p.gpus_total_by_type.values())
            rows.append(
                {
                    "site": s.site,
                    "partition": p.partition,
                    "status": status if p.state == "up" else p.state,
                    "nodes": p.nodes_total,
                    "CPUs idle": p.cpus_idle,
                    "CPUs total": p.cpus_total,
                    "GPUs idle": sum(p.gpus_idle_by_type.values()),
                    "GPUs total": gt,
                    "GPU type": ",".join(sorted(p.gpus_total_by_type)) or "-",
                    "memory free (GB)": round(p.mem_gb_total - p.mem_gb_alloc, 1),
                    "memory total (GB)": round(p.mem_gb_total, 1),
                    "jobs running": p.jobs_running,
                    "jobs pending": p.jobs_pending,
                    "max walltime (h)": None if p.max_time_s is None else p.max_time_s / 3600,
                    "probe age (s)": round(s.health.probe_age_s, 2),
                }
            )
        if not s.partitions:
            rows.append({"site": s.site, "partition": "-", "status": status})
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    return frame.set_index(["site", "partition"])


def events_frame(events: Sequence[Event], labels: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One row per event: time (UTC), seconds since the first, task, event, site, details."""
    labels = labels or {}
    columns = ["seq", "time (UTC)", "t (s)", "task", "task id", "event", "site", "details"]
    if not events:
        return pd.DataFrame(columns=columns)
    t0 = min(e.at for e in events)
    rows = [
        {
            "seq": e.seq,
            "time (UTC)": e.at,
            "t (s)": round((e.at - t0).total_seconds(), 2),
            "task": labels.get(e.task_id, ""),
            "task id": e.task_id[:8],
            "event": e.kind.removeprefix("task."),
            "site": e.site or "",
            "details": ", ".join(f"{k}={v}" for k, v in e.detail.items()),
        }
        for e in events
    ]
    frame = pd.DataFrame(rows, columns=columns)
    frame["time (UTC)"] = _utc_naive(frame["time (UTC)"])
    return frame.set_index("seq")


def tasks_frame(tasks: Sequence[TaskHandle | TaskResult | TaskStatus]) -> pd.DataFrame:
    """One row per task: where it ran, predicted and actual wait, runtime and outcome."""
    rows = []
    for t in tasks:
        if isinstance(t, TaskHandle):
            task_id, state = t.id, t.state
            started, completed, submitted = t.started_at, t.completed_at, t.submitted_at
            job, error, compute_id = t.slurm_job_id, t.error, t.compute_task_id
        elif isinstance(t, TaskStatus):
            task_id, state = t.task_id, t.state
            started, completed, submitted = t.started_at, t.completed_at, t.submitted_at
            job, compute_id = t.slurm_job_id, t.compute_task_id
            error = t.result.error if t.result is not None else None
        else:
            task_id, state = t.task_id, t.status
            started, completed, submitted = t.started_at, t.completed_at, t.submitted_at
            job, error, compute_id = t.slurm_job_id, t.error, t.compute_task_id
        wait = None if started is None else max(0.0, (started - submitted).total_seconds())
        run = None
        if completed is not None:
            run = (completed - (started or submitted)).total_seconds()
        shape = t.decision.chosen.shape
        rows.append(
            {
                "task": t.label,
                "task id": task_id[:8],
                "state": state,
                "site": shape.site,
                "partition": shape.partition,
                "CPUs": shape.cpus,
                "memory (GB)": shape.mem_gb,
                "GPUs": shape.gpus,
                "GPU type": shape.gpu_type or "-",
                "predicted wait (s)": round(t.decision.chosen.predicted_wait_s, 1),
                "queue wait (s)": None if wait is None else round(wait, 1),
                "runtime (s)": None if run is None else round(run, 1),
                "Slurm job": job or "",
                "Globus Compute task": compute_id or "",
                "error": error or "",
            }
        )
    return pd.DataFrame(rows)


def envelope_frame(draft: EnvelopeDraft | ResourceEnvelope) -> pd.DataFrame:
    """An envelope's bounds with the rationale for each, indexed by bound."""
    env = draft.envelope if isinstance(draft, EnvelopeDraft) else draft
    why = env.rationale
    rows = []
    for bound, value in envelope_rows(env):
        key = bound.removesuffix("_min")
        rows.append(
            {"bound": bound, "value": value, "rationale": why.get(bound) or why.get(key) or ""}
        )
    return pd.DataFrame(rows).set_index("bound")
