"""Recovery after a restart: every task the store knows is re-attached (finished ones come
back finished; open ones, and the copies of hedged ones, through their Globus Compute task
ids), ends the event log missed are reported, milestones watched and groups re-attached."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from federation.core.errors import FederationError
from federation.runtime.handles import TaskCopy, TaskHandle
from federation.runtime.rows import copy_from_row, handle_from_row

if TYPE_CHECKING:
    from federation.runtime.context import Runtime
    from federation.runtime.hedging import Hedging
    from federation.runtime.holds import Holds
    from federation.runtime.lifecycle import Lifecycle
    from federation.runtime.registry import TaskRegistry


class Recovery:
    """Re-attaches a restarted coordinator to the tasks, copies and groups of its store."""

    def __init__(
        self,
        rt: Runtime,
        reg: TaskRegistry,
        life: Lifecycle,
        hedging: Hedging,
        holds: Holds,
    ) -> None:
        self.rt = rt
        self.reg = reg
        self.life = life
        self.hedging = hedging
        self.holds = holds

    def recover(self) -> list[TaskHandle]:
        """Re-attach to every task the store knows (after a restart); returns open ones.

        Finished tasks come back as finished handles (their results from the store); open
        ones are re-attached through their Globus Compute task ids, and complete (once) when
        their results arrive. A task whose submission the site never acknowledged is failed
        with that reason: its function was never shipped, so resubmit it.

        Hedged tasks (``task_copies`` in the store) are re-attached too. If no copy had
        started, every acknowledged copy is re-attached and the race goes on: the first
        copy reported started, or failing that the first to return a result (a start
        reported while no coordinator listened is not reported again), wins and the others
        are cancelled; a copy never acknowledged leaves the race. If a copy had won, only it
        is re-attached, and copies the earlier coordinator did not get to cancel are
        cancelled now (``task.hedge_cancelled``).
        """
        store = self.rt.store
        if store is None:
            raise FederationError("recover() needs a store: Coordinator(..., store=Store(path))")
        for held in self.rt.held.all():  # held or rejected by policy: never in the task table
            if held.state != "approved":
                self.holds.held_handle(held)
        reopened: list[TaskHandle] = []
        by_site: dict[str, list[TaskHandle]] = {}
        copy_rows: dict[str, list[dict[str, Any]]] = {}
        for r in store.task_copies():
            copy_rows.setdefault(r["task_id"], []).append(r)
        racing: list[TaskHandle] = []
        for row in store.tasks():
            if row["id"] in self.reg.handles:
                continue
            h = handle_from_row(row, self.rt.events)
            h.copies = [copy_from_row(r) for r in copy_rows.get(h.id, [])]
            with self.reg.lock:
                self.reg.handles[h.id] = h
                self.reg.unindexed[h.id] = h
            if h.state in ("completed", "failed"):
                h._done.set()
                continue
            if h.copies and not h.attempts:  # a retry after the race runs as one task
                w = h.winner
                if w is None:  # no copy started yet: the race goes on
                    with self.reg.lock:
                        self.reg.unindexed.pop(h.id, None)
                    racing.append(h)
                    reopened.append(h)
                    continue
                # the copy is recorded before the row: the winner is the copy's
                h.decision = h.decision.model_copy(update={"chosen": w.candidate})
                row = {**row, "compute_task_id": w.compute_task_id}
            if row["compute_task_id"] is None:
                self.life.fail(
                    h,
                    "the coordinator stopped before the site acknowledged this "
                    "submission; it never ran: submit it again",
                    "",
                )
                continue
            h._recovered_compute_id = row["compute_task_id"]
            by_site.setdefault(h.site, []).append(h)
            reopened.append(h)
        on_done = self.hedging.shipping.on_done
        for site, handles in by_site.items():
            backend = self.rt.backends.get(site)
            ids = [h._recovered_compute_id for h in handles if h._recovered_compute_id]
            futs = backend.reattach(ids) if backend else {}
            for h in handles:
                fut = futs.get(h._recovered_compute_id or "")
                if fut is None:
                    self.life.fail(
                        h, f"site {site} no longer knows task {h._recovered_compute_id}", ""
                    )
                    continue
                h.future = fut
                fut.add_done_callback(functools.partial(on_done, h))
        self.recover_copies(racing)
        self.recover_continuations(reopened)
        self.rt.transfers.recover()  # open transfers: Globus tasks re-monitored, copies re-run
        return reopened

    def recover_copies(self, racing: list[TaskHandle]) -> None:
        """Re-attach the copies of hedged tasks; cancel the losers a won race left queued."""
        now = datetime.now(UTC)
        by_site: dict[str, list[tuple[TaskHandle, TaskCopy]]] = {}
        won = [
            h
            for h in self.reg.all()
            if h.copies and not h.attempts and not h.done and h.winner is not None
        ]
        persist_copy = self.hedging.persist_copy
        for h in [*racing, *won]:
            for c in h.copies:
                if c.state != "queued":
                    continue
                if c.compute_task_id is None:
                    c.state, c.ended_at = "failed", now
                    c.error = "the coordinator stopped before the site acknowledged this copy"
                    persist_copy(h, c)
                    continue
                by_site.setdefault(c.site, []).append((h, c))
        for site, pairs in by_site.items():
            backend = self.rt.backends.get(site)
            ids = [str(c.compute_task_id) for _, c in pairs]
            futs = backend.reattach(ids) if backend else {}
            for h, c in pairs:
                fut = futs.get(str(c.compute_task_id))
                if fut is None and h.winner is None:
                    c.state, c.ended_at = "failed", now
                    c.error = f"site {site} no longer knows copy {c.compute_task_id}"
                    persist_copy(h, c)
                c.future = fut
        for h in won:
            w = h.winner
            for c in h.copies:
                if c.state == "queued":
                    with self.reg.lock:
                        c.state = "cancelling"
                    self.hedging.cancel_copy(h, c, winner=w)
        for h in racing:
            live = [c for c in h.copies if c.state == "queued"]
            if not live:
                text = "; ".join(f"{c.site}/{c.partition}: {c.error}" for c in h.copies)
                self.life.fail(h, f"every copy failed: {text}", "")
                continue
            with self.reg.lock:
                self.reg.hedged[h.id] = h
            for c in live:
                assert c.future is not None
                c.future.add_done_callback(functools.partial(self.hedging.on_copy_done, h, c))

    def recover_continuations(self, reopened: list[TaskHandle]) -> None:
        """After a restart: report ends the log missed, watch milestones, re-attach groups."""
        ended = {
            e.task_id
            for e in self.rt.events.history()
            if e.kind in ("task.completed", "task.failed")
        }
        for h in self.reg.all():
            if h.done and h.id not in ended and h.completed_at is not None:
                # the coordinator stopped between recording the end and announcing it
                self.life.announce_missed_end(h)
        for h in reopened:
            if not h.done:
                self.life.watch(h)
        self.rt.groups.recover()
