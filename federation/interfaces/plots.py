"""Figures for notebooks and reports (matplotlib; no pyplot state, any backend).

- :func:`plot_capacity`: idle vs total GPUs and CPUs, and pending jobs, per site over time
  (from :meth:`Telemetry.frame <federation.runtime.telemetry.Telemetry.frame>`), like Fig. 1 of the
  Diamond Agent paper.
- :func:`plot_timeline`: one Gantt row per task: queued, then running, then completed or
  failed, colored by site; re-placements drawn as arrows.
- :func:`plot_predicted_vs_actual`: each task's predicted wait against its actual queue wait,
  with the y = x line.

Every figure colours a site with :func:`site_colour` (one colour per site name, the same in
every figure). Each returns a :class:`matplotlib.figure.Figure`; save it with
``fig.savefig(path)`` or show it as a notebook cell's value.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from federation.runtime.events import Event
from federation.runtime.handles import TaskHandle, TaskResult

__all__ = [
    "KNOWN_SITES",
    "plot_capacity",
    "plot_predicted_vs_actual",
    "plot_timeline",
    "site_colors",
    "site_colour",
]

_PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
KNOWN_SITES = ("delta", "deltaai", "anvil", "vista", "local")
"""The federation's sites, which take the first palette colours in this order."""


def site_colour(site: str) -> str:
    """The colour of ``site`` in every figure: a fixed palette slot for each known site
    (:data:`KNOWN_SITES`), and for any other a slot of the rest chosen from its name alone
    (a stable hash), so a site looks the same whichever other sites a figure shows."""
    if site in KNOWN_SITES:
        return _PALETTE[KNOWN_SITES.index(site)]
    spare = len(_PALETTE) - len(KNOWN_SITES)
    return _PALETTE[len(KNOWN_SITES) + zlib.crc32(site.encode()) % spare]


def site_colors(sites: Iterable[str]) -> dict[str, str]:
    """:func:`site_colour` of each site, sorted by name (a figure's legend order)."""
    return {s: site_colour(s) for s in sorted(set(sites))}


# --- capacity over time ----------------------------------------------------------------------
def capacity_by_site(telemetry_frame: pd.DataFrame) -> pd.DataFrame:
    """Sum partition rows per (site, snapshot time): CPUs/GPUs total and idle, jobs pending."""
    cols = ["site", "taken_at", "cpus_total", "cpus_idle", "gpus_total", "gpus_idle", "pending"]
    if telemetry_frame.empty or "partition" not in telemetry_frame:
        return pd.DataFrame(columns=cols)
    df = telemetry_frame[telemetry_frame["partition"].notna()].copy()
    if df.empty:
        return pd.DataFrame(columns=cols)
    df["taken_at"] = pd.to_datetime(df["taken_at"], utc=True)
    df["gpus_idle"] = df["gpus_total"].fillna(0) - df["gpus_alloc"].fillna(0)
    agg = (
        df.groupby(["site", "taken_at"], as_index=False)
        .agg(
            cpus_total=("cpus_total", "sum"),
            cpus_idle=("cpus_idle", "sum"),
            gpus_total=("gpus_total", "sum"),
            gpus_idle=("gpus_idle", "sum"),
            pending=("jobs_pending", "sum"),
        )
        .sort_values(["site", "taken_at"])
    )
    return agg[cols].reset_index(drop=True)


def plot_capacity(telemetry_frame: pd.DataFrame, *, title: str | None = None) -> Figure:
    """Idle vs total GPUs (top) and CPUs (middle), and pending jobs (bottom), per site.

    Solid lines are totals, dashed lines idle capacity; time is since the first snapshot,
    in seconds, minutes or hours depending on the span. Each panel has one line per site
    (two in the capacity panels).
    """
    agg = capacity_by_site(telemetry_frame)
    fig = Figure(figsize=(9, 8), layout="constrained")
    ax_gpu, ax_cpu, ax_pend = fig.subplots(3, 1, sharex=True)
    sites = sorted(agg["site"].unique()) if not agg.empty else []
    colors = site_colors(sites)
    t0 = agg["taken_at"].min() if not agg.empty else None
    span_s = (agg["taken_at"].max() - t0).total_seconds() if t0 is not None else 0.0
    unit, per = (
        ("s", 1.0) if span_s <= 300 else ("min", 60.0) if span_s <= 5 * 3600 else ("h", 3600.0)
    )
    for site in sites:
        d = agg[agg["site"] == site]
        x = (d["taken_at"] - t0).dt.total_seconds() / per
        c = colors[site]
        # steps: a snapshot's values hold until the next one
        kw: dict[str, Any] = {"color": c, "lw": 1.5, "drawstyle": "steps-post"}
        ax_gpu.plot(x, d["gpus_total"], label=f"{site} total", **kw)
        ax_gpu.plot(x, d["gpus_idle"], ls="--", label=f"{site} idle", **kw)
        ax_cpu.plot(x, d["cpus_total"], label=f"{site} total", **kw)
        ax_cpu.plot(x, d["cpus_idle"], ls="--", label=f"{site} idle", **kw)
        ax_pend.plot(x, d["pending"], label=site, **kw)
    ax_gpu.set_ylabel("GPUs")
    ax_gpu.set_title("GPUs: total (solid) and idle (dashed)", loc="left", fontsize=10)
    ax_cpu.set_ylabel("CPU cores")
    ax_cpu.set_title("CPU cores: total (solid) and idle (dashed)", loc="left", fontsize=10)
    ax_pend.set_ylabel("pending jobs")
    ax_pend.set_title("Pending jobs", loc="left", fontsize=10)
    ax_pend.set_xlabel(f"time since first snapshot ({unit})")
    for ax in (ax_gpu, ax_cpu, ax_pend):
        ax.grid(True, alpha=0.3)
        ax.set_ylim(0, max(1.0, ax.get_ylim()[1]))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if sites:
        ax_pend.legend(title="site", loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    start = "" if t0 is None else f" from {t0:%Y-%m-%d %H:%M:%S} UTC"
    fig.suptitle(title or f"Federation capacity and queues over time{start}")
    return fig


# --- task timeline -----------------------------------------------------------------------------
@dataclass(frozen=True)
class _Row:
    label: str
    task_id: str
    site: str
    status: str
    submitted_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    events: tuple[Event, ...]


def _as_row(obj: Any) -> _Row:
    if hasattr(obj, "handle") and isinstance(obj.handle, TaskHandle):  # a TaskFuture
        obj = obj.handle
    if isinstance(obj, TaskHandle):
        return _Row(
            obj.label,
            obj.id,
            obj.site,
            obj.state,
            obj.submitted_at,
            obj.started_at,
            obj.completed_at,
            tuple(obj.bus.history(obj.id)),
        )
    if isinstance(obj, TaskResult):
        return _Row(
            obj.label,
            obj.task_id,
            obj.site,
            obj.status,
            obj.submitted_at,
            obj.started_at,
            obj.completed_at,
            obj.events,
        )
    raise TypeError(f"expected a TaskHandle, TaskResult or TaskFuture, got {type(obj).__name__}")


def _replacements(events: Sequence[Event]) -> list[tuple[datetime, str | None, str | None]]:
    """(time, from site, to site) of each re-placement event."""
    out = []
    for e in events:
        kind = str(e.kind)
        if "replaced" in kind or "retried" in kind or "replaced_from" in e.detail:
            src = e.detail.get("replaced_from") or e.detail.get("from_site")
            dst = e.detail.get("to_site") or e.site
            out.append((e.at, None if src is None else str(src), None if dst is None else str(dst)))
    return out


def plot_timeline(
    handles_or_results: Iterable[Any], *, now: datetime | None = None, title: str | None = None
) -> Figure:
    """A Gantt chart: one row per task, a light bar while queued, a solid bar while running.

    Bars are colored by site; a failed task's running bar is hatched and ends in an ``x``;
    a task still queued or running extends to ``now`` (default: the latest event). A
    re-placement (an event whose kind contains ``replaced`` or ``retried``, or whose detail
    has ``replaced_from``; the old site from ``replaced_from``/``from_site``, the new one from
    ``to_site`` or the event's site) splits the queued bar at that moment, colors each part
    by its site and is drawn as an arrow labeled ``old -> new``.
    """
    rows = [_as_row(o) for o in handles_or_results]
    rows.sort(key=lambda r: r.submitted_at)
    sites: set[str] = {r.site for r in rows}
    for r in rows:
        for _, src, dst in _replacements(r.events):
            sites.update(s for s in (src, dst) if s)
    colors = site_colors(sites)
    height = max(2.5, 0.5 * len(rows) + 1.5)
    fig = Figure(figsize=(10, height), layout="constrained")
    ax = fig.subplots()
    if not rows:
        ax.set_title(title or "Task timeline (no tasks)")
        ax.set_xlabel("seconds since first submission")
        return fig
    t0 = rows[0].submitted_at
    stamps = [e.at for r in rows for e in r.events] + [
        t for r in rows for t in (r.started_at, r.completed_at) if t is not None
    ]
    end_default = now or max([*stamps, t0])

    def sec(t: datetime) -> float:
        return (t - t0).total_seconds()

    for y, r in enumerate(rows):
        start_q = sec(r.submitted_at)
        end_q = sec(r.started_at or r.completed_at or end_default)
        moves = _replacements(r.events)
        # queued part(s): split at re-placements
        cuts = [start_q] + [sec(t) for t, _, _ in moves] + [end_q]
        seg_sites = [(moves[0][1] if moves and moves[0][1] else r.site)] + [
            dst or r.site for _, _, dst in moves
        ]
        for i, site in enumerate(seg_sites):
            a, b = cuts[i], max(cuts[i], cuts[i + 1])
            ax.barh(y, b - a, left=a, height=0.5, color=colors[site], alpha=0.3, edgecolor="none")
        for t, src, dst in moves:
            x = sec(t)
            ax.annotate(
                "",
                xy=(x, y - 0.38),
                xytext=(x, y + 0.38),
                arrowprops={"arrowstyle": "->", "color": "black", "lw": 1.2},
            )
            ax.text(x, y + 0.42, f"{src or '?'} -> {dst or r.site}", fontsize=7, ha="center")
        if r.started_at is not None:
            run_end = sec(r.completed_at or end_default)
            a = sec(r.started_at)
            failed = r.status == "failed"
            ax.barh(
                y,
                max(0.0, run_end - a),
                left=a,
                height=0.5,
                color=colors[r.site],
                hatch="//" if failed else None,
                edgecolor="black" if failed else colors[r.site],
            )
        if r.status == "failed" and r.completed_at is not None:
            ax.plot([sec(r.completed_at)], [y], marker="x", color="black", ms=9, mew=2, ls="none")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r.label} ({r.task_id[:6]})" for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since first submission")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_xlim(left=0)
    handles: list[Any] = [Patch(color=c, label=s) for s, c in colors.items()]
    handles += [
        Patch(facecolor="grey", alpha=0.3, label="queued"),
        Patch(facecolor="grey", label="running"),
        Patch(facecolor="white", edgecolor="black", hatch="//", label="failed"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    ax.set_title(title or "Task timeline: queued (light) -> running (solid), by site")
    return fig


# --- predicted vs actual wait -----------------------------------------------------------------
def _as_result(obj: Any) -> TaskResult | None:
    if hasattr(obj, "handle") and isinstance(obj.handle, TaskHandle):
        obj = obj.handle
    if isinstance(obj, TaskHandle):
        return obj.manifest() if obj.done else None
    if isinstance(obj, TaskResult):
        return obj
    raise TypeError(f"expected a TaskResult, TaskHandle or TaskFuture, got {type(obj).__name__}")


def plot_predicted_vs_actual(results: Iterable[Any], *, title: str | None = None) -> Figure:
    """Predicted wait (placement's ``predicted_wait_s``) vs actual queue wait, per task.

    One scatter per site; tasks that never started (no queue wait) are left out and
    counted in the title. Points above the dashed y = x line waited longer than predicted.
    """
    res = [r for r in (_as_result(o) for o in results) if r is not None]
    pts = [
        (r.decision.chosen.predicted_wait_s, r.queue_wait_s, r.site, r.label)
        for r in res
        if r.queue_wait_s is not None
    ]
    skipped = len(res) - len(pts)
    fig = Figure(figsize=(6.5, 6), layout="constrained")
    ax = fig.subplots()
    colors = site_colors(p[2] for p in pts)
    for site, c in colors.items():
        mine = [p for p in pts if p[2] == site]
        ax.scatter([p[0] for p in mine], [p[1] for p in mine], color=c, s=45, label=site, zorder=3)
    top = max([1.0] + [max(p[0], p[1]) for p in pts]) * 1.1
    # labels: nudge up (with a leader line) where they would overlap a neighbour's
    gap = 0.04 * top
    placed: list[tuple[float, float]] = []
    for x, y, _, label in sorted(pts, key=lambda p: (p[1], p[0])):
        ly = y
        for px, py in sorted(placed, key=lambda q: q[1]):  # ascending: one pass suffices
            if abs(px - x) < 0.25 * top and abs(py - ly) < 0.999 * gap:
                ly = py + gap
        placed.append((x, ly))
        ax.annotate(
            label,
            (x, y),
            xytext=(x + 0.02 * top, ly + 0.01 * top),
            fontsize=8,
            arrowprops={"arrowstyle": "-", "color": "grey", "lw": 0.5} if ly != y else None,
        )
    ax.plot([0, top], [0, top], ls="--", color="grey", lw=1, label="y = x")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_aspect("equal", adjustable="box")
    ax.set_xlabel("predicted wait (s)")
    ax.set_ylabel("actual queue wait (s)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    note = f" ({skipped} never started)" if skipped else ""
    ax.set_title(title or f"Predicted vs actual queue wait, {len(pts)} tasks{note}")
    return fig
