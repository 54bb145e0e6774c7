"""Globus Transfer backend: ``globus_sdk.TransferClient`` between site collections.

Each site maps to a collection id and the path prefix of its storage inside that
collection. A transfer is one ``TransferData`` (sync level, checksum verification, label,
deadline) submitted with a submission id recorded first, so a restarted coordinator
re-submits without creating a duplicate task. One monitor thread follows every active
task with ``get_task``, backing off from ``poll_min_s`` to ``poll_max_s`` per task, and on
FAILED reads the task's event list for Globus's own reason.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import globus_sdk
from pydantic import Field, field_validator

from federation.core.errors import (
    DataNotFoundError,
    TransferAuthError,
    TransferError,
    TransferUnavailableError,
    UnknownSiteError,
)
from federation.core.model import Frozen
from federation.transfer.backend import Reporter
from federation.transfer.models import DataRef, TransferRequest, TransferStatus
from federation.transfer.paths import under_root

logger = logging.getLogger(__name__)

T = TypeVar("T")

OFFLINE_CODES = ("EndpointError", "ExternalError", "GCDisconnected", "GC_NOT_CONNECTED")
"""Error codes (or parts of them) with which Transfer says a collection cannot be reached."""


class GlobusCollection(Frozen):
    """Where a site's storage lives in Globus: a collection and a folder inside it."""

    collection_id: uuid.UUID
    path_prefix: str = Field(default="/", description="the site's storage root in it")

    @field_validator("path_prefix")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"path_prefix must be absolute (start with '/'), got {v!r}")
        return v


@dataclass(order=True)
class _Watch:
    due: float
    transfer_id: str = field(compare=False)
    task_id: str = field(compare=False)
    request: TransferRequest = field(compare=False)
    report: Reporter = field(compare=False)
    interval_s: float = field(compare=False)
    submission_id: str | None = field(default=None, compare=False)
    last_bytes: int = field(default=-1, compare=False)
    last_note: str | None = field(default=None, compare=False)
    errors: int = field(default=0, compare=False)


class GlobusTransferBackend:
    """Transfers between Globus collections, followed by one monitor thread.

    Args:
        client: an authenticated ``globus_sdk.TransferClient`` (its retry settings apply:
            429 and 5xx answers are retried by the SDK before anything reaches here).
        collections: each site's collection and path prefix.
        poll_min_s / poll_max_s: first and longest interval between two ``get_task`` calls
            for one task; the interval grows by ``backoff`` after each check.
        max_poll_errors: consecutive failed checks of one task before it is reported
            failed (the task itself may still run: its Globus id is in the error).
    """

    name = "globus"

    def __init__(
        self,
        client: globus_sdk.TransferClient,
        collections: Mapping[str, GlobusCollection],
        *,
        poll_min_s: float = 2.0,
        poll_max_s: float = 60.0,
        backoff: float = 1.5,
        max_poll_errors: int = 5,
    ) -> None:
        self.client = client
        self.collections = dict(collections)
        self.sites = sorted(self.collections)
        self.poll_min_s = poll_min_s
        self.poll_max_s = poll_max_s
        self.backoff = backoff
        self.max_poll_errors = max_poll_errors
        self.polls = 0
        """``get_task`` calls made so far (the monitor's whole cost)."""
        self._queue: list[_Watch] = []
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None

    # --- seam ---------------------------------------------------------------------------------
    def serves(self, site: str) -> bool:
        return site in self.collections

    def locate(self, ref: DataRef) -> tuple[str, str]:
        """(collection id, absolute path in it) for ``ref``; refuses paths outside its root."""
        coll = self.collections.get(ref.site)
        if coll is None:
            raise UnknownSiteError(ref.site, self.sites)
        return str(coll.collection_id), under_root(coll.path_prefix, ref.path, ref.site)

    def validate(self, request: TransferRequest) -> None:
        self.locate(request.source)
        self.locate(request.destination)

    def start(
        self, transfer_id: str, request: TransferRequest, report: Reporter, resume: TransferStatus
    ) -> TransferStatus:
        if resume.globus_task_id:  # submitted before a restart: follow it again
            self._watch(transfer_id, resume.globus_task_id, request, report, resume.submission_id)
            return resume.model_copy(update={"state": "active"})
        src_id, src_path = self.locate(request.source)
        dst_id, dst_path = self.locate(request.destination)
        sid = resume.submission_id
        if sid is None:
            sid = str(self._call("get a submission id", self.client.get_submission_id)["value"])
            report(TransferStatus(state="queued", submission_id=sid))  # recorded before submit
        recursive = self._is_dir(src_id, src_path, request.source)
        tdata = globus_sdk.TransferData(
            src_id,
            dst_id,
            label=request.label or f"federation move_data {transfer_id[:8]}",
            submission_id=sid,
            sync_level=request.sync_level,
            verify_checksum=request.verify_checksum,
            notify_on_succeeded=False,
            notify_on_failed=False,
            notify_on_inactive=False,
            **_deadline(request),
        )
        tdata.add_item(src_path, dst_path, recursive=recursive)
        res = self._call(
            f"submit the transfer {request.source.describe()} -> {request.destination.describe()}",
            lambda: self.client.submit_transfer(tdata),
        )
        task_id = str(res["task_id"])
        self._watch(transfer_id, task_id, request, report, sid)
        note = "Globus already had this submission" if res.get("code") == "Duplicate" else None
        return TransferStatus(state="active", globus_task_id=task_id, submission_id=sid, note=note)

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def watching(self) -> int:
        """How many tasks the monitor follows now."""
        with self._cond:
            return len(self._queue)

    # --- calls and their errors -------------------------------------------------------------
    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except globus_sdk.GlobusAPIError as e:
            raise api_error(e, what) from e
        except globus_sdk.NetworkError as e:
            raise TransferUnavailableError(
                f"could not {what}: Globus Transfer unreachable ({type(e).__name__}: {e}); "
                "check the network and retry"
            ) from e

    def _is_dir(self, collection_id: str, path: str, ref: DataRef) -> bool:
        try:
            st = self.client.operation_stat(collection_id, path)
        except globus_sdk.GlobusAPIError as e:
            if e.http_status == 404:
                raise DataNotFoundError(
                    f"source {ref.describe()} does not exist ({path} on collection "
                    f"{collection_id}); check the site and the path"
                ) from e
            raise api_error(e, f"look up the source {ref.describe()}") from e
        except globus_sdk.NetworkError as e:
            raise TransferUnavailableError(f"Globus Transfer unreachable: {e}") from e
        return bool(st["type"] == "dir")

    # --- the monitor ----------------------------------------------------------------------------
    def _watch(
        self,
        transfer_id: str,
        task_id: str,
        request: TransferRequest,
        report: Reporter,
        submission_id: str | None,
    ) -> None:
        w = _Watch(
            due=time.monotonic() + self.poll_min_s,
            transfer_id=transfer_id,
            task_id=task_id,
            request=request,
            report=report,
            interval_s=self.poll_min_s,
            submission_id=submission_id,
        )
        with self._cond:
            heapq.heappush(self._queue, w)
            if self._thread is None or not self._thread.is_alive():
                self._stop = False
                self._thread = threading.Thread(
                    target=self._monitor, daemon=True, name="globus-transfer-monitor"
                )
                self._thread.start()
            self._cond.notify_all()

    def _monitor(self) -> None:
        while True:
            with self._cond:
                while not self._stop and (not self._queue or self._queue[0].due > time.monotonic()):
                    timeout = self._queue[0].due - time.monotonic() if self._queue else None
                    self._cond.wait(timeout)
                if self._stop:
                    return
                w = heapq.heappop(self._queue)
            again = True
            try:
                again = self._check(w)
            except Exception as e:  # the monitor must outlive any one task's trouble
                logger.exception("checking Globus task %s failed", w.task_id)
                w.report(_failed(w, f"monitoring failed: {type(e).__name__}: {e}"))
                again = False
            if again:
                w.interval_s = min(self.poll_max_s, w.interval_s * self.backoff)
                w.due = time.monotonic() + w.interval_s
                with self._cond:
                    heapq.heappush(self._queue, w)

    def _check(self, w: _Watch) -> bool:
        """One ``get_task``; reports what changed. False when the task is finished."""
        self.polls += 1
        try:
            task: dict[str, Any] = dict(self.client.get_task(w.task_id).data)
        except globus_sdk.GlobusAPIError as e:
            err = api_error(e, f"check Globus task {w.task_id}")
            if isinstance(err, TransferAuthError):
                w.report(_failed(w, str(err)))
                return False
            return self._poll_error(w, str(err))
        except globus_sdk.NetworkError as e:
            return self._poll_error(w, f"Globus Transfer unreachable: {e}")
        w.errors = 0
        status = task["status"]
        counts: dict[str, Any] = {
            "bytes_transferred": int(task.get("bytes_transferred") or 0),
            "files": int(task.get("files_transferred") or 0),
            "files_skipped": int(task.get("files_skipped") or 0),
            "globus_task_id": w.task_id,
        }
        if status == "SUCCEEDED":
            w.report(
                TransferStatus(
                    state="succeeded", checksum_verified=w.request.verify_checksum, **counts
                )
            )
            return False
        if status == "FAILED":
            reason = self._failure_reason(w.task_id, task)
            cancelled = "CANCEL" in reason.upper() and "deadline" not in reason.lower()
            w.report(
                TransferStatus(
                    state="cancelled" if cancelled else "failed",
                    error=f"Globus task {w.task_id} failed: {reason}",
                    **counts,
                )
            )
            return False
        note = _nice_status(task)
        if counts["bytes_transferred"] != w.last_bytes or note != w.last_note:
            w.last_bytes, w.last_note = counts["bytes_transferred"], note
            w.report(TransferStatus(state="active", note=note, **counts))
        return True

    def _poll_error(self, w: _Watch, message: str) -> bool:
        w.errors += 1
        if w.errors >= self.max_poll_errors:
            w.report(
                _failed(
                    w,
                    f"{message}; gave up after {w.errors} checks in a row. The Globus task "
                    f"{w.task_id} may still be running: look at it in the Globus web app",
                )
            )
            return False
        return True

    def _failure_reason(self, task_id: str, task: Mapping[str, Any]) -> str:
        parts: list[str] = []
        try:
            for ev in self.client.task_event_list(task_id, limit=10):
                if ev.get("is_error"):
                    details = str(ev.get("details") or "").strip()
                    parts.append(
                        f"{ev.get('code')}: {ev.get('description')}"
                        + (f" ({details[:300]})" if details else "")
                    )
                    break
        except (globus_sdk.GlobusAPIError, globus_sdk.NetworkError) as e:
            parts.append(f"(its event list could not be read: {e})")
        fatal = task.get("fatal_error")
        if isinstance(fatal, Mapping) and fatal.get("code"):
            parts.append(f"fatal error {fatal.get('code')}: {fatal.get('description')}")
        nice = _nice_status(task)
        if nice:
            parts.append(f"status {nice}")
        return "; ".join(parts) or "Globus gave no reason"


def api_error(e: globus_sdk.GlobusAPIError, what: str) -> TransferError:
    """A Transfer API error as a :class:`TransferError` that says what to do."""
    said = f"Globus said {e.http_status} {e.code}: {e.message} (request id {e.request_id})"
    if e.http_status == 401:
        return TransferAuthError(
            f"could not {what}: the Transfer token is missing, expired or revoked; log in "
            f"again or renew the coordinator's client credentials. {said}"
        )
    if e.http_status == 403:
        return TransferAuthError(
            f"could not {what}: not allowed; grant the collection's data_access consent or "
            f"ask its administrator for permission on that path. {said}"
        )
    if e.http_status == 429:
        return TransferUnavailableError(
            f"could not {what}: rate-limited by Globus Transfer even after the SDK's "
            f"retries; wait a minute and try again. {said}"
        )
    code = e.code or ""
    if any(c in code for c in OFFLINE_CODES) or e.http_status in (502, 503, 504):
        return TransferUnavailableError(
            f"could not {what}: a collection or the service is unreachable (offline, "
            f"disconnected or under maintenance); check its status and retry. {said}"
        )
    if e.http_status == 404:
        return TransferError(f"could not {what}: unknown collection or task. {said}")
    return TransferError(f"could not {what}. {said}")


def _nice_status(task: Mapping[str, Any]) -> str | None:
    nice = task.get("nice_status")
    if not nice or nice == "OK" or nice == "Queued":
        return None
    desc = task.get("nice_status_short_description")
    return f"{nice} ({desc})" if desc else str(nice)


def _failed(w: _Watch, message: str) -> TransferStatus:
    return TransferStatus(state="failed", error=message, globus_task_id=w.task_id)


def _deadline(request: TransferRequest) -> dict[str, Any]:
    if request.deadline_s is None:
        return {}
    return {"deadline": datetime.now(UTC) + timedelta(seconds=request.deadline_s)}


__all__ = ["GlobusCollection", "GlobusTransferBackend", "api_error"]
