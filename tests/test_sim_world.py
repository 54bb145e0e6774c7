"""A policy's world: copies are real queued jobs, cancelled at the coordinator's next look."""

from __future__ import annotations

import pytest

from federation.core.spec import load_sites
from federation.sim.queue import SimJob, SimSite
from federation.sim.world import TaskRun, World, background_delay

SPECS = {s.name: s for s in load_sites(["delta", "anvil"])}


def _site(name: str) -> SimSite:
    spec = SPECS[name]
    return SimSite(spec, nodes={p.name: 1 for p in spec.partitions})


def _whole_cpu(run_s: float, submit_s: float | None = None) -> SimJob:
    return SimJob("cpu", 7200.0, run_s, cpus_per_node=128, mem_mb_per_node=1024, submit_s=submit_s)


def _gpu(run_s: float, submit_s: float | None = None) -> SimJob:
    return SimJob(
        "gpu",
        7200.0,
        run_s,
        cpus_per_node=128,
        mem_mb_per_node=1024,
        gpus_per_node=4,
        submit_s=submit_s,
    )


def test_a_copy_takes_room_and_delays_a_background_job() -> None:
    delta = _site("delta")
    (bg,) = delta.submit_many([_whole_cpu(500.0, submit_s=10.0)])  # arrives at 10 s
    base = World({"delta": delta})
    world = World.cloned({"delta": delta})
    run = TaskRun(0.0)
    world.submit(run, "delta", _whole_cpu(1000.0))  # our copy takes the only node at 0 s
    for w in (base, world):
        w.advance(3000.0)
    assert base.sites["delta"].status(bg).start_s == 10.0
    assert world.sites["delta"].status(bg).start_s == 1000.0
    assert world.start_end(run) == (0.0, 1000.0)
    assert background_delay(world, base, window=(0.0, 100.0)) == (990.0, 1)


def test_a_queued_copy_is_cancelled_at_the_next_look_and_charged_its_hold() -> None:
    delta, anvil = _site("delta"), _site("anvil")
    delta.submit(_whole_cpu(5000.0))  # delta's node is busy until 5000 s
    world = World({"delta": delta, "anvil": anvil}, seen_every_s=60.0)
    run = TaskRun(0.0)
    queued = world.submit(run, "delta", _whole_cpu(600.0))
    world.submit(run, "anvil", _gpu(600.0))  # starts at once
    world.advance(59.0)
    assert run.winner is None and queued.cancelled_s is None  # not looked yet
    world.advance(200.0)
    assert run.winner == 1 and run.seen_s == 60.0
    assert queued.cancelled_s == 60.0 and world.status(queued).state == "cancelled"
    assert run.held_s == 60.0 and run.duplicates == 0 and run.duplicate_run_s == 0.0
    world.advance(6000.0)  # the cancelled copy never runs
    assert world.status(queued).start_s is None


def test_copies_that_start_before_the_look_run_as_duplicates_until_then() -> None:
    world = World({"delta": _site("delta"), "anvil": _site("anvil")}, seen_every_s=60.0)
    world.advance(15.0)
    run = TaskRun(15.0)
    a = world.submit(run, "delta", _whole_cpu(900.0))
    b = world.submit(run, "anvil", _gpu(600.0))  # same start; ends sooner: the winner
    world.advance(300.0)
    assert run.winner == 1 and run.seen_s == 60.0
    assert a.cancelled_s == 60.0 and b.cancelled_s is None
    assert run.duplicates == 1 and run.duplicate_run_s == pytest.approx(45.0)
    assert run.held_s == 0.0
    assert world.status(a).state == "cancelled"


def test_a_single_copy_needs_no_look_and_a_withdrawn_task_holds_nothing() -> None:
    delta = _site("delta")
    delta.submit(_whole_cpu(5000.0))
    world = World({"delta": delta, "anvil": _site("anvil")}, seen_every_s=60.0)
    alone = TaskRun(0.0)
    world.submit(alone, "anvil", _gpu(100.0))
    stuck = TaskRun(0.0)
    c = world.submit(stuck, "delta", _whole_cpu(100.0))
    world.advance(1000.0)
    assert alone.winner == 0 and world.start_end(alone) == (0.0, 100.0)
    assert stuck.winner is None and world.start_end(stuck) is None
    world.withdraw(stuck)
    assert c.cancelled_s == 1000.0 and stuck.held_s == 0.0  # no copy won: nothing held for one


def test_a_world_refuses_a_bad_look_cadence_and_going_back() -> None:
    with pytest.raises(ValueError, match="seen_every_s"):
        World({"delta": _site("delta")}, seen_every_s=0)
    w = World({"delta": _site("delta")})
    w.advance(100.0)
    with pytest.raises(ValueError, match="back in time"):
        w.advance(50.0)
