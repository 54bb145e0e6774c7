"""The seam between groups (:mod:`federation.runtime.groups`) and the coordinator."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from federation.security.policy import LOCAL_CALLER

if TYPE_CHECKING:
    from federation.core.envelope import ResourceEnvelope
    from federation.core.snapshot import FederationSnapshot
    from federation.core.tasks import TaskSpec
    from federation.placement.candidates import PlacementDecision
    from federation.runtime.events import EventBus, EventCallback
    from federation.runtime.handles import TaskHandle
    from federation.runtime.hooks import Hook, HookRunner
    from federation.runtime.milestones import MilestoneWatcher
    from federation.runtime.store import Store
    from federation.sites.backend import SiteBackend


class GroupCoordinator(Protocol):
    """What groups use of the coordinator (``federation.runtime.coordinator.Coordinator``):
    submitting, cancelling and planning tasks, its events and its store."""

    @property
    def backends(self) -> dict[str, SiteBackend]: ...
    @property
    def events(self) -> EventBus: ...
    @property
    def hooks(self) -> HookRunner: ...
    @property
    def milestones(self) -> MilestoneWatcher: ...
    @property
    def store(self) -> Store | None: ...

    def submit_task(
        self,
        task: TaskSpec,
        envelope: ResourceEnvelope,
        *,
        on_event: EventCallback | None = None,
        snapshot: FederationSnapshot | None = None,
        caller: str = LOCAL_CALLER,
        hooks: Iterable[Hook] = (),
        workflow: str | None = None,
    ) -> TaskHandle: ...

    def cancel(self, handle: TaskHandle | str, reason: str = ...) -> bool: ...

    def plan(
        self, envelope: ResourceEnvelope, snapshot: FederationSnapshot | None = None
    ) -> PlacementDecision: ...

    def snapshot(
        self, max_age_s: float | None = None, sites: Iterable[str] = ()
    ) -> FederationSnapshot: ...

    def inspect_federation(self) -> FederationSnapshot: ...

    def handles(self) -> list[TaskHandle]: ...

    def task(self, task_id: str) -> TaskHandle | None: ...

    def _handle(self, handle: TaskHandle | str) -> TaskHandle: ...
