"""One behavioural suite, two backends: switching a site to the cloud is configuration.

The same test bodies run over the ``local`` site reached two ways:

* ``local``: the site as :class:`~federation.sites.compute.ComputeSite` through
  :class:`~federation.deploy.local.LocalSites` (its own offline web service, adopter re-attach);
* ``cloud``: the SAME site as :class:`~federation.sites.cloud.CloudSite`, built by
  :class:`~federation.deploy.config.Deployment` from a ``federation.yaml`` that says
  ``backend: globus`` with the site's endpoint id. Its real SDK ``Client`` talks to a
  :class:`~federation.standin.compute_service.LocalComputeService` standing in for the Globus cloud
  at the ``requests`` transport seam, so the cloud code path runs for real (endpoint status
  and metadata checks, payload limit, task-group re-attach without an adopter) against the
  real endpoint daemon and Slurm. The stand-in cloud outlives the coordinators, as the real
  one does.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from globus_compute_sdk import Client, Executor

from federation.core.envelope import ResourceEnvelope
from federation.core.errors import (
    FederationError,
    NoFeasibleSiteError,
    PayloadTooLargeError,
    TaskFailedError,
)
from federation.core.tasks import PythonTask, ShellTask
from federation.deploy.config import Deployment, load_config
from federation.deploy.local import LocalSites
from federation.endpoint.manager import local_endpoint_id
from federation.runtime.coordinator import Coordinator
from federation.runtime.events import Event
from federation.sites.cloud import PAYLOAD_LIMIT_BYTES, CloudSite
from federation.sites.globus_auth import AuthSettings
from federation.standin.compute_service import LocalComputeService
from functions.workloads import fail_with, report_allocation, square

pytestmark = pytest.mark.slurm

SITE = "local"
ENV = ResourceEnvelope(sites=(SITE,), cpus_min=1, mem_gb_min=1, walltime_s=300)


class Harness:
    """Connects coordinators over the site through one backend (``local`` or ``cloud``)."""

    def __init__(self, kind: str, local: LocalSites, home: Path) -> None:
        self.kind = kind
        self.fed_home = local.home
        self.run_dir = local.daemons.run_dir(SITE)
        self.home = home  # the cloud deployment's home (its coordinator.db)
        self.cloud: LocalComputeService | None = None
        self._current: Coordinator | None = None
        self._local: LocalSites | None = None
        if kind == "cloud":
            self.cloud = LocalComputeService()  # "the Globus cloud": outlives coordinators
            self.cloud.add_endpoint(local_endpoint_id(SITE), SITE, self.run_dir)
            # the stand-in cloud also reports task starts (Slurm job id), as LocalSites does
            self.cloud.on_started(self._started)
            self.config_path = home / "federation.yaml"
            self.config_path.write_text(
                f"sites:\n  {SITE}:\n    backend: globus\n"
                f"    endpoint_id: {local_endpoint_id(SITE)}\n"
            )

    @property
    def db(self) -> Path:
        return (self.home if self.kind == "cloud" else self.fed_home) / "coordinator.db"

    def _started(self, task_id: str, job_id: str | None) -> None:
        if self._current is not None:
            self._current.notify_started(task_id, job_id)

    def connect(self, *, durable: bool = False) -> Coordinator:
        if self.kind == "local":
            self._local = LocalSites(home=self.fed_home, sites=[SITE])
            coord = self._local.connect(telemetry=False, durable=durable, probe_timeout_s=60)
        else:
            cloud = self.cloud
            assert cloud is not None

            def client_factory(_auth: AuthSettings) -> Client:
                return cloud.client()

            def executor_factory(
                eid: uuid.UUID, cl: Client, uec: dict[str, Any], tg: uuid.UUID
            ) -> Executor:
                return cloud.executor(eid, cl, user_endpoint_config=uec, task_group_id=tg)

            dep = Deployment(
                load_config(self.config_path),
                home=self.home,
                client_factory=client_factory,
                executor_factory=executor_factory,
            )
            assert dep.local is None  # nothing local left: the site is a cloud site now
            coord = dep.connect(telemetry=False, durable=durable, probe_timeout_s=60)
        self._current = coord
        return coord

    def disconnect(self, coord: Coordinator) -> None:
        if self._current is coord:
            self._current = None
        coord.close()
        if self.kind == "local" and self._local is not None and self._local.service is not None:
            self._local.service.close()
        if coord.store is not None:  # Coordinator.close leaves its store open
            deadline = time.monotonic() + 30  # futures the shutdown cancelled settle first
            while time.monotonic() < deadline and not all(h.done for h in coord.handles()):
                time.sleep(0.05)
            coord.store.close()

    def close(self) -> None:
        if self.cloud is not None:
            self.cloud.close()


@pytest.fixture(scope="module", params=["local", "cloud"])
def harness(
    request: pytest.FixtureRequest, local: LocalSites, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Harness]:
    h = Harness(str(request.param), local, Path(tmp_path_factory.mktemp(f"dep-{request.param}")))
    try:
        yield h
    finally:
        h.close()


@pytest.fixture(scope="module")
def bcoord(harness: Harness) -> Iterator[Coordinator]:
    c = harness.connect()
    try:
        yield c
    finally:
        harness.disconnect(c)


def test_the_site_is_served_by_the_configured_backend(
    harness: Harness, bcoord: Coordinator
) -> None:
    site = bcoord.backends[SITE]
    assert site.endpoint_id == local_endpoint_id(SITE)  # type: ignore[attr-defined]
    if harness.kind == "cloud":
        assert isinstance(site, CloudSite)
        info = site.endpoint_info(refresh=True)  # status + metadata routes, as on the cloud
        assert info.status == "online"
        assert info.endpoint_id == local_endpoint_id(SITE)
    else:
        assert not isinstance(site, CloudSite)
    snap = bcoord.inspect_federation()
    health = snap.site(SITE)
    assert health is not None and health.health.reachable, health


def test_python_task_value_and_manifest(bcoord: Coordinator) -> None:
    kinds: list[str] = []
    h = bcoord.submit_task(PythonTask(report_allocation, (0.2,)), ENV, on_event=_kind(kinds))
    r = bcoord.get_result(h, timeout_s=180)
    assert r.status == "completed", (r.error, r.remote_traceback)
    v = r.value
    assert r.site == SITE == v["cluster"]
    assert r.partition == v["partition"]
    assert r.shape.cpus == v["cpus"] and float(r.shape.mem_gb) == v["mem_gb"]
    assert r.slurm_job_id is not None and r.slurm_job_id == v["slurm_job_id"]
    assert h.compute_task_id is not None
    uuid.UUID(h.compute_task_id)  # a Globus Compute task id from the (stand-in) service
    assert kinds == ["task.queued", "task.started", "task.completed"], kinds


def test_remote_exception_comes_back_with_its_traceback(bcoord: Coordinator) -> None:
    h = bcoord.submit_task(PythonTask(fail_with, ("no such input",)), ENV)
    with pytest.raises(TaskFailedError) as err:
        bcoord.result_value(h, timeout_s=180)
    assert "RuntimeError: no such input" in err.value.remote_traceback
    assert "fail_with" in err.value.remote_traceback
    r = bcoord.get_result(h)
    assert r.status == "failed" and "no such input" in (r.error or "")


def test_shell_task(bcoord: Coordinator) -> None:
    h = bcoord.submit_task(ShellTask(command="echo part=$SLURM_JOB_PARTITION"), ENV)
    r = bcoord.get_result(h, timeout_s=180)
    assert r.status == "completed", r.error
    assert r.returncode == 0
    assert r.stdout is not None and r.stdout.strip() == f"part={r.partition}"


def test_placement_honours_the_envelope(bcoord: Coordinator) -> None:
    env = ResourceEnvelope(
        sites=(SITE,), gpus_min=1, gpu_types=("l4",), cpus_min=2, mem_gb_min=4, walltime_s=420
    )
    h = bcoord.submit_task(PythonTask(report_allocation, (0.1,)), env)
    r = bcoord.get_result(h, timeout_s=180)
    assert r.status == "completed", (r.error, r.remote_traceback)
    assert r.partition == "gpu"  # the only partition with an L4
    assert r.shape.gpus >= 1 and r.shape.cpus >= 2 and r.shape.mem_gb >= 4
    assert r.shape.walltime_s <= 420
    v = r.value  # what Slurm really granted, seen from inside the job
    assert (v["partition"], v["gpus"], v["cpus"]) == ("gpu", r.shape.gpus, r.shape.cpus)
    with pytest.raises(NoFeasibleSiteError):
        bcoord.submit_task(
            PythonTask(square, (2,)), ResourceEnvelope(sites=(SITE,), gpus_min=3, walltime_s=300)
        )


def test_oversized_payload(harness: Harness, bcoord: Coordinator) -> None:
    """Cloud: refused before anything is sent. Local: sent, and refused by the service as
    the real one refuses it (413 TASK_PAYLOAD_TOO_LARGE): the task fails saying so."""
    big = b"x" * (PAYLOAD_LIMIT_BYTES + 1)
    task = PythonTask(len, (big,))
    if harness.kind == "cloud":
        assert harness.cloud is not None
        with pytest.raises(FederationError, match="10 MB") as err:
            bcoord.submit_task(task, ENV)
        assert isinstance(err.value.__cause__, PayloadTooLargeError)
        refused = [h for h in bcoord.handles() if h.label == "len"]
        assert [h.state for h in refused] == ["failed"]
        assert refused[0].compute_task_id is None  # the service never took it
    else:
        h = bcoord.submit_task(task, ENV)
        r = bcoord.get_result(h, timeout_s=180)
        assert r.status == "failed" and "TASK_PAYLOAD_TOO_LARGE" in (r.error or ""), r.error


def _kind(out: list[str]) -> Any:
    def cb(ev: Event) -> None:
        out.append(ev.kind)

    return cb
