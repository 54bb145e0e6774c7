"""Placement over hand-built snapshots: feasibility, wait prediction, decision traces."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from federation.core.envelope import ResourceEnvelope, Shape, format_walltime
from federation.core.errors import BadEnvelopeError, NoFeasibleSiteError
from federation.core.snapshot import (
    FederationSnapshot,
    JobRecord,
    NodeRecord,
    PartitionSnapshot,
    SiteHealth,
    SiteSnapshot,
)
from federation.core.spec import SiteSpec, load_sites
from federation.placement.candidates import shape_in
from federation.placement.decide import place

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
SPECS = load_sites()


def _site_snapshot(
    spec: SiteSpec,
    busy: dict[str, int] | None = None,
    pending: dict[str, int] | None = None,
    reachable: bool = True,
) -> SiteSnapshot:
    """A snapshot of ``spec`` where ``busy[partition]`` nodes are fully allocated by jobs
    ending in 1 h and ``pending[partition]`` whole-node jobs wait behind them."""
    busy, pending = busy or {}, pending or {}
    nodes, parts, jobs = [], [], []
    for p in spec.partitions:
        n_busy = busy.get(p.name, 0)
        gtype = p.gpu_type
        for i in range(p.nodes_local):
            full = i < n_busy
            nodes.append(
                NodeRecord(
                    name=f"{spec.name}-{p.name}-{i}",
                    partition=p.name,
                    state="allocated" if full else "idle",
                    cpus_total=p.cpus_per_node,
                    cpus_alloc=p.cpus_per_node if full else 0,
                    mem_mb_total=p.mem_gb_per_node * 1024,
                    mem_mb_alloc=p.mem_gb_per_node * 1024 if full else 0,
                    gpus_total_by_type={gtype: p.gpus_per_node} if gtype else {},
                    gpus_alloc_by_type={gtype: p.gpus_per_node if full else 0} if gtype else {},
                )
            )
            if full:
                jobs.append(
                    JobRecord(
                        job_id=f"{p.name}{i}",
                        partition=p.name,
                        state="running",
                        cpus=p.cpus_per_node,
                        gpus=p.gpus_per_node,
                        gpu_type=gtype,
                        time_limit_s=3600,
                        start_time=NOW,
                        end_time=NOW + timedelta(hours=1),
                    )
                )
        for k in range(pending.get(p.name, 0)):
            jobs.append(
                JobRecord(
                    job_id=f"{p.name}p{k}",
                    partition=p.name,
                    state="pending",
                    reason="Resources",
                    cpus=p.cpus_per_node,
                    gpus=p.gpus_per_node,
                    gpu_type=gtype,
                    time_limit_s=3600,
                    start_time=NOW + timedelta(hours=1),
                )
            )
        gt = {gtype: p.gpus_per_node * p.nodes_local} if gtype else {}
        ga = {gtype: p.gpus_per_node * n_busy} if gtype else {}
        n_pend = pending.get(p.name, 0)
        parts.append(
            PartitionSnapshot(
                site=spec.name,
                partition=p.name,
                max_time_s=p.max_walltime_s,
                nodes_total=p.nodes_local,
                cpus_total=p.cpus_per_node * p.nodes_local,
                cpus_alloc=p.cpus_per_node * n_busy,
                cpus_idle=p.cpus_per_node * (p.nodes_local - n_busy),
                mem_gb_total=p.mem_gb_per_node * p.nodes_local,
                mem_gb_alloc=p.mem_gb_per_node * n_busy,
                gpus_total_by_type=gt,
                gpus_alloc_by_type=ga,
                jobs_running=n_busy,
                jobs_pending=n_pend,
                pending_reasons={"Resources": n_pend} if n_pend else {},
                latest_pending_start=NOW + timedelta(hours=1) if n_pend else None,
            )
        )
    return SiteSnapshot(
        site=spec.name,
        taken_at=NOW,
        health=SiteHealth(
            reachable=reachable,
            probe_age_s=1.0,
            error=None if reachable else "probe timed out after 30 s",
        ),
        partitions=tuple(parts) if reachable else (),
        nodes=tuple(nodes) if reachable else (),
        jobs=tuple(jobs) if reachable else (),
    )


def _fed(**overrides: SiteSnapshot) -> FederationSnapshot:
    sites = [overrides.get(s.name) or _site_snapshot(s) for s in SPECS]
    return FederationSnapshot(taken_at=NOW, sites=tuple(sites))


def _spec(name: str) -> SiteSpec:
    return next(s for s in SPECS if s.name == name)


def test_idle_federation_cpu_task_goes_to_a_cpu_partition() -> None:
    d = place(ResourceEnvelope(cpus_min=8, mem_gb_min=16, walltime_s=600), SPECS, _fed(), now=NOW)
    assert d.chosen.predicted_wait_s == 0
    assert d.chosen.waste == 0  # a CPU-only partition, no GPUs stranded
    assert (d.chosen.site, d.chosen.partition) == ("delta", "cpu")
    assert d.chosen.shape.cpus == 8 and d.chosen.shape.gpus == 0 and d.chosen.shape.mem_gb == 16
    # Vista's GPU partitions are rejected for a CPU task because Vista has a CPU partition
    reasons = {(r.site, r.partition): r.reason for r in d.rejected}
    assert "CPU-only task" in reasons[("vista", "gh")]


def test_one_gpu_task_prefers_best_fit_node() -> None:
    d = place(ResourceEnvelope(gpus_min=1, cpus_min=4, mem_gb_min=8), SPECS, _fed(), now=NOW)
    # every GPU partition is idle; best fit is a 1-GPU-per-node partition (Vista gh/gh-dev)
    assert d.chosen.site == "vista" and d.chosen.partition in ("gh", "gh-dev")
    assert d.chosen.shape.gpu_type == "gh200"


def test_full_queue_is_avoided_and_trace_says_why() -> None:
    env = ResourceEnvelope(gpus_min=4, gpu_types=("a100",), cpus_min=16, mem_gb_min=64)
    idle = place(env, SPECS, _fed(), now=NOW)
    assert idle.chosen.site in ("delta", "anvil")
    busy = _fed(
        delta=_site_snapshot(_spec("delta"), busy={"gpuA100x4": 2}, pending={"gpuA100x4": 3})
    )
    d = place(env, SPECS, busy, policy="earliest-start", now=NOW)
    assert (d.chosen.site, d.chosen.partition) == ("anvil", "gpu")
    delta = next(c for c in d.candidates if c.site == "delta")
    assert delta.predicted_wait_s >= 3600
    assert "3 pending ahead" in delta.why
    twin = place(env, SPECS, busy, now=NOW)  # the default (auto): the twin, same verdict
    assert (twin.chosen.site, twin.chosen.partition) == ("anvil", "gpu")
    assert "twin:" in next(c for c in twin.candidates if c.site == "delta").why
    text = d.explain()
    assert "not delta/gpuA100x4: predicted wait" in text
    assert "GPU type h100 not in ['a100']" in text  # anvil/ai rejected, with the reason


def test_wait_is_time_until_running_jobs_free_enough() -> None:
    env = ResourceEnvelope(
        gpus_min=4, gpu_types=("a100",), cpus_min=16, mem_gb_min=64, sites=("delta",)
    )
    snap = _fed(delta=_site_snapshot(_spec("delta"), busy={"gpuA100x4": 2}))
    d = place(env, SPECS, snap, now=NOW)
    assert d.chosen.predicted_wait_s == pytest.approx(3600)


def test_unreachable_site_is_rejected_not_fatal() -> None:
    snap = _fed(vista=_site_snapshot(_spec("vista"), reachable=False))
    d = place(ResourceEnvelope(gpus_min=1, gpu_types=("gh200",)), SPECS, snap, now=NOW)
    assert d.chosen.site == "deltaai"
    assert any(r.site == "vista" and "probe timed out" in r.reason for r in d.rejected)


def test_no_site_has_eight_h100_per_node() -> None:
    with pytest.raises(NoFeasibleSiteError) as err:
        place(ResourceEnvelope(gpus_min=8, gpu_types=("h100",)), SPECS, _fed(), now=NOW)
    msg = str(err.value)
    assert "anvil/ai: 4 GPUs per node, envelope needs 8 h100" in msg
    assert "Relax the envelope" in msg
    assert err.value.reasons["delta/cpu"] == "no GPUs (envelope needs 8)"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"cpus_min": 8, "cpus_max": 4}, "cpus_min=8 is larger than cpus_max=4"),
        ({"gpus_min": -1}, "gpus_min"),
        ({"walltime_s": 10}, "walltime_s"),
        ({"mem_gb_min": 1e9}, "mem_gb_min"),
        ({"gpu_types": ("A100",), "gpus_min": 1}, "lowercase"),
        ({"gpu_types": ("a100",)}, "gpus_min=0"),
        ({"account": "x; rm -rf /"}, "account"),
    ],
)
def test_bad_envelopes_raise_named_errors(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(BadEnvelopeError, match="invalid resource envelope") as err:
        ResourceEnvelope(**kwargs)  # type: ignore[arg-type]
    assert needle in str(err.value)
    assert isinstance(err.value, ValueError)


def test_unknown_gpu_type_lists_known_ones() -> None:
    with pytest.raises(BadEnvelopeError, match=r"unknown GPU type\(s\) \['b200'\]") as err:
        place(ResourceEnvelope(gpus_min=1, gpu_types=("b200",)), SPECS, _fed(), now=NOW)
    assert "'a100'" in str(err.value) and "'gh200'" in str(err.value)


def test_shape_respects_walltime_and_arch() -> None:
    vista = _spec("vista")
    env = ResourceEnvelope(gpus_min=1, walltime_s=4 * 3600)
    assert shape_in(env, vista, vista.partition("gh-dev")) == "max walltime 7200 s < 14400 s needed"
    arm_only = ResourceEnvelope(arch=("aarch64",))
    assert isinstance(shape_in(arm_only, _spec("delta"), _spec("delta").partition("cpu")), str)


def test_format_walltime() -> None:
    assert format_walltime(90) == "00:01:30"
    assert format_walltime(49 * 3600 + 61) == "49:01:01"
    with pytest.raises(ValueError):
        format_walltime(-1)


# --- policies ------------------------------------------------------------------------------
from federation.core.hardware import GPU_MEMORY_BANDWIDTH_GBPS, gpu_speed, speed_prior  # noqa: E402
from federation.placement.candidates import PlacementDecision, snapshot_wait  # noqa: E402
from federation.placement.policies import (  # noqa: E402
    Policy,
    Watch,
    best_feasible,
    fixed_site,
    get_policy,
    shortest_queue,
    twin,
    twin_hedge,
    twin_watch,
)
from federation.placement.runtime_model import TaskRuntimeModel, UsageRatioModel  # noqa: E402

DDP = ResourceEnvelope(gpus_min=1, gpus_max=4, cpus_min=8, mem_gb_min=32, walltime_s=3600)


def test_fixed_site_pins_and_rejects_the_rest() -> None:
    d = fixed_site("delta").decide(DDP, SPECS, _fed(), NOW)
    assert d.chosen.site == "delta" and all(c.site == "delta" for c in d.candidates)
    assert any(r.reason == "policy pins delta" for r in d.rejected)


def test_shortest_queue_counts_pending_jobs() -> None:
    snap = _fed(
        vista=_site_snapshot(
            _spec("vista"), busy={"gh": 2, "gh-dev": 1}, pending={"gh": 5, "gh-dev": 1}
        )
    )
    env = ResourceEnvelope(gpus_min=1, gpu_types=("gh200",))
    d = shortest_queue().decide(env, SPECS, snap, NOW)
    assert d.chosen.site == "deltaai" and d.chosen.pending_jobs == 0
    assert [c.pending_jobs for c in d.candidates] == [0, 1, 5]


def test_best_feasible_trades_wait_against_runtime() -> None:
    # delta's A100s are busy for an hour; deltaai is free but (by assumption) 3x slower
    snap = _fed(delta=_site_snapshot(_spec("delta"), busy={"gpuA100x4": 2}))
    env = ResourceEnvelope(gpus_min=4, cpus_min=8, mem_gb_min=32, gpu_types=("a100", "gh200"))

    def slow_on_deltaai(s: Shape) -> float:
        return 3 * 7200.0 if s.site == "deltaai" else 7200.0

    d = best_feasible(slow_on_deltaai).decide(env, SPECS, snap, NOW)
    assert d.chosen.site == "anvil"  # free A100s: no wait, normal speed
    by_site = {c.site: c for c in d.candidates}
    assert by_site["delta"].predicted_completion_s == pytest.approx(3600 + 7200)
    assert by_site["deltaai"].predicted_completion_s == pytest.approx(21600)


def test_twin_picks_bigger_shape_only_when_it_finishes_sooner() -> None:
    rt = TaskRuntimeModel(default_speedup_per_doubling=1.9)
    runtime = lambda s: rt.predict("ddp", s, default_s=4000.0)  # noqa: E731
    idle = twin(snapshot_wait, runtime).decide(DDP, SPECS, _fed(), NOW)
    assert idle.chosen.shape.gpus == 4  # nothing waits: 4 GPUs finish first
    assert idle.chosen.predicted_runtime_s == pytest.approx(4000 / 1.9**2)
    # with every 4-GPU node busy for an hour, 1-2 GPUs on Vista/local finish first
    busy = _fed(
        **{
            s.name: _site_snapshot(
                s, busy={p.name: p.nodes_local for p in s.partitions if p.gpus_per_node == 4}
            )
            for s in SPECS
        }
    )
    d = twin(snapshot_wait, runtime).decide(DDP, SPECS, busy, NOW)
    assert d.chosen.shape.gpus in (1, 2) and d.chosen.predicted_wait_s == 0


def test_usefulness_threshold_keeps_the_small_shape_for_marginal_gains() -> None:
    flat = lambda s: 1000.0 * (0.99 if s.gpus > 1 else 1.0)  # noqa: E731
    d = twin(snapshot_wait, flat, usefulness=0.05).decide(DDP, SPECS, _fed(), NOW)
    assert d.chosen.shape.gpus == 1


def test_twin_hedge_adds_a_copy_at_another_site_when_close() -> None:
    env = ResourceEnvelope(gpus_min=4, gpu_types=("a100",), cpus_min=8, mem_gb_min=32)
    d = twin_hedge(snapshot_wait, lambda s: 600.0).decide(env, SPECS, _fed(), NOW)
    assert len(d.hedges) == 1 and d.hedges[0].site != d.chosen.site
    assert {d.chosen.site, d.hedges[0].site} == {"anvil", "delta"}


def test_twin_watch_adds_a_copy_only_to_an_overdue_task_where_another_site_is_sooner() -> None:
    env = ResourceEnvelope(gpus_min=4, gpu_types=("a100",), cpus_min=8, mem_gb_min=32)
    pol = twin_watch(
        snapshot_wait,
        lambda s: 600.0,
        watch=Watch(overdue_s=300.0, margin_s=300.0, max_copies=3, late_weight=0.0),
        max_copies=1,
    )
    first = pol.decide(env, SPECS, _fed(), NOW)  # idle: predicted to start at once
    assert first.chosen.predicted_wait_s == 0 and first.hedges == ()
    held = [first.chosen]
    other = "anvil" if first.chosen.site == "delta" else "delta"
    # now the holding site's A100 nodes are busy for an hour, with more waiting
    stuck = {s.name: (s, {"gpuA100x4": 2, "gpu": 2}) for s in SPECS if s.name == first.chosen.site}
    fresh = pol.decide(
        env,
        SPECS,
        _fed(**{n: _site_snapshot(s, busy=b, pending=b) for n, (s, b) in stuck.items()}),
        NOW,
    )
    # not overdue yet (queued 200 s < 0 s predicted + 300 s): left alone
    assert not pol.overdue(first, 1, queued_s=200.0) and pol.overdue(first, 1, queued_s=300.0)
    assert not pol.overdue(first, 3, queued_s=1e6)  # at max_copies: never judged again
    assert pol.extra_copy(first, fresh, held, queued_s=200.0) is None
    extra = pol.extra_copy(first, fresh, held, queued_s=400.0)
    assert extra is not None and extra.site == other and extra.predicted_wait_s == 0
    # at its copy limit, or where no other site is sooner by the margin: no copy
    three = [held[0], *(c for c in fresh.candidates if c.site in (other, "deltaai"))]
    assert pol.extra_copy(first, fresh, three, queued_s=400.0) is None
    calm = pol.decide(env, SPECS, _fed(), NOW)
    assert pol.extra_copy(first, calm, held, queued_s=400.0) is None
    # a policy that does not watch never adds one
    assert twin_hedge(snapshot_wait, lambda s: 600.0).extra_copy(first, fresh, held, 1e6) is None


def test_twin_watch_charges_a_holding_site_its_lateness_when_told_to() -> None:
    env = ResourceEnvelope(gpus_min=4, gpu_types=("a100",), cpus_min=8, mem_gb_min=32)

    def watching(late_weight: float) -> Policy:
        rules = Watch(overdue_s=300.0, margin_s=300.0, max_copies=3, late_weight=late_weight)
        return twin_watch(snapshot_wait, lambda s: 600.0, watch=rules, max_copies=1)

    first = watching(0.0).decide(env, SPECS, _fed(), NOW)
    held = [first.chosen]
    calm = watching(0.0).decide(env, SPECS, _fed(), NOW)  # the twin still sees no queue
    # the same completion everywhere by the fresh prediction: without the lateness charge,
    # no site is sooner by the margin however late the task is
    assert watching(0.0).extra_copy(first, calm, held, queued_s=1e5) is None
    # charged its whole lateness (400 s > 300 s margin), the holding site loses a copy
    extra = watching(1.0).extra_copy(first, calm, held, queued_s=400.0)
    assert extra is not None and extra.site != held[0].site
    # charged half (200 s < 300 s margin): not yet
    assert watching(0.5).extra_copy(first, calm, held, queued_s=400.0) is None
    assert watching(0.5).extra_copy(first, calm, held, queued_s=700.0) is not None


class _Table:
    """Waits the test sets per (site, GPUs); 0 s for anything else."""

    def __init__(self, **waits: float) -> None:
        self.waits = waits

    def __call__(
        self, shape: Shape, part: object, site: object, now: datetime
    ) -> tuple[float, float, str]:
        w = self.waits.get(f"{shape.site}{shape.gpus}", 0.0)
        return w, w, f"the test says {w:.0f} s"


A100_1_2 = ResourceEnvelope(
    gpus_min=1, gpus_max=2, gpu_types=("a100",), cpus_min=8, mem_gb_min=32, walltime_s=3600
)


def _watch_on(waits: _Table, **rules: object) -> Policy:
    """Waits from ``waits``; 2000 s on 1 GPU, 1000 s on 2; no hedge; overdue after 300 s."""
    defaults: dict[str, object] = {"overdue_s": 300.0, "margin_s": 300.0, "late_weight": 0.0}
    pol = twin_watch(
        waits, lambda s: 2000.0 / s.gpus, watch=Watch(**{**defaults, **rules}), max_copies=1
    )
    pol.usefulness = 0.0
    return pol


def _decide(pol: Policy, waits: _Table, **now: float) -> PlacementDecision:
    waits.waits = now
    return pol.decide(A100_1_2, SPECS, _fed(), NOW)


def test_twin_watch_places_a_smaller_copy_where_a_new_request_starts_sooner() -> None:
    waits = _Table()
    pol = _watch_on(waits)
    first = _decide(pol, waits, anvil1=9e3, anvil2=9e3)  # Delta on 2 GPUs: 1000 s
    assert (first.chosen.site, first.chosen.shape.gpus) == ("delta", 2)
    # Delta's 2-GPU requests now wait 9000 s, a 1-GPU one starts at once; Anvil waits 5000 s
    fresh = _decide(pol, waits, delta2=9e3, anvil1=5e3, anvil2=5e3)
    by_default = pol.extra_copy(first, fresh, [first.chosen], queued_s=400.0)
    assert by_default is not None  # a new place may be a smaller request at a holding site
    assert (by_default.site, by_default.shape.gpus, by_default.predicted_completion_s) == (
        "delta",
        1,
        2000.0,
    )
    # places="site" (the first rule): another site only, and a holding site stands for its
    # best fresh request: Delta's 1-GPU one finishes in 2000 s, so no site is sooner
    site_rule = _watch_on(waits, places="site")
    assert site_rule.extra_copy(first, fresh, [first.chosen], 400.0) is None
    # nothing where a copy already was: with the 1-GPU Delta copy tried, Anvil on 1 GPU
    tried = [first.chosen, by_default]
    nxt = pol.extra_copy(first, fresh, [first.chosen], 400.0, tried=tried)
    assert nxt is not None and (nxt.site, nxt.shape.gpus) == ("anvil", 1)
    # now every Delta request waits 9000 s: by site, shapes="smallest" gives Anvil on 1 GPU
    # (7000 s), shapes="any" the fresh decision's best there, Anvil on 2 GPUs (6000 s)
    slow = _decide(pol, waits, delta1=9e3, delta2=9e3, anvil1=5e3, anvil2=5e3)
    other = site_rule.extra_copy(first, slow, [first.chosen], 400.0)
    assert other is not None and (other.site, other.shape.gpus) == ("anvil", 1)
    best = _watch_on(waits, places="site", shapes="any").extra_copy(
        first, slow, [first.chosen], 400.0
    )
    assert best is not None and (best.site, best.shape.gpus) == ("anvil", 2)


def test_twin_watch_charges_each_holding_site_its_own_copys_lateness() -> None:
    waits = _Table()
    pol = _watch_on(waits, late_weight=1.0)
    first = _decide(pol, waits, anvil1=9e3, anvil2=9e3)
    anvil2 = next(c for c in first.candidates if (c.site, c.shape.gpus) == ("anvil", 2))
    # fresh: Delta on 1 GPU 2000 s, Anvil on 1 GPU 2500 s; the held 2-GPU requests 6000 s
    fresh = _decide(pol, waits, delta2=5e3, anvil1=500.0, anvil2=5e3)
    # Delta's copy is 2000 s late: charged to Delta's new places too, so Anvil (2500 s)
    one = pol.extra_copy(first, fresh, [first.chosen], queued_s=2000.0)
    assert one is not None and (one.site, one.shape.gpus) == ("anvil", 1)
    # charge="task": the lateness only raises the bar; the ranking stays Delta first
    task = _watch_on(waits, late_weight=1.0, charge="task")
    two = task.extra_copy(first, fresh, [first.chosen], queued_s=2000.0)
    assert two is not None and (two.site, two.shape.gpus) == ("delta", 1)
    # an Anvil copy queued 100 s past its 0 s prediction charges Anvil 100 s: Anvil on 1 GPU
    # (2600 s) still wins; held as long as the task it charges 2000 s, and Delta's 4000 s
    # beats Anvil's 4500 s
    held = [first.chosen, anvil2.model_copy(update={"predicted_wait_s": 0.0})]
    three = pol.extra_copy(first, fresh, held, 2000.0, held_for_s=[2000.0, 100.0])
    assert three is not None and (three.site, three.shape.gpus) == ("anvil", 1)
    four = pol.extra_copy(first, fresh, held, 2000.0, held_for_s=[2000.0, 2000.0])
    assert four is not None and (four.site, four.shape.gpus) == ("delta", 1)


def test_unknown_policy_names_the_choices() -> None:
    with pytest.raises(BadEnvelopeError, match="best-feasible"):
        get_policy("random")


# --- runtime models ------------------------------------------------------------------------
def _shape(site: str, gpus: int) -> Shape:
    return Shape(site=site, partition="p", nodes=1, cpus=8, mem_gb=8, gpus=gpus, walltime_s=3600)


def test_speedup_per_doubling_is_learned_from_observations() -> None:
    m = TaskRuntimeModel()
    assert m.speedup_per_doubling("ddp") == 1.8  # prior
    for g, t in ((1, 1000.0), (2, 1000 / 1.9), (4, 1000 / 1.9 / 1.96)):
        m.observe("ddp", _shape("delta", g), t)
    assert m.speedup_per_doubling("ddp") == pytest.approx(1.93, abs=0.01)
    assert m.predict("ddp", _shape("delta", 2), 1.0) == pytest.approx(1000 / 1.9, rel=0.02)
    # an untried site: scaled from the observations elsewhere
    assert m.predict("ddp", _shape("vista", 1), 1.0) == pytest.approx(1000, rel=0.05)


def test_observations_are_kept_per_partition_and_scaled_by_the_hardware_prior() -> None:
    specs = {s.name: s for s in load_sites(["delta", "deltaai", "anvil"])}
    m = TaskRuntimeModel(speed=speed_prior(specs.values()))

    def gpu(site: str, partition: str, gpus: int = 1) -> Shape:
        return Shape(
            site=site, partition=partition, nodes=1, cpus=8, mem_gb=8, gpus=gpus, walltime_s=60
        )

    # nothing observed: the default at the reference (A100) speed, scaled by bandwidth
    assert m.predict("inf", gpu("delta", "gpuA100x4"), 1000.0) == pytest.approx(1000.0)
    assert m.predict("inf", gpu("delta", "gpuA40x4"), 1000.0) == pytest.approx(1000 * 1555 / 696)
    assert m.predict("inf", gpu("deltaai", "ghx4"), 1000.0) == pytest.approx(1000 * 1555 / 4000)
    # run once on Delta's A40s: Delta's A100 partition is predicted from it through the
    # prior, not taken as the same hardware
    m.observe("inf", gpu("delta", "gpuA40x4"), 1400.0)
    assert m.predict("inf", gpu("delta", "gpuA40x4"), 1000.0) == pytest.approx(1400.0)
    assert m.predict("inf", gpu("delta", "gpuA100x4"), 1000.0) == pytest.approx(1400 * 696 / 1555)
    assert m.predict("inf", gpu("anvil", "ai"), 1000.0) == pytest.approx(1400 * 696 / 3350)
    # once it has run on the H100s, that observation replaces the prior there
    m.observe("inf", gpu("anvil", "ai"), 700.0)
    assert m.predict("inf", gpu("anvil", "ai"), 1000.0) == pytest.approx(700.0)
    # CPU shapes have no prior: a CPU workload seen on Delta is predicted alike elsewhere
    cpu = Shape(site="delta", partition="cpu", nodes=1, cpus=16, mem_gb=8, gpus=0, walltime_s=60)
    m.observe("prep", cpu, 300.0)
    assert m.predict("prep", cpu.model_copy(update={"site": "anvil", "partition": "gpu"}), 1.0) == (
        pytest.approx(300.0)
    )
    # no prior at all: every untried partition looks like the observed one
    flat = TaskRuntimeModel()
    flat.observe("inf", gpu("delta", "gpuA40x4"), 1400.0)
    assert flat.predict("inf", gpu("deltaai", "ghx4"), 1000.0) == pytest.approx(1400.0)


def test_optimism_makes_an_untried_partition_win_a_tie_until_it_has_run() -> None:
    m = TaskRuntimeModel(optimism=0.05)
    delta = Shape(site="delta", partition="cpu", nodes=1, cpus=16, mem_gb=8, gpus=0, walltime_s=60)
    vista = delta.model_copy(update={"site": "vista", "partition": "gg"})
    # nothing observed anywhere: no one is favoured
    assert m.predict("prep", delta, 100.0) == m.predict("prep", vista, 100.0)
    m.observe("prep", delta, 300.0)
    assert m.predict("prep", delta, 1.0) == pytest.approx(300.0)
    assert m.predict("prep", vista, 1.0) == pytest.approx(300.0 / 1.05)  # worth a try
    m.observe("prep", vista, 330.0)  # tried: slower there, and now known
    assert m.predict("prep", vista, 1.0) == pytest.approx(330.0)


def test_the_datasheet_prior_orders_the_gpus_and_leaves_cpus_alone() -> None:
    assert gpu_speed("a100") == 1.0 and gpu_speed(None) == 1.0 and gpu_speed("mi300x") == 1.0
    order = sorted(GPU_MEMORY_BANDWIDTH_GBPS, key=gpu_speed)
    assert order == ["l4", "a40", "a100", "h100", "gh200"]
    spec = load_sites(["anvil"])[0]
    speed = speed_prior([spec])
    h100 = Shape(site="anvil", partition="ai", nodes=1, cpus=8, mem_gb=8, gpus=1, walltime_s=60)
    assert speed(h100) == pytest.approx(3350 / 1555)
    assert speed(h100.model_copy(update={"gpus": 0})) == 1.0
    assert speed(h100.model_copy(update={"site": "elsewhere"})) == 1.0


def test_usage_ratio_conditional_remaining_time() -> None:
    u = UsageRatioModel()
    assert u.remaining_s("kth", 1000, 100) == 900  # no data: Slurm's assumption
    for r in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0):
        u.observe("kth", 1000, 1000 * r)
    assert u.duration_s("kth", 1000, 0.5) == pytest.approx(600)
    # survived 450 s of 1000: only ratios >= 0.5 remain; median of those is 0.8
    assert u.remaining_s("kth", 1000, 450, 0.5) == pytest.approx(800 - 450)
    assert u.remaining_s("kth", 1000, 999.5) == pytest.approx(0.5)
