"""The default placement (auto): the twin, learning from the deployment's own queues and tasks."""

from __future__ import annotations

from datetime import timedelta

from test_placement import NOW, SPECS, _fed, _site_snapshot, _spec

from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.snapshot import FederationSnapshot
from federation.placement.decide import place
from federation.placement.learned import BOUND_WEIGHT, LearnedPlacement


def _nap() -> int:
    """A task that takes a measurable time (a runtime of 0 s teaches nothing)."""
    import time

    time.sleep(0.05)
    return 9


GPU = ResourceEnvelope(gpus_min=1, gpus_max=1, cpus_min=8, mem_gb_min=32, walltime_s=7200)


def test_auto_is_twin_watch_where_copies_can_be_withdrawn_else_twin() -> None:
    hedging = LearnedPlacement(SPECS, hedge=True)
    assert hedging.policy.name == "auto" and hedging.policy.watch is not None
    assert hedging.policy.hedge_within is not None and hedging.policy.bound is not None
    assert hedging.budget is not None and hedging.budget.copies_per_task == 1.2
    once = LearnedPlacement(SPECS, hedge=False)
    assert once.policy.name == "auto" and once.policy.watch is None and once.budget is None
    assert once.policy.hedge_within is None and once.policy.ladder
    assert once.policy.bound is not None and once.policy.bound.weight == BOUND_WEIGHT
    assert place(GPU, SPECS, _fed(), now=NOW).policy == "auto"  # place()'s default


def test_jobs_that_vanish_between_probes_are_usage_observations() -> None:
    lp = LearnedPlacement(SPECS, hedge=False)
    busy = _site_snapshot(_spec("delta"), busy={"gpuA100x4": 2})
    running = [j for j in busy.jobs if j.state == "running"]
    assert running and all(j.time_limit_s for j in running)
    lp.look(FederationSnapshot(taken_at=NOW, sites=(busy,)))
    assert lp.usage.samples("delta") == 0  # running jobs are only censored observations
    later = _site_snapshot(_spec("delta")).model_copy(
        update={"taken_at": NOW + timedelta(minutes=10)}
    )
    lp.look(FederationSnapshot(taken_at=later.taken_at, sites=(later,)))
    assert lp.usage.samples("delta") == len(running)  # they ended between the two looks


def test_task_runtimes_rank_the_shapes_of_their_workload_only() -> None:
    lp = LearnedPlacement(SPECS, hedge=False)
    d = next(s for s in SPECS if s.name == "delta")
    part = next(p for p in d.partitions if p.gpus_per_node)
    shape = Shape(
        site="delta",
        partition=part.name,
        nodes=1,
        cpus=8,
        mem_gb=32,
        gpus=1,
        gpu_type=part.gpu_type,
        walltime_s=7200,
    )
    lp.ran("train", shape, 1800.0)
    lp.ran("train", shape, -1.0)  # nonsense is ignored
    with lp.workload("train"):
        assert lp._runtime(shape) == 1800.0
    with lp.workload("other"):
        assert lp._runtime(shape) == 0.0  # never seen: ranked by predicted start
    assert lp._runtime(shape) == 0.0  # outside any decision


def test_a_twin_keeps_a_job_over_its_partitions_documented_limits() -> None:
    # a real queue may show a job longer than the partition's maximum (a special QOS):
    # the twin keeps it at the partition's maximum instead of failing the decision
    snap = _site_snapshot(_spec("delta"), busy={"gpuA100x4": 2})
    jobs = tuple(
        j.model_copy(update={"time_limit_s": 10 * 86400}) if j.state == "running" else j
        for j in snap.jobs
    )
    fed = _fed(delta=snap.model_copy(update={"jobs": jobs}))
    lp = LearnedPlacement(SPECS, hedge=True)
    d = lp.policy.decide(GPU, SPECS, fed, NOW)
    assert d.chosen.predicted_wait_s == 0.0
    delta = [c for c in d.candidates if c.site == "delta" and c.partition == "gpuA100x4"]
    assert delta and all("twin" in c.why for c in delta)


def test_a_coordinator_places_with_auto_by_default_and_learns_each_finished_task() -> None:
    import time

    from inprocess import inprocess_coordinator

    from federation.core.tasks import PythonTask

    coord = inprocess_coordinator()
    try:
        assert coord.policy == "auto" and coord.learned is not None
        # its sites can withdraw a queued task: the default hedges, within its budget
        assert coord.learned.hedge and coord.learned.policy.watch is not None
        h = coord.submit_task(PythonTask(_nap), ResourceEnvelope(cpus_min=1))
        assert h.decision.policy == "auto"
        assert coord.result_value(h, timeout_s=30) == 9
        deadline = time.monotonic() + 10
        while "_nap" not in coord.learned.runtimes._obs and time.monotonic() < deadline:
            time.sleep(0.05)  # the completion event reaches the learner on the site's thread
        (obs,) = coord.learned.runtimes._obs["_nap"]
        assert obs[0] == (h.site, h.partition)
    finally:
        coord.close()


def test_a_queue_too_long_to_replay_is_predicted_from_the_snapshot_saying_so() -> None:
    busy = _fed(
        delta=_site_snapshot(_spec("delta"), busy={"gpuA100x4": 2}, pending={"gpuA100x4": 3})
    )
    n_jobs = len(next(s for s in busy.sites if s.site == "delta").jobs)
    lp = LearnedPlacement(SPECS, hedge=False, max_jobs=n_jobs - 1)
    d = lp.policy.decide(GPU, SPECS, busy, NOW)
    delta = [c for c in d.candidates if c.site == "delta" and c.partition == "gpuA100x4"]
    assert delta and all(
        "no twin" in c.why and "more than this twin replays" in c.why for c in delta
    )
    others = [c for c in d.candidates if c.site != "delta"]
    assert others and all(c.why.startswith("twin:") for c in others)


def test_a_coordinator_whose_sites_cannot_withdraw_a_copy_places_one_copy() -> None:
    from inprocess import FixedCoordinator, ThreadSite

    from federation.core.spec import load_sites
    from federation.runtime.telemetry import Telemetry

    class Uncancellable(ThreadSite):
        can_cancel = False

    backends = [Uncancellable(s) for s in load_sites(["local", "delta"])]
    coord = FixedCoordinator(backends, telemetry=Telemetry(":memory:"))
    try:
        assert coord.learned is not None and not coord.learned.hedge
        assert coord.learned.policy.watch is None and coord.learned.budget is None
    finally:
        coord.close()
