"""Each Globus caller's own sites: the service acts on Compute and Transfer as that caller.

:class:`CallerSiteSets` is the :class:`~federation.runtime.callers.CallerSites` of a
``federation serve`` whose ``service.auth`` is ``globus``. For each caller known to
:class:`~federation.security.globus_callers.GlobusCallers` it builds, on first use:

* a ``globus_compute_sdk.Client`` whose authorizer puts *the caller's* Globus Compute token
  on every request (:class:`~federation.security.globus_callers.CallerAuthorizer`), and over
  it one :class:`~federation.sites.cloud.CloudSite` per ``backend: globus`` site of the
  config, in a task group of the caller's own (derived from the coordinator's and the
  identity, so a restart finds it again). A multi-user endpoint maps the identity that
  submitted to a local account, so each caller's tasks run as their own account;
* a :class:`~federation.transfer.GlobusTransferBackend` over a ``TransferClient`` with the
  caller's Transfer token, for the sites that name a collection.

Local (embedded) sites have no Globus identity to map and stay shared; so do probes (the
coordinator's shared backends, under the service's own login). A caller's set is closed and
dropped when they log out.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import globus_sdk
from globus_compute_sdk import Client

from federation.security.globus_callers import COMPUTE_RS, TRANSFER_RS, GlobusCallers
from federation.sites.cloud import CloudSite
from federation.sites.compute import ExecutorFactory, cloud_executor

if TYPE_CHECKING:
    from federation.core.spec import SiteSpec
    from federation.sites.backend import SiteBackend
    from federation.sites.globus_auth import AuthSettings
    from federation.transfer import GlobusCollection, TransferBackend

logger = logging.getLogger(__name__)


class CallerConfig(Protocol):
    """What :class:`CallerSiteSets` reads of the deployment's configuration
    (:class:`~federation.deploy.config.FederationConfig`, which builds it), named here so
    the two modules do not import each other."""

    @property
    def auth(self) -> AuthSettings: ...

    @property
    def sites(self) -> Mapping[str, Any]: ...

    @property
    def specs(self) -> Mapping[str, SiteSpec]: ...

    def by_backend(self, backend: str) -> list[str]: ...

    def collections(self) -> Mapping[str, GlobusCollection]: ...


StartListener = Callable[[str, str | None], None]


def caller_task_group(task_group_id: uuid.UUID, sub: str) -> uuid.UUID:
    """The task group of one identity's tasks: the same after a restart, never another's."""
    return uuid.uuid5(task_group_id, f"globus-identity:{sub}")


def compute_client(authorizer: globus_sdk.authorizers.GlobusAuthorizer) -> Client:
    """The real SDK client acting with ``authorizer`` (the service's own client already
    checked the SDK version against the service)."""
    return Client(authorizer=authorizer, do_version_check=False)


def transfer_client(
    authorizer: globus_sdk.authorizers.GlobusAuthorizer,
) -> globus_sdk.TransferClient:
    return globus_sdk.TransferClient(authorizer=authorizer)


@dataclass
class _CallerSet:
    sub: str
    sites: dict[str, SiteBackend] = field(default_factory=dict)
    transfers: dict[str, TransferBackend] = field(default_factory=dict)

    def close(self) -> None:
        for b in self.sites.values():
            b.close()
        for t in {id(t): t for t in self.transfers.values()}.values():
            t.close()


class CallerSiteSets:
    """Per-caller Compute and Transfer backends for the Globus callers of the service."""

    def __init__(
        self,
        config: CallerConfig,
        callers: GlobusCallers,
        task_group_id: uuid.UUID,
        *,
        executor_factory: ExecutorFactory = cloud_executor,
        compute_client_factory: Callable[..., Client] = compute_client,
        transfer_client_factory: Callable[..., globus_sdk.TransferClient] = transfer_client,
    ) -> None:
        self.config = config
        self.callers = callers
        self.task_group_id = task_group_id
        self._executor_factory = executor_factory
        self._compute = compute_client_factory
        self._transfer = transfer_client_factory
        self._sets: dict[str, _CallerSet] = {}
        self._lock = threading.Lock()
        self.on_started: StartListener | None = None
        """Told when a caller's task is seen started (the coordinator's ``notify_started``)."""
        callers.on_logout.append(self.drop)

    # --- the CallerSites protocol -----------------------------------------------------------
    def sites_for(self, caller: str) -> Mapping[str, SiteBackend] | None:
        found = self._set(caller)
        return None if found is None else found.sites

    def transfers_for(self, caller: str) -> Mapping[str, TransferBackend] | None:
        found = self._set(caller)
        return None if found is None or not found.transfers else found.transfers

    def every_caller(self) -> list[Mapping[str, SiteBackend]]:
        out: list[Mapping[str, SiteBackend]] = []
        for caller, _ in self.callers.callers():
            found = self._set(caller)
            if found is not None:
                out.append(found.sites)
        return out

    def close(self) -> None:
        with self._lock:
            sets, self._sets = list(self._sets.values()), {}
        for s in sets:
            s.close()

    # --- the sets -----------------------------------------------------------------------------
    def drop(self, caller: str) -> None:
        """Close and forget ``caller``'s backends (after a logout)."""
        with self._lock:
            gone = self._sets.pop(caller, None)
        if gone is not None:
            gone.close()

    def _set(self, caller: str) -> _CallerSet | None:
        ident = self.callers.identity_of(caller)
        if ident is None:  # not a Globus caller (the in-process user, a token holder)
            return None
        sub = ident[0]
        with self._lock:
            found = self._sets.get(caller)
            if found is not None and found.sub == sub:
                return found
            made = self._make(caller, sub)
            self._sets[caller] = made
        if found is not None:
            found.close()
        return made

    def _make(self, caller: str, sub: str) -> _CallerSet:
        made = _CallerSet(sub)
        globus = self.config.by_backend("globus")
        if globus:
            client = self._compute(self.callers.authorizer(caller, COMPUTE_RS))
            group = caller_task_group(self.task_group_id, sub)
            for name in globus:
                site = self.config.sites[name]
                assert site.endpoint_id is not None
                cloud = CloudSite(
                    self.config.specs[name],
                    site.endpoint_id,
                    client,
                    auth=self.config.auth,
                    executor_factory=self._executor_factory,
                    task_group_id=group,
                    account=site.account,
                    budgets=site.budgets(),
                    python_mismatch=site.python_mismatch,
                    job_check_s=site.job_check_s,
                )
                if self.on_started is not None:
                    cloud.on_started(self.on_started)
                made.sites[name] = cloud
        collections = self.config.collections()
        if collections:
            from federation.transfer import GlobusTransferBackend

            tc = self._transfer(self.callers.authorizer(caller, TRANSFER_RS))
            mover = GlobusTransferBackend(tc, collections)
            made.transfers = {n: mover for n in collections}
        logger.info("backends for %s: %s", caller, ", ".join([*made.sites, *made.transfers]))
        return made
