"""The queue twin: rebuilt from a snapshot, it predicts the true wait when jobs run to their
limits and nothing else arrives, because it seeds running jobs on the nodes they hold."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest

from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.snapshot import FederationSnapshot, SiteSnapshot
from federation.core.spec import SiteSpec, load_sites
from federation.placement.overlay import with_own_jobs
from federation.placement.policies import twin, twin_hedge
from federation.placement.runtime_model import UsageRatioModel
from federation.placement.twin import TwinPredictor
from federation.sim.load import background_load
from federation.sim.queue import DEFAULT_EPOCH, SimJob, SimSite
from federation.sim.traces import default_trace_dir, load_swf


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
    assert mid == pytest.approx(999.5, abs=1.0)
    assert high == pytest.approx(999.5, abs=1.0)
    assert "every job to its limit" in why
    # one twin answers both quantiles when nothing finished has been seen (they are equal)
    assert len({k[3] for k in p._cache}) == 1


def _kth_window() -> tuple[dict[str, SiteSpec], dict[str, SimSite], UsageRatioModel]:
    """Two paper-shaped sites loaded from the real KTH log, after 12 h of history."""
    path = default_trace_dir() / "KTH-SP2-1996-2.1-cln.swf.gz"
    if not path.exists():
        pytest.skip(f"trace {path} not found (set FEDERATION_TRACES)")
    trace = load_swf(path)
    specs = {s.name: s for s in load_sites(["delta", "anvil"])}
    sims: dict[str, SimSite] = {}
    usage = UsageRatioModel()
    for i, (name, spec) in enumerate(specs.items()):
        nodes = {p.name: max(2, min(6, round(p.nodes_real / 24))) for p in spec.partitions}
        load = background_load(
            spec, trace, target_utilization=1.3, duration_s=20 * 3600, seed=11 + i, nodes=nodes
        )
        sim = sims[name] = load.site_for(spec, start_delay_s=10.0)
        sim.submit_many(load.jobs)
        sim.advance(12 * 3600)
        for st in sim.finished_since(0.0):
            if st.start_s is not None and st.end_s is not None and st.limit_end_s is not None:
                usage.observe(name, st.limit_end_s - st.start_s, st.end_s - st.start_s)
    return specs, sims, usage


_KTH_ENVELOPES = (
    ResourceEnvelope(cpus_min=16, cpus_max=64, mem_gb_min=32, walltime_s=3 * 3600),
    ResourceEnvelope(gpus_min=1, gpus_max=4, cpus_min=8, mem_gb_min=32, walltime_s=6 * 3600),
)
"""A CPU and a GPU envelope decided on the KTH window."""


def _kth_runtime(s: Shape) -> float:
    return 1200.0 / (s.gpus or s.cpus / 16)


@pytest.mark.parametrize("samples", [6, 0])
def test_prepared_twin_decides_exactly_as_one_shape_at_a_time(samples: int) -> None:
    """The fast path (waits memoized across policies, every shape of a decision batched into
    one what-if pass per twin and partition) gives the very numbers of asking each shape
    alone on fresh twins: same candidates, same predicted waits, same choice."""
    specs, sims, usage = _kth_window()
    envelopes, rt = _KTH_ENVELOPES, _kth_runtime
    fast = TwinPredictor(specs, usage, samples=samples)
    fast_policies = [twin(fast, rt), twin_hedge(fast, rt)]
    assert all(p.prepare is not None for p in fast_policies)
    queued = 0
    for step in range(3):
        for sim in sims.values():
            sim.advance(12 * 3600 + step * 1800.0)
        t = sims["delta"].now
        now = DEFAULT_EPOCH + timedelta(seconds=t)
        fed = FederationSnapshot(taken_at=now, sites=tuple(s.snapshot() for s in sims.values()))
        for env in envelopes:
            for pol in fast_policies:
                slow_pol = twin(TwinPredictor(specs, usage, samples=samples), rt, name=pol.name)
                slow_pol.prepare = None  # every wait from its own what-if on a fresh twin
                slow_pol.hedge_within, slow_pol.hedge_spread_s = (
                    pol.hedge_within,
                    pol.hedge_spread_s,
                )
                d_fast = pol.decide(env, list(specs.values()), fed, now)
                d_slow = slow_pol.decide(env, list(specs.values()), fed, now)
                assert d_fast.candidates == d_slow.candidates
                assert d_fast.hedges == d_slow.hedges
                how = f"{samples} sampled twins" if samples else "quantile twin"
                assert how in d_fast.chosen.why
                queued += sum(c.predicted_wait_s > 0 for c in d_fast.candidates)
    assert queued > 0  # the window is busy enough that the twins have waits to agree on


def test_a_burst_adds_our_own_jobs_to_the_twin_instead_of_replaying_the_queue() -> None:
    """A burst placed from one snapshot (each decision sees the ones before it as pending
    jobs of ours, :mod:`federation.placement.overlay`) decides exactly as when every twin
    is built again from the whole queue with our jobs in it, while the queue is replayed
    once per site and quantile for the whole burst."""
    specs, sims, usage = _kth_window()
    envelopes, rt = _KTH_ENVELOPES, _kth_runtime
    now = DEFAULT_EPOCH + timedelta(seconds=sims["delta"].now)
    fed = FederationSnapshot(taken_at=now, sites=tuple(s.snapshot() for s in sims.values()))
    fast = TwinPredictor(specs, usage)
    builds: list[str] = []
    build = fast._build

    def counted(site: SiteSnapshot, at: datetime, q: float, part: str | None = None) -> SimSite:
        builds.append(site.site)
        return build(site, at, q, part)

    fast._build = counted  # type: ignore[method-assign]
    pol = twin(fast, rt)
    shipped: list[tuple[Shape, datetime]] = []
    where: set[str] = set()
    for i in range(16):
        env = envelopes[i % 2]
        if i % 3 == 2:  # some of the burst on the other site too
            env = env.model_copy(update={"sites": ("anvil",)})
        snap = with_own_jobs(fed, shipped)
        slow = TwinPredictor(specs, usage)
        # every twin built again from the whole queue, every partition in it
        slow.twin = lambda site, at, q, _part, p=slow: p._build(site, at, q)  # type: ignore[method-assign]
        slow_pol = twin(slow, rt, name=pol.name)
        slow_pol.prepare = None
        d_fast = pol.decide(env, list(specs.values()), snap, now)
        d_slow = slow_pol.decide(env, list(specs.values()), snap, now)
        assert d_fast.candidates == d_slow.candidates, i
        shipped.append((d_fast.chosen.shape, now + timedelta(microseconds=i + 1)))
        where.add(d_fast.chosen.shape.site)
    assert len(where) == 2  # both sites took some of the burst: both twins grew
    # the queue replayed once per quantile and partition asked (not once per decision)
    parts = {(s, p.name) for s in specs for p in specs[s].partitions}
    assert len(builds) <= 2 * len(parts), builds


# --- the usage model: censored running jobs, partitions -------------------------------------


def _five_finished_early() -> UsageRatioModel:
    """Five finished jobs that used 10%..50% of a 1000 s limit (the pooled ratios alone: no
    same-limit history)."""
    usage = UsageRatioModel(history=0)
    for r in (0.1, 0.2, 0.3, 0.4, 0.5):
        usage.observe("sim", 1000.0, 1000.0 * r, "p")
    return usage


def test_running_jobs_enter_the_usage_model_as_censored_observations() -> None:
    """Five jobs finished early; five more have been running for 60% of their limit. From
    finished jobs alone the median job uses 30%; with the running ones as right-censored
    (Kaplan-Meier), half the mass lies beyond 50%, past every finished job, so the median
    runs to its limit, and the lower quartile moves from 20% to 30%."""
    usage = _five_finished_early()
    assert usage.duration_s("sim", 1000.0, 0.5) == pytest.approx(300.0)
    assert usage.duration_s("sim", 1000.0, 0.25) == pytest.approx(200.0)
    assert usage.remaining_s("sim", 1000.0, 450.0, 0.5) == pytest.approx(50.0)
    site = SimSite(make_spec(nodes=5, cpus=4))
    site.submit_many([job(4, 1000) for _ in range(5)])
    site.advance(600.0)
    snap = site.snapshot()
    usage.look(snap)
    assert usage.duration_s("sim", 1000.0, 0.5) == pytest.approx(1000.0)
    assert usage.duration_s("sim", 1000.0, 0.25) == pytest.approx(300.0)
    # partition p has too few finished jobs of its own: the site's estimate answers
    assert usage.samples("sim", "p") == 5 < usage.min_partition_samples
    assert usage.duration_s("sim", 1000.0, 0.5, "p") == pytest.approx(1000.0)
    # a job running for 45% of its limit: among finished jobs only the 50% one outlived
    # that (50 s left); with the censored ones, most of the jobs that did run to the limit
    assert usage.remaining_s("sim", 1000.0, 450.0, 0.5) == pytest.approx(550.0)
    # the next look sees none running: back to the finished jobs alone
    site.advance(1001.0)
    usage.look(site.snapshot())
    assert usage.duration_s("sim", 1000.0, 0.5) == pytest.approx(300.0)


def test_jobs_of_one_limit_are_predicted_from_the_last_ones_of_that_limit() -> None:
    """A sweep of 8-hour jobs that each ran 7.6 h, among many short jobs: the pooled ratios
    say 8-hour jobs end early; the same-limit history says they run 7.6 h."""
    usage = UsageRatioModel()
    for _ in range(200):
        usage.observe("s", 3600.0, 300.0, "gpu")  # the many short ones
    assert usage.duration_s("s", 28800.0, 0.5, "gpu") == pytest.approx(2400.0)
    usage.observe("s", 28800.0, 27360.0, "gpu")
    assert usage.duration_s("s", 28800.0, 0.5, "gpu") < 27000  # one is not a kind yet
    usage.observe("s", 28800.0, 27500.0, "gpu")
    assert usage.duration_s("s", 28800.0, 0.5, "gpu") == pytest.approx(27500.0)
    assert usage.duration_s("s", 28800.0, 0.0, "gpu") == pytest.approx(27360.0)
    # a running one: 20,000 s in, the kind runs ~27.4 ks: about 7.4 ks left
    assert usage.remaining_s("s", 28800.0, 20000.0, 0.0, "gpu") == pytest.approx(7360.0)
    # one that outlived its kind runs to its limit
    assert usage.remaining_s("s", 28800.0, 28000.0, 0.5, "gpu") == pytest.approx(800.0)
    # other partitions, other limits, and the site-wide query are not affected
    assert usage.duration_s("s", 28800.0, 0.5, "cpu") == pytest.approx(2400.0)
    assert usage.duration_s("s", 28800.0, 0.5) == pytest.approx(2400.0)
    # only the latest few count: a changed campaign takes over
    for _ in range(4):
        usage.observe("s", 28800.0, 1000.0, "gpu")
    assert usage.duration_s("s", 28800.0, 0.5, "gpu") == pytest.approx(1000.0)


def test_kaplan_meier_quantiles_by_hand() -> None:
    from federation.placement.runtime_model import kaplan_meier_quantiles

    # 4 events, 4 censored at 0.25: S(0.1) = 7/8, S(0.2) = 7/8 * 6/7 = 3/4, then the
    # censored leave the risk set: S(0.3) = 3/4 * 1/2 = 3/8, S(0.4) = 0
    q = kaplan_meier_quantiles([0.1, 0.2, 0.3, 0.4], [0.25] * 4, 8)
    assert q == [0.1, 0.2, 0.3, 0.3, 0.3, 0.4, 0.4, 0.4]
    assert kaplan_meier_quantiles([], [0.5], 4) == []
    # no censoring: the empirical quantiles
    assert kaplan_meier_quantiles([0.2, 0.4], [], 4) == [0.2, 0.2, 0.4, 0.4]


def test_usage_model_keeps_partitions_apart_once_they_have_enough_jobs() -> None:
    usage = UsageRatioModel(min_partition_samples=30)
    for _ in range(30):
        usage.observe("s", 1000.0, 900.0, "gpu")
        usage.observe("s", 1000.0, 100.0, "cpu")
    for _ in range(5):
        usage.observe("s", 1000.0, 500.0, "small")
    assert usage.samples("s") == 65 and usage.samples("s", "gpu") == 30
    assert usage.duration_s("s", 1000.0, 0.5, "gpu") == pytest.approx(900.0)
    assert usage.duration_s("s", 1000.0, 0.5, "cpu") == pytest.approx(100.0)
    # too few of its own: the site's distribution (35 of 65 used >= 50%: median 500)
    assert usage.duration_s("s", 1000.0, 0.5, "small") == pytest.approx(
        usage.duration_s("s", 1000.0, 0.5)
    )
    assert usage.duration_s("s", 1000.0, 0.5) == pytest.approx(500.0)
