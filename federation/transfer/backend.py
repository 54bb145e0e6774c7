"""The seam between the transfer manager and whatever moves the bytes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from federation.transfer.models import TransferRequest, TransferStatus

Reporter = Callable[[TransferStatus], None]
"""Called by a backend, on any thread, with each progress report and the final status."""


class TransferBackend(Protocol):
    """Moves data between the sites it serves; reports through a :data:`Reporter`."""

    name: str

    def serves(self, site: str) -> bool:
        """Whether ``site``'s storage is reachable through this backend."""
        ...

    def validate(self, request: TransferRequest) -> None:
        """Raise a :class:`~federation.core.errors.TransferError` for a request that cannot run
        (unknown site, path outside the storage root, missing source) before anything moves."""
        ...

    def start(
        self, transfer_id: str, request: TransferRequest, report: Reporter, resume: TransferStatus
    ) -> TransferStatus:
        """Begin (or, after a restart, resume from ``resume``) moving the data; return soon.

        Returns the status once started (for Globus, with its task id). A failure to begin
        raises a :class:`~federation.core.errors.TransferError`; everything later is reported,
        ending with exactly one terminal status. ``queued`` reports are persisted only
        (e.g. a Globus submission id, before the task is submitted).
        """
        ...

    def close(self) -> None: ...
