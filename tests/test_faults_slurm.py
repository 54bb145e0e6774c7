"""Fault injection on a site's Slurm: slurmctld killed and restarted, a node crashed.

What the user sees:
* slurmctld killed: probes mark the site unreachable with the probe's reason while it is
  down and healthy once it is back; a task already running finishes normally (its job
  keeps running without the controller), exactly once; a task queued from a snapshot
  taken before the crash ends exactly once, completed or failed with a reason.
* a node crashed (its slurmd and job steps killed): Slurm marks the node down, the task
  fails with the engine's reason (``ManagerLost``, class ``endpoint_lost``) once the
  engine's heartbeat expires; its side effect never happened; no job is left behind.

Every killed daemon is restored by a finalizer, so later tests find a working federation.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_faults_engine import by_value, pid_then_work

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import PythonTask
from federation.deploy.local import LocalSites
from federation.localslurm.commands import run_slurm
from federation.localslurm.faults import SiteFaults
from federation.runtime.coordinator import Coordinator
from federation.runtime.events import Event
from federation.runtime.handles import TaskHandle

pytestmark = pytest.mark.slurm

SITE = "local"


@pytest.fixture(scope="module")
def site_coord(local_federation: Any) -> Iterator[tuple[LocalSites, Coordinator]]:
    """A coordinator over the local site only (probing the others is not the point)."""
    local = LocalSites(home=local_federation.home, sites=[SITE])
    local.up()
    coord = local.connect(telemetry=False, probe_timeout_s=120)
    try:
        yield local, coord
    finally:
        coord.close()
        if local.service is not None:
            local.service.close()


@pytest.fixture
def faults(site_coord: tuple[LocalSites, Coordinator]) -> Iterator[SiteFaults]:
    local, _ = site_coord
    f = SiteFaults(local.slurm, SITE)
    try:
        yield f
    finally:  # whatever happened, leave the site as we found it
        f.restore_controller(timeout_s=120)
        for node in f.cluster.spec.nodes:
            f.restore_node(node.name, timeout_s=120)


def _wait(pred: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what} within {timeout_s:.0f} s")


def _marker_text(path: Path, h: TaskHandle, timeout_s: float) -> str:
    _wait(lambda: (path.exists() and path.read_text().strip()) or h.done, timeout_s, "start")
    assert not h.done, f"the task ended before it started working: {h.error}"
    return path.read_text().strip()


def _ended_once(events: list[Event], task_id: str) -> str:
    ends = Counter(e.kind for e in events if e.task_id == task_id)
    assert ends["task.completed"] + ends["task.failed"] == 1, ends
    return "completed" if ends["task.completed"] else "failed"


def _no_jobs_left(faults: SiteFaults, earlier: set[str], timeout_s: float = 180) -> None:
    """No job submitted since the test began is left (an earlier test's idle block may still
    be waiting for its process to end: not this test's orphan)."""
    try:
        _wait(
            lambda: not set(faults.cluster.job_ids()) - earlier,
            timeout_s,
            "jobs still in squeue (orphans)",
        )
    except AssertionError as e:  # which jobs, whose, in what state: the next run's lead
        out = run_slurm(
            ["squeue", "-h", "-o", "%i %j %T %r %V"], faults.cluster.env(), timeout_s=10
        )
        raise AssertionError(f"{e}:\n{out.stdout}") from None


def test_slurmctld_killed_and_restarted(
    site_coord: tuple[LocalSites, Coordinator], faults: SiteFaults, tmp_path: Path
) -> None:
    _, coord = site_coord
    earlier = set(faults.cluster.job_ids())
    tag = uuid.uuid4().hex[:6]
    marker, done = tmp_path / f"pid-{tag}", tmp_path / f"done-{tag}"
    before = coord.inspect_federation()
    up = before.site(SITE)
    assert up is not None and up.health.reachable
    events: list[Event] = []
    coord.events.subscribe(events.append)
    running = coord.submit_task(
        PythonTask(by_value(pid_then_work), (str(marker), str(done), 15.0)),
        ResourceEnvelope(sites=(SITE,), walltime_s=600),
        snapshot=before,
    )
    _marker_text(marker, running, 240)

    faults.kill_controller()
    assert not faults.controller_up()
    # a task placed from the snapshot taken before the crash (another shape: a new block)
    queued = coord.submit_task(
        PythonTask(by_value(pid_then_work), (str(marker) + "-q", str(done) + "-q", 0.5)),
        ResourceEnvelope(sites=(SITE,), cpus_min=2, walltime_s=600),
        snapshot=before,
    )
    down = coord.inspect_federation().site(SITE)
    assert down is not None and not down.health.reachable
    assert down.health.error, "an unreachable site must say why"

    faults.restore_controller(timeout_s=120)
    r = coord.get_result(running, timeout_s=400)
    # A SIGKILLed slurmctld recovers only the state it had saved: a job started just before
    # the kill can be unknown to it after the restart, and Slurm then kills that job on its
    # node. Either way the task ends exactly once, and a failure says why.
    lines = done.read_text().splitlines() if done.exists() else []
    if r.status == "completed":
        assert lines == [f"{SITE} {marker.read_text().strip()}"]
    else:
        assert "ManagerLost" in (r.error or "") or "WorkerLost" in (r.error or ""), r.error
        assert len(lines) <= 1
    q = coord.get_result(queued, timeout_s=400)
    if q.status == "failed":
        assert q.error, "a failure must carry its reason"
    else:
        assert len(Path(str(done) + "-q").read_text().splitlines()) == 1
    assert _ended_once(events, running.id) == r.status
    _ended_once(events, queued.id)

    after = coord.inspect_federation().site(SITE)
    assert after is not None
    assert after.health.reachable, after.health
    _no_jobs_left(faults, earlier)


def test_node_crash_fails_the_task_with_a_reason(
    site_coord: tuple[LocalSites, Coordinator], faults: SiteFaults, tmp_path: Path
) -> None:
    _, coord = site_coord
    earlier = set(faults.cluster.job_ids())
    tag = uuid.uuid4().hex[:6]
    marker, done = tmp_path / f"node-{tag}", tmp_path / f"done-{tag}"
    events: list[Event] = []
    h = coord.submit_task(
        PythonTask(by_value(node_then_work), (str(marker), str(done), 600.0)),
        ResourceEnvelope(sites=(SITE,), walltime_s=900),
        on_event=events.append,
    )
    node = _marker_text(marker, h, 240)
    assert node in {n.name for n in faults.cluster.spec.nodes}
    killed = faults.crash_node(node)
    assert killed, "nothing was killed"
    seen_down = []

    def ended_or_down() -> bool:
        if "down" in faults.node_state(node):
            seen_down.append(True)
        return h.done and bool(seen_down)

    # slurmctld marks the node down after SlurmdTimeout; the engine gives up on the lost
    # worker pool after its heartbeat threshold (45 s on the local federation)
    _wait(ended_or_down, 400, "the task did not end or the node never went down")
    r = coord.get_result(h)
    assert r.status == "failed"
    assert "ManagerLost" in (r.error or "") or "WorkerLost" in (r.error or ""), r.error
    assert _ended_once(events, h.id) == "failed"
    assert not done.exists(), "the crashed attempt cannot have finished its side effect"
    faults.restore_node(node, timeout_s=120)
    _no_jobs_left(faults, earlier)


def node_then_work(marker: str, done_file: str, work_s: float) -> str:
    """Write the node this runs on to ``marker``, work, then append to ``done_file``."""
    import os
    import time
    from pathlib import Path

    Path(marker).write_text(os.environ.get("SLURMD_NODENAME", "?"))
    time.sleep(work_s)
    with open(done_file, "a") as f:
        f.write(f"{os.getpid()}\n")
    return os.environ.get("SLURMD_NODENAME", "?")
