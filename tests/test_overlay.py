"""A burst placed from one snapshot sees its own earlier placements (placement.overlay)."""

from __future__ import annotations

from datetime import timedelta

from test_placement import NOW, SPECS, _fed

from federation.core.envelope import ResourceEnvelope
from federation.placement.decide import place
from federation.placement.overlay import OWN_JOB_PREFIX, with_own_jobs

WHOLE_A100_NODE = ResourceEnvelope(
    gpus_min=4,
    gpus_max=4,
    cpus_min=16,
    mem_gb_min=64,
    walltime_s=3600,
    sites=("delta",),
    partitions=("gpuA100x4",),
)


def test_only_placements_after_a_sites_snapshot_are_added_as_pending_jobs() -> None:
    fed = _fed()
    shape = place(WHOLE_A100_NODE, SPECS, fed, now=NOW).chosen.shape
    same = with_own_jobs(fed, [(shape, NOW - timedelta(seconds=1))])  # already in the probe
    assert same is fed
    view = with_own_jobs(fed, [(shape, NOW + timedelta(seconds=1))])
    delta = next(s for s in view.sites if s.site == "delta")
    (own,) = [j for j in delta.jobs if j.job_id.startswith(OWN_JOB_PREFIX)]
    assert own.state == "pending" and own.partition == "gpuA100x4" and own.gpus == 4
    assert own.time_limit_s == 3600 and own.submit_time == NOW + timedelta(seconds=1)
    others = [s for s in view.sites if s.site != "delta"]
    assert others == [s for s in fed.sites if s.site != "delta"]  # untouched


def test_the_third_whole_node_request_of_a_burst_waits_on_two_nodes() -> None:
    fed = _fed()
    shipped = []
    waits = []
    for i in range(3):
        view = with_own_jobs(fed, shipped)
        d = place(WHOLE_A100_NODE, SPECS, view, now=NOW)  # auto: the twin
        waits.append(d.chosen.predicted_wait_s)
        shipped.append((d.chosen.shape, NOW + timedelta(seconds=i + 1)))
    assert waits[:2] == [0.0, 0.0]
    assert waits[2] > 0  # both nodes are taken by the burst's first two
    blind = [place(WHOLE_A100_NODE, SPECS, fed, now=NOW).chosen.predicted_wait_s for _ in range(3)]
    assert blind == [0.0, 0.0, 0.0]  # without the overlay every one "starts now"
