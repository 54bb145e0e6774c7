"""Tasks held by the policy gate: kept unshipped until an operator approves (then shipped
on the shape they were placed on) or rejects them (then failed with the reason)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from federation.core.errors import FederationError
from federation.core.tasks import ShellTask
from federation.runtime.handles import TaskHandle
from federation.security import LOCAL_CALLER, HeldTask, PolicyOutcome

if TYPE_CHECKING:
    from federation.core.tasks import TaskSpec
    from federation.runtime.context import Runtime
    from federation.runtime.lifecycle import Lifecycle
    from federation.runtime.registry import TaskRegistry
    from federation.runtime.staging import Staging


class Holds:
    """Holds, approves and rejects tasks (``policy.unresolved``, ``.approved``,
    ``.rejected``); approved ones are shipped through ``hedging`` (a :class:`Staging`:
    their inputs are moved first)."""

    def __init__(self, rt: Runtime, reg: TaskRegistry, life: Lifecycle, hedging: Staging) -> None:
        self.rt = rt
        self.reg = reg
        self.life = life
        self.hedging = hedging

    def hold(
        self, handle: TaskHandle, task: TaskSpec, caller: str, outcome: PolicyOutcome
    ) -> TaskHandle:
        """Keep a placed task unshipped until an operator approves or rejects it."""

        def persist() -> None:
            self.rt.held.hold(
                task_id=handle.id,
                caller=caller,
                label=handle.label,
                task=task,
                envelope=handle.envelope,
                decision=handle.decision,
                code_hash=handle.code_hash,
                outcome=outcome,
            )

        def register() -> None:
            with self.reg.lock:
                self.reg.handles[handle.id] = handle
                self.reg.unindexed[handle.id] = handle

        detail = {
            "caller": caller,
            "shape": handle.shape.describe(),
            "rules": [f.rule for f in outcome.findings],
            "reason": outcome.summary(),
            "hint": "held, not shipped: an operator approves or rejects it "
            "(`federation policy approve|reject TASK_ID`)",
        }
        note = f"held for an operator: {outcome.summary()}"
        self.life.hold(handle, note, detail, persist, register)
        return handle

    def approve(self, task_id: str, actor: str = LOCAL_CALLER) -> TaskHandle:
        held = self.held(task_id)
        if not self.rt.held.resolve(task_id, "approved", actor, None):
            raise FederationError(f"task {task_id} was decided meanwhile; nothing to approve")
        h = self.held_handle(held)
        task = h.task if h.task is not None else self.rt.held.task(task_id)
        assert task is not None
        h.task = task
        self.rt.gate.record(
            "approved",
            held.caller,
            task,
            h.shape,
            held.outcome,
            task_id=task_id,
            actor=actor,
            message=f"approved by {actor}: {held.why}",
        )
        self.rt.events.emit("policy.approved", task_id, h.site, actor=actor, caller=held.caller)
        return self.hedging.ship(h, task)  # held -> queued (``task.queued``)

    def reject(
        self, task_id: str, reason: str = "rejected by an operator", actor: str = LOCAL_CALLER
    ) -> TaskHandle:
        held = self.held(task_id)
        if not self.rt.held.resolve(task_id, "rejected", actor, reason):
            raise FederationError(f"task {task_id} was decided meanwhile; nothing to reject")
        h = self.held_handle(held)
        self.rt.gate.record(
            "rejected",
            held.caller,
            h.task,
            h.shape,
            held.outcome,
            task_id=task_id,
            label=held.label,
            actor=actor,
            message=f"rejected by {actor}: {reason}",
        )
        self.rt.events.emit(
            "policy.rejected", task_id, h.site, actor=actor, caller=held.caller, reason=reason
        )
        self.life.fail(h, f"rejected by policy: {reason}", "")
        return h

    def held(self, task_id: str) -> HeldTask:
        held = self.rt.held.get(task_id)
        if held is None or held.state != "held":
            state = "unknown" if held is None else held.state
            raise FederationError(
                f"task {task_id!r} is not held for approval ({state}); "
                "`federation policy list` shows the held tasks"
            )
        return held

    def held_handle(self, held: HeldTask) -> TaskHandle:
        """The handle of a held (or rejected) task, rebuilt from the held-task record when
        this coordinator has none (after a restart)."""
        with self.reg.lock:
            h = self.reg.handles.get(held.task_id)
        if h is not None:
            return h
        task = self.rt.held.task(held.task_id)
        h = TaskHandle(
            id=held.task_id,
            label=held.label,
            envelope=held.envelope,
            decision=held.decision,
            code_hash=held.code_hash,
            is_shell=isinstance(task, ShellTask),
            bus=self.rt.events,
            task=task,
            submitted_at=held.held_at,
            caller=held.caller,
        )
        self.rt.events.set_owner(h.id, h.caller)
        if held.state == "held":  # restored as recorded, not a transition
            h.state = "held"
        elif held.state == "rejected":
            h.state = "failed"
            h.error = f"rejected by policy: {held.reason}"
            h.completed_at = held.resolved_at
            h._done.set()
        with self.reg.lock:
            self.reg.handles.setdefault(h.id, h)
            return self.reg.handles[h.id]
