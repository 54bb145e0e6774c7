"""Shipping: what is sent to the site backends, once the caller's policy admitted it.

A task placed once is recorded, queued and submitted to its site here; the task's Globus
Compute id is recorded once the site acknowledged it, and its future is followed (its end
goes to ``on_done``). Hedged copies and retries ship through the same helpers
(:meth:`Shipping.send`, :meth:`Shipping.shipped`, :meth:`Shipping.admit`).

**Shipping is idempotent across crashes.** With a store, :meth:`Shipping.send` records the
intent (``ship_state='submitting'``) before the site is asked and the acknowledged id
(``acked``) once the SDK's batch was accepted (:mod:`federation.runtime.acks`, off the
caller's path: the SDK batches a shape's tasks, up to 128 per request, under its own rate
limit). A restart asks the site (the task group) and pairs a lone ``submitting`` record
with the lone task no record claims, or, when the group holds none, knows the task never
reached the site and ships it again (:mod:`federation.runtime.intents`). Records left
``submitting`` together (a batch in flight when the coordinator died) cannot be paired
by the group alone: they are reported as possibly run, never shipped twice.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from federation.core.errors import FederationError
from federation.core.workspace import workspace_rel
from federation.runtime.acks import Acks
from federation.runtime.crashpoints import crash_point
from federation.runtime.handles import TaskCopy, TaskHandle
from federation.runtime.results import shipped
from federation.runtime.rows import task_row
from federation.sites.backend import ClaimingSite
from federation.sites.jobtags import shipment_tag

if TYPE_CHECKING:
    from federation.core.envelope import Shape
    from federation.core.snapshot import FederationSnapshot
    from federation.core.tasks import TaskSpec
    from federation.runtime.context import Runtime
    from federation.runtime.lifecycle import Lifecycle
    from federation.runtime.registry import TaskRegistry

OnDone = Callable[[TaskHandle, "Future[Any]"], None]


class Shipping:
    """Submits tasks to their sites; ``on_done`` receives each shipped task's future."""

    def __init__(self, rt: Runtime, reg: TaskRegistry, life: Lifecycle, on_done: OnDone) -> None:
        self.rt = rt
        self.reg = reg
        self.life = life
        self.on_done = on_done
        self.acks = Acks()
        """Records each shipment's acknowledgement as the SDK sets it (:meth:`send`)."""

    def ship_once(self, handle: TaskHandle, task: TaskSpec) -> TaskHandle:
        """Record ``handle`` (``task.queued``) and submit it to its one site."""
        self.record(handle, task)
        return self.dispatch(handle, task)

    def record(
        self, handle: TaskHandle, task: TaskSpec, extra: dict[str, Any] | None = None
    ) -> None:
        """Record ``handle`` as queued on its one site (durable, ``task.queued`` with the
        placement, its workspace and ``extra``), not yet handed to the site."""
        decision = handle.decision
        shape = decision.chosen.shape
        store = self.rt.store

        def persist() -> None:  # durable before anything is shipped or acknowledged
            if store is not None:
                store.insert_task(task_row(handle, task))  # StoreError: nothing shipped

        def register() -> None:
            with self.reg.lock:
                self.reg.handles[handle.id] = handle
                self.reg.unindexed[handle.id] = handle
            self.life.watch(handle)

        detail = {
            "shape": shape.describe(),
            "predicted_wait_s": decision.chosen.predicted_wait_s,
            "workspace": str(workspace_rel(handle.caller, handle.workflow)),
            **(extra or {}),
        }
        self.life.queue(handle, detail, persist, register)
        crash_point("recorded")

    def dispatch(self, handle: TaskHandle, task: TaskSpec) -> TaskHandle:
        """Hand a recorded task to its site (its failure fails the task, and raises)."""
        shape = handle.decision.chosen.shape
        try:
            fut = self.send(handle, lambda: self.submit_to(handle, task, shape))
        except Exception as e:
            self.life.fail(handle, f"submission to {shape.site} failed: {e}", "")
            raise FederationError(f"submission to {shape.site} failed: {e}") from e
        handle.future = fut
        self.follow(handle, fut)
        return handle

    def send(
        self,
        handle: TaskHandle,
        submit: Callable[[], Future[Any]],
        copy: TaskCopy | None = None,
    ) -> Future[Any]:
        """Hand ``handle`` (or one ``copy`` of it) to its site through ``submit``, with the
        intent on record before and the Globus Compute id the site acknowledged recorded
        after, off the caller's path (:class:`~federation.runtime.acks.Acks`; see the
        module's note). Without a store it only submits."""
        store = self.rt.store
        if store is None:
            return submit()
        self._mark(handle, copy, ship_state="submitting")
        crash_point("shipping")
        try:
            fut = submit()
        except BaseException:
            self._mark(handle, copy, ship_state=None)  # nothing reached the site
            raise
        self.acks.watch(fut, lambda tid: self._acked(handle, copy, fut, tid))
        return fut

    def _acked(
        self, handle: TaskHandle, copy: TaskCopy | None, fut: Future[Any], tid: str | None
    ) -> None:
        crash_point("accepted")
        if tid is not None:
            self._mark(handle, copy, compute_task_id=tid, ship_state="acked")
        elif fut.done():  # refused before any acknowledgement: not on the site
            self._mark(handle, copy, ship_state=None)

    def _mark(self, handle: TaskHandle, copy: TaskCopy | None, **fields: Any) -> None:
        store = self.rt.store
        assert store is not None
        if copy is None:
            store.update_task(handle.id, **fields)
        else:
            store.update_task_copy(handle.id, copy.index, **fields)

    def follow(self, handle: TaskHandle, fut: Future[Any]) -> None:
        """Pass the future's end to ``on_done``."""
        fut.add_done_callback(lambda f: self.on_done(handle, f))

    def submit_to(
        self,
        h: TaskHandle,
        task: TaskSpec,
        shape: Shape,
        copy: TaskCopy | None = None,
        generation: int = 0,
    ) -> Future[Any]:
        """Submit ``task`` (as :meth:`shipped`) to ``shape``'s site for ``h`` (or its
        ``copy``); where tasks claim tags, under this shipment's own tag
        (:func:`~federation.sites.jobtags.shipment_tag`: task, attempt, copy, generation),
        so a restart finds what reached the site by its claim."""
        site = self.rt.site_for(h.caller, shape.site)
        spec = self.shipped(h, task, copy)
        if isinstance(site, ClaimingSite):
            index = None if copy is None else copy.index
            tag = shipment_tag(h.id, len(h.attempts), index, generation)
            return site.submit_claiming(spec, shape, tag)
        return site.submit(spec, shape)

    def shipped(self, h: TaskHandle, task: TaskSpec, copy: TaskCopy | None = None) -> TaskSpec:
        """``task`` as shipped: a large result spills to the site's storage (by name)."""
        name = f"{h.id}-{len(h.attempts) + 1}.result"
        site = h.site
        if copy is not None:  # each copy spills to its own site, under its own name
            name, site = f"{h.id}-{len(h.attempts) + 1}.copy{copy.index}.result", copy.site
        ws = workspace_rel(h.caller, h.workflow)
        return shipped(task, site, name, self.rt.result_storage, self.rt.inline_limit_bytes, ws)

    def admit(
        self,
        handle: TaskHandle,
        shape: Shape,
        what: str,
        snapshot: FederationSnapshot | None = None,
    ) -> bool:
        """Whether the caller's policy lets ``handle`` run one more time on ``shape`` (a
        hedge copy, a watch copy, a retry), audited like a submission: allowed ones count
        towards the caller's daily node-hours. One the policy would deny or hold is not
        shipped (a further copy is not worth an operator's approval) and that shape is not
        proposed again for this task."""
        if handle.task is None:
            return False
        gate = self.rt.gate
        snap = snapshot or self.rt._last_snapshot
        outcome = gate.evaluate(handle.caller, handle.task, shape, snap)
        label = f"{handle.label} ({what})"
        if outcome.verdict == "allowed":
            gate.record(
                "allowed",
                handle.caller,
                handle.task,
                shape,
                outcome,
                task_id=handle.id,
                label=label,
            )
            return True
        message = f"{what} on {shape.site}/{shape.partition} not shipped: {outcome.summary()}"
        gate.record(
            "denied",
            handle.caller,
            handle.task,
            shape,
            outcome,
            task_id=handle.id,
            label=label,
            message=message,
        )
        with self.reg.lock:
            handle.refused.add(shape)
            handle.notes.append(message)
        self.rt.events.emit(
            "policy.copy_refused", handle.id, shape.site, caller=handle.caller, reason=message
        )
        return False

    def cancellable(self, handle: TaskHandle, site: str, what: str) -> bool:
        """Whether a copy at ``site`` can be withdrawn if another copy starts first (and
        the task's chosen site too: either may lose). Where one cannot (the site's backend
        has no cancel, as the Globus Compute cloud has none), copies would all run: no copy
        is made, and a note on the task says why."""
        for s in dict.fromkeys((handle.site, site)):
            if not self.rt.backends[s].can_cancel:
                handle.notes.append(
                    f"no {what} on {site}: {s} cannot cancel a queued copy, so every copy "
                    "would run; placed once"
                )
                return False
        return True
