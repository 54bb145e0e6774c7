"""The virtual-time queue: FIFO, EASY backfill, kills, delays, cancels, snapshots, what-if."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from federation.core.errors import FederationError
from federation.core.spec import SiteSpec
from federation.sim.queue import (
    DEFAULT_EPOCH,
    SimJob,
    SimRequestError,
    SimSite,
    UnknownSimJobError,
)


def make_spec(
    nodes: int = 4,
    cpus: int = 4,
    mem_gb: int = 16,
    gpus: int = 0,
    max_walltime_s: int = 100_000,
    extra: list[dict[str, object]] | None = None,
) -> SiteSpec:
    part: dict[str, object] = {
        "name": "p",
        "nodes_real": nodes,
        "nodes_local": 1,
        "cpus_per_node": cpus,
        "mem_gb_per_node": mem_gb,
        "max_walltime_s": max_walltime_s,
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
            "partitions": [part, *(extra or [])],
        }
    )


def job(
    nodes: int = 1,
    wall: float = 100,
    run: float | None = None,
    *,
    cpus: int = 4,
    mem_mb_per_node: int = 0,
    gpus_per_node: int = 0,
    partition: str = "p",
    submit_s: float | None = None,
    priority: int = 0,
) -> SimJob:
    return SimJob(
        partition=partition,
        walltime_s=wall,
        run_s=wall if run is None else run,
        nodes=nodes,
        cpus_per_node=cpus,
        mem_mb_per_node=mem_mb_per_node,
        gpus_per_node=gpus_per_node,
        submit_s=submit_s,
        priority=priority,
    )


def times(site: SimSite, jid: str) -> tuple[float | None, float | None]:
    st = site.status(jid)
    return st.start_s, st.end_s


# -- FIFO and EASY ---------------------------------------------------------------------------


def test_fifo_waits_for_resources_in_order() -> None:
    site = SimSite(make_spec(nodes=4))
    a = site.submit(job(nodes=4, wall=100))
    b = site.submit(job(nodes=2, wall=50))
    c = site.submit(job(nodes=2, wall=50))
    site.run_until_idle()
    assert times(site, a) == (0, 100)
    assert times(site, b) == (100, 150)
    assert times(site, c) == (100, 150)  # both fit once A is gone


def test_small_job_backfills_when_it_ends_before_the_shadow_time() -> None:
    site = SimSite(make_spec(nodes=4))
    a = site.submit(job(nodes=2, wall=100))
    head = site.submit(job(nodes=4, wall=100))  # shadow time 100 (A's limit)
    small = site.submit(job(nodes=2, wall=100, run=60))  # ends by 100: may go first
    site.run_until_idle()
    assert times(site, a) == (0, 100)
    assert times(site, small) == (0, 60)
    assert times(site, head) == (100, 200)


def test_job_that_would_delay_the_reservation_does_not_backfill() -> None:
    site = SimSite(make_spec(nodes=4))
    site.submit(job(nodes=2, wall=100))
    head = site.submit(job(nodes=4, wall=100))
    long = site.submit(job(nodes=2, wall=150, run=10))  # would still hold nodes at t=100
    site.run_until_idle()
    assert times(site, head) == (100, 200)
    assert times(site, long) == (200, 210)


def test_long_job_backfills_onto_nodes_the_head_does_not_need() -> None:
    site = SimSite(make_spec(nodes=6))
    a = site.submit(job(nodes=4, wall=100))
    head = site.submit(job(nodes=4, wall=100))  # at t=100: 6 free, head takes 4 (A's)
    long = site.submit(job(nodes=2, wall=1000))  # the 2 spare nodes: no delay to the head
    too_wide = site.submit(job(nodes=3, wall=1000))
    site.run_until_idle()
    assert times(site, a) == (0, 100)
    assert times(site, long) == (0, 1000)
    assert times(site, head) == (100, 200)
    assert times(site, too_wide) == (200, 1200)


def test_head_starts_early_when_jobs_end_before_their_limit() -> None:
    site = SimSite(make_spec(nodes=4))
    site.submit(job(nodes=4, wall=1000, run=30))
    head = site.submit(job(nodes=4, wall=100))
    site.run_until_idle()
    assert times(site, head) == (30, 130)


def test_priority_jumps_the_queue() -> None:
    site = SimSite(make_spec(nodes=1))
    site.submit(job(nodes=1, wall=100))
    low = site.submit(job(nodes=1, wall=100))
    high = site.submit(job(nodes=1, wall=100, priority=5, submit_s=10))
    site.run_until_idle()
    assert times(site, high) == (100, 200)
    assert times(site, low) == (200, 300)


def test_partial_nodes_are_shared_and_packed() -> None:
    site = SimSite(make_spec(nodes=2, cpus=4))
    a = site.submit(job(nodes=1, cpus=2, wall=100))
    b = site.submit(job(nodes=1, cpus=2, wall=100))
    whole = site.submit(job(nodes=1, cpus=4, wall=100))  # the other node is still idle
    site.advance(1)
    assert [times(site, x)[0] for x in (a, b, whole)] == [0, 0, 0]
    snap = site.snapshot()
    assert [n.cpus_alloc for n in snap.nodes] == [4, 4]  # a and b share node 1


def test_memory_and_gpus_limit_sharing() -> None:
    site = SimSite(make_spec(nodes=1, cpus=8, mem_gb=8, gpus=2))
    a = site.submit(SimJob("p", walltime_s=100, run_s=100, cpus_per_node=1, gpus_per_node=2))
    b = site.submit(SimJob("p", walltime_s=100, run_s=100, cpus_per_node=1, gpus_per_node=1))
    c = site.submit(SimJob("p", walltime_s=50, run_s=50, cpus_per_node=1, mem_mb_per_node=8192))
    site.run_until_idle()
    assert times(site, a) == (0, 100)
    assert times(site, b) == (100, 200)  # no GPU left before
    assert times(site, c) == (0, 50)  # no GPU needed, all memory free: backfills


# -- kills, delays, cancels ----------------------------------------------------------------


def test_walltime_kill() -> None:
    site = SimSite(make_spec())
    jid = site.submit(job(wall=100, run=500))
    site.run_until_idle()
    st = site.status(jid)
    assert (st.start_s, st.end_s, st.state) == (0, 100, "timeout")


def test_start_delay_holds_the_allocation_and_counts_against_the_limit() -> None:
    site = SimSite(make_spec(nodes=1), start_delay_s=5)
    a = site.submit(job(wall=100, run=50))
    b = site.submit(job(wall=100, run=98))  # 5 + 98 > 100: killed at the limit
    site.run_until_idle()
    assert times(site, a) == (0, 55)
    assert times(site, b) == (55, 155)
    assert site.status(a).state == "completed"
    assert site.status(b).state == "timeout"
    assert site.what_if(job(wall=100, run=10)) == (155, 170)


def test_cancel_pending_running_and_future() -> None:
    site = SimSite(make_spec(nodes=1))
    run = site.submit(job(wall=100))
    pend = site.submit(job(wall=100))
    nxt = site.submit(job(wall=100))
    future = site.submit(job(wall=100, submit_s=50))
    assert site.status(future).state == "future"
    assert site.cancel(pend) is True
    assert site.cancel(future) is True
    site.advance(40)
    assert site.cancel(run) is True  # frees the node at t=40
    site.run_until_idle()
    assert site.status(pend).state == "cancelled"
    assert site.status(future).state == "cancelled"
    assert site.status(run).state == "cancelled"
    assert site.status(run).end_s == 40
    assert times(site, nxt) == (40, 140)
    assert site.cancel(nxt) is False  # already finished
    with pytest.raises(UnknownSimJobError, match="no job '999'"):
        site.cancel("999")


def test_statuses_and_finished_since() -> None:
    site = SimSite(make_spec(nodes=1))
    a = site.submit(job(wall=100, run=40))
    b = site.submit(job(wall=100, run=30))
    c = site.submit(job(wall=100))
    d = site.submit(job(wall=100, submit_s=500))
    site.advance(80)
    assert [(s.job_id, s.state) for s in site.statuses()] == [
        (a, "completed"),
        (b, "completed"),
        (c, "running"),
        (d, "future"),
    ]
    assert [(s.job_id, s.end_s) for s in site.finished_since(0)] == [(a, 40), (b, 70)]
    assert [s.job_id for s in site.finished_since(40)] == [b]
    assert site.finished_since(70) == []


def test_bad_requests_raise_federation_errors() -> None:
    site = SimSite(make_spec(nodes=4, cpus=4, max_walltime_s=1000))
    with pytest.raises(SimRequestError, match=r"nodes=5 \(partition has 4\)"):
        site.submit(job(nodes=5))
    with pytest.raises(SimRequestError, match="walltime_s=2000"):
        site.submit(job(wall=2000))
    with pytest.raises(SimRequestError, match="no partition 'gpu'"):
        site.submit(job(partition="gpu"))
    site.advance(10)
    with pytest.raises(SimRequestError, match="in the past"):
        site.submit(job(submit_s=5))
    with pytest.raises(SimRequestError, match="back in time"):
        site.advance(5)
    assert issubclass(SimRequestError, FederationError)


# -- node counts, utilization ----------------------------------------------------------------


def test_node_scale_and_explicit_counts() -> None:
    spec = make_spec(nodes=100, extra=[{**make_spec().partitions[0].model_dump(), "name": "q"}])
    assert SimSite(spec, 0.25).node_count("p") == 25
    assert SimSite(spec, 0.001).node_count("p") == 1
    site = SimSite(spec, 0.5, nodes={"q": 3})
    assert (site.node_count("p"), site.node_count("q")) == (50, 3)
    with pytest.raises(SimRequestError, match="no partition"):
        SimSite(spec, nodes={"zz": 1})


def test_utilization_over_a_window() -> None:
    site = SimSite(make_spec(nodes=4, cpus=4))
    site.submit(job(nodes=2, wall=100))
    site.submit(job(nodes=4, cpus=1, wall=100, submit_s=100))  # 4 of 16 CPUs
    site.advance(400)
    assert site.utilization((0, 100)) == pytest.approx(0.5)
    assert site.utilization((0, 200)) == pytest.approx((0.5 + 0.25) / 2)
    assert site.utilization((200, 400)) == 0.0
    assert site.utilization() == pytest.approx(0.75 * 100 / 400)


# -- snapshots -------------------------------------------------------------------------------


def test_snapshot_contents() -> None:
    site = SimSite(make_spec(nodes=4, cpus=4, mem_gb=16, gpus=2))
    a = site.submit(job(nodes=2, wall=100, gpus_per_node=2, mem_mb_per_node=1024))
    head = site.submit(job(nodes=4, wall=100, gpus_per_node=2, mem_mb_per_node=1024))
    small = site.submit(job(nodes=2, cpus=1, wall=80, run=50))  # backfills on the free pair
    behind = site.submit(job(nodes=1, wall=50, gpus_per_node=2, mem_mb_per_node=1024))
    site.advance(10)
    snap = site.snapshot()
    assert snap.site == "sim"
    assert snap.health.reachable
    assert snap.taken_at == DEFAULT_EPOCH + timedelta(seconds=10)
    nodes = {n.name: n for n in snap.nodes}
    assert len(nodes) == 4
    assert [n.cpus_alloc for n in snap.nodes] == [4, 4, 1, 1]
    assert [n.state for n in snap.nodes] == ["allocated", "allocated", "mixed", "mixed"]
    assert [n.gpus_alloc_by_type for n in snap.nodes] == [{"a100": 2}] * 2 + [{"a100": 0}] * 2
    assert snap.nodes[0].mem_mb_alloc == 1024 and snap.nodes[0].mem_mb_total == 16 * 1024
    (p,) = snap.partitions
    assert (p.nodes_total, p.cpus_total, p.cpus_alloc, p.cpus_idle) == (4, 16, 10, 6)
    assert p.gpus_total_by_type == {"a100": 8} and p.gpus_alloc_by_type == {"a100": 4}
    assert p.nodes_by_state == {"allocated": 2, "mixed": 2}
    assert (p.jobs_running, p.jobs_pending) == (2, 2)
    assert p.pending_reasons == {"Resources": 1, "Priority": 1}
    jobs = {j.job_id: j for j in snap.jobs}
    t0 = DEFAULT_EPOCH
    ra = jobs[a]
    assert (ra.state, ra.nodes, ra.cpus, ra.gpus, ra.gpu_type) == ("running", 2, 8, 4, "a100")
    assert (ra.start_time, ra.end_time, ra.time_limit_s) == (t0, t0 + timedelta(seconds=100), 100)
    assert jobs[small].end_time == t0 + timedelta(seconds=80)  # start + limit, as Slurm shows
    rh, rb = jobs[head], jobs[behind]
    assert (rh.state, rh.reason) == ("pending", "Resources")
    assert rh.start_time == t0 + timedelta(seconds=100)  # the EASY shadow time
    assert rb.reason == "Priority"
    assert rb.start_time == t0 + timedelta(seconds=200)  # after the head, all nodes busy
    assert p.earliest_pending_start == t0 + timedelta(seconds=100)
    assert p.latest_pending_start == t0 + timedelta(seconds=200)


def test_snapshot_stamps_with_the_given_wall_clock() -> None:
    site = SimSite(make_spec(nodes=1))
    jid = site.submit(job(wall=100))
    site.submit(job(wall=100))
    site.advance(30)
    now = datetime(2030, 5, 1, 12, 0, tzinfo=UTC)
    snap = site.snapshot(now)
    assert snap.taken_at == now
    run = next(j for j in snap.jobs if j.job_id == jid)
    assert run.start_time == now - timedelta(seconds=30)
    assert snap.partitions[0].latest_pending_start == now + timedelta(seconds=70)


def test_snapshot_records_validate_as_real_models() -> None:
    from federation.core.snapshot import SiteSnapshot

    site = SimSite(make_spec(nodes=3, gpus=2))
    for k in range(6):
        site.submit(job(nodes=1 + k % 3, wall=100 + k, gpus_per_node=k % 3))
    snap = site.snapshot()
    again = SiteSnapshot.model_validate(snap.model_dump())
    assert again == snap


# -- what-if, clones, determinism -------------------------------------------------------------


def _busy_site(seed: int) -> SimSite:
    rng = random.Random(seed)
    site = SimSite(make_spec(nodes=6, cpus=8, mem_gb=4, gpus=2, max_walltime_s=10_000))
    jobs = []
    for _ in range(60):
        w = rng.choice([100, 300, 600, 1200, 3000])
        jobs.append(
            SimJob(
                "p",
                walltime_s=w,
                run_s=rng.uniform(0, 1.2 * w),
                nodes=rng.choice([1, 1, 1, 2, 3, 6]),
                cpus_per_node=rng.choice([1, 2, 4, 8]),
                mem_mb_per_node=rng.choice([0, 512, 2048]),
                gpus_per_node=rng.choice([0, 0, 1, 2]),
                submit_s=rng.uniform(0, 5000),
                priority=rng.choice([0, 0, 0, 1]),
            )
        )
    site.submit_many(jobs)
    site.advance(rng.uniform(500, 4000))
    return site


@pytest.mark.parametrize("seed", range(12))
def test_what_if_equals_submitting_in_a_clone(seed: int) -> None:
    site = _busy_site(seed)
    probes = [
        SimJob("p", walltime_s=w, run_s=w / 2, nodes=n, cpus_per_node=c, gpus_per_node=g)
        for n, c, g, w in [(1, 1, 0, 300), (2, 8, 2, 1200), (6, 8, 0, 600), (1, 4, 1, 3000)]
    ]
    before = site.snapshot()
    answers = site.what_if_many(probes)
    assert site.snapshot() == before  # what-if changes nothing
    for probe, answer in zip(probes, answers, strict=True):
        clone = site.clone()
        jid = clone.submit(probe)
        clone.run_until_idle()
        st = clone.status(jid)
        assert (st.start_s, st.end_s) == answer
        assert site.what_if(probe) == answer


def test_what_if_without_future_arrivals() -> None:
    site = SimSite(make_spec(nodes=1))
    site.submit(job(wall=100))
    site.submit(job(wall=50, submit_s=10, priority=9))  # arrives later, jumps the queue
    probe = job(wall=100, run=20)
    assert site.what_if(probe) == (150, 170)
    assert site.what_if(probe, future_arrivals=False) == (100, 120)
    site.advance(20)
    assert site.what_if(probe, future_arrivals=False) == (150, 170)  # now it is queued


def test_clone_is_independent() -> None:
    site = _busy_site(3)
    clone = site.clone()
    clone.submit(job(nodes=6, cpus=8, wall=5000))
    clone.run_until_idle()
    assert clone.now > site.now
    original = [(s.job_id, s.state, s.start_s) for s in site.statuses()]
    site.run_until_idle()
    fresh = _busy_site(3)
    fresh.run_until_idle()
    assert [(s.job_id, s.state, s.start_s) for s in site.statuses()] == [
        (s.job_id, s.state, s.start_s) for s in fresh.statuses()
    ]
    assert len(original) == 60


def test_replay_is_deterministic() -> None:
    a, b = _busy_site(7), _busy_site(7)
    a.run_until_idle()
    b.run_until_idle()
    assert [(s.start_s, s.end_s) for s in a.statuses()] == [
        (s.start_s, s.end_s) for s in b.statuses()
    ]


# -- node placement in snapshots, seeding running jobs ----------------------------------------


def test_snapshot_names_the_nodes_of_running_jobs() -> None:
    site = SimSite(make_spec(nodes=4, cpus=4))
    wide = site.submit(job(nodes=2, wall=100))
    part = site.submit(job(nodes=1, cpus=1, wall=100))
    pend = site.submit(job(nodes=4, wall=100))
    jobs = {j.job_id: j for j in site.snapshot().jobs}
    assert jobs[wide].node_names == ("p-0001", "p-0002")
    assert jobs[part].node_names == ("p-0003",)
    assert jobs[pend].node_names == ()
    assert {n.name for n in site.snapshot().nodes} >= {"p-0001", "p-0002", "p-0003"}


def test_seed_running_places_a_job_on_given_nodes() -> None:
    site = SimSite(make_spec(nodes=4, cpus=4))
    site.advance(50)
    a = site.seed_running(job(nodes=2, cpus=2, wall=100, run=30), [1, 3])
    st = site.status(a)
    assert (st.state, st.start_s, st.end_s, st.limit_end_s) == ("running", 50, 80, 150)
    snap = site.snapshot()
    assert [n.cpus_alloc for n in snap.nodes] == [0, 2, 0, 2]
    assert next(j for j in snap.jobs if j.job_id == a).node_names == ("p-0002", "p-0004")
    # a whole-node job now waits for a pair of idle nodes: 0 and 2 are free, so it starts
    b = site.submit(job(nodes=2, wall=100))
    assert site.status(b).start_s == 50
    # and a 3-node one waits for the seeded job to end (at 80), not for its limit
    c = site.submit(job(nodes=3, wall=100))
    site.advance(200)
    assert site.status(c).start_s == 150  # b holds nodes 0 and 2 until 150
    with pytest.raises(SimRequestError, match="cannot seed"):
        site.seed_running(job(nodes=1, wall=10), [0])  # node 0 is full
    with pytest.raises(SimRequestError, match="distinct"):
        site.seed_running(job(nodes=2, cpus=1, wall=10), [3, 3])
    with pytest.raises(SimRequestError, match="out of range"):
        site.seed_running(job(nodes=1, cpus=1, wall=10), [9])


def test_seeded_running_job_has_no_launch_delay_and_blocks_the_head() -> None:
    site = SimSite(make_spec(nodes=2, cpus=4), start_delay_s=10)
    site.seed_running(job(nodes=1, wall=100, run=100), [0])
    head = site.submit(job(nodes=2, wall=50))
    late = site.submit(job(nodes=1, wall=101))  # its limit is past the shadow time (100)
    fits = site.submit(job(nodes=1, wall=100))  # its limit is the shadow time: backfills
    assert site.status(head).start_s is None
    assert site.status(late).start_s is None and site.status(fits).start_s == 0
    site.run_until_idle()
    assert site.status(head).start_s == 100  # the seeded job ends at 100 exactly


def test_clones_snapshot_their_own_running_jobs_under_a_shared_job_id() -> None:
    # Two clones of one site (two policies' worlds) each number their next submission the
    # same; their snapshots must show their own job, never the other clone's record of it.
    base = SimSite(make_spec(nodes=2, cpus=4))
    base.submit(job(1, wall=1000, run=1000))  # a background job on one node
    base.advance(10.0)
    base.snapshot()
    a, b = base.clone(), base.clone()
    a.advance(20.0)
    ja = a.submit(job(1, wall=500, cpus=1))
    b.advance(50.0)
    jb = b.submit(job(1, wall=3000, cpus=3))
    assert ja == jb  # the same id for different jobs
    a.advance(60.0)
    b.advance(60.0)
    ra = next(j for j in a.snapshot().jobs if j.job_id == ja)
    rb = next(j for j in b.snapshot().jobs if j.job_id == jb)
    assert (ra.cpus, ra.time_limit_s) == (1, 500)
    assert (rb.cpus, rb.time_limit_s) == (3, 3000)
    assert ra.start_time is not None and rb.start_time is not None
    assert (rb.start_time - ra.start_time).total_seconds() == 30.0
