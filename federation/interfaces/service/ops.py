"""The operations behind the HTTP service and the MCP server, over one coordinator.

:class:`LocalOps` turns wire requests into coordinator calls and coordinator objects into
wire views; every failure becomes an :class:`OpsError` that carries its HTTP status, a code,
what was wrong and what to do. Probing every site takes seconds, so a
:class:`SnapshotCache` keeps a recent snapshot (refreshed in the background) for ``inspect``
and for placement: every other operation answers in milliseconds.

**Ownership.** Every operation acts for a ``caller`` (the bearer token's caller over HTTP,
``mcp`` over MCP's stdio, ``local`` in-process). A caller sees, waits on and cancels only the
tasks, groups, transfers and events they created: anything else answers exactly as an id
that does not exist (404), and their event cursor counts their own events only (gap-free).
Operators (``operator: true``; ``local`` in-process) see and cancel everything, and each
time they touch another caller's record the audit log gets an ``operator_access`` row.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, cast

import anyio
import anyio.to_thread

from federation.core.errors import (
    BadEnvelopeError,
    DataNotFoundError,
    FederationError,
    NoFeasibleSiteError,
    SerializationError,
    SiteUnavailableError,
    TransferAuthError,
    TransferPathError,
    TransferUnavailableError,
    UnknownSiteError,
)
from federation.core.snapshot import FederationSnapshot
from federation.core.tasks import ShellTask, TaskSpec
from federation.interfaces.service.errors import OpsError
from federation.interfaces.service.models import (
    EVENT_KINDS,
    CancelResponse,
    DraftRequest,
    EventsPage,
    GroupRequest,
    GroupResponse,
    GroupView,
    SubmitResponse,
    TaskRequest,
    TaskStatus,
    TransferLike,
    TransferRequest,
    TransferResponse,
    TransferView,
    child_names,
    group_view,
    submit_response,
    task_status,
    transfer_view,
)
from federation.interfaces.service.ownership import Ownership, not_found
from federation.placement.drafting import EnvelopeDraft, validate
from federation.runtime.catalog import Catalog, CatalogError, FunctionInfo, default_catalog
from federation.runtime.coordinator import Coordinator
from federation.runtime.groups import GroupHandle
from federation.runtime.handles import TaskHandle
from federation.security.audit import RecordKind
from federation.security.policy import LOCAL_CALLER, PolicyViolationError

logger = logging.getLogger(__name__)

WAIT_SLICE_S = 1.0
"""A long wait sleeps on the event bus in slices this long, so an abandoned waiter (a client
that went away, a cancelled tool call) frees its thread within a second. Events still wake
it at once: each slice is a condition-variable wait, not a poll."""


class Operations(Protocol):
    """What the MCP server (and anything else) can do with a federation."""

    def inspect(self, refresh: bool = False) -> FederationSnapshot: ...

    def functions(self) -> list[FunctionInfo]: ...

    def draft(self, req: DraftRequest) -> EnvelopeDraft: ...

    def submit(self, req: TaskRequest, caller: str = "") -> SubmitResponse: ...

    def tasks(self, caller: str = "") -> list[dict[str, Any]]: ...

    def status(self, task_id: str, caller: str = "") -> TaskStatus: ...

    def cancel(self, task_id: str, caller: str = "") -> CancelResponse: ...

    def submit_group(self, req: GroupRequest, caller: str = "") -> GroupResponse: ...

    def group(self, group_id: str, caller: str = "") -> GroupView: ...

    def move_data(self, req: TransferRequest, caller: str = "") -> TransferResponse: ...

    def transfer(self, transfer_id: str, caller: str = "") -> TransferView: ...

    async def events(
        self,
        after: int,
        task_ids: Sequence[str] | None,
        kinds: Sequence[str] | None,
        timeout_s: float,
        abandoned: Callable[[], Awaitable[bool]] | None = None,
        caller: str = "",
    ) -> EventsPage: ...

    def close(self) -> None: ...


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
    ) -> TransferLike: ...

    def get_transfer(self, transfer_id: str) -> TransferLike: ...


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
        self.owners = Ownership(coord)
        """Who may see what (each caller their own work; operators all of it, audited)."""
        self._on_close = on_close
        self.catalog = catalog or default_catalog()
        self.cache = cache or SnapshotCache(coord, refresh_s=refresh_s)
        self.waiters = 0
        """Long waits in progress (each holds a worker thread for at most one slice)."""
        self._limiter = anyio.CapacityLimiter(max_waiters)
        self._max_waiters = max_waiters
        self._lock = threading.Lock()
        self._groups: dict[str, GroupHandle] = {}
        self._transfers: dict[str, TransferLike] = {}

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

    def handle(self, task_id: str, caller: str = "", action: str = "read") -> TaskHandle:
        who = self.owners.who(caller)
        for h in self.coord.handles():
            if h.id == task_id:
                kind: RecordKind = "shell" if h.is_shell else "python"
                if self.owners.visible(who, kind, h.id, h.caller, action):
                    return h
                break
        raise not_found("task", task_id)

    def tasks(self, caller: str = "") -> list[dict[str, Any]]:
        """The caller's tasks (an operator: everyone's, with whose each is)."""
        who = self.owners.who(caller)
        rows = [
            {"task_id": h.id, "label": h.label, "state": h.state, "site": h.site, "owner": h.caller}
            for h in self.coord.handles()
            if who.operator or h.caller == who.name
        ]
        for owner in sorted({r["owner"] for r in rows}):
            self.owners.visible(who, "tasks", None, owner, "list")
        return rows

    def status(self, task_id: str, caller: str = "") -> TaskStatus:
        return task_status(self.handle(task_id, caller))

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
        cursor = self.owners.cursor(self.owners.who(caller))
        try:
            handle = self.coord.submit_task(
                task, req.envelope, snapshot=snap, caller=caller or LOCAL_CALLER
            )
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

    def cancel(self, task_id: str, caller: str = "") -> CancelResponse:
        h = self.handle(task_id, caller, action="cancel")
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

    # --- groups -------------------------------------------------------------------------------
    def submit_group(self, req: GroupRequest, caller: str = "") -> GroupResponse:
        """Check every child (arguments, sites, feasibility), then submit them all.

        A child that fits nowhere refuses the whole group before anything is submitted.
        """
        names = child_names(req.children)
        tasks = [self.task_spec(c) for c in req.children]
        snap = self.cache.get()
        refused: dict[str, dict[str, str]] = {}
        for name, child in zip(names, req.children, strict=True):
            unknown = [s for s in child.envelope.sites if s not in self.coord.backends]
            if unknown:
                raise OpsError(
                    422,
                    "unknown_site",
                    f"child {name!r}: unknown site(s) {unknown}",
                    "use some of the known sites",
                    {"child": name, "known": sorted(self.coord.backends)},
                )
            try:
                self.coord.plan(child.envelope, snap)
            except NoFeasibleSiteError as e:
                refused[name] = e.reasons
            except Exception as e:
                raise translate(e) from e
        if refused:
            raise OpsError(
                409,
                "no_feasible_site",
                f"no site can host child(ren) {sorted(refused)}; nothing was submitted",
                "relax those children's envelopes; draft_envelope shows the nearest feasible one",
                {"reasons": refused},
            )
        cursor = self.owners.cursor(self.owners.who(caller))
        children = [(n, t, c.envelope) for n, t, c in zip(names, tasks, req.children, strict=True)]
        try:
            g = self.coord.submit_group(
                children,
                objective=req.objective,
                distinct_sites=req.distinct_sites,
                snapshot=snap,
                caller=caller or LOCAL_CALLER,
            )
        except NoFeasibleSiteError as e:
            raise OpsError(
                409,
                "no_feasible_site",
                str(e).splitlines()[0],
                "the sites changed while the group was placed; check get_group and retry "
                "the children that are missing",
                {"reasons": e.reasons},
            ) from e
        except Exception as e:
            raise translate(e) from e
        with self._lock:
            self._groups[g.id] = g
        logger.info(
            "group %s (%d children) from %s placed on %s",
            g.id,
            len(g.children),
            caller or "(local)",
            ", ".join(c.handle.site for c in g.children),
        )
        return GroupResponse.model_validate(group_view(g).model_dump() | {"cursor": cursor})

    def group_handle(self, group_id: str, caller: str = "", action: str = "read") -> GroupHandle:
        with self._lock:
            g = self._groups.get(group_id)
        if g is None:  # one of an earlier coordinator's, re-attached by recover()
            try:
                g = self.coord.groups.get(group_id)
            except KeyError:
                g = None
        if g is None or not self.owners.visible(
            self.owners.who(caller), "group", g.id, g.caller, action
        ):
            raise not_found("group", group_id)
        return g

    def group(self, group_id: str, caller: str = "") -> GroupView:
        return group_view(self.group_handle(group_id, caller))

    # --- transfers -----------------------------------------------------------------------------
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
            )
        except Exception as e:
            raise translate(e) from e
        with self._lock:
            self._transfers[h.id] = h
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
        with self._lock:
            h = self._transfers.get(transfer_id)
        if h is None:
            try:
                h = self._mover().get_transfer(transfer_id)
            except (KeyError, FederationError, ValueError) as e:
                raise not_found("transfer", transfer_id) from e
        if not self.owners.visible(self.owners.who(caller), "transfer", h.id, h.owner, action):
            raise not_found("transfer", transfer_id)
        return h

    def transfer(self, transfer_id: str, caller: str = "") -> TransferView:
        return transfer_view(self.transfer_handle(transfer_id, caller))

    # --- events -------------------------------------------------------------------------------
    def expand_ids(self, ids: set[str] | None) -> set[str] | None:
        """A group id stands for the group and every attempt of every child (so far)."""
        if not ids:
            return ids
        out = set(ids)
        groups = []
        for i in ids:
            with self._lock:
                g = self._groups.get(i)
            if g is None:
                g = self.coord.groups.groups.get(i)  # re-attached after a restart
            if g is not None:
                groups.append(g)
        for g in groups:
            for child in list(g.children):
                out.update(a.id for a in list(child.attempts))
        return out

    def check_event_filter(
        self, task_ids: Sequence[str] | None, kinds: Sequence[str] | None, caller: str = ""
    ) -> tuple[set[str] | None, set[str] | None]:
        """The filters, checked: ids the caller cannot see are refused as unknown (404)."""
        ids = set(task_ids) if task_ids else None
        if ids:
            unknown = self.owners.unseen(self.owners.who(caller), ids)
            if unknown:
                raise OpsError(
                    404,
                    "unknown_task",
                    f"no task, group or transfer with id(s) {unknown} on this coordinator",
                    "filter on ids that submit_task, submit_group or move_data returned",
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
        caller: str = "",
    ) -> EventsPage:
        """The caller's events after ``after`` matching the filters; waits up to
        ``timeout_s`` for one.

        A caller's cursor counts their own events (each event's ``seq`` is its place in
        their log, 1, 2, 3, ... with no gaps); an operator's counts every event. The wait
        runs in worker threads (one condition-variable wait per slice), so the event loop
        stays free. ``abandoned()`` is asked between slices; when it says so (the client
        went away), the wait ends early.
        """
        if after < 0:
            raise OpsError(422, "bad_cursor", f"after={after} is negative", "start from 0")
        who = self.owners.who(caller)
        ids, kind_set = self.check_event_filter(task_ids, kinds, who.name)
        owner = None if who.operator else who.name
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
                    task_ids=self.expand_ids(ids),
                    kinds=kind_set,
                    timeout_s=max(0.0, min(WAIT_SLICE_S, remaining)),
                    owner=owner,
                )
                found = await anyio.to_thread.run_sync(wait, limiter=self._limiter)
                if found:
                    found = self.owners.shown(who, found)
                    return EventsPage(
                        events=tuple(found),
                        cursor=max(e.seq for e in found),
                        timed_out=False,
                        last_seq=self.owners.cursor(who),
                    )
                if time.monotonic() >= deadline:
                    break
                if abandoned is not None and await abandoned():
                    break
        finally:
            with self._lock:
                self.waiters -= 1
        return EventsPage(events=(), cursor=after, timed_out=True, last_seq=self.owners.cursor(who))

    def close(self) -> None:
        self.cache.close()
        if self._on_close is not None:
            self._on_close()


def translate(e: BaseException) -> OpsError:
    """A federation exception as an :class:`OpsError` with the right HTTP status."""
    if isinstance(e, OpsError):
        return e
    if isinstance(e, PolicyViolationError):
        return OpsError(
            403,
            "policy_violation",
            str(e),
            "fit the request to your policy, or ask an operator to change it",
            {"rules": {f.rule: {"limit": f.limit, "asked": f.value} for f in e.findings}},
        )
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
    if isinstance(e, TransferPathError):
        return OpsError(
            422, "bad_path", str(e), "give a path inside the site's storage, without `..`"
        )
    if isinstance(e, DataNotFoundError):
        return OpsError(404, "data_not_found", str(e), "check the source site and path")
    if isinstance(e, TransferAuthError):
        return OpsError(
            502, "transfer_refused", str(e), "the coordinator's Globus login needs renewing"
        )
    if isinstance(e, TransferUnavailableError):
        return OpsError(503, "transfer_unavailable", str(e), "retry later")
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
