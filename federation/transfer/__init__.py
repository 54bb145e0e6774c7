"""move_data: transfers between site storage, over Globus Transfer or local copies.

The backends only; transfers in flight (``TransferManager``, ``TransferHandle``) are the
runtime's: :mod:`federation.runtime.transfers`."""

from federation.transfer.backend import Reporter, TransferBackend
from federation.transfer.globus import GlobusCollection, GlobusTransferBackend
from federation.transfer.local import LocalCopyBackend
from federation.transfer.models import (
    DataRef,
    SyncLevel,
    TransferRequest,
    TransferState,
    TransferStatus,
)

__all__ = [
    "DataRef",
    "GlobusCollection",
    "GlobusTransferBackend",
    "LocalCopyBackend",
    "Reporter",
    "SyncLevel",
    "TransferBackend",
    "TransferRequest",
    "TransferState",
    "TransferStatus",
]
