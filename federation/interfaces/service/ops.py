"""The operations behind the HTTP service and the MCP server, over one coordinator.

:class:`LocalOps` turns wire requests into coordinator calls and coordinator objects into
wire views; every failure becomes an :class:`OpsError` that carries its HTTP status, a code,
what was wrong and what to do. Probing every site takes seconds, so a
:class:`~federation.interfaces.service.snapshot_cache.SnapshotCache` keeps a recent
snapshot (refreshed in the background) for ``inspect`` and for placement: every other
operation answers in milliseconds. Groups, transfers and events are in ``ops_groups``,
``ops_transfers`` and ``ops_events``; :func:`translate` in ``translate``.

**Ownership.** Every operation acts for a ``caller`` (the bearer token's caller over HTTP,
``mcp`` over MCP's stdio, ``local`` in-process). A caller sees, waits on and cancels only the
tasks, groups, transfers and events they created: anything else answers exactly as an id
that does not exist (404), and their event cursor counts their own events only (gap-free).
Operators (``operator: true``; ``local`` in-process) see and cancel everything, and each
time they touch another caller's record the audit log gets an ``operator_access`` row.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import anyio

from federation.core.errors import NoFeasibleSiteError
from federation.core.fairlock import FairLock
from federation.core.snapshot import FederationSnapshot
from federation.core.tasks import ShellTask, TaskSpec
from federation.interfaces.service.errors import OpsError
from federation.interfaces.service.models import (
    CancelResponse,
    DraftRequest,
    EventsPage,
    GroupRequest,
    GroupResponse,
    GroupView,
    SubmitResponse,
    TaskRequest,
    TaskStatus,
    TransferRequest,
    TransferResponse,
    TransferView,
    dry_run_response,
    submit_response,
    task_status,
)
from federation.interfaces.service.ops_events import WAIT_SLICE_S, EventOps, parse_kinds
from federation.interfaces.service.ops_groups import GroupOps
from federation.interfaces.service.ops_transfers import TransferOps
from federation.interfaces.service.ownership import Ownership, not_found
from federation.interfaces.service.snapshot_cache import SnapshotCache
from federation.interfaces.service.translate import translate
from federation.placement.drafting import EnvelopeDraft, validate
from federation.runtime.catalog import Catalog, CatalogError, FunctionInfo, default_catalog
from federation.runtime.coordinator import Coordinator
from federation.runtime.handles import TaskHandle
from federation.security.audit import RecordKind
from federation.security.policy import LOCAL_CALLER

__all__ = [
    "WAIT_SLICE_S",
    "LocalOps",
    "Operations",
    "SnapshotCache",
    "parse_kinds",
    "translate",
]

logger = logging.getLogger(__name__)


class Operations(Protocol):
    """What the MCP server (and anything else) can do with a federation."""

    def inspect(self, refresh: bool = False) -> FederationSnapshot: ...

    def functions(self) -> list[FunctionInfo]: ...

    def draft(self, req: DraftRequest) -> EnvelopeDraft: ...

    def submit(
        self, req: TaskRequest, caller: str = "", dry_run: bool = False
    ) -> SubmitResponse: ...

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


class LocalOps(GroupOps, TransferOps, EventOps):
    """Operations on an in-process :class:`Coordinator` (the service's and the MCP server's).

    Tasks and snapshots here; groups (:class:`GroupOps`), transfers (:class:`TransferOps`)
    and events (:class:`EventOps`) in their own modules."""

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
        self.submitting = FairLock()
        """One submission at a time, in the order they came: each is a few milliseconds of
        Python, and twenty at once only pass the GIL between them at every SQLite call (a
        convoy: P95 1.5-2x longer); a plain lock lets a caller that just submitted go
        again ahead of the others (P95 twice the median)."""

    # --- reads --------------------------------------------------------------------------------
    def inspect(self, refresh: bool = False) -> FederationSnapshot:
        return self.cache.refresh() if refresh else self.cache.get()

    def functions(self) -> list[FunctionInfo]:
        return self.catalog.describe()

    def draft(self, req: DraftRequest) -> EnvelopeDraft:
        try:
            return self.coord.draft_envelope(req.description, req.hints, req.proposal)
        except Exception as e:
            raise translate(e) from e

    def handle(self, task_id: str, caller: str = "", action: str = "read") -> TaskHandle:
        who = self.owners.who(caller)
        h = self.coord.task(task_id)
        if h is not None:
            kind: RecordKind = "shell" if h.is_shell else "python"
            if self.owners.visible(who, kind, h.id, h.caller, action):
                return h
        raise not_found("task", task_id)

    def tasks(self, caller: str = "") -> list[dict[str, Any]]:
        """The caller's tasks (an operator: everyone's, with whose each is)."""
        who = self.owners.who(caller)
        rows = [
            {"task_id": h.id, "label": h.label, "state": h.state, "site": h.site, "owner": h.caller}
            for h in self.coord.live_handles()
            if who.operator or h.caller == who.name
        ]
        store = self.coord.store
        if store is not None:  # finished tasks are read from the store, not memory
            live = {r["task_id"]: r for r in rows}
            rows = [
                live.pop(r["id"])
                if r["id"] in live
                else {k: r[k] for k in ("label", "state", "site", "owner")} | {"task_id": r["id"]}
                for r in store.task_summaries()
                if who.operator or r["owner"] == who.name
            ] + list(live.values())  # + tasks held for an operator (not in the task table)
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

    def submit(self, req: TaskRequest, caller: str = "", dry_run: bool = False) -> SubmitResponse:
        """Place and ship ``req``; with ``dry_run``, only place it and read off the job it
        would be (:meth:`Coordinator.dry_run`): nothing is submitted."""
        if req.needs:
            raise OpsError(
                422,
                "bad_request",
                "`needs` names siblings in a group; a single task names its inputs in its "
                "envelope's `stage_in` ({site, path, size_bytes})",
                "submit the steps as one group (submit_group), or use stage_in",
            )
        task = self.task_spec(req)
        snap = self.cache.get()
        cursor = self.owners.cursor(self.owners.who(caller))
        try:
            if dry_run:  # not under `submitting`: it renders a template, and writes nothing
                dry = self.coord.dry_run(
                    task, req.envelope, snapshot=snap, caller=caller or LOCAL_CALLER
                )
                return dry_run_response(dry, cursor)
            with self.submitting:
                handle = self.coord.submit_task(
                    task,
                    req.envelope,
                    snapshot=snap,
                    caller=caller or LOCAL_CALLER,
                    workflow=req.workflow,
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

    # --- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        self.cache.close()
        if self._on_close is not None:
            self._on_close()
