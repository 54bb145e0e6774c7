"""Data movement operations of :class:`~federation.interfaces.service.ops.LocalOps`: start a
transfer between sites and read one back, for its caller only."""

from __future__ import annotations

import logging
import threading
from typing import Protocol, cast

from federation.core.errors import FederationError
from federation.core.workspace import PathBase
from federation.interfaces.service.errors import OpsError
from federation.interfaces.service.models import (
    TransferLike,
    TransferRequest,
    TransferResponse,
    TransferView,
    transfer_view,
)
from federation.interfaces.service.ownership import Ownership, not_found
from federation.interfaces.service.translate import translate
from federation.runtime.coordinator import Coordinator
from federation.security.policy import LOCAL_CALLER

__all__ = ["TransferOps"]

logger = logging.getLogger("federation.interfaces.service.ops")


class _Mover(Protocol):
    """The coordinator's data movement (``federation.transfer``)."""

    def move_data(
        self,
        source_site: str,
        source_path: str,
        dest_site: str,
        dest_path: str,
        *,
        label: str | None = None,
        sync_level: str = "checksum",
        verify_checksum: bool = True,
        deadline_s: float | None = None,
        caller: str = LOCAL_CALLER,
        paths: PathBase = "workspace",
        workflow: str | None = None,
    ) -> TransferLike: ...

    def get_transfer(self, transfer_id: str) -> TransferLike: ...


class TransferOps:
    """Transfers, mixed into :class:`~federation.interfaces.service.ops.LocalOps`."""

    coord: Coordinator
    owners: Ownership
    _lock: threading.Lock

    def _mover(self) -> _Mover:
        if not callable(getattr(self.coord, "move_data", None)):
            raise OpsError(
                501,
                "transfers_unavailable",
                "this coordinator cannot move data (no federation.transfer backend)",
                "move the data with the sites' own tools, or upgrade the coordinator",
            )
        return cast(_Mover, self.coord)

    def move_data(self, req: TransferRequest, caller: str = "") -> TransferResponse:
        mover = self._mover()
        for site in (req.source_site, req.dest_site):
            if site not in self.coord.backends:
                raise OpsError(
                    422,
                    "unknown_site",
                    f"unknown site {site!r}",
                    "use one of the known sites",
                    {"known": sorted(self.coord.backends)},
                )
        who = self.owners.who(caller)
        cursor = self.owners.cursor(who)
        try:
            h = mover.move_data(
                req.source_site,
                req.source_path,
                req.dest_site,
                req.dest_path,
                label=req.label,
                sync_level=req.sync_level,
                verify_checksum=req.verify_checksum,
                deadline_s=req.deadline_s,
                caller=who.name,
                paths=req.paths,
                workflow=req.workflow,
            )
        except Exception as e:
            raise translate(e) from e
        logger.info(
            "transfer %s from %s: %s -> %s",
            h.id,
            caller or "(local)",
            req.source_site,
            req.dest_site,
        )
        return TransferResponse.model_validate(transfer_view(h).model_dump() | {"cursor": cursor})

    def transfer_handle(
        self, transfer_id: str, caller: str = "", action: str = "read"
    ) -> TransferLike:
        try:  # the coordinator's: in memory while open, a finished one from its store
            h = self._mover().get_transfer(transfer_id)
        except (KeyError, FederationError, ValueError) as e:
            raise not_found("transfer", transfer_id) from e
        if not self.owners.visible(self.owners.who(caller), "transfer", h.id, h.owner, action):
            raise not_found("transfer", transfer_id)
        return h

    def transfer(self, transfer_id: str, caller: str = "") -> TransferView:
        return transfer_view(self.transfer_handle(transfer_id, caller))
