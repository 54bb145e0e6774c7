"""The fast paths of placement decide exactly as the plain walks they replace.

Per-snapshot caches (queue and node views, site and partition indexes) must never carry
over to a different snapshot, a ``model_copy`` included; the running-sum binary search
over a partition's running jobs must release the same jobs as a job-by-job walk.
"""

from __future__ import annotations

import gc
import random
from datetime import UTC, datetime, timedelta

import pytest

from federation.core.envelope import Shape
from federation.core.snapshot import (
    _DERIVED,
    FederationSnapshot,
    JobRecord,
    NodeRecord,
    PartitionSnapshot,
    SiteHealth,
    SiteSnapshot,
    derived,
)
from federation.placement.candidates import _VECTOR_MIN, predict_wait

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def _part(name: str = "cpu", pending: int = 0, **kw: object) -> PartitionSnapshot:
    return PartitionSnapshot(
        site="s",
        partition=name,
        max_time_s=86400,
        nodes_total=2,
        cpus_total=128,
        cpus_alloc=128,
        cpus_idle=0,
        mem_gb_total=512,
        mem_gb_alloc=512,
        jobs_pending=pending,
        **kw,  # type: ignore[arg-type]
    )


def _node(i: int, cpus_alloc: int = 64, state: str = "mixed") -> NodeRecord:
    return NodeRecord(
        name=f"n{i}",
        partition="cpu",
        state=state,  # type: ignore[arg-type]
        cpus_total=64,
        cpus_alloc=cpus_alloc,
        mem_mb_total=256 * 1024,
        mem_mb_alloc=0,
    )


def _running(i: int, cpus: int, end_s: float | None, start_s: float | None = -60) -> JobRecord:
    return JobRecord(
        job_id=f"r{i}",
        partition="cpu",
        state="running",
        cpus=cpus,
        time_limit_s=None if end_s is None and i % 2 else 7200,
        start_time=None if start_s is None else NOW + timedelta(seconds=start_s),
        end_time=None if end_s is None else NOW + timedelta(seconds=end_s),
    )


def _pending(i: int, cpus: int) -> JobRecord:
    return JobRecord(job_id=f"p{i}", partition="cpu", state="pending", cpus=cpus)


def _site(jobs: list[JobRecord], nodes: list[NodeRecord] | None = None) -> SiteSnapshot:
    n_pending = sum(j.state == "pending" for j in jobs)
    return SiteSnapshot(
        site="s",
        taken_at=NOW,
        health=SiteHealth(reachable=True, probe_age_s=0),
        partitions=(_part(pending=n_pending),),
        nodes=tuple(nodes if nodes is not None else [_node(0), _node(1)]),
        jobs=tuple(jobs),
    )


def _walk_wait(site: SiteSnapshot, shape: Shape) -> float:
    """The plain reference: release running jobs one by one in end order (open-ended ones,
    ending at start + limit, among those already past their end) until the pending CPUs
    and the shape fit; the wait is the latest end released."""
    part = site.partitions[0]
    now_ts = NOW.timestamp()
    free = sum(n.cpus_free for n in site.nodes if n.usable)
    need = shape.cpus * shape.nodes + sum(j.cpus for j in site.jobs if j.state == "pending")
    dated = sorted(
        (j for j in site.jobs if j.state == "running" and j.end_time is not None),
        key=lambda j: j.end_time.timestamp(),  # type: ignore[union-attr]
    )
    past = [j for j in dated if j.end_time.timestamp() <= now_ts]  # type: ignore[union-attr]
    future = dated[len(past) :]
    open_ended = [j for j in site.jobs if j.state == "running" and j.end_time is None]
    t_free = now_ts
    for j in [*past, *open_ended, *future]:
        if free >= need:
            break
        free += j.cpus
        if j.end_time is not None:
            end = j.end_time.timestamp()
        else:
            start = j.start_time.timestamp() if j.start_time else now_ts
            end = start + (j.time_limit_s or part.max_time_s or 86400)
        t_free = max(t_free, end)
    wait = max(0.0, t_free - now_ts)
    if free < need:
        return max(wait, float(part.max_time_s or 86400))
    return wait


@pytest.mark.parametrize("n_running", [0, 1, 7, 40, _VECTOR_MIN + 13])
@pytest.mark.parametrize("open_ended", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_release_matches_the_job_by_job_walk(n_running: int, open_ended: bool, seed: int) -> None:
    rng = random.Random(seed * 1000 + n_running)
    jobs = []
    for i in range(n_running):
        end = None if open_ended and i % 5 == 0 else rng.choice([-120, 0, 30, 600, 3600, 9000])
        jobs.append(_running(i, rng.choice([0, 1, 4, 16, 64]), end, rng.choice([-600, None])))
    jobs += [_pending(i, rng.choice([1, 8, 32])) for i in range(rng.randint(1, 30))]
    rng.shuffle(jobs)
    site = _site(jobs)
    for cpus in (1, 16, 64):
        for nodes in (1, 2, 5):
            shape = Shape(
                site="s", partition="cpu", nodes=nodes, cpus=cpus, mem_gb=1, gpus=0, walltime_s=3600
            )
            wait, why = predict_wait(shape, site.partitions[0], site, NOW)
            assert wait == _walk_wait(site, shape), why


def test_fits_now_names_the_first_node_that_fits() -> None:
    site = _site([], nodes=[_node(0), _node(1, cpus_alloc=8), _node(2, cpus_alloc=0)])
    shape = Shape(site="s", partition="cpu", nodes=1, cpus=32, mem_gb=1, gpus=0, walltime_s=60)
    wait, why = predict_wait(shape, site.partitions[0], site, NOW)
    assert wait == 0.0
    assert why.startswith("fits now on n1 (56 CPUs, 256 GB, 0 GPUs free)")
    two = shape.model_copy(update={"nodes": 2})
    assert predict_wait(two, site.partitions[0], site, NOW)[0] == 0.0
    three = shape.model_copy(update={"nodes": 3})  # two nodes fit: the fluid estimate
    assert not predict_wait(three, site.partitions[0], site, NOW)[1].startswith("fits now")


def test_no_usable_nodes_is_infeasible() -> None:
    site = _site([_pending(0, 4)], nodes=[_node(0, state="down"), _node(1, state="drained")])
    shape = Shape(site="s", partition="cpu", nodes=1, cpus=1, mem_gb=1, gpus=0, walltime_s=60)
    assert predict_wait(shape, site.partitions[0], site, NOW) == (
        float("inf"),
        "no usable nodes (all down or drained)",
    )


def test_a_copy_with_other_jobs_or_nodes_gets_its_own_views() -> None:
    shape = Shape(site="s", partition="cpu", nodes=1, cpus=64, mem_gb=1, gpus=0, walltime_s=60)
    site = _site([_running(0, 64, 600), _running(1, 64, 1800), _pending(0, 64)])
    wait, _ = predict_wait(shape, site.partitions[0], site, NOW)
    assert wait == 1800
    shorter = site.model_copy(
        update={"jobs": (_running(0, 64, 600), _running(1, 64, 900), _pending(0, 64))}
    )
    assert predict_wait(shape, site.partitions[0], shorter, NOW)[0] == 900
    idle = site.model_copy(update={"nodes": (_node(0, cpus_alloc=0), _node(1))})
    assert predict_wait(shape, idle.partitions[0], idle, NOW)[0] == 600  # one pending ahead
    assert predict_wait(shape, site.partitions[0], site, NOW)[0] == 1800  # unchanged


def test_indexes_follow_copies_and_keep_the_first_of_a_name() -> None:
    site = _site([])
    assert site.partition("cpu") is site.partitions[0]
    assert site.partition("gpu") is None
    gpu, dup = _part("gpu"), _part("gpu", pending=3)
    other = site.model_copy(update={"partitions": (gpu, dup)})
    assert other.partition("cpu") is None
    assert other.partition("gpu") is gpu
    assert site.partition("cpu") is site.partitions[0]

    a, b = site.model_copy(update={"site": "a"}), site.model_copy(update={"site": "b"})
    fed = FederationSnapshot(taken_at=NOW, sites=(a, b, site.model_copy(update={"site": "a"})))
    assert fed.site("a") is a and fed.site("b") is b and fed.site("s") is None
    fewer = fed.model_copy(update={"sites": (b,)})
    assert fewer.site("a") is None and fewer.site("b") is b


def test_derived_values_are_dropped_with_their_snapshot() -> None:
    site = _site([_running(0, 64, 600), _pending(0, 64)])
    shape = Shape(site="s", partition="cpu", nodes=1, cpus=64, mem_gb=1, gpus=0, walltime_s=60)
    predict_wait(shape, site.partitions[0], site, NOW)
    key = id(site)
    assert derived(site) and key in _DERIVED
    assert site == site.model_copy()  # equality never sees the cache
    del site
    gc.collect()
    assert key not in _DERIVED or _DERIVED[key][0]() is not None
