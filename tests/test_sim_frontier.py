"""What-if frontiers (:mod:`federation.sim.whatif`): a burst of decisions from one snapshot,
each seeing the ones before it, resumes where the previous what-if stopped, and every answer
is the one a fresh replay from now gives."""

from __future__ import annotations

import random

import pytest
from test_sim_queue import make_spec

from federation.sim.queue import SimJob, SimSite

SHAPES = [  # (nodes, cpus per node, walltime s): the candidates a decision asks about
    (1, 1, 600),
    (1, 4, 3_600),
    (2, 4, 1_800),
    (4, 2, 7_200),
    (1, 2, 300),
]


def _probe(shape: tuple[int, int, int], priority: int, run_s: float = 60.0) -> SimJob:
    nodes, cpus, wall = shape
    return SimJob(
        partition="p",
        walltime_s=float(wall),
        run_s=min(run_s, float(wall)),
        nodes=nodes,
        cpus_per_node=cpus,
        priority=priority,
    )


def _busy_site(rng: random.Random) -> SimSite:
    site = SimSite(make_spec(nodes=8, cpus=4))
    jobs = []
    for _ in range(120):
        wall = rng.choice([300, 900, 3_600, 14_400])
        jobs.append(
            SimJob(
                partition="p",
                walltime_s=float(wall),
                run_s=wall * rng.uniform(0.05, 1.0),
                nodes=rng.choice([1, 1, 1, 2, 4]),
                cpus_per_node=rng.choice([1, 2, 4]),
                priority=10**6 + rng.randrange(1_000),
            )
        )
    site.submit_many(jobs)
    site.advance(1_234.5)
    return site


def _fresh(site: SimSite) -> SimSite:
    """The same queue with no what-if played on it (so nothing to resume)."""
    c = site.clone()
    c._frontiers.clear()
    return c


@pytest.mark.parametrize("seed", range(6))
def test_a_burst_resumes_and_every_answer_is_the_fresh_one(seed: int) -> None:
    rng = random.Random(seed)
    site = _busy_site(rng)
    resumed = 0
    for n in range(40):
        asked = rng.sample(SHAPES, rng.choice([2, 3, 5]))
        probes = [_probe(s, 0) for s in asked]
        fr = site._frontiers.get("p")
        if fr is not None and all((float(w), (nd, c, 0, 0)) in fr.shapes for nd, c, w in asked):
            resumed += 1
        want = _fresh(site).what_if_many(probes)
        assert site.what_if_many(probes) == want, f"decision {n}"
        # the decision places one of them: queued behind everything, as ours are
        chosen = asked[min(range(len(asked)), key=lambda k: want[k][0])]
        site.submit(_probe(chosen, 1_000 - n, run_s=rng.uniform(10, 600)))
    assert resumed >= 5, f"only {resumed} of 40 what-ifs resumed from a frontier"


def test_a_frontier_is_dropped_when_the_queue_changes_otherwise() -> None:
    site = _busy_site(random.Random(7))
    probes = [_probe(s, 0) for s in SHAPES]
    site.what_if_many(probes)
    assert "p" in site._frontiers, "a busy queue: the what-if proved some future"
    # a job ahead of ours: the frontier cannot be kept
    site.submit(_probe(SHAPES[0], 10**7))
    assert "p" not in site._frontiers
    assert site.what_if_many(probes) == _fresh(site).what_if_many(probes)
    # a cancelled job or a later clock: dropped as well
    site.what_if_many(probes)
    assert "p" in site._frontiers
    site.cancel(site.submit(_probe(SHAPES[1], 0)))
    assert "p" not in site._frontiers
    site.what_if_many(probes)
    site.advance(site.now + 10)
    assert site._frontiers == {}
    assert site.what_if_many(probes) == _fresh(site).what_if_many(probes)


def test_a_candidate_ahead_of_queued_jobs_is_not_resumed() -> None:
    site = _busy_site(random.Random(3))
    low = [_probe(s, 0) for s in SHAPES]
    site.what_if_many(low)
    high = [_probe(s, 10**7) for s in SHAPES]  # ahead of every queued job
    assert site.what_if_many(high) == _fresh(site).what_if_many(high)
    assert site.what_if_many(low) == _fresh(site).what_if_many(low)
