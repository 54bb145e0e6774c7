"""The coordinator: the agent-facing operations over a set of site backends."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.errors import (
    FederationError,
    NoFeasibleSiteError,
    ProbeError,
    TaskFailedError,
    UnknownSiteError,
)
from federation.core.failures import Failure, classify
from federation.core.json_values import json_value
from federation.core.snapshot import FederationSnapshot, SiteSnapshot
from federation.parsing.snapshot_builder import build_site_snapshot, unreachable_snapshot
from federation.placement.candidates import Candidate, PlacementDecision, place
from federation.placement.drafting import EnvelopeDraft, TaskHints, draft_envelope
from federation.placement.lateness import LateBoard, QueuedCopy, with_late_board
from federation.placement.policies import Policy, get_policy
from federation.runtime.events import DEFAULT_OWNER, Event, EventBus, EventCallback
from federation.runtime.handles import TaskCopy, TaskHandle, TaskResult
from federation.runtime.hooks import Hook, HookRunner
from federation.runtime.milestones import Milestones, MilestoneWatcher
from federation.runtime.provenance import Accounting, fetch_accounting
from federation.runtime.results import (
    DEFAULT_INLINE_LIMIT_BYTES,
    ResultRef,
    StorageRoot,
    as_ref,
    shipped,
)
from federation.runtime.store import Store
from federation.security import LOCAL_CALLER, HeldTask, HeldTasks, PolicyGate, PolicyOutcome
from federation.sites.backend import SiteBackend

if TYPE_CHECKING:
    from collections.abc import Mapping

    from federation.runtime.groups import GroupHandle, GroupManager
    from federation.transfer import SyncLevel, TransferBackend, TransferHandle, TransferManager
from federation.core.tasks import ShellTask, TaskSpec, check_serializable
from federation.runtime.telemetry import Telemetry

logger = logging.getLogger(__name__)


class Coordinator:
    """Runs tasks across sites: probe, place, ship, and resume callers through events.

    Args:
        backends: one :class:`SiteBackend` per site.
        probe_timeout_s: a site whose probe takes longer is marked unreachable.
        probe_interval_s: a snapshot younger than this is reused by ``submit_task``.
        telemetry: where snapshots are kept over time (optional).
    """

    def __init__(
        self,
        backends: Iterable[SiteBackend],
        *,
        policy: str | Policy = "earliest-start",
        probe_timeout_s: float = 30.0,
        probe_interval_s: float = 0.0,
        telemetry: Telemetry | None = None,
        bus: EventBus | None = None,
        store: Store | None = None,
        retry_budget: int = 1,
        result_storage: StorageRoot | None = None,
        inline_limit_bytes: int = DEFAULT_INLINE_LIMIT_BYTES,
        gate: PolicyGate | None = None,
        transfer_backends: TransferBackend | Mapping[str, TransferBackend] | None = None,
    ) -> None:
        self.backends: dict[str, SiteBackend] = {b.name: b for b in backends}
        self.transfer_backends = transfer_backends
        """What ``move_data`` uses (default: local copies between site storage folders)."""
        self._transfers: TransferManager | None = None
        self.gate = gate or PolicyGate()
        """Asked before anything is shipped (see :mod:`federation.security`)."""
        self.held = HeldTasks(store.path if store is not None else None)
        self.store = store
        self.retry_budget = retry_budget
        self.policy = policy
        self.probe_timeout_s = probe_timeout_s
        self.probe_interval_s = probe_interval_s
        self.telemetry = telemetry
        self._owned: list[Store | Telemetry] = []
        self.events = bus or EventBus(store)
        self.result_storage = result_storage
        """Site -> directory for results too large to return inline (None: never spill)."""
        self.inline_limit_bytes = inline_limit_bytes
        self.milestones = MilestoneWatcher(self.events)
        self.hooks = HookRunner(self.events)
        """Webhook and command hooks: ``coord.hooks.add(WebhookHook(url=...))`` for all."""
        self._lock = threading.Lock()
        self._handles: dict[str, TaskHandle] = {}
        self._by_compute_id: dict[str, TaskHandle] = {}
        self._unindexed: dict[str, TaskHandle] = {}
        self._early_starts: dict[str, str | None] = {}
        """Start reports that arrived before their task's id was on its future (the submit
        reply still in flight), by compute task id: the result may overtake the retry."""
        """Handles whose Globus Compute task id was not yet seen by the index."""
        self._copy_ids: dict[str, tuple[TaskHandle, TaskCopy]] = {}
        """Hedged copies by their Globus Compute task id."""
        self._hedged: dict[str, TaskHandle] = {}
        """Hedged handles with a copy whose Globus Compute task id is not indexed yet."""
        self._last_snapshot: FederationSnapshot | None = None
        self._groups: GroupManager | None = None
        self._rejudge_pool: ThreadPoolExecutor | None = None
        """One thread that judges watched tasks again (a watching policy's ticks)."""
        self.late_board = LateBoard(self._queued_copies)
        """Our own copies still queued past their predictions
        (:mod:`federation.placement.lateness`)."""
        self.charge_late_copies = False
        """A watching policy's waits are charged :attr:`late_board` when set (off by
        default: on the replay it helped the CEA-Curie busy window and hurt KTH-SP2's
        P95; see the README)."""

    # --- inspect_federation ---------------------------------------------------------------
    def inspect_federation(self) -> FederationSnapshot:
        """Probe every site in parallel; a failing site is marked unhealthy, never fatal."""
        started = time.monotonic()
        futures: dict[str, Future[dict[str, Any]] | Exception] = {}
        for name, backend in self.backends.items():
            try:
                futures[name] = backend.probe()
            except Exception as e:  # submitting the probe itself failed
                futures[name] = e
        sites: list[SiteSnapshot] = []
        for name, fut in futures.items():
            sites.append(self._site_snapshot(name, fut, started))
        snap = FederationSnapshot(taken_at=datetime.now(UTC), sites=tuple(sites))
        self._last_snapshot = snap
        if self.telemetry is not None:
            self.telemetry.record(snap)
        return snap

    def _site_snapshot(
        self, name: str, fut: Future[dict[str, Any]] | Exception, started: float
    ) -> SiteSnapshot:
        if isinstance(fut, Exception):
            return unreachable_snapshot(name, f"probe could not be sent: {fut}")
        remaining = max(0.1, self.probe_timeout_s - (time.monotonic() - started))
        try:
            raw = fut.result(timeout=remaining)
        except FutureTimeout:
            fut.cancel()
            return unreachable_snapshot(
                name,
                f"probe timed out after {self.probe_timeout_s:.0f} s; "
                "check the site's endpoint (`federation sites status`)",
            )
        except Exception as e:
            return unreachable_snapshot(name, f"probe failed: {_first_line(e)}")
        try:
            return build_site_snapshot(name, raw)
        except ProbeError as e:
            return unreachable_snapshot(name, f"probe output unreadable: {e}")
        except Exception as e:
            logger.exception("snapshot of %s failed", name)
            return unreachable_snapshot(name, f"probe output unreadable: {type(e).__name__}: {e}")

    def snapshot(self, max_age_s: float | None = None) -> FederationSnapshot:
        """The last snapshot if younger than ``max_age_s`` (default: probe interval), else new."""
        age = self.probe_interval_s if max_age_s is None else max_age_s
        last = self._last_snapshot
        if last is not None and (datetime.now(UTC) - last.taken_at).total_seconds() <= age:
            return last
        return self.inspect_federation()

    # --- submit_task ----------------------------------------------------------------------
    def submit_task(
        self,
        task: TaskSpec,
        envelope: ResourceEnvelope,
        *,
        on_event: EventCallback | None = None,
        snapshot: FederationSnapshot | None = None,
        caller: str = LOCAL_CALLER,
        milestones: Milestones | Iterable[str] | None = None,
        hooks: Iterable[Hook] = (),
    ) -> TaskHandle:
        """Place ``task`` within ``envelope`` and ship it; returns at once with a handle.

        Raises :class:`BadEnvelopeError`, :class:`NoFeasibleSiteError` (with a reason per
        site), :class:`SerializationError` or :class:`PolicyViolationError` (``caller``'s
        policy refuses it) before anything is submitted. A task the policy holds for an
        operator (``policy.unresolved`` event) is returned unshipped: see :meth:`approve`.
        """
        for s in envelope.sites:
            if s not in self.backends:
                raise UnknownSiteError(s, sorted(self.backends))
        envelope = self.gate.narrow(caller, envelope, task)
        code_hash = check_serializable(task)
        snap = snapshot or self.snapshot()
        specs = [b.spec for b in self.backends.values()]
        policy = self._placer()
        decision = place(envelope, specs, snap, policy=policy)
        shape = decision.chosen.shape
        task_id = str(uuid.uuid4())
        self.events.set_owner(task_id, caller)  # before its first event (policy or queued)
        verdict = self.gate.enforce(caller, task, shape, snap, task_id=task_id)
        handle = TaskHandle(
            id=task_id,
            label=task.label,
            envelope=envelope,
            decision=decision,
            code_hash=code_hash,
            is_shell=isinstance(task, ShellTask),
            bus=self.events,
            task=task,
            caller=caller,
        )
        handle.wants = Milestones.of(milestones)
        if on_event is not None:
            handle.add_callback(on_event)
        for hook in hooks:
            self.hooks.add(hook, {handle.id})
        if verdict.held:
            return self._hold(handle, task, caller, verdict)
        return self._ship(handle, task, policy, snap)

    def _ship(
        self,
        handle: TaskHandle,
        task: TaskSpec,
        policy: Policy | None = None,
        snapshot: FederationSnapshot | None = None,
    ) -> TaskHandle:
        watching = policy or self._placer()  # the policy the task was placed by
        if handle.decision.hedges:  # each hedge copy is put to the caller's policy too
            kept = tuple(
                c
                for c in handle.decision.hedges
                if self._cancellable(handle, c.site, "hedge copy")
                and self._admit(handle, c.shape, "hedge copy", snapshot)
            )
            handle.decision = handle.decision.model_copy(update={"hedges": kept})
        watch = watching.watch is not None
        if watch and not self._cancellable(handle, handle.site, "watch"):
            watch = False  # a copy added later could not be withdrawn here
        if handle.decision.hedges or watch:
            return self._ship_copies(handle, task, watching if watch else None)
        decision = handle.decision
        shape = decision.chosen.shape
        if self.store is not None:  # durable before anything is shipped or acknowledged
            self.store.insert_task(_task_row(handle, task))  # StoreError: nothing shipped
        with self._lock:
            self._handles[handle.id] = handle
            self._unindexed[handle.id] = handle
        self._watch(handle)
        self.events.emit(
            "task.queued",
            handle.id,
            shape.site,
            shape=shape.describe(),
            predicted_wait_s=decision.chosen.predicted_wait_s,
        )
        try:
            fut = self.backends[shape.site].submit(self._shipped(handle, task), shape)
        except Exception as e:
            self._fail(handle, f"submission to {shape.site} failed: {e}", "")
            raise FederationError(f"submission to {shape.site} failed: {e}") from e
        handle.future = fut
        if self.store is not None:
            tid = _await_task_id(fut, ACK_TIMEOUT_S)
            if tid is not None:
                self.store.update_task(handle.id, compute_task_id=tid)
        fut.add_done_callback(lambda f: self._on_done(handle, f))
        return handle

    # --- hedged copies ------------------------------------------------------------------------
    def _ship_copies(
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
        if self.store is not None:  # durable before anything is shipped or acknowledged
            self.store.insert_task(_task_row(handle, task), [_copy_row(c) for c in copies])
        with self._lock:
            self._handles[handle.id] = handle
            self._unindexed.pop(handle.id, None)  # indexed by its copies instead
            self._hedged[handle.id] = handle
        self._watch(handle)
        self.events.emit(
            "task.queued",
            handle.id,
            shape.site,
            shape=shape.describe(),
            predicted_wait_s=decision.chosen.predicted_wait_s,
            hedges=[
                {"shape": c.shape.describe(), "predicted_wait_s": c.predicted_wait_s}
                for c in decision.hedges
            ],
        )
        errors = [e for c in copies if (e := self._send_copy(handle, task, c)) is not None]
        if len(errors) == len(copies):
            message = "submission of every copy failed: " + "; ".join(errors)
            raise FederationError(message)
        if watching is not None:
            self._arm_rejudge(handle, watching)
        return handle

    def _send_copy(self, handle: TaskHandle, task: TaskSpec, c: TaskCopy) -> str | None:
        """Ship one copy to its site; the error, if its submission failed."""
        with self._lock:
            if not c.queued:  # another copy won before this one was sent
                return None
            c._sending = True
        try:
            fut = self.backends[c.site].submit(self._shipped(handle, task, c), c.candidate.shape)
        except Exception as e:
            with self._lock:
                c._sending = False
                late = c.cancelling
            if late:  # another copy won meanwhile: this one never reached its site
                self._cancel_copy(handle, c)
            else:
                self._copy_failed(handle, c, f"submission to {c.site} failed: {e}", e)
            return f"{c.candidate.shape.describe()}: {e}"
        with self._lock:
            c.future = fut
            c._sending = False
            late = c.cancelling  # another copy won while this one was sent
        if self.store is not None:
            tid = _await_task_id(fut, ACK_TIMEOUT_S)
            if tid is not None:
                self.store.update_task_copy(handle.id, c.index, compute_task_id=tid)
        if late:
            self._cancel_copy(handle, c)
            return None
        fut.add_done_callback(functools.partial(self._on_copy_done, handle, c))
        return None

    def _admit(
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
        snap = snapshot or self._last_snapshot
        outcome = self.gate.evaluate(handle.caller, handle.task, shape, snap)
        label = f"{handle.label} ({what})"
        if outcome.verdict == "allowed":
            self.gate.record(
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
        self.gate.record(
            "denied",
            handle.caller,
            handle.task,
            shape,
            outcome,
            task_id=handle.id,
            label=label,
            message=message,
        )
        with self._lock:
            handle.refused.add(shape)
            handle.notes.append(message)
        self.events.emit(
            "policy.copy_refused", handle.id, shape.site, caller=handle.caller, reason=message
        )
        return False

    # --- watching: a task still queued past its prediction is judged again ---------------
    def _cancellable(self, handle: TaskHandle, site: str, what: str) -> bool:
        """Whether a copy at ``site`` can be withdrawn if another copy starts first (and
        the task's chosen site too: either may lose). Where one cannot (the site's backend
        has no cancel, as the Globus Compute cloud has none), copies would all run: no copy
        is made, and a note on the task says why."""
        for s in dict.fromkeys((handle.site, site)):
            if not self.backends[s].can_cancel:
                handle.notes.append(
                    f"no {what} on {site}: {s} cannot cancel a queued copy, so every copy "
                    "would run; placed once"
                )
                return False
        return True

    def _placer(self) -> Policy:
        """The configured policy (a watching one charged :attr:`late_board` if asked)."""
        pol = get_policy(self.policy)
        if self.charge_late_copies and pol.watch is not None:
            return with_late_board(pol, self.late_board)
        return pol

    def _queued_copies(self) -> list[QueuedCopy]:
        """Our copies still queued now, with what they were predicted to wait."""
        now = datetime.now(UTC)
        with self._lock:
            return [
                QueuedCopy(
                    c.candidate.shape,
                    c.candidate.predicted_wait_s,
                    (now - c.submitted_at).total_seconds(),
                )
                for h in self._handles.values()
                if not h.done
                for c in h.copies
                if c.state == "queued"
            ]

    def _arm_rejudge(self, h: TaskHandle, pol: Policy, delay_s: float | None = None) -> None:
        """Judge ``h`` again by ``pol`` once it is overdue (then every ``Watch.every_s``)."""
        w = pol.watch
        if w is None or h.task is None or h.done or len(h.copies) >= w.max_copies:
            return
        if delay_s is None:  # first: when it becomes overdue
            queued = (datetime.now(UTC) - h.submitted_at).total_seconds()
            delay_s = h.decision.chosen.predicted_wait_s + w.overdue_s - queued
        with self._lock:
            if self._rejudge_pool is None:
                self._rejudge_pool = ThreadPoolExecutor(1, thread_name_prefix="federation-rejudge")
            pool = self._rejudge_pool

        def due() -> None:
            with contextlib.suppress(RuntimeError):  # the coordinator is closing
                pool.submit(self._rejudge, h, pol)

        with contextlib.suppress(RuntimeError):  # the coordinator is closing
            self.milestones.timers.call_later(delay_s, due)

    def _rejudge(self, h: TaskHandle, pol: Policy) -> None:
        """A watched task still queued: add a copy where a fresh submission finishes sooner.

        Placed on a snapshot at most half a watch period old, so the sites are probed at
        most twice per period however many tasks are watched. The copy joins the race
        like a hedge (first to start wins) and is recorded before it is shipped
        (``task.copy_added``).
        """
        w = pol.watch
        if w is None or h.task is None:
            return
        with self._lock:
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
            self._arm_rejudge(h, pol, w.every_s)
            return
        try:
            snap = self.snapshot(max_age_s=max(self.probe_interval_s, w.every_s / 2))
            fresh = pol.decide(h.envelope, [b.spec for b in self.backends.values()], snap, now)
        except Exception as e:  # nothing feasible now, a probe failed: judged again later
            logger.info("judging %s again failed: %s", h.id, e)
            self._arm_rejudge(h, pol, w.every_s)
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
            and self._cancellable(h, cand.site, "watch copy")
            and self._admit(h, cand.shape, "watch copy", snap)
        ):
            self._add_copy(h, cand, queued_s, fresh)
        self._arm_rejudge(h, pol, w.every_s)

    def _add_copy(
        self, h: TaskHandle, cand: Candidate, queued_s: float, fresh: PlacementDecision
    ) -> None:
        assert h.task is not None
        with self._lock:
            if h.done or h.winner is not None:
                return
            c = TaskCopy(len(h.copies), cand)
            h.copies.append(c)
            self._hedged[h.id] = h  # its compute task id is indexed on first report
        if self.store is not None:
            try:
                self.store.insert_task_copy(h.id, _copy_row(c))
            except Exception as e:  # not durable: not shipped
                with self._lock:
                    c.state, c.error, c.ended_at = "failed", f"not recorded: {e}", datetime.now(UTC)
                logger.warning("copy of %s on %s not recorded, not shipped: %s", h.id, c.site, e)
                return
        self.events.emit(
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
        error = self._send_copy(h, h.task, c)
        if error is not None:
            h.notes.append(f"added copy could not be shipped: {error}")

    def _copy_failed(
        self, handle: TaskHandle, c: TaskCopy, message: str, exc: BaseException | None
    ) -> None:
        """A copy left the race before any copy started; the last one fails the task."""
        with self._lock:
            if c.state != "queued" or handle.done:
                return
            c.state = "failed"
            c.error = message
            c.ended_at = datetime.now(UTC)
            left = [x for x in handle.copies if x.state in ("queued", "won", "cancelling")]
        self._persist_copy(handle, c)
        handle.notes.append(f"copy on {c.site}/{c.partition} failed: {message}")
        if left:
            return
        failed = [x for x in handle.copies if x.state == "failed"]
        text = "; ".join(f"{x.site}/{x.partition}: {x.error}" for x in failed)
        traceback = str(exc) if exc is not None else ""
        failure = classify(message, traceback)
        if exc is not None and failure.retryable and handle.task is not None:
            self._retry_off_thread(handle, failure, f"every copy failed: {text}", traceback)
            return
        self._fail(handle, f"every copy failed: {text}", traceback, failure=failure.cls)

    def _on_copy_done(self, handle: TaskHandle, c: TaskCopy, fut: Future[Any]) -> None:
        """A copy's future resolved: settle the task (winner), leave the race, or ignore."""
        with self._lock:
            if handle.state in ("completed", "failed"):
                return
            if c.state == "cancelling":  # a cancel is on its way; replayed if it fails
                c._parked_done = fut
                return
            if c.state != "won" and (c.state != "queued" or handle.winner is not None):
                return  # a cancelled, abandoned or failed copy: its end is not the task's
            failed = c.state == "queued" and (fut.cancelled() or fut.exception() is not None)
            won_now = c.state == "queued" and not failed  # a result before any start report
            losers = self._take_win(handle, c) if won_now else []
        if failed:  # before any copy started: this copy leaves the race
            exc = None if fut.cancelled() else fut.exception()
            lost = exc is not None and _stream_lost(exc)
            if lost and exc is not None and self._reattach(handle, c, c.compute_task_id, exc):
                return  # the copy still races: its result is fetched again
            message = "cancelled at the site" if exc is None else _first_line(exc)
            self._copy_failed(handle, c, message, exc)
            return
        if won_now:
            self._after_win(handle, c, losers)
        self._on_done(handle, fut)

    def _copy_started(self, handle: TaskHandle, c: TaskCopy, slurm_job_id: str | None) -> None:
        """A copy reports running: the first one wins, the others are cancelled."""
        at = datetime.now(UTC)
        with self._lock:
            if handle.done:
                return
            if c.state == "cancelling":  # a cancel is on its way; replayed if it fails
                c._parked_start, c._parked_job = True, slurm_job_id
                return
            won_now = c.state == "queued" and handle.winner is None
            if not won_now and c.state != "won":
                return  # a loser that started before its cancel arrived: ignored
            losers = self._take_win(handle, c) if won_now else []
        if won_now:
            self._after_win(handle, c, losers)
        self._mark_started(handle, slurm_job_id, at=at)

    def _take_win(self, handle: TaskHandle, c: TaskCopy) -> list[TaskCopy]:
        """Make ``c`` the placement (under ``self._lock``); the copies to cancel."""
        c.state = "won"
        handle.decision = handle.decision.model_copy(update={"chosen": c.candidate})
        handle.future = c.future
        losers = [x for x in handle.copies if x.state == "queued"]
        for x in losers:
            x.state = "cancelling"
        return losers

    def _after_win(self, handle: TaskHandle, c: TaskCopy, losers: list[TaskCopy]) -> None:
        cid = c.compute_task_id
        with self._lock:
            if cid is not None:
                self._by_compute_id[cid] = handle
        # the copy first: recovery takes the winner from the copies, the row follows it
        self._persist_copy(handle, c)
        if self.store is not None:
            self.store.update_task(
                handle.id,
                site=c.site,
                decision=handle.decision.model_dump_json(),
                compute_task_id=cid,
            )
        for x in losers:
            with self._lock:
                sending = x.future is None and x._sending
            if not sending:  # one still being sent is cancelled by its sender
                self._cancel_copy(handle, x, winner=c)

    def _cancel_copy(self, handle: TaskHandle, c: TaskCopy, winner: TaskCopy | None = None) -> None:
        """Cancel a losing copy at its site and report it (``task.hedge_cancelled``)."""
        cid = c.compute_task_id
        ok = c.future is None and cid is None  # never sent: nothing to cancel
        if cid is not None:
            try:
                ok = self.backends[c.site].cancel(cid)
            except Exception as e:
                logger.warning(
                    "cancelling copy %s of %s on %s failed: %s", cid, handle.id, c.site, e
                )
        winner = winner or handle.winner
        with self._lock:
            c.state = "cancelled" if ok else "abandoned"
            c.ended_at = datetime.now(UTC)
        self._persist_copy(handle, c)
        held = (c.ended_at - c.submitted_at).total_seconds()
        self.events.emit(
            "task.hedge_cancelled",
            handle.id,
            c.site,
            partition=c.partition,
            compute_task_id=cid,
            held_s=round(held, 3),
            cancelled=ok,
            winner_site=winner.site if winner is not None else None,
        )

    def _cancel_copies(self, h: TaskHandle, reason: str) -> bool:
        """``cancel`` for a hedged task: every copy still queued, or the winner."""
        with self._lock:
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
            ok = self.backends[w.site].cancel(cid)
            if ok:
                self._fail(h, reason, "")
            else:
                h.cancel_reason = None
            return ok
        results: list[tuple[TaskCopy, bool]] = []
        for c in targets:
            cid = c.compute_task_id
            ok = False
            if cid is not None:
                try:
                    ok = self.backends[c.site].cancel(cid)
                except Exception as e:
                    logger.warning("cancelling copy %s on %s failed: %s", cid, c.site, e)
            results.append((c, ok))
        now = datetime.now(UTC)
        with self._lock:
            for c, ok in results:
                c.state = "cancelled" if ok else "queued"
                if ok:
                    c.ended_at = now
            remaining = [c for c in h.copies if c.state in ("queued", "won")]
        for c, ok in results:
            if ok:
                self._persist_copy(h, c)
        if not remaining:
            self._fail(h, reason, "")
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
                self._copy_started(h, c, job)
            if done is not None:
                self._on_copy_done(h, c, done)
        return False

    def _copy_for_compute_id(self, tid: str) -> tuple[TaskHandle, TaskCopy] | None:
        with self._lock:
            hit = self._copy_ids.get(tid)
            if hit is not None or not self._hedged:
                return hit
            for h in list(self._hedged.values()):
                pending = False
                for c in h.copies:
                    cid = c.compute_task_id
                    if cid is not None:
                        self._copy_ids.setdefault(cid, (h, c))
                    elif c.state in ("queued", "cancelling") or c._sending:
                        pending = True
                if not pending:
                    del self._hedged[h.id]
            return self._copy_ids.get(tid)

    def _persist_copy(self, h: TaskHandle, c: TaskCopy) -> None:
        if self.store is None:
            return
        self.store.update_task_copy(
            h.id,
            c.index,
            state=c.state,
            compute_task_id=c.compute_task_id,
            ended_at=c.ended_at.isoformat() if c.ended_at else None,
            error=c.error,
        )

    # --- policy: tasks held for an operator -------------------------------------------------
    def _hold(
        self, handle: TaskHandle, task: TaskSpec, caller: str, outcome: PolicyOutcome
    ) -> TaskHandle:
        """Keep a placed task unshipped until an operator approves or rejects it."""
        self.held.hold(
            task_id=handle.id,
            caller=caller,
            label=handle.label,
            task=task,
            envelope=handle.envelope,
            decision=handle.decision,
            code_hash=handle.code_hash,
            outcome=outcome,
        )
        handle.notes.append(f"held for an operator: {outcome.summary()}")
        handle.state = "held"
        with self._lock:
            self._handles[handle.id] = handle
            self._unindexed[handle.id] = handle
        self.events.emit(
            "policy.unresolved",
            handle.id,
            handle.site,
            caller=caller,
            shape=handle.shape.describe(),
            rules=[f.rule for f in outcome.findings],
            reason=outcome.summary(),
            hint="held, not shipped: an operator approves or rejects it "
            "(`federation policy approve|reject TASK_ID`)",
        )
        return handle

    def pending_policy(self) -> list[HeldTask]:
        """Tasks held by the policy gate, waiting for :meth:`approve` or :meth:`reject`."""
        return self.held.pending()

    def approve(self, task_id: str, actor: str = LOCAL_CALLER) -> TaskHandle:
        """Ship a held task on the shape it was placed on (``policy.approved``, then the
        usual ``task.queued``...)."""
        held = self._held(task_id)
        if not self.held.resolve(task_id, "approved", actor, None):
            raise FederationError(f"task {task_id} was decided meanwhile; nothing to approve")
        h = self._held_handle(held)
        task = h.task if h.task is not None else self.held.task(task_id)
        assert task is not None
        h.task = task
        self.gate.record(
            "approved",
            held.caller,
            task,
            h.shape,
            held.outcome,
            task_id=task_id,
            actor=actor,
            message=f"approved by {actor}: {held.why}",
        )
        self.events.emit("policy.approved", task_id, h.site, actor=actor, caller=held.caller)
        h.state = "queued"
        return self._ship(h, task)

    def reject(
        self, task_id: str, reason: str = "rejected by an operator", actor: str = LOCAL_CALLER
    ) -> TaskHandle:
        """Fail a held task with ``reason`` (``policy.rejected``, then ``task.failed``)."""
        held = self._held(task_id)
        if not self.held.resolve(task_id, "rejected", actor, reason):
            raise FederationError(f"task {task_id} was decided meanwhile; nothing to reject")
        h = self._held_handle(held)
        self.gate.record(
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
        self.events.emit(
            "policy.rejected", task_id, h.site, actor=actor, caller=held.caller, reason=reason
        )
        self._fail(h, f"rejected by policy: {reason}", "")
        return h

    def _held(self, task_id: str) -> HeldTask:
        held = self.held.get(task_id)
        if held is None or held.state != "held":
            state = "unknown" if held is None else held.state
            raise FederationError(
                f"task {task_id!r} is not held for approval ({state}); "
                "`federation policy list` shows the held tasks"
            )
        return held

    def _held_handle(self, held: HeldTask) -> TaskHandle:
        with self._lock:
            h = self._handles.get(held.task_id)
        if h is not None:
            return h
        task = self.held.task(held.task_id)
        h = TaskHandle(
            id=held.task_id,
            label=held.label,
            envelope=held.envelope,
            decision=held.decision,
            code_hash=held.code_hash,
            is_shell=isinstance(task, ShellTask),
            bus=self.events,
            task=task,
            submitted_at=held.held_at,
            caller=held.caller,
        )
        self.events.set_owner(h.id, h.caller)
        if held.state == "held":
            h.state = "held"
        elif held.state == "rejected":
            h.state = "failed"
            h.error = f"rejected by policy: {held.reason}"
            h.completed_at = held.resolved_at
            h._done.set()
        with self._lock:
            self._handles.setdefault(h.id, h)
            return self._handles[h.id]

    # --- recovery ---------------------------------------------------------------------------
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
        if self.store is None:
            raise FederationError("recover() needs a store: Coordinator(..., store=Store(path))")
        for held in self.held.all():  # held or rejected by policy: never in the task table
            if held.state != "approved":
                self._held_handle(held)
        reopened: list[TaskHandle] = []
        by_site: dict[str, list[TaskHandle]] = {}
        copy_rows: dict[str, list[dict[str, Any]]] = {}
        for r in self.store.task_copies():
            copy_rows.setdefault(r["task_id"], []).append(r)
        racing: list[TaskHandle] = []
        for row in self.store.tasks():
            if row["id"] in self._handles:
                continue
            h = _handle_from_row(row, self.events)
            h.copies = [_copy_from_row(r) for r in copy_rows.get(h.id, [])]
            with self._lock:
                self._handles[h.id] = h
                self._unindexed[h.id] = h
            if h.state in ("completed", "failed"):
                h._done.set()
                continue
            if h.copies and not h.attempts:  # a retry after the race runs as one task
                w = h.winner
                if w is None:  # no copy started yet: the race goes on
                    with self._lock:
                        self._unindexed.pop(h.id, None)
                    racing.append(h)
                    reopened.append(h)
                    continue
                # the copy is recorded before the row: the winner is the copy's
                h.decision = h.decision.model_copy(update={"chosen": w.candidate})
                row = {**row, "compute_task_id": w.compute_task_id}
            if row["compute_task_id"] is None:
                self._fail(
                    h,
                    "the coordinator stopped before the site acknowledged this "
                    "submission; it never ran: submit it again",
                    "",
                )
                continue
            h._recovered_compute_id = row["compute_task_id"]
            by_site.setdefault(h.site, []).append(h)
            reopened.append(h)
        for site, handles in by_site.items():
            backend = self.backends.get(site)
            ids = [h._recovered_compute_id for h in handles if h._recovered_compute_id]
            futs = backend.reattach(ids) if backend else {}
            for h in handles:
                fut = futs.get(h._recovered_compute_id or "")
                if fut is None:
                    self._fail(h, f"site {site} no longer knows task {h._recovered_compute_id}", "")
                    continue
                h.future = fut
                fut.add_done_callback(functools.partial(self._on_done, h))
        self._recover_copies(racing)
        self._recover_continuations(reopened)
        self.transfers.recover()  # open transfers: Globus tasks re-monitored, copies re-run
        return reopened

    def _recover_copies(self, racing: list[TaskHandle]) -> None:
        """Re-attach the copies of hedged tasks; cancel the losers a won race left queued."""
        now = datetime.now(UTC)
        by_site: dict[str, list[tuple[TaskHandle, TaskCopy]]] = {}
        won = [
            h
            for h in self.handles()
            if h.copies and not h.attempts and not h.done and h.winner is not None
        ]
        for h in [*racing, *won]:
            for c in h.copies:
                if c.state != "queued":
                    continue
                if c.compute_task_id is None:
                    c.state, c.ended_at = "failed", now
                    c.error = "the coordinator stopped before the site acknowledged this copy"
                    self._persist_copy(h, c)
                    continue
                by_site.setdefault(c.site, []).append((h, c))
        for site, pairs in by_site.items():
            backend = self.backends.get(site)
            ids = [str(c.compute_task_id) for _, c in pairs]
            futs = backend.reattach(ids) if backend else {}
            for h, c in pairs:
                fut = futs.get(str(c.compute_task_id))
                if fut is None and h.winner is None:
                    c.state, c.ended_at = "failed", now
                    c.error = f"site {site} no longer knows copy {c.compute_task_id}"
                    self._persist_copy(h, c)
                c.future = fut
        for h in won:
            w = h.winner
            for c in h.copies:
                if c.state == "queued":
                    with self._lock:
                        c.state = "cancelling"
                    self._cancel_copy(h, c, winner=w)
        for h in racing:
            live = [c for c in h.copies if c.state == "queued"]
            if not live:
                text = "; ".join(f"{c.site}/{c.partition}: {c.error}" for c in h.copies)
                self._fail(h, f"every copy failed: {text}", "")
                continue
            with self._lock:
                self._hedged[h.id] = h
            for c in live:
                assert c.future is not None
                c.future.add_done_callback(functools.partial(self._on_copy_done, h, c))

    # --- move_data ---------------------------------------------------------------------------
    @property
    def transfers(self) -> TransferManager:
        """The transfer manager, built on first use over ``transfer_backends``."""
        from federation.transfer import LocalCopyBackend, TransferManager

        with self._lock:
            if self._transfers is None:
                backends = self.transfer_backends
                if backends is None:
                    from federation.core.spec import site_names

                    home = self.store.path.parent if self.store is not None else None
                    backends = LocalCopyBackend(list(self.backends) or site_names(), home)
                self._transfers = TransferManager(backends, self.store, self.events)
            return self._transfers

    def move_data(
        self,
        source_site: str,
        source_path: str,
        dest_site: str,
        dest_path: str,
        *,
        label: str | None = None,
        sync_level: SyncLevel = "checksum",
        verify_checksum: bool = True,
        deadline_s: float | None = None,
        on_event: EventCallback | None = None,
        caller: str = LOCAL_CALLER,
    ) -> TransferHandle:
        """Copy a file or folder from one site's storage to another's; returns at once.

        Paths are relative to each site's storage root. The transfer is recorded before
        this returns; ``transfer.submitted``, ``transfer.progress`` and then
        ``transfer.completed`` or ``transfer.failed`` (with the reason) follow as events.
        Unknown sites, paths outside a storage root and a missing source raise a
        :class:`~federation.core.errors.TransferError` (or :class:`UnknownSiteError`) before
        anything is copied. ``caller`` owns the transfer (its events go to their log).
        """
        from federation.transfer import DataRef, TransferRequest

        request = TransferRequest(
            source=DataRef(site=source_site, path=source_path),
            destination=DataRef(site=dest_site, path=dest_path),
            label=label,
            sync_level=sync_level,
            verify_checksum=verify_checksum,
            deadline_s=deadline_s,
        )
        return self.transfers.submit(request, on_event=on_event, owner=caller)

    def get_transfer(self, transfer_id: str) -> TransferHandle:
        """The handle of a transfer ``move_data`` started (also one from before a restart)."""
        return self.transfers.get(transfer_id)

    # --- callbacks from the sites ----------------------------------------------------------
    def notify_started(self, compute_task_id: str, slurm_job_id: str | None) -> None:
        """A site reports a task running (its batch job started and picked it up)."""
        copy = self._copy_for_compute_id(compute_task_id)
        if copy is not None:
            self._copy_started(*copy, slurm_job_id)
            return
        handle = self._handle_for_compute_id(compute_task_id)
        if handle is None:
            # The id may not be on the future yet (submit reply still in flight): retry,
            # and keep the report so a result arriving first still starts the task first.
            with self._lock:
                self._early_starts[compute_task_id] = slurm_job_id
            threading.Timer(0.2, self._retry_started, (compute_task_id, slurm_job_id, 25)).start()
            return
        self._mark_started(handle, slurm_job_id)

    def _retry_started(self, tid: str, job: str | None, tries: int) -> None:
        copy = self._copy_for_compute_id(tid)
        if copy is not None:
            with self._lock:
                self._early_starts.pop(tid, None)
            self._copy_started(*copy, job)
            return
        handle = self._handle_for_compute_id(tid)
        if handle is not None:
            with self._lock:
                self._early_starts.pop(tid, None)
            self._mark_started(handle, job)
        elif tries > 0:
            threading.Timer(0.2, self._retry_started, (tid, job, tries - 1)).start()
        else:
            with self._lock:
                self._early_starts.pop(tid, None)

    def _started_before_done(self, handle: TaskHandle) -> None:
        """Announce a start reported before the task's id was known, ahead of its end."""
        cid = handle.compute_task_id
        with self._lock:
            if cid is None or cid not in self._early_starts:
                return
            job = self._early_starts.pop(cid)
        self._mark_started(handle, job)

    def _mark_started(
        self,
        handle: TaskHandle,
        slurm_job_id: str | None,
        at: datetime | None = None,
        seen: str = "reported",
    ) -> None:
        """Record and announce (once) that ``handle`` is running. ``seen``: ``reported``
        by the site, or ``at_end`` when its end came before any start report."""
        with self._lock:
            # the start was announced at the task's end; the site's report brings the job id
            late_job = bool(slurm_job_id) and handle.started_at is not None
            late_job = late_job and handle.slurm_job_id is None
            if late_job:
                handle.slurm_job_id = slurm_job_id
            if handle.started_at is not None or handle.done:
                if late_job and self.store is not None:
                    self.store.update_task(handle.id, slurm_job_id=slurm_job_id)
                return
            handle.started_at = at or datetime.now(UTC)
            handle.slurm_job_id = slurm_job_id
        if self.store is not None:
            self.store.update_task(
                handle.id,
                state="running",
                started_at=handle.started_at.isoformat(),
                slurm_job_id=slurm_job_id,
            )
        wait = (handle.started_at - handle.submitted_at).total_seconds()
        detail: dict[str, Any] = {"slurm_job_id": slurm_job_id, "queue_wait_s": round(wait, 3)}
        if seen != "reported":
            detail["seen"] = seen  # the start report had not arrived when the task ended
        self.events.emit("task.started", handle.id, handle.site, **detail)

    def _ran(self, handle: TaskHandle) -> None:
        """A task whose result (or its own error) came back has run: its start is announced
        before its end, however late (or never) the site's start report arrives."""
        self._started_before_done(handle)
        if handle.started_at is None:
            self._mark_started(handle, handle.slurm_job_id, seen="at_end")

    def _handle_for_compute_id(self, tid: str) -> TaskHandle | None:
        with self._lock:
            h = self._by_compute_id.get(tid)
            if h is not None:
                return h
            for cand in list(self._unindexed.values()):  # only handles not indexed yet
                cid = cand.compute_task_id
                if cid is not None:
                    self._by_compute_id[cid] = cand
                    del self._unindexed[cand.id]
            return self._by_compute_id.get(tid)

    def _on_done(self, handle: TaskHandle, fut: Future[Any]) -> None:
        if handle.state in ("completed", "failed"):
            return  # already settled (e.g. cancelled by request): report once
        self._started_before_done(handle)
        if fut.cancelled():
            self._fail(handle, "cancelled", "")
            return
        exc = fut.exception()
        lost = exc is not None and handle.cancel_reason is None and _stream_lost(exc)
        if lost and exc is not None and self._reattach(handle, None, handle.compute_task_id, exc):
            return  # not the task's failure: its result is fetched again
        if exc is not None:
            message = handle.cancel_reason or _first_line(exc)
            failure = classify(message, str(exc))
            if failure.cls == "user_error" and handle.cancel_reason is None and _remote(exc):
                self._ran(handle)  # its own code raised: it ran
            if failure.retryable and handle.task is not None:
                self._retry_off_thread(handle, failure, message, str(exc))
                return
            self._fail(handle, message, str(exc), failure=failure.cls)
            return
        value = fut.result()
        ref = as_ref(value, handle.site)
        if ref is not None:  # too large to return inline: written to the site's storage
            handle.value_ref, value = ref, None
        self._ran(handle)
        if handle.is_shell and getattr(value, "returncode", 0) != 0:
            self._fail(
                handle,
                f"command exited with {value.returncode}",
                getattr(value, "stderr", ""),
                value=value,
            )
            return
        with self._lock:
            handle.completed_at = datetime.now(UTC)
            handle.state = "completed"
            handle.value = value
        self._persist_end(handle)
        self.events.emit(
            "task.completed",
            handle.id,
            handle.site,
            runtime_s=handle.runtime_s,
            slurm_job_id=handle.slurm_job_id,
        )

    # --- a lost result stream ---------------------------------------------------------------
    def _reattach(
        self, handle: TaskHandle, copy: TaskCopy | None, cid: str | None, exc: BaseException
    ) -> bool:
        """The SDK's result stream died (its futures fail with "SDK thread quit
        unexpectedly"): the task itself did not fail and may still run or have ended at the
        site. Fetch it again from the task group, off the SDK's thread, a few times with
        backoff; False (then it fails, saying so) when that is used up."""
        site = copy.site if copy is not None else handle.site
        with self._lock:
            tries = handle._reattaches
            if cid is None or tries >= MAX_REATTACHES:
                return False
            handle._reattaches += 1
        handle.notes.append(
            f"result stream from {site} lost ({_first_line(exc)}); re-attaching to its task "
            f"{cid} (try {tries + 1} of {MAX_REATTACHES})"
        )
        delay = min(30.0, REATTACH_DELAY_S * 2**tries)
        timer = threading.Timer(delay, self._do_reattach, (handle, copy, cid, site, exc))
        timer.daemon = True
        timer.start()
        return True

    def _do_reattach(
        self,
        handle: TaskHandle,
        copy: TaskCopy | None,
        cid: str,
        site: str,
        exc: BaseException,
    ) -> None:
        try:
            fut = self.backends[site].reattach([cid]).get(cid)
            why = "the site no longer knows it"
        except Exception as e:  # the service is unreachable just now: try again later
            fut, why = None, f"{type(e).__name__}: {e}"
            if self._reattach(handle, copy, cid, exc):
                return
        if fut is None:
            message = f"lost the result stream from {site} and could not re-attach to {cid}"
            if copy is not None:
                self._copy_failed(handle, copy, f"{message}: {why}", None)
            else:
                self._fail(handle, f"{message}: {why}", "", failure="result_stream_lost")
            return
        if copy is not None:
            copy.future = fut
            fut.add_done_callback(functools.partial(self._on_copy_done, handle, copy))
        else:
            handle.future = fut
            fut.add_done_callback(functools.partial(self._on_done, handle))

    def _retry_off_thread(
        self, handle: TaskHandle, failure: Failure, message: str, traceback: str
    ) -> None:
        """:meth:`_retry_or_fail` off the SDK's result thread: placing again probes the
        sites, whose results arrive on that very thread."""
        threading.Thread(
            target=self._retry_or_fail,
            args=(handle, failure, message, traceback),
            daemon=True,
            name=f"retry-{handle.id[:8]}",
        ).start()

    def _retry_or_fail(
        self, handle: TaskHandle, failure: Failure, message: str, traceback: str
    ) -> None:
        if not self._retry(handle, failure, traceback):
            self._fail(handle, message, traceback, failure=failure.cls)

    def _retry(self, handle: TaskHandle, failure: Failure, traceback: str) -> bool:
        """Run a task whose infrastructure failed again, on another feasible site."""
        tried = [a["site"] for a in handle.attempts] + [handle.site]
        tried += [c.site for c in handle.copies]
        if handle.task is None or len(handle.attempts) >= self.retry_budget:
            return False
        env = handle.envelope
        others = tuple(s for s in (env.sites or self.backends) if s not in tried)
        if not others:
            handle.notes.append(f"{failure.cls} on {handle.site}; no other allowed site to retry")
            return False
        try:
            decision = self.plan(env.model_copy(update={"sites": others}))
        except NoFeasibleSiteError:
            handle.notes.append(f"{failure.cls} on {handle.site}; no other feasible site")
            return False
        if not self._admit(handle, decision.chosen.shape, "retry"):
            return False
        with self._lock:
            handle.attempts.append(
                {
                    "site": handle.site,
                    "partition": handle.partition,
                    "compute_task_id": handle.compute_task_id,
                    "slurm_job_id": handle.slurm_job_id,
                    "failure": failure.cls,
                    "error": failure.message,
                    "ended_at": datetime.now(UTC).isoformat(),
                }
            )
            old_site = handle.site
            handle.decision = decision
            handle.state = "queued"
            handle.started_at = None
            handle.slurm_job_id = None
        shape = decision.chosen.shape
        if self.store is not None:  # the attempt is on record before the retry is shipped
            self.store.update_task(
                handle.id,
                site=shape.site,
                decision=decision.model_dump_json(),
                state="queued",
                started_at=None,
                slurm_job_id=None,
                compute_task_id=None,
                attempts=json.dumps(handle.attempts, default=str),
            )
        self.events.emit(
            "task.retried",
            handle.id,
            shape.site,
            failure=failure.cls,
            from_site=old_site,
            to_site=shape.site,
            attempt=len(handle.attempts) + 1,
        )
        try:
            fut = self.backends[shape.site].submit(self._shipped(handle, handle.task), shape)
        except Exception as e:
            self._fail(handle, f"retry on {shape.site} could not be submitted: {e}", traceback)
            return True
        handle.future = fut
        with self._lock:  # its start is reported under the new compute task id
            self._unindexed[handle.id] = handle
        if self.store is not None:
            tid = _await_task_id(fut, ACK_TIMEOUT_S)
            if tid is not None:
                self.store.update_task(handle.id, compute_task_id=tid)
        fut.add_done_callback(lambda f: self._on_done(handle, f))
        return True

    def _fail(
        self,
        handle: TaskHandle,
        message: str,
        traceback: str,
        value: Any = None,
        failure: str | None = None,
    ) -> None:
        with self._lock:
            settled = handle.state in ("completed", "failed")
            if not settled:
                handle.completed_at = datetime.now(UTC)
                handle.state = "failed"
                handle.error = message
                handle.remote_traceback = traceback
                handle.value = value
        if settled:
            # ended on another thread (e.g. the site's 'cancelled' result overtook cancel):
            # return once that end is in the store and announced, as if it were ours
            handle._done.wait(10)
            return
        self._persist_end(handle)
        detail: dict[str, Any] = {"error": message}
        if failure:
            detail["failure"] = failure
        if handle.attempts:
            detail["attempts"] = len(handle.attempts) + 1
        self.events.emit("task.failed", handle.id, handle.site, **detail)

    def _persist_end(self, h: TaskHandle) -> None:
        if self.store is None or h.completed_at is None:
            return
        self.store.update_task(
            h.id,
            state=h.state,
            completed_at=h.completed_at.isoformat(),
            error=h.error,
            remote_traceback=h.remote_traceback,
            value_json=_value_json(h),
            value_ref=h.value_ref.model_dump_json() if h.value_ref else None,
            attempts=json.dumps(h.attempts, default=str),
        )

    # --- draft_envelope / cancel ----------------------------------------------------------
    def draft_envelope(self, description: str, hints: TaskHints | None = None) -> EnvelopeDraft:
        """Propose an envelope for a described task, validated against these sites."""
        return draft_envelope(description, [b.spec for b in self.backends.values()], hints)

    def cancel(self, handle: TaskHandle | str, reason: str = "cancelled by request") -> bool:
        """Cancel a task that has not started running; False if it cannot be cancelled.

        A hedged task: every copy still queued is cancelled (True when all were). If one
        could not be cancelled (it started meanwhile), False, and the task carries on there.
        """
        h = self._handle(handle)
        if h.state == "held":  # never shipped: cancelling it rejects it
            held = self.held.get(h.id)
            try:
                self.reject(h.id, reason, actor=held.caller if held else LOCAL_CALLER)
            except FederationError:  # not held (any more): approved or rejected meanwhile
                return False
            return True
        if h.copies and not h.attempts:  # hedged (a retry after the race ships one copy)
            return self._cancel_copies(h, reason)
        if h.done or h.compute_task_id is None:
            return False
        h.cancel_reason = reason  # the site's own 'cancelled' result may arrive first
        ok = self.backends[h.site].cancel(h.compute_task_id)
        if ok:
            self._fail(h, reason, "")
        else:
            h.cancel_reason = None
        return ok

    def plan(
        self, envelope: ResourceEnvelope, snapshot: FederationSnapshot | None = None
    ) -> PlacementDecision:
        """The placement ``submit_task`` would choose now, without submitting anything."""
        snap = snapshot or self.snapshot()
        specs = [b.spec for b in self.backends.values()]
        return place(envelope, specs, snap, policy=self._placer())

    def submit_group(
        self,
        children: list[tuple[str, TaskSpec, ResourceEnvelope]],
        *,
        objective: str = "",
        distinct_sites: bool = True,
        on_event: EventCallback | None = None,
        hooks: Iterable[Hook] = (),
        snapshot: FederationSnapshot | None = None,
        caller: str = LOCAL_CALLER,
    ) -> GroupHandle:
        """Fan out named children; see :mod:`federation.runtime.groups` for re-placement."""
        return self.groups.submit(
            children,
            objective=objective,
            distinct_sites=distinct_sites,
            on_event=on_event,
            hooks=hooks,
            snapshot=snapshot,
            caller=caller,
        )

    @property
    def groups(self) -> GroupManager:
        """The group manager (``submit_group``), built on first use."""
        from federation.runtime.groups import GroupManager

        with self._lock:
            if self._groups is None:
                self._groups = GroupManager(self)
            return self._groups

    def _handle(self, handle: TaskHandle | str) -> TaskHandle:
        h = self._handles.get(handle) if isinstance(handle, str) else handle
        if h is None:
            raise FederationError(
                f"unknown task handle {handle!r}; use the id submit_task returned"
            )
        return h

    # --- get_result -----------------------------------------------------------------------
    def get_result(self, handle: TaskHandle | str, timeout_s: float | None = None) -> TaskResult:
        """The task's result manifest; waits up to ``timeout_s`` for it to finish."""
        h = self._handle(handle)
        if not h.wait(timeout_s):
            raise TimeoutError(f"task {h.id} ({h.label}) still {h.state} after {timeout_s} s")
        self._account(h)
        return h.manifest()

    # --- continuation: milestones, large results, provenance, recovery of the rest ----------
    def _watch(self, h: TaskHandle) -> None:
        self.milestones.watch(
            h.id,
            h.site,
            h.wants or Milestones(),
            predicted_wait_s=h.decision.chosen.predicted_wait_s,
            walltime_s=h.envelope.walltime_s,
            submitted_at=h.submitted_at,
            started_at=h.started_at,
        )

    def _shipped(self, h: TaskHandle, task: TaskSpec, copy: TaskCopy | None = None) -> TaskSpec:
        name = f"{h.id}-{len(h.attempts) + 1}.result"
        site = h.site
        if copy is not None:  # each copy spills to its own site, under its own name
            name, site = f"{h.id}-{len(h.attempts) + 1}.copy{copy.index}.result", copy.site
        return shipped(task, site, name, self.result_storage, self.inline_limit_bytes)

    def _account(self, h: TaskHandle) -> None:
        """Record what the site's accounting says about the task's Slurm jobs (sacct)."""
        ids = list(h.slurm_job_ids)
        if not ids or (h.accounting is not None and h.accounting.complete):
            return
        last = h.accounting
        if last is not None and (datetime.now(UTC) - last.fetched_at).total_seconds() < 10:
            return
        acct = fetch_accounting(
            h.site,
            self.backends.get(h.site),
            ids,
            ACCOUNTING_TIMEOUT_S,
            started=h.started_at is not None or h.state == "completed",
        )
        if acct.error and last is not None and last.jobs:
            return  # keep what an earlier query found
        h.accounting = acct
        if self.store is not None:
            self.store.update_task(h.id, accounting=acct.model_dump_json())

    def _recover_continuations(self, reopened: list[TaskHandle]) -> None:
        """After a restart: report ends the log missed, watch milestones, re-attach groups."""
        ended = {
            e.task_id for e in self.events.history() if e.kind in ("task.completed", "task.failed")
        }
        for h in self.handles():
            if h.done and h.id not in ended and h.completed_at is not None:
                # the coordinator stopped between recording the end and announcing it
                kind: Any = "task.completed" if h.state == "completed" else "task.failed"
                detail: dict[str, Any] = {"recovered": True}
                if h.error:
                    detail["error"] = h.error
                self.events.emit(kind, h.id, h.site, **detail)
        for h in reopened:
            if not h.done:
                self._watch(h)
        self.groups.recover()

    def result_value(self, handle: TaskHandle, timeout_s: float | None = None) -> Any:
        """The return value; raises :class:`TaskFailedError` with the remote traceback."""
        res = self.get_result(handle, timeout_s)
        if res.status != "completed":
            raise TaskFailedError(f"task {res.task_id} failed: {res.error}", res.remote_traceback)
        return res.value

    def handles(self) -> list[TaskHandle]:
        with self._lock:
            return list(self._handles.values())

    def history(self, task_id: str | None = None) -> list[Event]:
        return self.events.history(task_id)

    def own(self, *resources: Store | Telemetry | None) -> None:
        """Close ``resources`` (a store, telemetry) with this coordinator, after its sites
        (whose last callbacks may still write to them): for what ``connect()`` opened."""
        self._owned.extend(r for r in resources if r is not None)

    def close(self) -> None:
        self.milestones.close()
        if self._rejudge_pool is not None:
            self._rejudge_pool.shutdown(wait=False, cancel_futures=True)
        self.hooks.close()
        for b in self.backends.values():
            b.close()
        if self._transfers is not None:
            self._transfers.close()
        owned, self._owned = self._owned, []
        for r in owned:
            r.close()


ACK_TIMEOUT_S = 30.0
MAX_REATTACHES = 5
REATTACH_DELAY_S = 0.5
"""A lost result stream is re-attached after 0.5 s, then 1, 2, 4, 8 s (at most 5 times)."""
ACCOUNTING_TIMEOUT_S = 60.0


def _await_task_id(fut: Future[Any], timeout_s: float) -> str | None:
    """The Globus Compute task id, once the service acknowledged the submission.

    The SDK sets ``task_id`` on the future from its submitter thread (milliseconds after
    ``submit``) and offers no notification, so this waits on it in short steps, bounded.
    """
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while time.monotonic() < deadline:
        tid = getattr(fut, "task_id", None)
        if tid is not None:
            return str(tid)
        if fut.done():
            return None
        pause.wait(0.002)
    return None


def _task_row(h: TaskHandle, task: TaskSpec) -> dict[str, Any]:
    return {
        "id": h.id,
        "label": h.label,
        "kind": "shell" if h.is_shell else "python",
        "envelope": h.envelope.model_dump_json(),
        "decision": h.decision.model_dump_json(),
        "code_hash": h.code_hash,
        "site": h.site,
        "endpoint_id": None,
        "compute_task_id": None,
        "state": "queued",
        "submitted_at": h.submitted_at.isoformat(),
        "milestones": h.wants.model_dump_json() if h.wants else None,
        "owner": h.caller,
    }


def _copy_row(c: TaskCopy) -> dict[str, Any]:
    return {
        "idx": c.index,
        "site": c.site,
        "partition": c.partition,
        "candidate": c.candidate.model_dump_json(),
        "compute_task_id": c.compute_task_id,
        "state": c.state,
        "submitted_at": c.submitted_at.isoformat(),
        "ended_at": None,
        "error": None,
    }


def _copy_from_row(row: dict[str, Any]) -> TaskCopy:
    return TaskCopy(
        index=row["idx"],
        candidate=Candidate.model_validate_json(row["candidate"]),
        state=row["state"],
        submitted_at=datetime.fromisoformat(row["submitted_at"]),
        ended_at=datetime.fromisoformat(row["ended_at"]) if row["ended_at"] else None,
        error=row["error"],
        _recovered_compute_id=row["compute_task_id"],
    )


def _value_json(h: TaskHandle) -> str | None:
    v = h.value
    if v is None:
        return None
    if h.is_shell:
        v = {
            "stdout": getattr(v, "stdout", ""),
            "stderr": getattr(v, "stderr", ""),
            "returncode": getattr(v, "returncode", None),
        }
    value, is_json, text = json_value(v)
    return json.dumps({"value": value} if is_json else {"repr": text})


def _handle_from_row(row: dict[str, Any], bus: EventBus) -> TaskHandle:
    h = TaskHandle(
        id=row["id"],
        label=row["label"],
        envelope=ResourceEnvelope.model_validate_json(row["envelope"]),
        decision=PlacementDecision.model_validate_json(row["decision"]),
        code_hash=row["code_hash"],
        is_shell=row["kind"] == "shell",
        bus=bus,
        state=row["state"],
        submitted_at=datetime.fromisoformat(row["submitted_at"]),
        started_at=datetime.fromisoformat(row["started_at"]) if row["started_at"] else None,
        completed_at=(datetime.fromisoformat(row["completed_at"]) if row["completed_at"] else None),
        slurm_job_id=row["slurm_job_id"],
        error=row["error"],
        remote_traceback=row["remote_traceback"] or "",
        caller=row.get("owner") or DEFAULT_OWNER,
    )
    bus.set_owner(h.id, h.caller)
    if row.get("milestones"):
        h.wants = Milestones.model_validate_json(row["milestones"])
    if row.get("value_ref"):
        h.value_ref = ResultRef.model_validate_json(row["value_ref"])
    if row.get("attempts"):
        h.attempts = list(json.loads(row["attempts"]))
    if row.get("accounting"):
        h.accounting = Accounting.model_validate_json(row["accounting"])
    if row["value_json"]:
        stored = json.loads(row["value_json"])
        value = stored.get("value", stored.get("repr"))
        if h.is_shell and isinstance(value, dict):
            value = SimpleNamespace(**value)
        h.value = value
    return h


def _stream_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is the SDK's own result stream dying, not the task failing."""
    return "SDK thread quit unexpectedly" in str(exc)


def _remote(exc: BaseException) -> bool:
    """Whether ``exc`` carries a traceback from the worker (the task's own code raised)."""
    return "Traceback (most recent call last)" in str(exc)


_EXC_LINE = re.compile(r"^\s*[A-Za-z_][\w.]*(Error|Exception|Failed|Timeout|Exit|Lost)\w*:")


def _first_line(exc: BaseException) -> str:
    """The informative line of an error: a remote traceback's final exception line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for ln in reversed(lines):
        if _EXC_LINE.match(ln):
            return ln
    worded = [ln for ln in lines if any(c.isalnum() for c in ln)]  # not a '+++' banner
    return worded[0] if worded else type(exc).__name__
