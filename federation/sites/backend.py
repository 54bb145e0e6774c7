"""The seam between the coordinator and a site: one small Protocol."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Protocol, runtime_checkable

from federation.core.envelope import Shape
from federation.core.spec import SiteSpec
from federation.core.tasks import TaskSpec


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
