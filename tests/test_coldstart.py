"""A cold block's start-up charged in placement; warm blocks draw a batch (issue 33).

Synthetic snapshots (``test_placement``'s helpers): every site idle, so that what decides is
the charge. The runtime's side (:mod:`federation.runtime.warmth`) is checked on the
in-process coordinator, whose sites run tasks on threads and report their starts.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from inprocess import block_coordinator, inprocess_coordinator
from test_placement import NOW, SPECS, _fed, _site_snapshot, _spec

from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.tasks import PythonTask
from federation.placement.coldstart import (
    DEFAULT_COLD_START_S,
    ColdStart,
    ColdStarts,
    WarmBlocks,
)
from federation.placement.learned import LearnedPlacement
from federation.placement.overlay import with_own_jobs
from federation.placement.policies import Policy, get_policy, with_cold_start
from federation.runtime.telemetry import Telemetry
from federation.runtime.warmth import warmth_of

SQUARE = ResourceEnvelope(  # what drafting gives functions.workloads.square
    cpus_min=1, cpus_max=8, mem_gb_min=4, mem_gb_max=16, walltime_s=3600
)


def _auto(step: ColdStart | None = None) -> tuple[Policy, LearnedPlacement]:
    lp = LearnedPlacement(SPECS, hedge=False)
    pol = lp.policy if step is None else with_cold_start(lp.policy, step)
    return pol, lp


def _smallest_at(site: str) -> Shape:
    env = SQUARE.model_copy(update={"sites": (site,)})
    d = _auto()[0].decide(env, SPECS, _fed(), NOW)
    return min((c.shape for c in d.candidates), key=lambda s: (s.cpus, s.mem_gb))


def square(x: int) -> int:
    return x * x


def test_every_cold_candidate_pays_its_sites_figure_and_the_trace_says_so() -> None:
    starts = ColdStarts()
    starts.observe("local", 6.0)  # measured at local and delta; the others take their median
    starts.observe("delta", 30.0)
    pol, _ = _auto(ColdStart(WarmBlocks(), starts))
    d = pol.decide(SQUARE, SPECS, _fed(), NOW)
    assert (d.chosen.site, d.chosen.partition) == ("local", "debug")
    assert d.chosen.cold_start_s == 6.0 and d.chosen.predicted_wait_s == 6.0
    delta = [c for c in d.candidates if c.site == "delta"]
    assert delta and all(c.cold_start_s == c.predicted_wait_s == 30.0 for c in delta)
    others = [c for c in d.candidates if c.site not in ("local", "delta")]
    assert others and all(c.cold_start_s == c.predicted_wait_s == 18.0 for c in others)
    text = d.explain()
    assert "cold start +6 s (no block of this shape here: median of 1 measured here)" in text
    assert "cold start +18 s (no block of this shape here: none measured here: the median" in text
    fresh = _auto(ColdStart(WarmBlocks(), ColdStarts()))[0].decide(SQUARE, SPECS, _fed(), NOW)
    assert "cold start +20 s (no block of this shape here: the default" in fresh.explain()
    plain = _auto()[0].decide(SQUARE, SPECS, _fed(), NOW)  # no charge: the tie-break decides
    assert plain.chosen.site == "delta" and plain.chosen.cold_start_s == 0


def test_a_warm_block_draws_the_task_and_says_so() -> None:
    blocks = WarmBlocks()
    warm = _smallest_at("vista")  # not where the tie-break would send a cold task
    blocks.opened("t1", warm, NOW - timedelta(seconds=9), ready_in_s=8.0, cold=True)
    assert blocks.started("t1", "vista", NOW - timedelta(seconds=2)) == pytest.approx(7.0)
    pol, _ = _auto(ColdStart(blocks, ColdStarts()))
    d = pol.decide(SQUARE, SPECS, _fed(), NOW)
    assert d.chosen.shape == warm
    assert d.chosen.predicted_wait_s == 0 and d.chosen.cold_start_s == 0
    assert d.chosen.why.startswith("warm block: ours, up here (1 task(s) of ours open on it)")
    bigger = [c for c in d.candidates if c.site == "vista" and c.shape != warm]
    assert bigger and all(c.cold_start_s > 0 for c in bigger)  # another shape: a new block


def test_a_starting_block_is_waited_for_until_it_is_predicted_up() -> None:
    blocks = WarmBlocks()
    warm = _smallest_at("anvil")
    blocks.opened("t1", warm, NOW - timedelta(seconds=5), ready_in_s=20.0, cold=True)
    d = _auto(ColdStart(blocks, ColdStarts()))[0].decide(SQUARE, SPECS, _fed(), NOW)
    assert d.chosen.shape == warm
    assert d.chosen.predicted_wait_s == pytest.approx(15.0)  # up 20 s after its shipment
    assert "warm block: ours, starting here (predicted up in 15 s" in d.chosen.why


def test_a_late_starting_block_is_taken_to_need_as_long_again() -> None:
    blocks = WarmBlocks()
    warm = _smallest_at("anvil")
    blocks.opened("t1", warm, NOW - timedelta(seconds=25), ready_in_s=15.0, cold=True)
    pol = _auto(ColdStart(blocks, ColdStarts()))[0]
    d = pol.decide(SQUARE, SPECS, _fed(), NOW)
    assert d.chosen.shape == warm and d.chosen.predicted_wait_s == pytest.approx(10.0)
    assert "starting here (10 s later than predicted" in d.chosen.why
    later = pol.decide(SQUARE, SPECS, _fed(), NOW + timedelta(seconds=15))  # 25 s late
    assert later.chosen.site != "anvil" and later.chosen.cold_start_s == DEFAULT_COLD_START_S


def test_a_starting_block_in_a_full_queue_waits_as_long_as_a_fresh_probe_says() -> None:
    """A group's child queued at a full Delta, judged again on a fresh probe (no jobs of
    ours laid over it): its block waits in that queue, not the 20 s its start was told."""
    blocks = WarmBlocks()
    warm = _smallest_at("delta")
    blocks.opened("t1", warm, NOW - timedelta(seconds=5), ready_in_s=20.0, cold=True)
    full = _fed(delta=_site_snapshot(_spec("delta"), busy={"cpu": 2}, pending={"cpu": 1}))
    env = SQUARE.model_copy(update={"sites": ("delta",)})
    d = _auto(ColdStart(blocks, ColdStarts()))[0].decide(env, SPECS, full, NOW)
    here = next(c for c in d.candidates if c.shape == warm)
    assert here.predicted_wait_s >= 3600 and here.cold_start_s == 0
    assert "starting here (predicted up in 15 s; the queue says" in here.why


def test_our_own_tasks_of_a_warm_shape_are_not_jobs_queued_ahead_of_the_next_one() -> None:
    """Vista's gg lets one user run 20 jobs: laid over the snapshot, 150 calls of a map are
    150 jobs and the twin says the next one waits. They share the shape's blocks: no wait."""
    blocks = WarmBlocks()
    warm = _smallest_at("vista")
    shipped = [(warm, NOW + timedelta(milliseconds=i + 1)) for i in range(150)]
    for i, (_, at) in enumerate(shipped):
        blocks.opened(f"t{i}", warm, at, ready_in_s=20.0, cold=i == 0)
    seen = with_own_jobs(_fed(), shipped)
    at = NOW + timedelta(seconds=1)
    plain = _auto()[0].decide(SQUARE, SPECS, seen, at)
    as_jobs = next(c for c in plain.candidates if c.shape == warm)
    assert as_jobs.predicted_wait_s == 3600  # behind 20 of its own jobs run to their limit
    d = _auto(ColdStart(blocks, ColdStarts()))[0].decide(SQUARE, SPECS, seen, at)
    assert d.chosen.shape == warm and d.chosen.predicted_wait_s == pytest.approx(19.0, abs=0.01)


def test_learned_runtimes_alone_move_a_map_off_its_block_and_the_charge_keeps_it() -> None:
    """How issue 33's map left its first shape: once its first calls ran, the runtime model
    predicts a bigger shape faster (its prior speedup per doubling of CPUs; an untried
    partition is taken 5% faster too), so without a charge for the new block that takes
    each later call goes to a shape of its own."""
    blocks = WarmBlocks()
    step = ColdStart(blocks, ColdStarts())
    pol, lp = _auto(step)
    first = pol.decide(SQUARE, SPECS, _fed(), NOW).chosen.shape
    lp.ran("square", first, 0.4)
    with lp.workload("square"):
        moved = lp.policy.decide(SQUARE, SPECS, _fed(), NOW).chosen
        blocks.opened("t1", first, NOW - timedelta(seconds=30), ready_in_s=20.0, cold=True)
        blocks.started("t1", first.site, NOW - timedelta(seconds=10))
        kept = pol.decide(SQUARE, SPECS, _fed(), NOW).chosen
    assert moved.shape != first and moved.predicted_runtime_s < 0.4
    assert kept.shape == first and kept.predicted_wait_s == pytest.approx(0.4)  # 1 ahead


def test_a_batch_placed_from_one_snapshot_lands_on_one_shape() -> None:
    """100 calls placed as a map is: one snapshot, the earlier calls laid over it as our own
    jobs, each shipment opening (or joining) its shape's block, the first ten having run."""
    fed = _fed()

    def batch(charged: bool) -> Counter[Shape]:
        blocks = WarmBlocks()
        pol, lp = _auto(ColdStart(blocks, ColdStarts()) if charged else None)
        shipped: list[tuple[Shape, datetime]] = []
        where: Counter[Shape] = Counter()
        for i in range(100):
            at = NOW + timedelta(milliseconds=50 * (i + 1))
            with lp.workload("square"):
                c = pol.decide(SQUARE, SPECS, with_own_jobs(fed, shipped), at).chosen
            shipped.append((c.shape, at))
            where[c.shape] += 1
            blocks.opened(
                f"t{i}", c.shape, at, ready_in_s=c.predicted_start_s, cold=c.cold_start_s > 0
            )
            if i < 10:  # the first calls started and ran 0.4 s (learned, as a coordinator does)
                blocks.started(f"t{i}", c.site, at)
                lp.ran("square", c.shape, 0.4)
                blocks.closed(f"t{i}", at)
        return where

    charged = batch(charged=True)
    assert len(charged) == 1 and sum(charged.values()) == 100
    # the same batch without the charge: once the first calls ran, a bigger shape is
    # predicted faster, and the batch opens a block of it (cold) beside the first
    assert len(batch(charged=False)) >= 2


def test_a_backlog_of_long_calls_sends_the_next_one_to_a_cold_site() -> None:
    blocks = WarmBlocks()
    warm = _smallest_at("local")
    for i in range(200):
        blocks.opened(f"t{i}", warm, NOW - timedelta(seconds=60), ready_in_s=1.0, cold=i == 0)
    blocks.started("t0", "local", NOW - timedelta(seconds=50))
    pol, lp = _auto(ColdStart(blocks, ColdStarts()))
    lp.ran("long", warm, 600.0)
    with lp.workload("long"):
        d = pol.decide(SQUARE, SPECS, _fed(), NOW)
    assert d.chosen.site != "local" and d.chosen.cold_start_s == DEFAULT_COLD_START_S
    here = next(c for c in d.candidates if c.shape == warm)
    # 200 calls of 600 s over the 16 one-CPU blocks local/debug holds at once
    assert here.predicted_wait_s == pytest.approx(200 * 600 / 16)
    assert "7500 s of them ahead over 16 block(s)" in here.why


def test_a_block_idles_out_after_the_idle_time() -> None:
    blocks = WarmBlocks(idle_s=5.0)
    shape = _smallest_at("local")
    blocks.opened("a", shape, NOW, ready_in_s=3.0, cold=True)
    st = blocks.state(shape, NOW + timedelta(seconds=1))
    assert st is not None and not st.up and st.ready_in_s == pytest.approx(2.0)
    blocks.started("a", "local", NOW + timedelta(seconds=3))
    blocks.closed("a", NOW + timedelta(seconds=4))
    idle = blocks.state(shape, NOW + timedelta(seconds=8.5))
    assert idle is not None and idle.up and idle.open_tasks == 0
    assert blocks.state(shape, NOW + timedelta(seconds=9.5)) is None  # released


def test_a_shape_whose_block_never_came_up_is_forgotten_when_its_tasks_end() -> None:
    blocks = WarmBlocks()
    shape = _smallest_at("delta")
    blocks.opened("a", shape, NOW, ready_in_s=30.0, cold=True)
    blocks.closed("a", NOW + timedelta(seconds=2))  # cancelled before it started
    assert blocks.state(shape, NOW + timedelta(seconds=3)) is None


def test_tasks_never_heard_of_again_stop_keeping_a_shape_warm_after_its_walltime() -> None:
    blocks = WarmBlocks()
    shape = _smallest_at("delta")  # walltime 3600 s
    blocks.opened("a", shape, NOW, ready_in_s=5.0, cold=True)
    assert blocks.state(shape, NOW + timedelta(seconds=3500)) is not None
    assert blocks.state(shape, NOW + timedelta(seconds=3700)) is None


def test_a_sites_figure_is_the_median_of_its_latest_measured_cold_starts() -> None:
    starts = ColdStarts(default_s=30.0, keep=3)
    assert starts.figure("delta") == (30.0, "the default, none measured here yet")
    for s in (100.0, 4.0, 6.0, 5.0):  # the oldest (100 s) falls out of the last three
        starts.observe("delta", s)
    assert starts.figure("delta") == (5.0, "median of 3 measured here")
    assert starts.figures() == {"delta": 5.0}
    starts.observe("local", 9.0)  # a site measured nowhere else is taken as the others are
    assert starts.figure("vista") == (7.0, "none measured here: the median of 2 other site(s)")


def test_only_a_coordinators_placer_charges_cold_starts_and_only_where_blocks_start() -> None:
    """The replay's policies (built as ``LearnedPlacement`` / ``get_policy`` build them)
    have no endpoints to start blocks on: no charge there. A coordinator's placer has it,
    for the sites that run a shape's tasks on blocks (Globus Compute endpoints) only."""
    assert LearnedPlacement(SPECS, hedge=True).policy.cold_start is None
    assert get_policy("best-feasible").cold_start is None
    coord = block_coordinator()
    threads = inprocess_coordinator()  # sites that start nothing per shape
    try:
        assert coord._placer().cold_start is warmth_of(coord).step
        assert warmth_of(coord).step.sites == {"local", "delta"}
        d = threads.submit_task(PythonTask(square, (2,)), ResourceEnvelope(walltime_s=600))
        assert d.decision.chosen.cold_start_s == 0 and "cold start" not in d.decision.explain()
        assert threads.result_value(d, timeout_s=30) == 4
    finally:
        coord.close()
        threads.close()


def test_a_coordinator_learns_warm_shapes_and_cold_starts_from_its_own_tasks() -> None:
    coord = block_coordinator()
    try:
        env = ResourceEnvelope(sites=("local",), walltime_s=600)
        first = coord.submit_task(PythonTask(square, (3,)), env)
        assert first.decision.chosen.cold_start_s == DEFAULT_COLD_START_S
        assert coord.result_value(first, timeout_s=30) == 9
        warmth = warmth_of(coord)
        assert set(warmth.starts.figures()) == {"local"}  # its start measured the figure
        second = coord.submit_task(PythonTask(square, (4,)), env)  # within the idle time
        assert second.decision.chosen.shape == first.decision.chosen.shape
        assert second.decision.chosen.cold_start_s == 0
        assert second.decision.chosen.why.startswith("warm block: ours, up here")
        assert coord.result_value(second, timeout_s=30) == 16
    finally:
        coord.close()


def test_a_group_of_tiny_children_lands_on_one_shape_unless_it_asks_for_distinct_sites() -> None:
    coord = block_coordinator()  # sites local and delta
    try:
        env = ResourceEnvelope(cpus_min=1, walltime_s=600)
        kids = [(f"c{i}", PythonTask(square, (i,)), env) for i in range(12)]
        together = coord.submit_group(kids, distinct_sites=False)
        assert together.wait(60)
        shapes = {c.handle.decision.chosen.shape for c in together.children}
        assert len(shapes) == 1  # one snapshot, and every later child on the first's block
        assert sorted(coord.result_value(c.handle, 10) for c in together.children) == sorted(
            i * i for i in range(12)
        )
        apart = coord.submit_group(kids[:2], distinct_sites=True)  # the soft constraint wins
        assert apart.wait(60)
        assert {c.handle.site for c in apart.children} == {"local", "delta"}
    finally:
        coord.close()


def test_measured_cold_starts_are_kept_for_the_next_coordinator(tmp_path: Path) -> None:
    kept = Telemetry(tmp_path / "telemetry.db")
    first = block_coordinator(telemetry=kept)
    try:
        env = ResourceEnvelope(sites=("delta",), walltime_s=600)
        assert first.result_value(first.submit_task(PythonTask(square, (5,)), env), 30) == 25
        measured = warmth_of(first).starts.figures()
        assert set(measured) == {"delta"}
    finally:
        first.close()
        kept.close()
    again = Telemetry(tmp_path / "telemetry.db")
    nxt = block_coordinator(telemetry=again)
    try:
        d = nxt.plan(ResourceEnvelope(walltime_s=600))
        delta = next(c for c in d.candidates if c.site == "delta")
        assert delta.cold_start_s == pytest.approx(measured["delta"])
        assert "median of 1 measured here" in delta.why
        local = next(c for c in d.candidates if c.site == "local")
        assert local.cold_start_s == pytest.approx(measured["delta"])  # as the site measured
        assert "none measured here" in local.why
    finally:
        nxt.close()
        again.close()
