"""move_data: transfers between site storage, over Globus Transfer or local copies."""

from federation.runtime.transfers import TransferHandle, TransferManager
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
    "TransferHandle",
    "TransferManager",
    "TransferRequest",
    "TransferState",
    "TransferStatus",
]
