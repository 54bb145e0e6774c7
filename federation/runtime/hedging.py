"""Hedging and watching: a task shipped as several copies that race (first to start wins).

Copies come from the placement's hedges (twin-hedge) or are added while a watched task
stays queued past its prediction (twin-watch timers, :meth:`Hedging.rejudge`). The first
copy reported started (or, failing a start report, the first to return a result) wins and
every other copy is cancelled (``task.hedge_cancelled``). A task placed once is handed to
:class:`~federation.runtime.shipping.Shipping` instead.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from federation.core.errors import FederationError
from federation.core.failures import classify
from federation.core.workspace import workspace_rel
from federation.placement.lateness import QueuedCopy
from federation.runtime.crashpoints import crash_point
from federation.runtime.errortext import first_line, ran_own_code, stream_lost
from federation.runtime.handles import TaskCopy, TaskHandle
from federation.runtime.queued_index import QueuedIndex
from federation.runtime.rows import copy_fields, copy_row, task_row
from federation.sites.backend import WithdrawsUnacknowledged

if TYPE_CHECKING:
    from federation.core.snapshot import FederationSnapshot
    from federation.core.tasks import TaskSpec
    from federation.placement.candidates import Candidate, PlacementDecision
    from federation.placement.policies import Policy
    from federation.runtime.context import Runtime
    from federation.runtime.lifecycle import Lifecycle
    from federation.runtime.registry import TaskRegistry
    from federation.runtime.retries import Retries
    from federation.runtime.shipping import Shipping

logger = logging.getLogger(__name__)


class Hedging:
    """Ships tasks (as copies when hedged or watched) and settles their races."""

    def __init__(
        self,
        rt: Runtime,
        reg: TaskRegistry,
        life: Lifecycle,
        shipping: Shipping,
        retries: Retries,
    ) -> None:
        self.rt = rt
        self.reg = reg
        self.life = life
        self.shipping = shipping
        self.retries = retries
        self._queued = QueuedIndex(reg)
        self.rejudge_pool: ThreadPoolExecutor | None = None
        """One thread that judges watched tasks again (a watching policy's ticks)."""

    def ship(
        self,
        handle: TaskHandle,
        task: TaskSpec,
        policy: Policy | None = None,
        snapshot: FederationSnapshot | None = None,
    ) -> TaskHandle:
        """Ship ``handle``: as copies if hedged or watched (and allowed), else once."""
        watching = policy or self.rt._placer()  # the policy the task was placed by
        shipping = self.shipping
        if handle.decision.hedges:  # each hedge copy is put to the caller's policy too
            kept = tuple(
                c
                for c in handle.decision.hedges
                if shipping.cancellable(handle, c.site, "hedge copy")
                and shipping.admit(handle, c.shape, "hedge copy", snapshot)
            )
            handle.decision = handle.decision.model_copy(update={"hedges": kept})
        watch = watching.watch is not None
        if watch and not shipping.cancellable(handle, handle.site, "watch"):
            watch = False  # a copy added later could not be withdrawn here
        if handle.decision.hedges or watch:
            return self.ship_copies(handle, task, watching if watch else None)
        return shipping.ship_once(handle, task)

    def close(self) -> None:
        if self.rejudge_pool is not None:
            self.rejudge_pool.shutdown(wait=False, cancel_futures=True)

    # --- hedged copies ------------------------------------------------------------------------
    def ship_copies(
        self, handle: TaskHandle, task: TaskSpec, watching: Policy | None = None
    ) -> TaskHandle:
        """Ship a hedged task: one copy at the chosen candidate and one per hedge.

        The copies are one task for the caller (one id, one ``task.queued``). They are
        recorded in the store (``task_copies``) before anything is shipped, and each copy's
        Globus Compute task id once its site acknowledged it, before this returns. The
        first copy reported started (or, failing a start report, the first to return a
        result) wins: it becomes the placement and every other copy is cancelled
        (``task.hedge_cancelled`` each). A copy that fails before any copy started leaves
        the race; the task fails only when every copy has failed (or is retried, when
        the last failure is retryable). ``watching``: a policy with :class:`Watch` rules
        that judges the task again while it stays queued.
        """
        decision = handle.decision
        shape = decision.chosen.shape
        copies = [TaskCopy(0, decision.chosen)]
        copies += [TaskCopy(i, c) for i, c in enumerate(decision.hedges, 1)]
        handle.copies = copies
        store = self.rt.store

        def persist() -> None:  # durable before anything is shipped or acknowledged
            if store is not None:
                store.insert_task(task_row(handle, task), [copy_row(c) for c in copies])

        def register() -> None:
            with self.reg.lock:
                self.reg.handles[handle.id] = handle
                self.reg.unindexed.pop(handle.id, None)  # indexed by its copies instead
                self.reg.hedged[handle.id] = handle
            self.life.watch(handle)

        detail = {
            "shape": shape.describe(),
            "predicted_wait_s": decision.chosen.predicted_wait_s,
            "workspace": str(workspace_rel(handle.caller, handle.workflow)),
            "hedges": [
                {"shape": c.shape.describe(), "predicted_wait_s": c.predicted_wait_s}
                for c in decision.hedges
            ],
        }
        self.life.queue(handle, detail, persist, register)
        crash_point("recorded")
        failed = [(c, e) for c in copies if (e := self.send_copy(handle, task, c)) is not None]
        if len(failed) == len(copies):
            if handle.single:  # refused as a task placed once is
                raise FederationError(f"submission to {shape.site} failed: {failed[0][1]}") from (
                    failed[0][1]
                )
            message = "submission of every copy failed: " + "; ".join(
                f"{c.candidate.shape.describe()}: {e}" for c, e in failed
            )
            raise FederationError(message) from failed[-1][1]
        if watching is not None:
            self.arm_rejudge(handle, watching)
        return handle

    def send_copy(self, handle: TaskHandle, task: TaskSpec, c: TaskCopy) -> Exception | None:
        """Ship one copy to its site; the error, if its submission failed."""
        with self.reg.lock:
            if not c.queued:  # another copy won before this one was sent
                return None
            c._sending = True
        try:
            fut = self.shipping.send(
                handle,
                lambda: self.shipping.submit_to(handle, task, c.candidate.shape, c, c._generation),
                copy=c,
            )
        except Exception as e:
            with self.reg.lock:
                c._sending = False
                late = c.cancelling
            if late:  # another copy won meanwhile: this one never reached its site
                self.cancel_copy(handle, c)
            else:
                self.copy_failed(handle, c, f"submission to {c.site} failed: {e}", e)
            return e
        with self.reg.lock:
            c.future = fut
            c._sending = False
            late = c.cancelling  # another copy won while this one was sent
        if late:
            self.cancel_copy(handle, c)
            return None
        fut.add_done_callback(functools.partial(self.on_copy_done, handle, c))
        return None

    # --- watching: a task still queued past its prediction is judged again ---------------
    def queued_copies(self) -> list[QueuedCopy]:
        """Our copies queued past their predicted wait now (a task placed once is its own one
        copy), one per shape, the latest of its copies: all a
        :class:`~federation.placement.lateness.LateBoard` charges (the most late of the copies
        no larger than a request). Read on every decision, from an index kept in the order
        copies become late (:mod:`federation.runtime.queued_index`)."""
        return self._queued.late()

    def arm_rejudge(self, h: TaskHandle, pol: Policy, delay_s: float | None = None) -> None:
        """Judge ``h`` again by ``pol`` once it is overdue (then every ``Watch.every_s``)."""
        w = pol.watch
        if w is None or h.task is None or h.done or len(h.copies) >= w.max_copies:
            return
        if delay_s is None:  # first: when it becomes overdue
            queued = (datetime.now(UTC) - h.submitted_at).total_seconds()
            delay_s = h.decision.chosen.predicted_wait_s + w.overdue_s - queued
        with self.reg.lock:
            if self.rejudge_pool is None:
                self.rejudge_pool = ThreadPoolExecutor(1, thread_name_prefix="federation-rejudge")
            pool = self.rejudge_pool

        def due() -> None:
            with contextlib.suppress(RuntimeError):  # the coordinator is closing
                pool.submit(self.rejudge, h, pol)

        with contextlib.suppress(RuntimeError):  # the coordinator is closing
            self.rt.milestones.timers.call_later(delay_s, due)

    def rejudge(self, h: TaskHandle, pol: Policy) -> None:
        """A watched task still queued: add a copy where a fresh submission finishes sooner.

        Placed on a snapshot at most half a watch period old, so the sites are probed at
        most twice per period however many tasks are watched. The copy joins the race
        like a hedge (first to start wins) and is recorded before it is shipped
        (``task.copy_added``).
        """
        w = pol.watch
        if w is None or h.task is None:
            return
        with self.reg.lock:
            if h.done or h.winner is not None:
                return
            queued = [c for c in h.copies if c.state == "queued"]
            holding = [c.candidate for c in queued]
            since = [c.submitted_at for c in queued]
            tried = [c.candidate for c in h.copies]
            failed = {c.site for c in h.copies if c.state == "failed"}
            n = len(h.copies)
        now = datetime.now(UTC)
        queued_s = (now - h.submitted_at).total_seconds()
        if not holding or n >= w.max_copies:
            return
        if not pol.overdue(h.decision, n, queued_s):
            self.arm_rejudge(h, pol, w.every_s)
            return
        rt = self.rt
        try:
            snap = rt.snapshot(max_age_s=max(rt.probe_interval_s, w.every_s / 2))
            fresh = pol.decide(
                h.envelope, [b.spec for b in rt.backends.values()], snap, now, new_task=False
            )
        except Exception as e:  # nothing feasible now, a probe failed: judged again later
            logger.info("judging %s again failed: %s", h.id, e)
            self.arm_rejudge(h, pol, w.every_s)
            return
        # a site where a copy failed gets no other (a broken site, not a queue to beat), nor
        # a shape the caller's policy refused
        open_ = tuple(
            c for c in fresh.candidates if c.site not in failed and c.shape not in h.refused
        )
        fresh = fresh.model_copy(update={"candidates": open_})
        ages = [(now - t).total_seconds() for t in since]  # each copy's own wait so far
        cand = pol.extra_copy(h.decision, fresh, holding, queued_s, tried, ages)
        if (
            cand is not None
            and self.shipping.cancellable(h, cand.site, "watch copy")
            and self.shipping.admit(h, cand.shape, "watch copy", snap)
        ):
            self.add_copy(h, cand, queued_s, fresh)
        self.arm_rejudge(h, pol, w.every_s)

    def add_copy(
        self, h: TaskHandle, cand: Candidate, queued_s: float, fresh: PlacementDecision
    ) -> None:
        assert h.task is not None
        with self.reg.lock:
            if h.done or h.winner is not None:
                return
            c = TaskCopy(len(h.copies), cand)
            h.copies.append(c)
            self.reg.hedged[h.id] = h  # its compute task id is indexed on first report
        store = self.rt.store
        if store is not None:
            try:
                store.insert_task_copy(h.id, copy_row(c))
            except Exception as e:  # not durable: not shipped
                with self.reg.lock:
                    c.state, c.error, c.ended_at = "failed", f"not recorded: {e}", datetime.now(UTC)
                logger.warning("copy of %s on %s not recorded, not shipped: %s", h.id, c.site, e)
                return
        self.rt.events.emit(
            "task.copy_added",
            h.id,
            c.site,
            partition=c.partition,
            shape=cand.shape.describe(),
            predicted_wait_s=cand.predicted_wait_s,
            predicted_completion_s=cand.predicted_completion_s,
            queued_s=round(queued_s, 3),
            copies=len(h.copies),
            reason=(
                f"queued {queued_s:.0f} s, predicted {h.decision.chosen.predicted_wait_s:.0f} s;"
                f" a fresh submission to {c.site} is predicted to finish in"
                f" {cand.predicted_completion_s:.0f} s"
            ),
            holding=sorted({x.site for x in h.copies if x is not c and x.queued}),
            snapshot_taken_at=fresh.snapshot_taken_at.isoformat(),
        )
        error = self.send_copy(h, h.task, c)
        if error is not None:
            h.notes.append(
                f"added copy could not be shipped: {c.candidate.shape.describe()}: {error}"
            )

    # --- the race -----------------------------------------------------------------------------
    def copy_failed(
        self, handle: TaskHandle, c: TaskCopy, message: str, exc: BaseException | None
    ) -> None:
        """A copy left the race before any copy started; the last one fails the task."""
        with self.reg.lock:
            if c.state != "queued" or handle.done:
                return
            c.state = "failed"
            c.error = message
            c.ended_at = datetime.now(UTC)
            left = [x for x in handle.copies if x.state in ("queued", "won", "cancelling")]
        self.persist_copy(handle, c)
        handle.notes.append(f"copy on {c.site}/{c.partition} failed: {message}")
        if left:
            return
        failed = [x for x in handle.copies if x.state == "failed"]
        text = "; ".join(f"{x.site}/{x.partition}: {x.error}" for x in failed)
        summary = message if handle.single else f"every copy failed: {text}"
        traceback = str(exc) if exc is not None else ""
        failure = classify(message, traceback)
        if exc is not None and failure.retryable and handle.task is not None:
            self.retries.retry_off_thread(handle, failure, summary, traceback)
            return
        self.life.fail(handle, summary, traceback, failure=failure.cls)

    def on_copy_done(self, handle: TaskHandle, c: TaskCopy, fut: Future[Any]) -> None:
        """A copy's future resolved: settle the task (winner), leave the race, or ignore."""
        if self.rt.closing and self.rt.store is not None and (fut.cancelled() or self.rt.closed):
            return  # the copy stays in flight in the store for the next coordinator
        with self.reg.lock:
            if handle.state in ("completed", "failed"):
                return
            if c.state == "cancelling":  # a cancel is on its way; replayed if it fails
                c._parked_done = fut
                return
            if c.state != "won" and (c.state != "queued" or handle.winner is not None):
                return  # a cancelled, abandoned or failed copy: its end is not the task's
            exc = None if fut.cancelled() else fut.exception()
            # the copy's own code raised: it ran, so it won (the task fails as it would alone)
            broke = fut.cancelled() or (exc is not None and not ran_own_code(exc))
            failed = c.state == "queued" and broke
            won_now = c.state == "queued" and not failed  # a result before any start report
            losers = self.take_win(handle, c) if won_now else []
        if failed:  # before any copy started: this copy leaves the race
            lost = exc is not None and stream_lost(exc)
            if lost and exc is not None and self._reattach(handle, c, exc):
                return  # the copy still races: its result is fetched again
            message = "cancelled at the site" if exc is None else first_line(exc)
            self.copy_failed(handle, c, message, exc)
            return
        if won_now:
            self.after_win(handle, c, losers)
        self.shipping.on_done(handle, fut)

    def _reattach(self, handle: TaskHandle, c: TaskCopy, exc: BaseException) -> bool:
        """Fetch a copy's result again after its stream was lost (see ``Retries``)."""

        def found(fut: Future[Any]) -> None:
            c.future = fut
            fut.add_done_callback(functools.partial(self.on_copy_done, handle, c))

        return self.retries.reattach(
            handle,
            c.site,
            c.compute_task_id,
            exc,
            gone=lambda message: self.copy_failed(handle, c, message, None),
            found=found,
        )

    def copy_started(self, handle: TaskHandle, c: TaskCopy, slurm_job_id: str | None) -> None:
        """A copy reports running: the first one wins, the others are cancelled."""
        at = datetime.now(UTC)
        with self.reg.lock:
            late = handle.done and c.state == "won"
        if late:  # read after the winner's end (its claim): the trace gains its job id
            self.life.start(handle, slurm_job_id, at=at)
            return
        with self.reg.lock:
            if handle.done:
                return
            if c.state == "cancelling":  # a cancel is on its way; replayed if it fails
                c._parked_start, c._parked_job = True, slurm_job_id
                return
            won_now = c.state == "queued" and handle.winner is None
            if not won_now and c.state != "won":
                return  # a loser that started before its cancel arrived: ignored
            losers = self.take_win(handle, c) if won_now else []
        if won_now:
            self.after_win(handle, c, losers)
        self.life.start(handle, slurm_job_id, at=at)

    def take_win(self, handle: TaskHandle, c: TaskCopy) -> list[TaskCopy]:
        """Make ``c`` the placement (under the lock); the copies to cancel."""
        c.state = "won"
        handle.decision = handle.decision.model_copy(update={"chosen": c.candidate})
        handle.future = c.future
        losers = [x for x in handle.copies if x.state == "queued"]
        for x in losers:
            x.state = "cancelling"
        return losers

    def after_win(self, handle: TaskHandle, c: TaskCopy, losers: list[TaskCopy]) -> None:
        cid = c.compute_task_id
        with self.reg.lock:
            if cid is not None:
                self.reg.by_compute_id[cid] = handle
        # the copy first: recovery takes the winner from the copies, the row follows it
        self.persist_copy(handle, c)
        store = self.rt.store
        if store is not None:
            store.update_task(
                handle.id,
                site=c.site,
                decision=handle.decision.model_dump_json(),
                compute_task_id=cid,
            )
        for x in losers:
            with self.reg.lock:
                sending = x.future is None and x._sending
            if not sending:  # one still being sent is cancelled by its sender
                self.cancel_copy(handle, x, winner=c)

    def cancel_copy(self, handle: TaskHandle, c: TaskCopy, winner: TaskCopy | None = None) -> None:
        """Cancel a losing copy at its site and report it (``task.hedge_cancelled``)."""
        cid = c.compute_task_id
        ok = c.future is None and cid is None  # never sent: nothing to cancel
        crash_point("hedge.cancel")
        try:
            site = self.rt.site_for(handle.caller, c.site)  # KeyError: no longer configured
            if cid is not None:
                ok = site.cancel(cid)
            elif c.future is not None and isinstance(site, WithdrawsUnacknowledged):
                ok = site.withdraw_future(c.future)  # sent, not acknowledged yet: no id
        except Exception as e:
            logger.warning("cancelling copy %s of %s on %s failed: %s", cid, handle.id, c.site, e)
        winner = winner or handle.winner
        with self.reg.lock:
            c.state = "cancelled" if ok else "abandoned"
            c.ended_at = datetime.now(UTC)
        self.persist_copy(handle, c)
        held = (c.ended_at - c.submitted_at).total_seconds()
        self.rt.events.emit(
            "task.hedge_cancelled",
            handle.id,
            c.site,
            partition=c.partition,
            compute_task_id=cid,
            held_s=round(held, 3),
            cancelled=ok,
            winner_site=winner.site if winner is not None else None,
        )
        self.life.release(handle)  # the task may have ended while this copy was cancelled

    def cancel_copies(self, h: TaskHandle, reason: str) -> bool:
        """``cancel`` for a hedged task: every copy still queued, or the winner."""
        with self.reg.lock:
            if h.done:
                return False
            w = h.winner
            targets = [] if w is not None else [c for c in h.copies if c.state == "queued"]
            for c in targets:
                c.state = "cancelling"
        if w is not None:  # a copy started (or returned): as for a task placed once
            cid = w.compute_task_id
            if cid is None:
                return False
            h.cancel_reason = reason
            ok = self.rt.site_for(h.caller, w.site).cancel(cid)
            if ok:
                self.life.fail(h, reason, "")
            else:
                h.cancel_reason = None
            return ok
        results: list[tuple[TaskCopy, bool]] = []
        for c in targets:
            cid = c.compute_task_id
            ok = False
            if cid is not None:
                try:
                    ok = self.rt.site_for(h.caller, c.site).cancel(cid)
                except Exception as e:
                    logger.warning("cancelling copy %s on %s failed: %s", cid, c.site, e)
            results.append((c, ok))
        now = datetime.now(UTC)
        with self.reg.lock:
            for c, ok in results:
                c.state = "cancelled" if ok else "queued"
                if ok:
                    c.ended_at = now
            remaining = [c for c in h.copies if c.state in ("queued", "won")]
        for c, ok in results:
            if ok:
                self.persist_copy(h, c)
        if not remaining:
            self.life.fail(h, reason, "")
            return True
        h.notes.append(
            f"cancel: {len(remaining)} copy(ies) could not be cancelled (started meanwhile); "
            "the task carries on there"
        )
        for c, ok in results:  # reports parked while the cancel was on its way
            if ok:
                continue
            start, job, done = c._parked_start, c._parked_job, c._parked_done
            c._parked_start, c._parked_job, c._parked_done = False, None, None
            if start:
                self.copy_started(h, c, job)
            if done is not None:
                self.on_copy_done(h, c, done)
        return False

    def persist_copy(self, h: TaskHandle, c: TaskCopy) -> None:
        store = self.rt.store
        if store is None:
            return
        store.update_task_copy(h.id, c.index, **copy_fields(c))
