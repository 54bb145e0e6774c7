"""Transfer requests (what to move) and statuses (what a backend reports about it)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from federation.core.model import Frozen

SyncLevel = Literal["exists", "size", "mtime", "checksum"]
"""When the destination already holds the data, skip it (Globus Transfer's sync levels):
``exists`` a file is there, ``size`` same size, ``mtime`` not older than the source,
``checksum`` same contents."""

TransferState = Literal["queued", "active", "succeeded", "failed", "cancelled"]
TERMINAL_STATES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})


class DataRef(Frozen):
    """A file or directory in one site's storage (its Globus collection, or local root)."""

    site: str = Field(min_length=1)
    path: str = Field(min_length=1, description="relative to the site's storage root")

    def describe(self) -> str:
        return f"{self.site}:{self.path}"


class TransferRequest(Frozen):
    """One ``move_data`` call: copy ``source`` to ``destination`` (full destination path)."""

    source: DataRef
    destination: DataRef
    label: str | None = Field(default=None, max_length=128)
    sync_level: SyncLevel = "checksum"
    verify_checksum: bool = True
    deadline_s: float | None = Field(default=None, gt=0, description="give up after this long")


class TransferStatus(Frozen):
    """A backend's report on one transfer: progress so far, or how it ended."""

    state: TransferState
    bytes_transferred: int = Field(default=0, ge=0)
    files: int = Field(default=0, ge=0, description="files copied so far")
    files_skipped: int = Field(default=0, ge=0, description="files already at the destination")
    checksum_verified: bool | None = None
    error: str | None = None
    globus_task_id: str | None = None
    submission_id: str | None = None
    note: str | None = None
    """Something worth telling the caller that is not an error (e.g. Globus nice_status)."""
