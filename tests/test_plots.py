"""Figures: rendered to PNG, checked for what they draw (axes, lines, bars, points, labels)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest
from inprocess import idle_snapshot, inprocess_coordinator
from matplotlib.figure import Figure

from federation.core.envelope import ResourceEnvelope
from federation.core.snapshot import FederationSnapshot
from federation.core.spec import load_sites
from federation.interfaces.jupyter.executor import FederatedExecutor
from federation.interfaces.plots import (
    capacity_by_site,
    plot_capacity,
    plot_predicted_vs_actual,
    plot_timeline,
    site_colors,
    site_colour,
)
from federation.parsing.snapshot_builder import unreachable_snapshot
from federation.runtime.events import Event
from federation.runtime.handles import TaskResult
from federation.runtime.telemetry import Telemetry

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def square(x: int) -> int:
    return x * x


def explode(msg: str) -> None:
    raise ValueError(msg)


def _png(fig: Figure, path: Path) -> None:
    fig.savefig(path, dpi=60)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _busy(snap: FederationSnapshot, k: int) -> FederationSnapshot:
    """``k`` CPUs allocated and ``k`` jobs pending in every partition."""
    sites = []
    for s in snap.sites:
        parts = tuple(
            p.model_copy(update={"cpus_alloc": k, "cpus_idle": p.cpus_total - k, "jobs_pending": k})
            for p in s.partitions
        )
        sites.append(s.model_copy(update={"partitions": parts}))
    return snap.model_copy(update={"sites": tuple(sites)})


def test_capacity_figure_has_three_panels_and_a_line_per_site(tmp_path: Path) -> None:
    specs = load_sites(["local", "delta", "vista"])
    tel = Telemetry(":memory:")
    for i in range(4):
        tel.record(_busy(idle_snapshot(specs, T0 + timedelta(minutes=i)), i))
    tel.record(
        FederationSnapshot(taken_at=T0, sites=(unreachable_snapshot("anvil", "down", now=T0),))
    )
    frame = tel.frame()
    agg = capacity_by_site(frame)
    assert sorted(agg["site"].unique()) == ["delta", "local", "vista"]  # the down site drops
    local = agg[agg["site"] == "local"]
    assert list(local["pending"]) == [0, 2, 4, 6]  # 2 partitions x i pending
    assert list(local["cpus_idle"]) == [24 - 2 * i for i in range(4)]
    fig = plot_capacity(frame)
    _png(fig, tmp_path / "capacity.png")
    ax_gpu, ax_cpu, ax_pend = fig.axes[:3]
    assert len(fig.axes) == 3
    assert len(ax_gpu.lines) == 6 and len(ax_cpu.lines) == 6 and len(ax_pend.lines) == 3
    assert [ln.get_label() for ln in ax_pend.lines] == ["delta", "local", "vista"]
    assert ax_gpu.get_ylabel() == "GPUs" and ax_pend.get_ylabel() == "pending jobs"
    assert ax_pend.get_xlabel() == "time since first snapshot (s)"  # a 3-minute span
    dashed = [ln for ln in ax_cpu.lines if ln.get_linestyle() == "--"]
    assert len(dashed) == 3  # idle lines
    assert list(ax_pend.lines[1].get_ydata()) == [0, 2, 4, 6]


def test_capacity_of_empty_telemetry_is_an_empty_figure(tmp_path: Path) -> None:
    import pandas as pd

    fig = plot_capacity(pd.DataFrame())
    _png(fig, tmp_path / "empty.png")
    assert len(fig.axes) == 3 and not fig.axes[0].lines


@pytest.fixture(scope="module")
def results() -> list[TaskResult]:
    coord = inprocess_coordinator()
    with FederatedExecutor(coord) as ex:
        futs = [
            ex.submit(square, 2, envelope=ResourceEnvelope(sites=("local",), walltime_s=300)),
            ex.submit(square, 3, envelope=ResourceEnvelope(sites=("delta",), walltime_s=300)),
            ex.submit(explode, "no rows", envelope=ResourceEnvelope(sites=("local",))),
        ]
        out = [f.manifest(timeout=10) for f in futs]
    coord.close()
    return out


def test_timeline_draws_queued_and_running_bars_per_task(
    results: list[TaskResult], tmp_path: Path
) -> None:
    fig = plot_timeline(results)
    _png(fig, tmp_path / "timeline.png")
    (ax,) = fig.axes
    assert len(ax.patches) == 6  # queued + running bar for each of the 3 tasks
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert [lb.split(" (")[0] for lb in labels] == ["square", "square", "explode"]
    failed_marks = [ln for ln in ax.lines if ln.get_marker() == "x"]
    assert len(failed_marks) == 1
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"delta", "local", "queued", "running", "failed"} <= set(legend)
    colors = {p.get_facecolor()[:3] for p in ax.patches}
    assert len(colors) == 2  # one per site
    assert ax.get_xlabel() == "seconds since first submission"


def test_timeline_draws_replacements_as_arrows(results: list[TaskResult], tmp_path: Path) -> None:
    r = results[0]
    queued = r.events[0]
    moved = Event(
        seq=queued.seq,
        kind="task.queued",
        task_id=r.task_id,
        site="local",
        at=queued.at + (r.started_at - queued.at) / 2,  # type: ignore[operator]
        detail={"replaced_from": "delta"},
    )
    fig = plot_timeline([r.model_copy(update={"events": (*r.events, moved)})])
    _png(fig, tmp_path / "replaced.png")
    (ax,) = fig.axes
    assert len(ax.patches) == 3  # queued at delta, queued at local, running at local
    texts = [t.get_text() for t in ax.texts]
    assert "delta -> local" in texts
    arrows = [t for t in ax.texts if getattr(t, "arrow_patch", None) is not None]
    assert len(arrows) == 1


def test_predicted_vs_actual_has_a_point_per_started_task_and_the_diagonal(
    results: list[TaskResult], tmp_path: Path
) -> None:
    fig = plot_predicted_vs_actual(results)
    _png(fig, tmp_path / "pva.png")
    (ax,) = fig.axes
    assert len(ax.collections) == 2  # one scatter per site
    n_points = sum(len(c.get_offsets()) for c in ax.collections)
    assert n_points == 3
    diag = [ln for ln in ax.lines if ln.get_label() == "y = x"]
    assert len(diag) == 1
    x, y = diag[0].get_data()
    assert list(x) == list(y)
    assert ax.get_xlabel() == "predicted wait (s)"
    assert ax.get_ylabel() == "actual queue wait (s)"
    assert "3 tasks" in ax.get_title()


def test_plots_reject_other_objects() -> None:
    with pytest.raises(TypeError, match="TaskHandle"):
        plot_timeline([object()])


def test_overlapping_labels_are_stacked_not_looped(results: list[TaskResult]) -> None:
    fig = plot_predicted_vs_actual([results[0]] * 6)
    (ax,) = fig.axes
    assert sum(len(c.get_offsets()) for c in ax.collections) == 6
    ys = sorted(t.get_position()[1] for t in ax.texts)
    assert all(b > a for a, b in pairwise(ys))  # each label above the last


def test_timeline_treats_a_retry_on_another_site_as_a_replacement(
    results: list[TaskResult],
) -> None:
    r = results[1]  # ran on delta
    retried = Event.model_construct(  # kind may be newer than this test
        seq=99,
        kind="task.retried",
        task_id=r.task_id,
        site="delta",
        at=r.submitted_at + (r.started_at - r.submitted_at) / 3,  # type: ignore[operator]
        detail={"from_site": "local", "to_site": "delta", "failure": "endpoint_lost"},
    )
    fig = plot_timeline([r.model_copy(update={"events": (*r.events, retried)})])
    (ax,) = fig.axes
    assert "local -> delta" in [t.get_text() for t in ax.texts]
    assert len(ax.patches) == 3


def test_each_site_has_one_colour_in_every_figure(results: list[TaskResult]) -> None:
    from matplotlib.colors import to_hex

    known = ["delta", "deltaai", "anvil", "vista", "local"]
    assert len({site_colour(s) for s in known}) == len(known)  # known sites never clash
    assert site_colour("delta") == site_colour("delta") and site_colour("zeus") == site_colour(
        "zeus"
    )
    assert site_colour("zeus") not in {site_colour(s) for s in known}
    # the same colour whichever other sites a figure shows
    assert site_colors(["local"])["local"] == site_colors(["anvil", "delta", "local"])["local"]
    legend = plot_timeline(results).axes[0].get_legend()
    assert legend is not None
    bars = {
        t.get_text(): to_hex(h.get_facecolor())  # type: ignore[union-attr]
        for t, h in zip(legend.get_texts(), legend.legend_handles, strict=True)
    }
    scatter = plot_predicted_vs_actual(results).axes[0]
    points = {c.get_label(): to_hex(c.get_facecolor()[0]) for c in scatter.collections}  # type: ignore[arg-type]
    for site in ("local", "delta"):
        assert bars[site] == points[site] == site_colour(site)
