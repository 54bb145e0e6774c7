"""Transfer handles and the manager that records, starts, follows and recovers transfers."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from federation.core.errors import TransferError, UnknownSiteError
from federation.runtime.events import DEFAULT_OWNER, Event, EventBus, EventCallback, EventKind
from federation.runtime.store import Store
from federation.transfer.backend import TransferBackend
from federation.transfer.models import (
    TERMINAL_STATES,
    TransferRequest,
    TransferState,
    TransferStatus,
)

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class TransferHandle:
    """A transfer started by ``move_data``; ``add_callback`` resumes you on its events."""

    id: str
    request: TransferRequest
    backend: str
    bus: EventBus
    state: TransferState = "queued"
    bytes_transferred: int = 0
    files: int = 0
    files_skipped: int = 0
    checksum_verified: bool | None = None
    error: str | None = None
    globus_task_id: str | None = None
    submission_id: str | None = None
    submitted_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    completed_at: datetime | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    """Notable moments beyond events: recoveries after a restart, and how they resumed."""
    owner: str = DEFAULT_OWNER
    """The caller who started it: its events go to that caller's log."""
    _done: threading.Event = field(default_factory=threading.Event)
    _lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def label(self) -> str | None:
        return self.request.label

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def add_callback(self, callback: EventCallback) -> None:
        """Call ``callback(event)`` for this transfer's events, past ones first."""
        for ev in self.bus.history(self.id):
            callback(ev)
        self.bus.subscribe(callback, task_id=self.id)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the transfer ends (True) or ``timeout_s`` passes (False)."""
        return self._done.wait(timeout_s)

    def events(self) -> list[Event]:
        return self.bus.history(self.id)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able summary (for the service, the MCP tools and the CLI)."""
        return {
            "id": self.id,
            "state": self.state,
            "source": self.request.source.model_dump(),
            "destination": self.request.destination.model_dump(),
            "bytes_transferred": self.bytes_transferred,
            "files": self.files,
            "files_skipped": self.files_skipped,
            "checksum_verified": self.checksum_verified,
            "error": self.error,
            "label": self.label,
            "backend": self.backend,
            "globus_task_id": self.globus_task_id,
            "sync_level": self.request.sync_level,
            "submitted_at": self.submitted_at.isoformat(),
            "completed_at": self.completed_at.isoformat() if self.completed_at else None,
            "history": list(self.history),
            "owner": self.owner,
        }


class TransferManager:
    """Chooses the backend for a pair of sites, records each transfer, turns reports into
    ``transfer.*`` events, and re-starts open transfers after a restart.

    Args:
        backends: one backend for every site, or one per site name.
        store: where transfers are recorded before ``submit`` returns (optional).
        bus: the coordinator's event bus.
        default: the backend for sites missing from a per-site mapping.
        per_owner: an owner's own backends by site (None: the shared ones serve them), for
            callers whose data moves under their own identity (:mod:`federation.runtime.callers`).
    """

    def __init__(
        self,
        backends: TransferBackend | Mapping[str, TransferBackend],
        store: Store | None,
        bus: EventBus,
        *,
        default: TransferBackend | None = None,
        per_owner: Callable[[str], Mapping[str, TransferBackend] | None] | None = None,
    ) -> None:
        self.per_owner = per_owner
        if isinstance(backends, Mapping):
            self.by_site: dict[str, TransferBackend] = dict(backends)
            self.default = default
        else:
            self.by_site = {}
            self.default = backends
        self.store = store
        self.bus = bus
        self._lock = threading.Lock()
        self._handles: dict[str, TransferHandle] = {}
        """Open transfers (and, without a store, every transfer)."""
        self.released = 0
        """How many finished transfers left memory."""

    # --- which backend --------------------------------------------------------------------------
    def _all_backends(self) -> dict[str, TransferBackend]:
        found = {b.name: b for b in self.by_site.values()}
        if self.default is not None:
            found.setdefault(self.default.name, self.default)
        return found

    def backend_for(
        self, source_site: str, dest_site: str, owner: str = DEFAULT_OWNER
    ) -> TransferBackend:
        """The backend serving both sites (for ``owner``); :class:`UnknownSiteError` or
        :class:`TransferError` when there is none."""
        own = (self.per_owner(owner) if self.per_owner else None) or {}
        chosen: list[TransferBackend] = []
        for site in (source_site, dest_site):
            b = own.get(site) or self.by_site.get(site, self.default)
            if b is None or not b.serves(site):
                known = sorted(set(self.by_site) | set(getattr(self.default, "sites", None) or []))
                raise UnknownSiteError(site, known)
            chosen.append(b)
        if chosen[0] is not chosen[1]:
            raise TransferError(
                f"{source_site} is served by the {chosen[0].name} transfer backend and "
                f"{dest_site} by {chosen[1].name}; no backend can move data between them. "
                "Configure both sites with Globus collections, or stage through a third site."
            )
        return chosen[0]

    # --- submit / get ----------------------------------------------------------------------------
    def submit(
        self,
        request: TransferRequest,
        on_event: EventCallback | None = None,
        owner: str = DEFAULT_OWNER,
    ) -> TransferHandle:
        """Validate, record, start; returns once the transfer is recorded and started.

        Bad requests (unknown site, path outside a storage root, missing source) raise
        before anything is recorded. A backend that cannot start the transfer (Globus
        refused it) raises after recording it as failed, with a ``transfer.failed`` event.
        """
        backend = self.backend_for(request.source.site, request.destination.site, owner)
        backend.validate(request)
        h = TransferHandle(
            id=str(uuid.uuid4()), request=request, backend=backend.name, bus=self.bus, owner=owner
        )
        self.bus.set_owner(h.id, owner)
        if on_event is not None:
            self.bus.subscribe(on_event, task_id=h.id)
        with self._lock:
            self._handles[h.id] = h
        if self.store is not None:  # durable before anything moves or is acknowledged
            self.store.insert_transfer(_row(h))
        self._start(h, backend, TransferStatus(state="queued"))
        return h

    def get(self, transfer_id: str) -> TransferHandle:
        with self._lock:
            h = self._handles.get(transfer_id)
        if h is not None:
            return h
        rows = self.store.transfers(transfer_id=transfer_id) if self.store else []
        if not rows:
            raise TransferError(f"unknown transfer {transfer_id!r}; use the id move_data returned")
        h = _handle_from_row(rows[0], self.bus)
        if h.state in TERMINAL_STATES:
            h._done.set()
            return h  # finished: read from the store each time, not kept
        with self._lock:
            return self._handles.setdefault(h.id, h)

    def handles(self) -> list[TransferHandle]:
        """The transfers in memory: open ones (and, without a store, every one)."""
        with self._lock:
            return list(self._handles.values())

    # --- recovery ---------------------------------------------------------------------------------
    def recover(self) -> list[TransferHandle]:
        """Resume every open transfer the store knows: Globus tasks are monitored again by
        their recorded task id; interrupted local copies are run again (safely: files that
        already match are skipped, others replaced atomically). Returns the resumed ones."""
        if self.store is None:
            return []
        backends = self._all_backends()
        resumed: list[TransferHandle] = []
        for row in self.store.transfers(open_only=True):
            with self._lock:
                if row["id"] in self._handles:
                    continue
            h = _handle_from_row(row, self.bus)
            with self._lock:
                self._handles[h.id] = h
            own = (self.per_owner(h.owner) if self.per_owner else None) or {}
            backend = {b.name: b for b in own.values()}.get(h.backend) or backends.get(h.backend)
            if backend is None:
                self._report(
                    h,
                    TransferStatus(
                        state="failed",
                        error=f"the {h.backend} transfer backend is not configured any more; "
                        "check the transfer yourself and move the data again",
                    ),
                )
                continue
            how = (
                f"re-monitoring Globus task {h.globus_task_id}"
                if h.globus_task_id
                else "re-running the interrupted copy (matching files skipped)"
                if backend.name == "local"
                else "re-submitting with the recorded submission id (Globus de-duplicates)"
            )
            h.history.append({"at": datetime.now(UTC).isoformat(), "what": "recovered", "how": how})
            if self.store is not None:
                self.store.update_transfer(h.id, history=json.dumps(h.history))
            resume = TransferStatus(
                state=h.state,
                bytes_transferred=h.bytes_transferred,
                files=h.files,
                globus_task_id=h.globus_task_id,
                submission_id=h.submission_id,
            )
            try:
                self._start(h, backend, resume, recovered=how)
            except TransferError:
                continue  # recorded and reported as transfer.failed
            resumed.append(h)
        return resumed

    def close(self) -> None:
        for b in self._all_backends().values():
            b.close()

    # --- internals --------------------------------------------------------------------------------
    def _start(
        self,
        h: TransferHandle,
        backend: TransferBackend,
        resume: TransferStatus,
        recovered: str | None = None,
    ) -> None:
        # the handle's lock is held until the submitted event is out: reports that the
        # backend sends meanwhile (from its own thread) wait and come after it
        with h._lock:
            try:
                started = backend.start(h.id, h.request, lambda st: self._report(h, st), resume)
            except TransferError as e:
                self._report(h, TransferStatus(state="failed", error=str(e)))
                raise
            self._apply(h, started)
            self._persist(h)
            if recovered is None:
                self._emit(
                    "transfer.submitted",
                    h,
                    source=h.request.source.describe(),
                    destination=h.request.destination.describe(),
                    backend=h.backend,
                    label=h.label,
                    sync_level=h.request.sync_level,
                    verify_checksum=h.request.verify_checksum,
                    globus_task_id=h.globus_task_id,
                )
            else:
                self._emit("transfer.progress", h, **_progress(h), note=f"recovered: {recovered}")

    def _report(self, h: TransferHandle, st: TransferStatus) -> None:
        with h._lock:
            if h.state in TERMINAL_STATES:
                return  # one terminal status per transfer, whatever a backend repeats
            self._apply(h, st)
            self._persist(h)
            if st.state == "queued":
                return  # bookkeeping only (e.g. a Globus submission id)
            if st.state == "succeeded":
                self._emit(
                    "transfer.completed",
                    h,
                    **_progress(h),
                    checksum_verified=h.checksum_verified,
                    globus_task_id=h.globus_task_id,
                )
            elif st.state in ("failed", "cancelled"):
                self._emit(
                    "transfer.failed",
                    h,
                    **_progress(h),
                    state=h.state,
                    error=h.error,
                    globus_task_id=h.globus_task_id,
                )
            else:
                self._emit("transfer.progress", h, **_progress(h), note=st.note)
        if st.state in TERMINAL_STATES:
            h._done.set()
            self._release(h)

    def _release(self, h: TransferHandle) -> None:
        """A finished transfer leaves memory once the store has it (:meth:`get` reads it
        back), as a finished task does: a long-running coordinator does not grow with them."""
        if self.store is None:
            return
        with self._lock:
            if self._handles.get(h.id) is h:
                del self._handles[h.id]
                self.released += 1

    @staticmethod
    def _apply(h: TransferHandle, st: TransferStatus) -> None:
        if st.state != "queued" or h.state == "queued":
            h.state = st.state
        if st.state != "queued":  # counters are cumulative within one run of the backend
            h.bytes_transferred = st.bytes_transferred
            h.files = st.files
            h.files_skipped = st.files_skipped
        if st.checksum_verified is not None:
            h.checksum_verified = st.checksum_verified
        h.error = st.error or h.error
        h.globus_task_id = st.globus_task_id or h.globus_task_id
        h.submission_id = st.submission_id or h.submission_id
        if st.state in TERMINAL_STATES:
            h.completed_at = datetime.now(UTC)

    def _persist(self, h: TransferHandle) -> None:
        if self.store is None:
            return
        self.store.update_transfer(
            h.id,
            state=h.state,
            bytes_transferred=h.bytes_transferred,
            files=h.files,
            files_skipped=h.files_skipped,
            checksum_verified=None if h.checksum_verified is None else int(h.checksum_verified),
            error=h.error,
            globus_task_id=h.globus_task_id,
            submission_id=h.submission_id,
            completed_at=h.completed_at.isoformat() if h.completed_at else None,
        )

    def _emit(self, kind: EventKind, h: TransferHandle, **detail: Any) -> None:
        site = h.request.destination.site
        self.bus.emit(kind, h.id, site, **{k: v for k, v in detail.items() if v is not None})


def _progress(h: TransferHandle) -> dict[str, Any]:
    return {
        "bytes_transferred": h.bytes_transferred,
        "files": h.files,
        "files_skipped": h.files_skipped,
    }


def _row(h: TransferHandle) -> dict[str, Any]:
    return {
        "id": h.id,
        "request": h.request.model_dump_json(),
        "backend": h.backend,
        "state": h.state,
        "submitted_at": h.submitted_at.isoformat(),
        "history": json.dumps(h.history),
        "owner": h.owner,
    }


def _handle_from_row(row: dict[str, Any], bus: EventBus) -> TransferHandle:
    verified = row["checksum_verified"]
    h = TransferHandle(
        id=row["id"],
        request=TransferRequest.model_validate_json(row["request"]),
        backend=row["backend"],
        bus=bus,
        state=row["state"],
        bytes_transferred=row["bytes_transferred"],
        files=row["files"],
        files_skipped=row["files_skipped"],
        checksum_verified=None if verified is None else bool(verified),
        error=row["error"],
        globus_task_id=row["globus_task_id"],
        submission_id=row["submission_id"],
        submitted_at=datetime.fromisoformat(row["submitted_at"]),
        completed_at=datetime.fromisoformat(row["completed_at"]) if row["completed_at"] else None,
        history=json.loads(row["history"] or "[]"),
        owner=row.get("owner") or DEFAULT_OWNER,
    )
    bus.set_owner(h.id, h.owner)
    return h
