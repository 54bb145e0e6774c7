"""The coordinator: the agent-facing operations over a set of site backends.

A facade over its parts, one concept each: ``lifecycle`` (the task state machine),
``shipping``, ``hedging`` (copies and watching), ``retries``, ``reports`` (what the sites
report), ``holds`` (tasks the policy gate holds) and ``recovery``, all modules of
:mod:`federation.runtime`, sharing one ``registry.TaskRegistry`` and its lock.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from federation.core.envelope import ResourceEnvelope
from federation.core.errors import FederationError, TaskFailedError, UnknownSiteError
from federation.core.snapshot import FederationSnapshot
from federation.core.tasks import ShellTask, TaskSpec, check_serializable
from federation.core.workspace import PathBase, storage_path
from federation.placement.candidates import PlacementDecision
from federation.placement.decide import place
from federation.placement.drafting import EnvelopeDraft, Proposal, TaskHints, draft_envelope
from federation.placement.lateness import LateBoard, with_late_board
from federation.placement.learned import AUTO, LearnedPlacement
from federation.placement.overlay import OwnJobs
from federation.placement.policies import Policy, get_policy, with_cold_start
from federation.runtime.accounting import Accountant
from federation.runtime.crashpoints import crash_point
from federation.runtime.dry_run import DryRun, dry_run_of
from federation.runtime.events import Event, EventBus, EventCallback
from federation.runtime.freshness import DEFAULT_MAX_STALE_S, Freshness
from federation.runtime.handles import TaskHandle, TaskResult
from federation.runtime.hedging import Hedging
from federation.runtime.holds import Holds
from federation.runtime.hooks import Hook, HookRunner
from federation.runtime.lifecycle import Lifecycle
from federation.runtime.milestones import Milestones, MilestoneWatcher
from federation.runtime.recovery import Recovery
from federation.runtime.registry import TaskRegistry
from federation.runtime.reports import Reports
from federation.runtime.results import DEFAULT_INLINE_LIMIT_BYTES, StorageRoot
from federation.runtime.retries import Retries
from federation.runtime.rows import finished_handle
from federation.runtime.shipping import Shipping
from federation.runtime.staging import Staging
from federation.runtime.store import Store
from federation.runtime.telemetry import Telemetry
from federation.runtime.warmth import warmth_of
from federation.security import LOCAL_CALLER, HeldTask, HeldTasks, PolicyGate
from federation.sites.backend import SiteBackend

if TYPE_CHECKING:
    from collections.abc import Mapping

    from federation.runtime.callers import CallerSites
    from federation.runtime.group_inputs import ChildNeed
    from federation.runtime.groups import GroupHandle, GroupManager
    from federation.runtime.transfers import TransferHandle, TransferManager
    from federation.transfer import SyncLevel, TransferBackend

DEFAULT_PROBE_INTERVAL_S = 0.0
"""How long ``submit_task`` reuses a snapshot by default (0: a fresh probe round each time,
unless a round now would wait for the SDK's throttle: see
:data:`~federation.runtime.freshness.PROBE_ROUNDS_PER_WINDOW`)."""
CLOSE_DRAIN_S = 30.0
"""How long closing a durable coordinator waits for the SDK to send (and the service to
acknowledge) what ``submit_task`` returned before, so the store names each task's id."""

logger = logging.getLogger(__name__)


class Coordinator:
    """Runs tasks across sites: probe, place, ship, and resume callers through events.

    Args:
        backends: one :class:`SiteBackend` per site.
        probe_timeout_s: a site whose probe takes longer is marked unreachable.
        probe_interval_s: a snapshot younger than this is reused by ``submit_task`` (the
            coordinator's own placements since are laid over it). A probe round is one
            request per site to the Globus Compute service, whose SDK allows 4 per 16 s
            per executor before it throttles: past that, a burst reuses the latest snapshot
            instead of waiting (:data:`~federation.runtime.freshness.PROBE_ROUNDS_PER_WINDOW`).
        max_stale_s: ``submit_task`` places on the latest snapshot up to this old (and
            starts a fresh round in the background once it is older than
            ``probe_interval_s``) rather than wait for a probe round on the caller's path;
            only an older one, or none, is probed first
            (:class:`~federation.runtime.freshness.Freshness`).
        telemetry: where snapshots are kept over time (optional).
        caller_sites: each caller's own backends, where work must act under the caller's
            identity (:mod:`federation.runtime.callers`); default: the shared ones for all.
    """

    def __init__(
        self,
        backends: Iterable[SiteBackend],
        *,
        policy: str | Policy = AUTO,
        probe_timeout_s: float = 30.0,
        probe_interval_s: float = DEFAULT_PROBE_INTERVAL_S,
        max_stale_s: float = DEFAULT_MAX_STALE_S,
        telemetry: Telemetry | None = None,
        bus: EventBus | None = None,
        store: Store | None = None,
        retry_budget: int = 1,
        result_storage: StorageRoot | None = None,
        inline_limit_bytes: int = DEFAULT_INLINE_LIMIT_BYTES,
        gate: PolicyGate | None = None,
        transfer_backends: TransferBackend | Mapping[str, TransferBackend] | None = None,
        caller_sites: CallerSites | None = None,
    ) -> None:
        self.backends: dict[str, SiteBackend] = {b.name: b for b in backends}
        self.caller_sites = caller_sites
        self.transfer_backends = transfer_backends
        """What ``move_data`` uses (default: local copies between site storage folders)."""
        self._transfers: TransferManager | None = None
        self.gate = gate or PolicyGate()
        """Asked before anything is shipped (see :mod:`federation.security`)."""
        self.gate.know_sites(b.spec for b in self.backends.values())  # charges: own units
        self.held = HeldTasks(store.path if store is not None else None)
        self.store = store
        self.retry_budget = retry_budget
        self.policy = policy
        self.probe_timeout_s = probe_timeout_s
        self.probe_interval_s = probe_interval_s
        self._probing = Freshness(self, max_stale_s)
        """The snapshot ``submit_task`` places on: probed in the background when stale."""
        self.telemetry = telemetry
        self._owned: list[Store | Telemetry] = []
        self.closing = False
        self.closed = False
        """Set once the sites are closed, before the store: no callback writes after it."""
        self.events = bus or EventBus(store)
        self.result_storage = result_storage
        """Site -> directory for results too large to return inline (None: never spill)."""
        self.inline_limit_bytes = inline_limit_bytes
        self.milestones = MilestoneWatcher(self.events)
        self.hooks = HookRunner(self.events)
        self.hooks.store = store
        """Webhook and command hooks: ``coord.hooks.add(WebhookHook(url=...))`` for all."""
        self._registry = reg = TaskRegistry()
        if store is not None:  # finished handles leave memory; the store keeps them
            reg.lookup = functools.partial(finished_handle, store, bus=self.events)
        self._lock = reg.lock  # the one lock every part takes
        self._handles = reg.handles  # the same dict (the indexes: ``_registry``)
        self._last_snapshot: FederationSnapshot | None = None
        self._groups: GroupManager | None = None
        self._lifecycle = life = Lifecycle(self, reg)
        self._shipping = Shipping(self, reg, life, self._on_done)
        self._retries = Retries(self, reg, life, self._shipping)
        self._hedging = Hedging(self, reg, life, self._shipping, self._retries)
        self._reports = Reports(self, reg, life, self._hedging, self._retries)
        self._staging = Staging(self, life, self._hedging)
        self._retries.stage = self._staging.stage_if_needed  # a retry elsewhere: inputs first
        self._holds = Holds(self, reg, life, self._staging)
        self._recovery = Recovery(self, reg, life, self._hedging, self._holds, self._staging)
        self.accountant = Accountant(self, reg, life)  # sacct of ended tasks, in the background
        self.late_board = LateBoard(self._hedging.queued_copies)
        """Our own copies still queued past their predictions
        (:mod:`federation.placement.lateness`)."""
        self._shipped = OwnJobs()
        """The latest placements, laid over snapshots by :meth:`_own_view`."""
        self.learned: LearnedPlacement | None = None
        """The ``auto`` policy's learned predictors (None for a named policy)."""
        if policy == AUTO:
            # hedging within the budget where a copy can be withdrawn; the runtime ships
            # one copy per task where none could be (Hedging.ship), as when the coordinator
            # has no site that can withdraw one
            specs = [b.spec for b in self.backends.values()]
            hedge = any(b.can_cancel for b in self.backends.values())
            self.learned = LearnedPlacement(specs, hedge=hedge)
            self.events.subscribe(self._learn_runtime)
        self.charge_late_copies = False
        """A watching policy's waits are charged :attr:`late_board` when set; ``auto``
        always is (the replay, where copies take room in the queues, measures it;
        docs/placement.md)."""

    def site_for(self, caller: str, site: str) -> SiteBackend:
        """The backend acting for ``caller`` at ``site``: the caller's own when they have an
        identity of their own (:attr:`caller_sites`), else the shared one (KeyError for a
        site not configured)."""
        if self.caller_sites is not None:
            own = self.caller_sites.sites_for(caller)
            if own is not None and site in own:
                return own[site]
        return self.backends[site]

    # --- inspect_federation ---------------------------------------------------------------
    def inspect_federation(self) -> FederationSnapshot:
        """Probe every site in parallel; a failing site is marked unhealthy, never fatal."""
        return self._probe(list(self.backends))

    def _probe(self, names: list[str]) -> FederationSnapshot:
        """Probe ``names`` now (``Freshness.probe``; tests' in-process sites replace it)."""
        return self._probing.probe(names)

    def probe_ahead(self) -> None:
        """Start a probe round in the background (at connect), for the first submission."""
        self._probing.start()

    def snapshot(
        self, max_age_s: float | None = None, sites: Iterable[str] = ()
    ) -> FederationSnapshot:
        """The last snapshot if ``sites`` (default: all) in it are younger than ``max_age_s``
        (default: probe interval), else one with those sites probed afresh (in a burst, the
        last one while a round now would wait for the SDK's throttle)."""
        return self._probing.snapshot(max_age_s, sites)

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
        workflow: str | None = None,
    ) -> TaskHandle:
        """Place ``task`` within ``envelope`` and ship it; returns at once with a handle.

        The task runs in ``caller``'s workspace on its site (``workflow``'s, when named:
        :mod:`federation.core.workspace`). Inputs the envelope's ``stage_in`` names on other
        sites (paths in that workspace) are moved to the chosen site first, and the task is
        shipped when they have arrived (:mod:`federation.runtime.staging`).

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
        snap = snapshot or self._probing.current(envelope.sites)  # no probe round waited for
        specs = [b.spec for b in self.backends.values()]
        policy = self._placer()
        with self.deciding_for(task.label or code_hash):
            decision = place(envelope, specs, self._own_view(snap), policy=policy)
        shape = decision.chosen.shape
        task_id = str(uuid.uuid4())
        # a denied task (PolicyViolationError) leaves nothing but its audit row: not an
        # owner, not a job in the placement's own view
        verdict = self.gate.enforce(caller, task, shape, snap, task_id=task_id)
        self._note_shipped(decision)
        self.events.set_owner(task_id, caller, new=True)  # before its first event
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
            workflow=workflow,
        )
        handle.wants = Milestones.of(milestones)
        if on_event is not None:
            handle.add_callback(on_event)
        for hook in hooks:
            self.hooks.add(hook, {handle.id})
        if verdict.held:
            return self._holds.hold(handle, task, caller, verdict)
        crash_point("placed")
        return self._staging.ship(handle, task, policy, snap)

    def _placer(self) -> Policy:
        """The configured policy (a watching one charged :attr:`late_board` if asked)."""
        auto = self.learned is not None and isinstance(self.policy, str) and self.policy == AUTO
        pol = self.learned.policy if auto and self.learned is not None else get_policy(self.policy)
        pol = with_cold_start(pol, warmth_of(self).step)  # cold blocks charged (runtime.warmth)
        if auto or (self.charge_late_copies and pol.watch is not None):
            return with_late_board(pol, self.late_board)
        return pol

    def _own_view(self, snap: FederationSnapshot) -> FederationSnapshot:
        """``snap`` with the tasks this coordinator placed since it was taken
        (:mod:`federation.placement.overlay`): a burst placed from one snapshot sees itself."""
        return self._shipped.view(snap)

    def _note_shipped(self, decision: PlacementDecision) -> None:
        self._shipped.note(
            (c.shape for c in (decision.chosen, *decision.hedges)), decision.decided_at
        )

    def deciding_for(self, workload: str) -> AbstractContextManager[None]:
        """Decisions inside rank shapes by ``workload``'s learned runtimes (``auto``)."""
        return self.learned.workload(workload) if self.learned is not None else nullcontext()

    def _learn_runtime(self, ev: Event) -> None:
        """``auto`` learns each finished task's runtime where it ran."""
        if ev.kind != "task.completed" or self.learned is None:
            return
        h = self._handles.get(ev.task_id)
        if h is None or h.runtime_s is None:
            return
        self.learned.ran(h.label or h.code_hash, h.shape, h.runtime_s)

    # --- draft_envelope / cancel ----------------------------------------------------------
    def draft_envelope(
        self, description: str, hints: TaskHints | None = None, proposal: Proposal | None = None
    ) -> EnvelopeDraft:
        """An envelope for a described task (or ``proposal``), validated against these sites."""
        return draft_envelope(
            description, [b.spec for b in self.backends.values()], hints, None, proposal
        )

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
            return self._hedging.cancel_copies(h, reason)
        if self._staging.cancel(h, reason):  # its inputs were still moving: never shipped
            return True
        if h.done or h.compute_task_id is None:
            return False
        h.cancel_reason = reason  # the site's own 'cancelled' result may arrive first
        ok = self.site_for(h.caller, h.site).cancel(h.compute_task_id)
        if ok:
            self._lifecycle.fail(h, reason, "")
        else:
            h.cancel_reason = None
        return ok

    def plan(
        self, envelope: ResourceEnvelope, snapshot: FederationSnapshot | None = None
    ) -> PlacementDecision:
        """The placement ``submit_task`` would choose now, without submitting anything."""
        snap = snapshot or self.snapshot()
        specs = [b.spec for b in self.backends.values()]
        return place(envelope, specs, snap, policy=self._placer(), new_task=False)

    def dry_run(
        self,
        task: TaskSpec,
        envelope: ResourceEnvelope,
        *,
        snapshot: FederationSnapshot | None = None,
        caller: str = LOCAL_CALLER,
    ) -> DryRun:
        """What :meth:`submit_task` would do now, nothing submitted: the decision, the chosen
        node class and the Slurm options its job would carry (:mod:`.dry_run`). Raises as
        :meth:`submit_task` does before it submits; the policy's verdict is only reported."""
        envelope = self.gate.narrow(caller, envelope, task)
        code_hash = check_serializable(task)
        snap = snapshot or self._probing.current(envelope.sites)
        with self.deciding_for(task.label or code_hash):
            decision = self.plan(envelope, self._own_view(snap))
        verdict = self.gate.evaluate(caller, task, decision.chosen.shape, snap)
        return dry_run_of(task, code_hash, envelope, decision, verdict, self.site_for, caller)

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
        needs: Mapping[str, Sequence[ChildNeed]] | None = None,
        workflow: str | None = None,
    ) -> GroupHandle:
        """Fan out named children; see :mod:`federation.runtime.groups` for re-placement
        and :mod:`federation.runtime.group_inputs` for children that read their siblings'
        outputs (``needs``)."""
        return self.groups.submit(
            children,
            objective=objective,
            distinct_sites=distinct_sites,
            on_event=on_event,
            hooks=hooks,
            snapshot=snapshot,
            caller=caller,
            needs=needs,
            workflow=workflow,
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
        return self._registry.get(handle)

    # --- get_result -----------------------------------------------------------------------
    def get_result(self, handle: TaskHandle | str, timeout_s: float | None = None) -> TaskResult:
        """The task's result manifest as known (ships nothing); waits ``timeout_s`` for its end."""
        h = self._handle(handle)
        if not h.wait(timeout_s):
            raise TimeoutError(f"task {h.id} ({h.label}) still {h.state} after {timeout_s} s")
        return h.manifest()

    def result_value(self, handle: TaskHandle, timeout_s: float | None = None) -> Any:
        """The return value; raises :class:`TaskFailedError` with the remote traceback."""
        res = self.get_result(handle, timeout_s)
        if res.status != "completed":
            raise TaskFailedError(f"task {res.task_id} failed: {res.error}", res.remote_traceback)
        return res.value

    def handles(self) -> list[TaskHandle]:
        """Every task's handle: those in memory, and with a store the finished ones read
        back from it (each call reads them all: to find one task, use :meth:`task`)."""
        live = self._registry.all()
        if self.store is None:
            return live
        by_id = {h.id: h for h in live}
        ids = [r["id"] for r in self.store.task_summaries()]
        found = [by_id.pop(i, None) or self._registry.find(i) for i in ids]
        return [h for h in found if h is not None] + list(by_id.values())  # + held tasks

    def live_handles(self) -> list[TaskHandle]:
        """The handles in memory: every open task (and, without a store, every task)."""
        return self._registry.all()

    def task(self, task_id: str) -> TaskHandle | None:
        """The handle of ``task_id`` (read back from the store once finished), or None."""
        return self._registry.find(task_id)

    def history(self, task_id: str | None = None) -> list[Event]:
        return self.events.history(task_id)

    # --- policy: tasks held for an operator (:mod:`federation.runtime.holds`) --------------
    def pending_policy(self) -> list[HeldTask]:
        """Tasks held by the policy gate, waiting for :meth:`approve` or :meth:`reject`."""
        return self.held.pending()

    def approve(self, task_id: str, actor: str = LOCAL_CALLER) -> TaskHandle:
        """Ship a held task on the shape it was placed on (``policy.approved``, then the
        usual ``task.queued``...)."""
        return self._holds.approve(task_id, actor)

    def reject(
        self, task_id: str, reason: str = "rejected by an operator", actor: str = LOCAL_CALLER
    ) -> TaskHandle:
        """Fail a held task with ``reason`` (``policy.rejected``, then ``task.failed``)."""
        return self._holds.reject(task_id, reason, actor)

    # --- recovery (:mod:`federation.runtime.recovery`) --------------------------------------
    def recover(self) -> list[TaskHandle]:
        """Re-attach to every task the store knows (after a restart); returns open ones
        (hedged tasks' copies too; see :meth:`Recovery.recover
        <federation.runtime.recovery.Recovery.recover>`)."""
        store = self.store
        if store is not None:  # hooks first: they hear what the recovery reports
            ended = {e.task_id for e in self.events.history() if e.kind == "group.round_terminal"}
            open_ids = {r["id"] for r in store.tasks(open_only=True)}
            open_ids |= {g["id"] for g in store.groups() if g["id"] not in ended}
            self.hooks.restore(open_ids)
        return self._recovery.recover()

    # --- move_data ---------------------------------------------------------------------------
    @property
    def transfers(self) -> TransferManager:
        """The transfer manager, built on first use over ``transfer_backends``."""
        from federation.runtime.transfers import TransferManager
        from federation.transfer import LocalCopyBackend

        with self._lock:
            if self._transfers is None:
                backends = self.transfer_backends
                if backends is None:
                    from federation.core.spec import site_names

                    home = self.store.path.parent if self.store is not None else None
                    backends = LocalCopyBackend(list(self.backends) or site_names(), home)
                per_owner = self.caller_sites.transfers_for if self.caller_sites else None
                self._transfers = TransferManager(
                    backends, self.store, self.events, per_owner=per_owner
                )
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
        paths: PathBase = "workspace",
        workflow: str | None = None,
    ) -> TransferHandle:
        """Copy a file or folder from one site's storage to another's; returns at once.

        ``paths="workspace"`` (the default, as over the service, MCP and CLI): relative to
        ``caller``'s workspace on each site (``workflow``'s, when given), as a result's
        ``outputs`` name files: pass an output's path unchanged. ``paths="storage"``:
        relative to each site's storage root (shared data; another caller's workspace is
        refused). The transfer is recorded before this returns; ``transfer.submitted``,
        ``transfer.progress``, then ``transfer.completed`` or ``transfer.failed`` follow.
        Unknown sites, paths outside a storage root and a missing source raise a
        :class:`~federation.core.errors.TransferError` (or :class:`UnknownSiteError`) before
        anything is copied. ``caller`` owns the transfer (its events go to their log).
        """
        from federation.transfer import DataRef, TransferRequest

        trusted = caller == LOCAL_CALLER

        def where(path: str) -> str:
            return storage_path(caller, path, paths, workflow, trusted=trusted)

        request = TransferRequest(
            source=DataRef(site=source_site, path=where(source_path)),
            destination=DataRef(site=dest_site, path=where(dest_path)),
            label=label,
            sync_level=sync_level,
            verify_checksum=verify_checksum,
            deadline_s=deadline_s,
        )
        return self.transfers.submit(request, on_event=on_event, owner=caller)

    def get_transfer(self, transfer_id: str) -> TransferHandle:
        """The handle of a transfer ``move_data`` started (also one from before a restart)."""
        return self.transfers.get(transfer_id)

    # --- callbacks from the sites (:mod:`federation.runtime.reports`) -----------------------
    def notify_started(self, compute_task_id: str, slurm_job_id: str | None) -> None:
        """A site reports a task running (its batch job started and picked it up)."""
        if not self.closed:
            self._reports.notify_started(compute_task_id, slurm_job_id)

    def _on_done(self, handle: TaskHandle, fut: Future[Any]) -> None:
        if not self.closed:  # else the store is shut: the next coordinator re-attaches it
            self._reports.on_done(handle, fut)

    # --- lifetime ----------------------------------------------------------------------------
    def own(self, *resources: Store | Telemetry | None) -> None:
        """Close ``resources`` (a store, telemetry) with this coordinator, after its sites
        (whose last callbacks may still write to them): for what ``connect()`` opened."""
        self._owned.extend(r for r in resources if r is not None)

    def close(self) -> None:
        """Drain, then stop: acknowledgements still on their way are recorded; watchers,
        listeners and the background probe stop before the sites, and the store (and
        telemetry) close last, so nothing writes to them, or logs, after this returns."""
        self.closing = True
        self.accountant.close()  # before the store closes
        self._probing.close(1.0)
        if self.store is not None and not self._shipping.acks.drain(CLOSE_DRAIN_S):
            logger.warning(
                "closing: %d shipment(s) still unacknowledged after %.0f s; the next "
                "coordinator settles them (recover())",
                self._shipping.acks.waiting(),
                CLOSE_DRAIN_S,
            )
        self._shipping.acks.close()  # a later acknowledgement is the next coordinator's
        self.milestones.close()
        self._hedging.close()
        self.hooks.close()
        for b in self.backends.values():
            b.close()
        if self.caller_sites is not None:
            self.caller_sites.close()
        if self._transfers is not None:
            self._transfers.close()
        self.closed = True
        owned, self._owned = self._owned, []
        for r in owned:
            r.close()
