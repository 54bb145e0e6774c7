"""What the coordinator's parts (shipping, hedging, retries, recovery...) read from the
coordinator that composes them: its configuration, read when used (a caller may change
``policy`` or ``gate`` at any time), as a typing Protocol so no part imports the coordinator."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterable

    from federation.core.envelope import ResourceEnvelope
    from federation.core.snapshot import FederationSnapshot
    from federation.placement.candidates import PlacementDecision
    from federation.placement.policies import Policy
    from federation.runtime.callers import CallerSites
    from federation.runtime.events import EventBus
    from federation.runtime.groups import GroupManager
    from federation.runtime.milestones import MilestoneWatcher
    from federation.runtime.results import StorageRoot
    from federation.runtime.store import Store
    from federation.runtime.transfers import TransferManager
    from federation.security import HeldTasks, PolicyGate
    from federation.sites.backend import SiteBackend


class Runtime(Protocol):
    """The coordinator as its parts see it."""

    backends: dict[str, SiteBackend]
    caller_sites: CallerSites | None
    store: Store | None
    events: EventBus
    gate: PolicyGate
    held: HeldTasks
    milestones: MilestoneWatcher
    retry_budget: int
    result_storage: StorageRoot | None
    inline_limit_bytes: int
    probe_interval_s: float
    closing: bool
    closed: bool
    """Set when close() begins: a durable coordinator's tasks then stay in flight in
    its store for the next one, whatever their futures report as the sites close."""
    _last_snapshot: FederationSnapshot | None

    def snapshot(
        self, max_age_s: float | None = None, sites: Iterable[str] = ()
    ) -> FederationSnapshot: ...

    def site_for(self, caller: str, site: str) -> SiteBackend: ...

    def plan(
        self, envelope: ResourceEnvelope, snapshot: FederationSnapshot | None = None
    ) -> PlacementDecision: ...

    def _placer(self) -> Policy: ...

    @property
    def groups(self) -> GroupManager: ...

    @property
    def transfers(self) -> TransferManager: ...
