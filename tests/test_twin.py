"""The queue twin: rebuilt from a snapshot, it predicts the true wait when jobs run to their
limits and nothing else arrives, because it seeds running jobs on the nodes they hold."""

from __future__ import annotations

import random

import pytest

from federation.envelope import Shape
from federation.runtime_model import UsageRatioModel
from federation.sim.queue import SimJob, SimSite
from federation.sites.spec import SiteSpec
from federation.snapshot import SiteSnapshot
from federation.twin import TwinPredictor


def make_spec(nodes: int = 2, cpus: int = 4, mem_gb: int = 16, gpus: int = 0) -> SiteSpec:
    part: dict[str, object] = {
        "name": "p",
        "nodes_real": nodes,
        "nodes_local": 1,
        "cpus_per_node": cpus,
        "mem_gb_per_node": mem_gb,
        "max_walltime_s": 100_000,
    }
    if gpus:
        part.update(gpus_per_node=gpus, gpu_type="a100")
    return SiteSpec.model_validate(
        {
            "name": "sim",
            "institution": "test",
            "arch": "x86_64",
            "access": "login-node",
            "default_account": "acct",
            "partitions": [part],
        }
    )


def job(cpus: int, wall: float, *, nodes: int = 1, gpus: int = 0, at: float = 0.0) -> SimJob:
    return SimJob(
        "p",
        walltime_s=wall,
        run_s=wall,  # runs to its limit: what a Slurm-style twin assumes
        nodes=nodes,
        cpus_per_node=cpus,
        mem_mb_per_node=1024,
        gpus_per_node=gpus,
        submit_s=at,
    )


def shape(cpus: int, wall: int, *, gpus: int = 0) -> Shape:
    return Shape(
        site="sim", partition="p", nodes=1, cpus=cpus, mem_gb=1, gpus=gpus, walltime_s=wall
    )


def probe(s: Shape) -> SimJob:
    return SimJob(
        "p",
        walltime_s=float(s.walltime_s),
        run_s=60.0,
        cpus_per_node=s.cpus,
        mem_mb_per_node=s.mem_gb * 1024,
        gpus_per_node=s.gpus,
    )


def twin_wait(spec: SiteSpec, snap: SiteSnapshot, s: Shape) -> float:
    return TwinPredictor({"sim": spec}, UsageRatioModel()).wait(s, snap, snap.taken_at, 0.5)


def blind(snap: SiteSnapshot) -> SiteSnapshot:
    jobs = tuple(j.model_copy(update={"node_names": ()}) for j in snap.jobs)
    return snap.model_copy(update={"jobs": jobs})


def test_fragmented_nodes_are_reproduced() -> None:
    """Two half-used nodes: a whole-node job must wait, though the CPUs are free."""
    spec = make_spec(nodes=2, cpus=4)
    site = SimSite(spec)
    site.submit_many([job(2, 10), job(2, 1000), job(2, 1000)])  # node 0: short + long, node 1
    site.advance(10)  # the short job ended: 2 CPUs free on each node
    snap = site.snapshot()
    assert sorted(j.node_names for j in snap.jobs) == [("p-0001",), ("p-0002",)]
    whole, half = shape(4, 3600), shape(2, 3600)
    for s in (whole, half):
        truth = site.what_if(probe(s))[0] - site.now
        assert twin_wait(spec, snap, s) == pytest.approx(truth, abs=1e-6)
    assert site.what_if(probe(whole))[0] - site.now == pytest.approx(990)
    # without node names the twin packs both jobs on one node and wrongly sees an idle one
    assert twin_wait(spec, blind(snap), whole) == 0


def test_pending_jobs_keep_their_order_and_reservation() -> None:
    spec = make_spec(nodes=2, cpus=4)
    site = SimSite(spec)
    site.submit_many(
        [
            job(2, 10),
            job(2, 1000),
            job(2, 500),
            job(4, 300, at=5),  # head: waits for a whole node (at 500)
            job(4, 100, at=6),  # then this one (at 800, after the head, or at 1000)
            job(1, 400, at=7),  # backfills? it ends after the shadow time on node 1 ...
        ]
    )
    site.advance(20)
    snap = site.snapshot()
    for s in (shape(4, 3600), shape(1, 100), shape(1, 3600), shape(2, 400)):
        truth = site.what_if(probe(s))[0] - site.now
        assert twin_wait(spec, snap, s) == pytest.approx(truth, abs=1e-6), s


def _random_site(seed: int) -> tuple[SiteSpec, SimSite]:
    rng = random.Random(seed)
    spec = make_spec(nodes=6, cpus=8, mem_gb=4, gpus=2)
    site = SimSite(spec)
    jobs = []
    for _ in range(80):
        w = float(rng.choice([100, 300, 600, 1200, 3000]))
        jobs.append(
            SimJob(
                "p",
                walltime_s=w,
                run_s=w,
                nodes=rng.choice([1, 1, 1, 2, 3]),
                cpus_per_node=rng.choice([1, 2, 4, 8]),
                mem_mb_per_node=rng.choice([0, 512, 2048]),
                gpus_per_node=rng.choice([0, 0, 1, 2]),
                submit_s=rng.uniform(0, 3000),
            )
        )
    site.submit_many(jobs)
    site.advance(3000.5)  # everything has arrived: the snapshot holds the whole future
    return spec, site


@pytest.mark.parametrize("seed", range(10))
def test_twin_equals_the_truth_when_jobs_run_to_their_limits(seed: int) -> None:
    spec, site = _random_site(seed)
    snap = site.snapshot()
    for s in (shape(1, 60), shape(8, 600), shape(2, 3000, gpus=1), shape(8, 5000, gpus=2)):
        truth = site.what_if(probe(s))[0] - site.now
        assert twin_wait(spec, snap, s) == pytest.approx(truth, abs=1e-3), s


def _spread_usage(site: str = "sim") -> UsageRatioModel:
    """Half the finished jobs used 10% of their limit, half 90%."""
    usage = UsageRatioModel()
    for i in range(100):
        usage.observe(site, 1000.0, 100.0 if i % 2 else 900.0)
    return usage


def test_sampled_twin_waits_for_the_first_of_many_ends() -> None:
    """Two running jobs, each ending at 10% or 90% of its limit with equal odds: a probe that
    needs either one's CPUs waits for the first end, 100 s with probability 3/4. One twin at
    the median usage ends both at 900 s; sampled twins see the earliest end."""
    spec = make_spec(nodes=1, cpus=4)
    site = SimSite(spec)
    site.submit_many([job(2, 1000), job(2, 1000)])
    site.advance(0.5)
    snap = site.snapshot()
    half = shape(2, 3600)
    part = snap.partitions[0]
    quantile = TwinPredictor({"sim": spec}, _spread_usage())
    mid_q, _, why_q = quantile(half, part, snap, snap.taken_at)
    assert mid_q == pytest.approx(899.5, abs=1.0)
    assert "quantile twin" in why_q
    sampled = TwinPredictor({"sim": spec}, _spread_usage(), samples=16, q_high=0.9)
    mid_s, high_s, why_s = sampled(half, part, snap, snap.taken_at)
    assert mid_s == pytest.approx(99.5, abs=1.0)
    assert high_s == pytest.approx(899.5, abs=1.0)  # some draws end both late
    assert "16 sampled twins" in why_s
    # reproducible: the same snapshot gives the same draws
    assert sampled(half, part, snap, snap.taken_at)[:2] == (mid_s, high_s)


def test_sampled_twin_without_history_is_slurms_estimate() -> None:
    spec = make_spec(nodes=1, cpus=4)
    site = SimSite(spec)
    site.submit_many([job(2, 1000), job(2, 1000)])
    site.advance(0.5)
    snap = site.snapshot()
    p = TwinPredictor({"sim": spec}, UsageRatioModel(), samples=8)
    mid, high, why = p(shape(2, 3600), snap.partitions[0], snap, snap.taken_at)
    assert (mid, high) == (pytest.approx(999.5, abs=1.0), pytest.approx(999.5, abs=1.0))
    assert "quantile twin" in why
