"""The seam between the coordinator and a site: one small Protocol."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, runtime_checkable

from federation.core.envelope import Shape
from federation.core.spec import SiteSpec
from federation.core.tasks import TaskSpec
from federation.sites.jobtags import Settled


@runtime_checkable
class SiteBackend(Protocol):
    """How the coordinator reaches one site.

    ``probe`` and ``submit`` return futures at once; nothing blocks on the site. Submitted
    futures carry ``task_id`` (the Globus Compute task id) once the service accepts them.
    """

    spec: SiteSpec

    @property
    def name(self) -> str: ...

    def probe(self) -> Future[dict[str, Any]]:
        """Run the probe function on the site's login node; resolves to its raw output."""
        ...

    def submit(self, task: TaskSpec, shape: Shape) -> Future[Any]:
        """Ship ``task`` to run inside a Slurm allocation of ``shape``."""
        ...

    def reattach(self, task_ids: list[str]) -> dict[str, Future[Any]]:
        """Futures for tasks submitted by an earlier coordinator (by Globus Compute id)."""
        ...

    def cancel(self, task_id: str) -> bool:
        """Cancel a task that has not started; False if it cannot be cancelled."""
        ...

    @property
    def can_cancel(self) -> bool:
        """Whether :meth:`cancel` can withdraw a queued task here at all (hedged and
        watched copies are made only where they can be withdrawn)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class WithdrawsUnacknowledged(Protocol):
    """A site that can withdraw a task the service has not acknowledged yet (no Globus
    Compute id): it knows the task by the future its ``submit`` returned (its claim's tag)."""

    def withdraw_future(self, future: Future[Any]) -> bool:
        """Withdraw the task ``future`` stands for; False if it cannot be (started, unknown)."""
        ...


@runtime_checkable
class ClaimingSite(Protocol):
    """A site whose tasks claim a tag before they run (:mod:`federation.sites.jobtags`):
    the coordinator names each shipment's tag, so a restart can ask the site which of the
    shipments in flight when it stopped reached it (their claims), and make sure the
    others never run (it claims their tags first) before shipping them again."""

    def submit_claiming(self, task: TaskSpec, shape: Shape, tag: str) -> Future[Any]:
        """:meth:`SiteBackend.submit` under ``tag``."""
        ...

    def settle_claims(self, chains: Mapping[str, Sequence[str]]) -> dict[str, Settled]:
        """Each in-flight shipment (key -> its tags by generation): the task that claimed
        one, or the first free one, claimed now so that it never runs."""
        ...
