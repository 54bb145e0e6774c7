"""The embedded local federation: real Slurm clusters, endpoint daemons, offline service."""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from globus_compute_sdk import Client, Executor

from federation.core.paths import federation_home as federation_home  # re-exported
from federation.core.spec import SiteSpec, load_sites
from federation.core.storage import site_storage
from federation.endpoint.manager import EndpointDaemons, local_endpoint_id
from federation.endpoint.uep_pool import HOLDS_OTHERS
from federation.localslurm import LocalFederation
from federation.runtime.coordinator import Coordinator
from federation.runtime.store import Store
from federation.runtime.telemetry import Telemetry
from federation.sites.cloud import CloudSite
from federation.sites.compute import ComputeSite
from federation.standin.compute_service import LocalComputeService

logger = logging.getLogger(__name__)


PATHS = ("embedded", "cloud")
"""How the coordinator reaches the local sites. ``embedded``: the offline service may cancel
queued tasks on the endpoint and tells the coordinator when a task's job starts (an
on-site agent could; the Globus service does not). ``cloud``: exactly what a deployment
on real endpoints has, through the strict stand-in of the Globus Compute service:
:class:`~federation.sites.cloud.CloudSite` with its endpoint-status, Python and payload
checks, starts read from the tasks' claims, withdrawal by claiming first."""
JOB_CHECK_S = 6.0
"""The local sites' interval between looks at the tasks' claims (real sites: 60 s by
default); each look is a request to the service, which allows 20 per 10 s per identity
(six sites looking every 3 s took the whole budget: a probe or submission then met a 429
and its 10-s wait)."""


def default_path() -> str:
    """``FEDERATION_PATH`` (``embedded`` or ``cloud``), else ``embedded``."""
    path = os.environ.get("FEDERATION_PATH", "embedded").strip() or "embedded"
    if path not in PATHS:
        raise ValueError(f"FEDERATION_PATH={path!r}: use one of {', '.join(PATHS)}")
    return path


class LocalSites:
    """Bring the local sites up and connect a coordinator to them through Globus Compute."""

    def __init__(
        self,
        home: Path | None = None,
        sites: list[str] | None = None,
        path: str | None = None,
        *,
        specs: list[SiteSpec] | None = None,
    ) -> None:
        """``sites``: the package's example sites by name (default: all); ``specs``: the
        sites themselves instead (a deployment's, from the folders its federation.yaml
        names)."""
        self.home = home or federation_home()
        self.path = path or default_path()
        if self.path not in PATHS:
            raise ValueError(f"path {self.path!r}: use one of {', '.join(PATHS)}")
        self.specs = specs if specs is not None else load_sites(sites)
        self.slurm = LocalFederation(home=self.home, specs=self.specs)
        self.daemons = EndpointDaemons(self.home)
        self.service: LocalComputeService | None = None
        """The offline web service of the latest :meth:`backends` call."""
        self._services: list[LocalComputeService] = []

    def close(self) -> None:
        """Close every offline web service :meth:`backends` started (their result watchers
        fail the futures still open; otherwise the SDK holds the interpreter at exit)."""
        services, self._services = self._services, []
        for svc in services:
            svc.close()

    def up(self) -> dict[str, float]:
        """Start Slurm and each site's endpoint (idempotent); returns seconds per step."""
        t0 = time.monotonic()
        self.slurm.up()
        t1 = time.monotonic()
        for spec in self.specs:
            self.daemons.start(spec.name, self.slurm.env(spec.name), site_dir=spec.config_dir)
        t2 = time.monotonic()
        return {"slurm_s": round(t1 - t0, 2), "endpoints_s": round(t2 - t1, 2)}

    def down(self) -> list[str]:
        """Stop the endpoints, then the Slurm daemons; returns what was stopped."""
        stopped = [f"endpoint-{s.name}" for s in self.specs if self.daemons.stop(s.name)]
        return stopped + self.slurm.down()

    def backends(
        self,
        task_group_id: uuid.UUID,
        *,
        accounts: Mapping[str, str | None] | None = None,
        budgets: Mapping[str, Mapping[str, float]] | None = None,
    ) -> list[ComputeSite]:
        """One backend per local site, reached through the real Globus Compute SDK.

        Starts this object's offline web service (``self.service``; strict on the ``cloud``
        path); ``accounts`` (the default account) and ``budgets`` (by account, in the site's
        units) per site feed the credit probe.
        """
        cloud = self.path == "cloud"
        # the cloud remembers a client's task groups across the client's restarts; the
        # embedded service does too, so a restarted coordinator can ask either which of
        # its submissions arrived (federation.runtime.intents)
        memory = self.home / "compute-service.db"
        service = self.service = LocalComputeService(strict=cloud, memory=memory)
        self._services.append(service)
        for spec in self.specs:
            service.add_endpoint(
                local_endpoint_id(spec.name), spec.name, self.daemons.run_dir(spec.name)
            )
        client = service.client()

        def factory(eid: uuid.UUID, cl: Client, uec: dict[str, Any], tg: uuid.UUID) -> Executor:
            return service.executor(eid, cl, user_endpoint_config=uec, task_group_id=tg)

        if cloud:
            return [
                CloudSite(
                    spec,
                    local_endpoint_id(spec.name),
                    client,
                    executor_factory=factory,
                    task_group_id=task_group_id,
                    account=(accounts or {}).get(spec.name),
                    budgets=(budgets or {}).get(spec.name),
                    job_check_s=JOB_CHECK_S,
                    storage_root=str(site_storage(spec.name, self.home)),
                )
                for spec in self.specs
            ]

        def cancel(task_id: str) -> bool | None:
            ok, why = service.cancel(task_id)
            return None if why == HOLDS_OTHERS else ok

        return [
            ComputeSite(
                spec,
                local_endpoint_id(spec.name),
                client,
                executor_factory=factory,
                task_group_id=task_group_id,
                canceller=cancel,
                job_check_s=JOB_CHECK_S,  # withdrawals of tasks sharing a process: by claim
                starts_by_claims=False,  # the endpoints report starts (listen_for_starts)
                storage_root=str(site_storage(spec.name, self.home)),
                adopter=_adopter(service, local_endpoint_id(spec.name), task_group_id),
                account=(accounts or {}).get(spec.name),
                budgets=(budgets or {}).get(spec.name),
            )
            for spec in self.specs
        ]

    def listen_for_starts(self, backends: list[Any], coord: Coordinator) -> None:
        """Wire the coordinator to whoever reports starts on this path."""
        if self.path == "cloud":
            for b in backends:
                if isinstance(b, CloudSite):
                    b.on_started(coord.notify_started)
        elif self.service is not None:
            self.service.on_started(coord.notify_started)
            for b in backends:  # a started task is no longer withdrawn by its claim
                if isinstance(b, ComputeSite) and b.jobs is not None:
                    self.service.on_started(b.jobs.mark_started)

    def connect(
        self,
        *,
        telemetry: bool = True,
        durable: bool = False,
        store_path: Path | None = None,
        **coordinator_kwargs: Any,
    ) -> Coordinator:
        """A coordinator whose sites are reached through the real Globus Compute SDK.

        ``durable``: keep tasks and events in ``home/coordinator.db`` (or ``store_path``)
        and re-attach to the tasks an earlier (possibly killed) coordinator left in flight.
        """
        store = Store(store_path or self.home / "coordinator.db") if durable else None
        task_group = store.task_group_id() if store else uuid.uuid4()
        backends = self.backends(task_group)
        tel = Telemetry(self.home / "telemetry.db") if telemetry else None
        home = self.home  # results too large to return inline go to the site's storage
        coordinator_kwargs.setdefault("result_storage", lambda site: site_storage(site, home))
        coord = Coordinator(backends, telemetry=tel, store=store, **coordinator_kwargs)
        coord.own(store, tel)  # closed with the coordinator
        self.listen_for_starts(backends, coord)
        for b in backends:  # the functions every task uses: registered before the first
            b.warm()
        coord.probe_ahead()
        if store is not None:
            coord.recover()
        return coord


def _adopter(
    service: LocalComputeService, endpoint_id: uuid.UUID, task_group: uuid.UUID
) -> Callable[[str], None]:
    def adopt(task_id: str) -> None:
        service.adopt_task(task_id, endpoint_id, task_group)

    return adopt
