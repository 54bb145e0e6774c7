"""End to end on the real local federation: Slurm clusters, endpoint daemons, the real SDK."""

from __future__ import annotations

import threading
import time
from contextlib import suppress
from typing import Any

import pytest
from slurm_scene import BOTH_PATHS, scheduled, until

from federation.core.envelope import ResourceEnvelope
from federation.core.errors import SiteUnavailableError
from federation.core.tasks import PythonTask, ShellTask
from federation.deploy.local import LocalSites
from federation.localslurm.topology import DEFAULT_PARTITION
from federation.placement.classes import class_view
from federation.runtime.coordinator import Coordinator
from federation.runtime.events import Event
from federation.sites.cloud import CloudSite
from federation.sites.compute import ComputeSite
from functions.faults import garbage_probe, slow_probe
from functions.workloads import fail_with, report_allocation

pytestmark = [pytest.mark.slurm, BOTH_PATHS]


def _events(handle_events: list[Event]) -> list[str]:
    return [e.kind for e in handle_events]


def _wait_for(what: str, check: Any, timeout_s: float) -> None:
    until(what, check, timeout_s, every_s=0.2)


def test_snapshot_covers_every_site_and_partition(coord: Coordinator, local: LocalSites) -> None:
    snap = coord.inspect_federation()
    assert {s.site for s in snap.sites} == {s.name for s in local.specs}
    for spec in local.specs:
        site = snap.site(spec.name)
        assert site is not None and site.health.reachable, site
        for p in spec.partitions:  # each class, matched to live nodes as placement does
            view = class_view(site, p)
            assert view is not None, (spec.name, p.name)
            ps = view[0]
            if p.partition == p.name and not p.constraint:  # a partition of its own
                assert ps.nodes_total == p.nodes_local
                assert ps.cpus_total == p.cpus_per_node * p.nodes_local
            else:  # nodes chosen by constraint (Perlmutter): shared with other classes
                assert ps.nodes_total >= p.nodes_local, (spec.name, p.name)
            if p.gpu_type:
                assert ps.gpus_total_by_type.get(p.gpu_type, 0) >= p.gpus_per_node * p.nodes_local
    frame = snap.partitions_frame()
    parts = {(s.name, p.partition or DEFAULT_PARTITION) for s in local.specs for p in s.partitions}
    assert len(frame) == len(parts)


def test_shaped_tasks_run_in_matching_slurm_allocations(
    coord: Coordinator, local: LocalSites
) -> None:
    envelopes = {
        "cpu": ResourceEnvelope(cpus_min=4, mem_gb_min=8, walltime_s=600, sites=("local",)),
        "gpu1": ResourceEnvelope(  # --gpus-per-node, as Anvil documents
            gpus_min=1, cpus_min=2, mem_gb_min=4, walltime_s=600, sites=("anvil",)
        ),
        "gpu4": ResourceEnvelope(
            gpus_min=4, cpus_min=8, mem_gb_min=16, walltime_s=600, sites=("deltaai",)
        ),
    }
    seen: dict[str, list[Event]] = {k: [] for k in envelopes}
    handles = {
        k: coord.submit_task(PythonTask(report_allocation, (0.2,)), env, on_event=seen[k].append)
        for k, env in envelopes.items()
    }
    for k, h in handles.items():
        r = coord.get_result(h, timeout_s=180)
        assert r.status == "completed", (k, r.error, r.remote_traceback)
        if local.path == "cloud":  # the start is read from squeue, possibly after the end
            _wait_for("the job id of " + k, lambda h=h: coord.get_result(h).slurm_job_id, 30)
            r = coord.get_result(h)
        v = r.value
        assert v["partition"] == r.partition
        assert v["cluster"] == r.site
        assert v["cpus"] == r.shape.cpus
        assert v["gpus"] == r.shape.gpus
        assert v["mem_gb"] == float(r.shape.mem_gb)
        assert r.slurm_job_id == v["slurm_job_id"]
        kinds = _events(seen[k])  # task.accounted may follow (sacct, read after the end)
        assert kinds[:3] == ["task.queued", "task.started", "task.completed"], kinds
        assert kinds[3:] in ([], ["task.accounted"]), kinds
    # sacct (real accounting through the shared slurmdbd) knows the batch job and its GPUs
    r = coord.get_result(handles["gpu4"])
    assert r.slurm_job_id is not None
    deadline = time.monotonic() + 60
    row = ""
    while time.monotonic() < deadline and "gres/gpu=4" not in row:
        out = local.slurm.run(
            "deltaai",
            ["sacct", "-X", "-n", "-P", "-j", r.slurm_job_id, "-o", "JobID,Partition,AllocTRES"],
        )
        row = out.stdout.strip()
        time.sleep(0.5)
    assert row.startswith(f"{r.slurm_job_id}|ghx4|"), row
    assert "gres/gpu=4" in row, row


def test_failure_arrives_as_event_with_remote_traceback(coord: Coordinator) -> None:
    got = threading.Event()
    events: list[Event] = []

    def cb(ev: Event) -> None:
        events.append(ev)
        if ev.kind == "task.failed":
            got.set()

    h = coord.submit_task(
        PythonTask(fail_with, ("no such input",)),
        ResourceEnvelope(sites=("local",), walltime_s=300),
        on_event=cb,
    )
    assert got.wait(180), _events(events)
    r = coord.get_result(h)
    assert r.status == "failed"
    assert "RuntimeError: no such input" in r.remote_traceback
    assert "fail_with" in r.remote_traceback


def test_shell_task(coord: Coordinator) -> None:
    h = coord.submit_task(
        ShellTask(command="echo part=$SLURM_JOB_PARTITION; echo own-words >&2"),
        ResourceEnvelope(sites=("local",), walltime_s=300),
    )
    r = coord.get_result(h, timeout_s=180)
    assert r.status == "completed", r.error
    assert r.stdout is not None and r.stdout.strip() == f"part={r.partition}"
    assert r.returncode == 0
    # the task's stderr is its own: the endpoint sandboxes shell tasks, as the SDK expects
    # (before, it began with "WARNING: Task sandboxing will not work ...")
    assert r.stderr is not None and r.stderr.strip() == "own-words", r.stderr


@pytest.mark.paths("embedded")
def test_full_queue_is_avoided_and_trace_says_why(coord: Coordinator, local: LocalSites) -> None:
    """Placement reads Delta's full A100 partition from the snapshot and goes to an idle
    A100 node elsewhere (Anvil or Perlmutter), saying why. On one path: the path only
    carries the probe there, and the snapshot it brings is checked on both
    (``test_snapshot_covers_every_site_and_partition``)."""
    tag = "fed-test-fill"
    try:
        for _ in range(4):  # 2 nodes x 4 A100: two running, two pending
            res = local.slurm.run(
                "delta",
                [
                    "sbatch",
                    "--parsable",
                    f"--job-name={tag}",
                    "--partition=gpuA100x4",
                    "--account=bbka-delta-gpu",  # Delta charges GPU partitions apart
                    "--gpus-per-node=4",
                    "--cpus-per-task=8",
                    "--mem=8G",
                    "--time=00:30:00",
                    "--output=/dev/null",
                    "--wrap=sleep 600",
                ],
            )
            assert res.returncode == 0, res.stderr
        _wait_for(
            "Delta's controller scheduled the fillers",
            lambda: scheduled(local.slurm, "delta", tag),
            30,
        )
        env = ResourceEnvelope(gpus_min=4, gpu_types=("a100",), cpus_min=8, mem_gb_min=16)
        snap = coord.inspect_federation()
        delta = snap.site("delta")
        assert delta is not None
        part = delta.partition("gpuA100x4")
        assert part is not None and part.jobs_pending >= 1
        from federation.placement.decide import place

        d = place(env, [b.spec for b in coord.backends.values()], snap)
        # an idle 4-A100 node elsewhere: Anvil's gpu partition or Perlmutter's gpu classes
        assert d.chosen.site in ("anvil", "perlmutter") and d.chosen.predicted_wait_s < 60
        delta_c = next(c for c in d.candidates if c.site == "delta")
        assert delta_c.predicted_wait_s > 60
        assert "pending" in delta_c.why  # the twin (auto) or the snapshot estimate says why
        assert "not delta/gpuA100x4" in d.explain()
    finally:
        local.slurm.run("delta", ["scancel", f"--name={tag}"])


def _reachable(coord: Coordinator, site: str) -> bool:
    s = coord.inspect_federation().site(site)
    return s is not None and s.health.reachable


def test_bad_site_is_marked_unhealthy_not_fatal(coord: Coordinator, local: LocalSites) -> None:
    """As on the real service, the endpoint's status is what the service last heard: a
    stopped endpoint shows offline once its connection closes, and a restarted one online
    once it is heard again (within a second or so); a cloud site asks for the status only
    when its cached answer (``status_ttl_s``; ``online_ttl_s`` on the embedded path) is
    stale, so here it is asked afresh."""
    local.daemons.stop("local")
    try:
        site = coord.backends["local"]
        assert isinstance(site, ComputeSite)
        _wait_for("the service shows it offline", lambda: _offline(site), 30)
        snap = coord.inspect_federation()
        bad = snap.site("local")
        assert bad is not None and not bad.health.reachable
        assert bad.health.error and "local" in bad.health.error
        assert "offline" in bad.health.error, bad.health.error
        assert all(s.health.reachable for s in snap.sites if s.site != "local")
    finally:
        local.daemons.start("local", local.slurm.env("local"))
        _wait_for("the restarted endpoint is heard again", lambda: _reachable(coord, "local"), 30)


def _offline(site: ComputeSite) -> bool:
    """The service shows the endpoint offline (a cloud site's cached status refreshed)."""
    status = site.client.get_endpoint_status(str(site.endpoint_id))
    if status["status"] != "offline":
        return False
    with suppress(SiteUnavailableError):  # its cached "online" answer is dropped
        if isinstance(site, CloudSite):
            site.endpoint_info(refresh=True)
        else:
            site.check_online()
    return True


@pytest.mark.paths("embedded")
@pytest.mark.parametrize(
    ("probe_fn", "needle"), [(garbage_probe, "unreadable"), (slow_probe, "timed out")]
)
def test_probe_garbage_or_timeout_marks_site_unhealthy(
    coord: Coordinator, probe_fn: Any, needle: str
) -> None:
    """A probe answering garbage, or too late, marks the site unhealthy with the reason.
    On one path: the coordinator judges the answer once it arrives, whichever path brought
    it, and a probe's round trip on the cloud path is what every test there starts with
    (``connect``). The embedded one, whose garbage answer comes back well within the 5 s
    limit on a loaded machine (through the stand-in it was seen to take longer, and the
    case tested the timeout twice)."""
    real = coord.backends["local"]
    assert isinstance(real, ComputeSite)
    odd = ComputeSite(
        real.spec,
        real.endpoint_id,
        real.client,
        real._factory,
        task_group_id=real.task_group_id,
        probe_fn=probe_fn,
    )
    c = Coordinator([odd], probe_timeout_s=5)
    try:
        snap = c.inspect_federation()
        site = snap.site("local")
        assert site is not None and not site.health.reachable
        assert needle in (site.health.error or ""), site.health.error
    finally:
        c.close()


def test_endpoint_restart_mid_task_fails_it_with_the_reason(
    coord: Coordinator, local: LocalSites
) -> None:
    started = threading.Event()
    failed = threading.Event()

    def cb(ev: Event) -> None:
        if ev.kind == "task.started":
            started.set()
        if ev.kind == "task.failed":
            failed.set()

    h = coord.submit_task(
        PythonTask(report_allocation, (60.0,)),
        ResourceEnvelope(sites=("local",), walltime_s=600),
        on_event=cb,
    )
    assert started.wait(120)
    local.daemons.stop("local")
    local.daemons.start("local", local.slurm.env("local"))
    assert failed.wait(60), "the lost task was never reported"
    r = coord.get_result(h)
    assert r.status == "failed"
    assert "restarted" in (r.error or "") + r.remote_traceback
    _wait_for("the restarted endpoint is heard again", lambda: _reachable(coord, "local"), 30)


@pytest.mark.paths("cloud")
def test_endpoint_loss_is_retried_on_another_allowed_site(
    coord: Coordinator, local: LocalSites
) -> None:
    """A task lost with its endpoint is retried on the other allowed site and completes
    there. On the cloud path only (what real endpoints offer): how the loss is noticed
    differs by path, and ``test_endpoint_restart_mid_task_fails_it_with_the_reason`` checks
    it on both; the retry that follows is the coordinator's, the same on either."""
    started = threading.Event()
    kinds: list[str] = []

    def cb(ev: Event) -> None:
        kinds.append(ev.kind)
        if ev.kind == "task.started":
            started.set()

    env = ResourceEnvelope(sites=("local", "vista"), cpus_min=1, mem_gb_min=1, walltime_s=600)
    h = coord.submit_task(PythonTask(report_allocation, (20.0,)), env, on_event=cb)
    first = h.site
    other = "vista" if first == "local" else "local"
    assert started.wait(120)
    local.daemons.stop(first)
    local.daemons.start(first, local.slurm.env(first))
    r = coord.get_result(h, timeout_s=180)
    assert r.status == "completed", (r.error, r.remote_traceback)
    assert r.site == other and r.value["cluster"] == other
    assert [a["site"] for a in r.attempts] == [first]
    assert r.attempts[0]["failure"] == "endpoint_lost"
    assert "task.retried" in kinds and kinds[-1] == "task.completed"
