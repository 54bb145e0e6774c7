"""Inputs moved before a task ships: the envelope's ``stage_in`` on other sites.

A task names its inputs as paths in its caller's workspace on the sites where they are
(``StageIn(site, path, size_bytes)``, e.g. the ``outputs`` of an earlier task). Placement
already counts the time to move them (:func:`federation.placement.candidates.stage_in_estimate`).
Once placed, a task whose inputs are all on its site ships at once; otherwise it is recorded
as queued (durable, ``task.queued``), one transfer per input starts to the same workspace
path on the chosen site (``task.staging`` names them), and the task is handed to its site
when the last one has arrived (``task.staged``, with how long the data took) -- from the
transfers' own events, never by polling. An input that is missing (or on a site no transfer
reaches) is refused by ``submit_task`` with nothing recorded; a transfer that fails later
fails the task with the transfer's own error (which names the path); cancelling the task
while its inputs move fails it at once.

A staged task runs as one copy (its inputs go to one site), so its decision's hedges are
dropped. After a restart, a recorded task that was never handed to its site is staged
again before it ships (transfers at ``checksum`` sync skip what already arrived).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING

from federation.core.errors import FederationError, TransferError
from federation.core.workspace import workspace_rel
from federation.runtime.events import Event

if TYPE_CHECKING:
    from federation.core.envelope import StageIn
    from federation.core.snapshot import FederationSnapshot
    from federation.core.tasks import TaskSpec
    from federation.placement.policies import Policy
    from federation.runtime.context import Runtime
    from federation.runtime.handles import TaskHandle
    from federation.runtime.hedging import Hedging
    from federation.runtime.lifecycle import Lifecycle
    from federation.transfer import TransferRequest


class _Staged:
    """One task's inputs on their way: which transfers are still moving."""

    def __init__(self, handle: TaskHandle, task: TaskSpec, count: int) -> None:
        self.handle = handle
        self.task = task
        self.waiting = count
        self.arrived: set[str] = set()
        self.bytes = 0
        self.started = time.monotonic()
        self.over = False
        self.armed = False
        """Set once ``task.staging`` is out: arrivals before it wait for it."""


class Staging:
    """Ships a placed task once its inputs are on its site (see the module's note)."""

    def __init__(self, rt: Runtime, life: Lifecycle, hedging: Hedging) -> None:
        self.rt = rt
        self.life = life
        self.hedging = hedging
        self._lock = threading.Lock()
        self._open: dict[str, _Staged] = {}
        """Tasks whose inputs are moving, by task id."""

    @staticmethod
    def needs(handle: TaskHandle) -> list[StageIn]:
        """The inputs not on the task's site (deduplicated)."""
        seen: dict[tuple[str, str], StageIn] = {}
        for d in handle.envelope.stage_in:
            if d.site != handle.site:
                seen.setdefault((d.site, d.path), d)
        return list(seen.values())

    def ship(
        self,
        handle: TaskHandle,
        task: TaskSpec,
        policy: Policy | None = None,
        snapshot: FederationSnapshot | None = None,
    ) -> TaskHandle:
        """Ship ``handle`` now when its inputs are all on its site, else once they are."""
        needs = self.needs(handle)
        if not needs:
            return self.hedging.ship(handle, task, policy, snapshot)
        if handle.decision.hedges:
            handle.decision = handle.decision.model_copy(update={"hedges": ()})
            handle.notes.append("not hedged: its inputs are staged to the chosen site only")
        for d, request in zip(needs, self._requests(handle, needs), strict=True):
            try:  # a missing input or a site no transfer reaches: raised, nothing recorded
                manager = self.rt.transfers
                manager.backend_for(d.site, handle.site, handle.caller).validate(request)
            except FederationError as e:  # the transfer error's own kind, else a TransferError
                kind = type(e) if isinstance(e, TransferError) else TransferError
                raise kind(f"input {d.site}:{d.path} cannot be staged to {handle.site}: {e}") from e
        inputs = [f"{d.site}:{d.path}" for d in needs]
        self.hedging.shipping.record(handle, task, {"stage_in": inputs})
        self.stage(handle, task, needs)
        return handle

    @staticmethod
    def _requests(handle: TaskHandle, needs: list[StageIn]) -> list[TransferRequest]:
        """One transfer per input, to the same path in the workspace on the task's site."""
        from federation.transfer import DataRef, TransferRequest

        ws = workspace_rel(handle.caller, handle.workflow)
        return [
            TransferRequest(
                source=DataRef(site=d.site, path=str(ws / d.path)),
                destination=DataRef(site=handle.site, path=str(ws / d.path)),
                label=f"stage-in {handle.label or handle.id[:8]}"[:128],
                sync_level="checksum",
            )
            for d in needs
        ]

    def stage_if_needed(self, handle: TaskHandle, task: TaskSpec) -> bool:
        """Stage a recorded task's inputs to its (new) site and ship it once they arrived
        (True); False when they are all there already (ship it yourself)."""
        needs = self.needs(handle)
        if needs:
            self.stage(handle, task, needs)
        return bool(needs)

    def stage(self, handle: TaskHandle, task: TaskSpec, needs: list[StageIn]) -> None:
        """Start one transfer per input to the task's site; ship it when all arrived."""
        ws = workspace_rel(handle.caller, handle.workflow)
        entry = _Staged(handle, task, len(needs))
        with self._lock:
            self._open[handle.id] = entry
        started: list[str] = []
        for d, request in zip(needs, self._requests(handle, needs), strict=True):
            try:
                th = self.rt.transfers.submit(
                    request, on_event=lambda ev: self._on_transfer(entry, ev), owner=handle.caller
                )
            except (FederationError, ValueError) as e:
                self._end(entry, f"input {d.site}:{d.path} cannot be staged to {handle.site}: {e}")
                return
            started.append(th.id)
        with self._lock:
            if entry.over:  # failed (or cancelled) while the others were being started
                return
        self.rt.events.emit(
            "task.staging",
            handle.id,
            handle.site,
            transfers=started,
            inputs=[f"{d.site}:{d.path}" for d in needs],
            bytes=sum(d.size_bytes for d in needs),
            workspace=str(ws),
        )
        with self._lock:
            entry.armed = True  # task.staged may follow now: never before task.staging
        self._arrived(entry)

    def cancel(self, handle: TaskHandle, reason: str) -> bool:
        """Cancel a task whose inputs are still moving (False: it is not staging)."""
        with self._lock:
            entry = self._open.get(handle.id)
        if entry is None:
            return False
        return self._end(entry, reason)

    def staging(self, task_id: str) -> bool:
        with self._lock:
            return task_id in self._open

    # --- internals ------------------------------------------------------------------------------
    def _on_transfer(self, entry: _Staged, ev: Event) -> None:
        if ev.kind == "transfer.failed":
            why = ev.detail.get("error") or "the transfer failed"
            self._end(entry, f"an input could not be staged to {entry.handle.site}: {why}")
            return
        if ev.kind != "transfer.completed":
            return
        with self._lock:
            if entry.over or ev.task_id in entry.arrived:
                return
            entry.arrived.add(ev.task_id)
            entry.bytes += int(ev.detail.get("bytes_transferred") or 0)
        self._arrived(entry)

    def _arrived(self, entry: _Staged) -> None:
        """Ship the task if every input has arrived (once, and after ``task.staging``)."""
        with self._lock:
            if entry.over or not entry.armed or len(entry.arrived) < entry.waiting:
                return
            entry.over = True
            self._open.pop(entry.handle.id, None)
        h = entry.handle
        self.rt.events.emit(
            "task.staged",
            h.id,
            h.site,
            transfers=sorted(entry.arrived),
            bytes=entry.bytes,
            staging_s=round(time.monotonic() - entry.started, 3),
        )
        with contextlib.suppress(FederationError):  # dispatch failed the task, with why
            self.hedging.shipping.dispatch(h, entry.task)

    def _end(self, entry: _Staged, reason: str) -> bool:
        with self._lock:
            if entry.over:
                return False
            entry.over = True
            self._open.pop(entry.handle.id, None)
        self.life.fail(entry.handle, reason, "")
        return True
