"""The operations behind the HTTP service and the MCP server, over one coordinator.

:class:`LocalOps` turns wire requests into coordinator calls and coordinator objects into
wire views; every failure becomes an :class:`OpsError` that carries its HTTP status, a code,
what was wrong and what to do. Probing every site takes seconds, so a
:class:`SnapshotCache` keeps a recent snapshot (refreshed in the background) for ``inspect``
and for placement: every other operation answers in milliseconds.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import anyio
import anyio.to_thread

from federation.catalog import Catalog, CatalogError, FunctionInfo, default_catalog
from federation.coordinator import Coordinator
from federation.drafting import EnvelopeDraft, validate
from federation.errors import (
    BadEnvelopeError,
    FederationError,
    NoFeasibleSiteError,
    SerializationError,
    SiteUnavailableError,
    UnknownSiteError,
)
from federation.handles import TaskHandle
from federation.service.models import (
    EVENT_KINDS,
    CancelResponse,
    DraftRequest,
    ErrorBody,
    EventsPage,
    SubmitResponse,
    TaskRequest,
    TaskStatus,
    submit_response,
    task_status,
)
from federation.snapshot import FederationSnapshot
from federation.tasks import ShellTask, TaskSpec

logger = logging.getLogger(__name__)

WAIT_SLICE_S = 1.0
"""A long wait sleeps on the event bus in slices this long, so an abandoned waiter (a client
that went away, a cancelled tool call) frees its thread within a second. Events still wake
it at once: each slice is a condition-variable wait, not a poll."""


class OpsError(Exception):
    """A failed operation: an HTTP status plus the JSON body that explains it."""

    def __init__(
        self,
        status: int,
        error: str,
        message: str,
        hint: str = "",
        details: dict[str, Any] | None = None,
    ) -> None:
        self.status = status
        self.body = ErrorBody(error=error, message=message, hint=hint, details=details or {})
        super().__init__(message)

    def __str__(self) -> str:
        text = f"{self.body.error}: {self.body.message}"
        if self.body.hint:
            text += f" -- {self.body.hint}"
        return text


class Operations(Protocol):
    """What the MCP server (and anything else) can do with a federation."""

    def inspect(self, refresh: bool = False) -> FederationSnapshot: ...

    def functions(self) -> list[FunctionInfo]: ...

    def draft(self, req: DraftRequest) -> EnvelopeDraft: ...

    def submit(self, req: TaskRequest, caller: str = "") -> SubmitResponse: ...

    def status(self, task_id: str) -> TaskStatus: ...

    def cancel(self, task_id: str) -> CancelResponse: ...

    async def events(
        self,
        after: int,
        task_ids: Sequence[str] | None,
        kinds: Sequence[str] | None,
        timeout_s: float,
        abandoned: Callable[[], Awaitable[bool]] | None = None,
    ) -> EventsPage: ...

    def close(self) -> None: ...


class SnapshotCache:
    """The latest federation snapshot, refreshed every ``refresh_s`` by a background thread.

    ``get()`` answers at once with the cached snapshot once the first probe is in (it waits
    for that one). ``refresh()`` probes now. Placement reads the snapshot it is given, so a
    decision is made on data at most ``refresh_s`` plus one probe round old; its trace
    records ``snapshot_taken_at``.
    """

    def __init__(self, coord: Coordinator, refresh_s: float = 15.0, start: bool = True) -> None:
        self.coord = coord
        self.refresh_s = refresh_s
        self._snap: FederationSnapshot | None = None
        self._have = threading.Event()
        self._probe_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(
                target=self._loop, name="federation-snapshot", daemon=True
            )
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception:
                logger.exception("background probe failed")
            if self._stop.wait(self.refresh_s):
                return

    def refresh(self) -> FederationSnapshot:
        with self._probe_lock:
            snap = self.coord.inspect_federation()
            self.put(snap)
            return snap

    def put(self, snap: FederationSnapshot) -> None:
        self._snap = snap
        self._have.set()

    def get(self, timeout_s: float | None = None) -> FederationSnapshot:
        snap = self._snap
        if snap is not None:
            return snap
        if self._thread is None:
            return self.refresh()
        wait = self.coord.probe_timeout_s + 10 if timeout_s is None else timeout_s
        if not self._have.wait(wait) or self._snap is None:
            raise OpsError(
                503,
                "no_snapshot",
                f"the first probe of the sites has not come back within {wait:.0f} s",
                "check the sites (`federation sites status`) and retry",
            )
        return self._snap

    def age_s(self) -> float | None:
        snap = self._snap
        if snap is None:
            return None
        return (datetime.now(UTC) - snap.taken_at).total_seconds()

    def close(self) -> None:
        self._stop.set()


class LocalOps:
    """Operations on an in-process :class:`Coordinator` (the service's and the MCP server's)."""

    def __init__(
        self,
        coord: Coordinator,
        catalog: Catalog | None = None,
        *,
        cache: SnapshotCache | None = None,
        refresh_s: float = 15.0,
        max_waiters: int = 64,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.coord = coord
        self._on_close = on_close
        self.catalog = catalog or default_catalog()
        self.cache = cache or SnapshotCache(coord, refresh_s=refresh_s)
        self.waiters = 0
        """Long waits in progress (each holds a worker thread for at most one slice)."""
        self._limiter = anyio.CapacityLimiter(max_waiters)
        self._max_waiters = max_waiters
        self._lock = threading.Lock()

    # --- reads --------------------------------------------------------------------------------
    def inspect(self, refresh: bool = False) -> FederationSnapshot:
        return self.cache.refresh() if refresh else self.cache.get()

    def functions(self) -> list[FunctionInfo]:
        return self.catalog.describe()

    def draft(self, req: DraftRequest) -> EnvelopeDraft:
        try:
            return self.coord.draft_envelope(req.description, req.hints)
        except Exception as e:
            raise translate(e) from e

    def handle(self, task_id: str) -> TaskHandle:
        for h in self.coord.handles():
            if h.id == task_id:
                return h
        raise OpsError(
            404,
            "unknown_task",
            f"no task with id {task_id!r} on this coordinator",
            "use the task_id that submit returned; tasks do not survive a restart",
        )

    def status(self, task_id: str) -> TaskStatus:
        return task_status(self.handle(task_id))

    # --- writes -------------------------------------------------------------------------------
    def task_spec(self, req: TaskRequest) -> TaskSpec:
        if req.command is not None:
            return ShellTask(command=req.command, name=req.name)
        assert req.function is not None
        try:
            task = self.catalog.bind(req.function, req.args, req.kwargs)
        except CatalogError as e:
            raise translate(e) from e
        return dataclasses.replace(task, name=req.name) if req.name else task

    def submit(self, req: TaskRequest, caller: str = "") -> SubmitResponse:
        task = self.task_spec(req)
        snap = self.cache.get()
        cursor = self.coord.events.last_seq
        try:
            handle = self.coord.submit_task(task, req.envelope, snapshot=snap)
        except NoFeasibleSiteError as e:
            raise self._no_site(e, req, snap) from e
        except Exception as e:
            raise translate(e) from e
        logger.info(
            "task %s (%s) from %s placed on %s",
            handle.id,
            handle.label,
            caller or "(local)",
            handle.shape.describe(),
        )
        return submit_response(handle, cursor)

    def _no_site(
        self, e: NoFeasibleSiteError, req: TaskRequest, snap: FederationSnapshot
    ) -> OpsError:
        """409 when the envelope fits nowhere; 503 when it fits only sites that are down."""
        specs = [b.spec for b in self.coord.backends.values()]
        static = validate(req.envelope, specs).feasible
        fitting_sites = {p.split("/", 1)[0] for p in static}
        down = {
            s.site: s.health.error or "unreachable"
            for s in snap.sites
            if s.site in fitting_sites and not s.health.reachable
        }
        if fitting_sites and set(down) == fitting_sites:
            return OpsError(
                503,
                "site_unavailable",
                "every site that could host this envelope is unavailable: "
                + "; ".join(f"{k}: {v}" for k, v in sorted(down.items())),
                "retry later, or widen the envelope to other sites",
                {"reasons": e.reasons, "unavailable": down},
            )
        return OpsError(
            409,
            "no_feasible_site",
            str(e).splitlines()[0],
            "relax the envelope (fewer GPUs, another GPU type, shorter walltime, less "
            "memory); draft_envelope shows the nearest feasible one",
            {"reasons": e.reasons},
        )

    def cancel(self, task_id: str) -> CancelResponse:
        h = self.handle(task_id)
        try:
            ok = self.coord.cancel(h)
        except Exception as e:
            raise translate(e) from e
        if ok:
            msg = "cancelled before it started"
        elif h.done:
            msg = f"already {h.state}; nothing to cancel"
        else:
            msg = f"could not be cancelled (it is {h.state}); wait for it to finish"
        return CancelResponse(task_id=h.id, cancelled=ok, state=h.state, message=msg)

    # --- events -------------------------------------------------------------------------------
    def check_event_filter(
        self, task_ids: Sequence[str] | None, kinds: Sequence[str] | None
    ) -> tuple[set[str] | None, set[str] | None]:
        ids = set(task_ids) if task_ids else None
        if ids:
            known = {h.id for h in self.coord.handles()}
            unknown = sorted(ids - known)
            if unknown:
                raise OpsError(
                    404,
                    "unknown_task",
                    f"no task with id(s) {unknown} on this coordinator",
                    "filter on task ids that submit returned",
                )
        kind_set = set(kinds) if kinds else None
        if kind_set:
            bad = sorted(kind_set - set(EVENT_KINDS))
            if bad:
                raise OpsError(
                    422,
                    "bad_event_kind",
                    f"unknown event kind(s) {bad}",
                    f"use some of {list(EVENT_KINDS)}",
                )
        return ids, kind_set

    async def events(
        self,
        after: int,
        task_ids: Sequence[str] | None,
        kinds: Sequence[str] | None,
        timeout_s: float,
        abandoned: Callable[[], Awaitable[bool]] | None = None,
    ) -> EventsPage:
        """Events after ``after`` matching the filters; waits up to ``timeout_s`` for one.

        The wait runs in worker threads (one condition-variable wait per slice), so the
        event loop stays free. ``abandoned()`` is asked between slices; when it says so
        (the client went away), the wait ends early.
        """
        if after < 0:
            raise OpsError(422, "bad_cursor", f"after={after} is negative", "start from 0")
        ids, kind_set = self.check_event_filter(task_ids, kinds)
        bus = self.coord.events
        deadline = time.monotonic() + max(0.0, timeout_s)
        if self.waiters >= self._max_waiters:
            raise OpsError(
                503,
                "too_many_waiters",
                f"{self._max_waiters} event waits are already in progress",
                "retry shortly, or wait on several tasks in one call",
            )
        with self._lock:
            self.waiters += 1
        try:
            while True:
                remaining = deadline - time.monotonic()
                wait = functools.partial(
                    bus.await_event,
                    after,
                    task_ids=ids,
                    kinds=kind_set,
                    timeout_s=max(0.0, min(WAIT_SLICE_S, remaining)),
                )
                found = await anyio.to_thread.run_sync(wait, limiter=self._limiter)
                if found:
                    return EventsPage(
                        events=tuple(found),
                        cursor=max(e.seq for e in found),
                        timed_out=False,
                        last_seq=bus.last_seq,
                    )
                if time.monotonic() >= deadline:
                    break
                if abandoned is not None and await abandoned():
                    break
        finally:
            with self._lock:
                self.waiters -= 1
        return EventsPage(events=(), cursor=after, timed_out=True, last_seq=bus.last_seq)

    def close(self) -> None:
        self.cache.close()
        if self._on_close is not None:
            self._on_close()


def translate(e: BaseException) -> OpsError:
    """A federation exception as an :class:`OpsError` with the right HTTP status."""
    if isinstance(e, OpsError):
        return e
    if isinstance(e, CatalogError):
        return OpsError(
            422,
            "bad_function",
            str(e),
            "call one of the catalog functions with arguments matching its schema",
            {"errors": e.errors},
        )
    if isinstance(e, UnknownSiteError):
        return OpsError(
            422, "unknown_site", str(e), "use one of the known sites", {"known": e.known}
        )
    if isinstance(e, BadEnvelopeError):
        return OpsError(422, "bad_envelope", str(e), "fix the named bound and resubmit")
    if isinstance(e, SerializationError):
        return OpsError(422, "not_serializable", str(e), "pass plain JSON arguments")
    if isinstance(e, NoFeasibleSiteError):
        return OpsError(
            409,
            "no_feasible_site",
            str(e).splitlines()[0],
            "relax the envelope; draft_envelope shows the nearest feasible one",
            {"reasons": e.reasons},
        )
    if isinstance(e, SiteUnavailableError) or (
        isinstance(e, FederationError) and isinstance(e.__cause__, Exception)
    ):
        return OpsError(
            503,
            "site_unavailable",
            str(e),
            "check the site (`federation sites status`) and retry",
        )
    if isinstance(e, FederationError):
        return OpsError(500, "federation_error", str(e))
    logger.exception("unexpected error", exc_info=e)
    return OpsError(500, "internal_error", f"{type(e).__name__}: {e}", "see the server log")


def parse_kinds(values: Iterable[str] | None) -> list[str] | None:
    """``["task.completed,task.failed", "task.started"]`` -> the three kinds (None if empty)."""
    if not values:
        return None
    out = [k.strip() for v in values for k in v.split(",") if k.strip()]
    return out or None
