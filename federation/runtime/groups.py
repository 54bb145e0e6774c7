"""submit_group: related tasks under one objective, with hard and soft constraints.

Hard constraints live in each child's envelope (sites, architecture, GPU type). The soft
constraint here is *distinct systems*: children are spread over different sites while that
is feasible. When a child is still queued after all its siblings have finished, the soft
constraint is released and the child re-placed: its queued job is cancelled and it is
resubmitted wherever it would now start first; the move is recorded as an event (the
paper's example: child c3 queued on Anvil, re-placed on Vista once its siblings were done).

Groups are durable when the coordinator has a store: the group, its children and each
child's placements are written before ``submit_group`` returns and after every move. A
restarted coordinator re-attaches every group whose round had not ended (:meth:`recover`):
its children come back through task recovery, and ``group.round_terminal`` follows, once,
when the last of them ends. Re-placement needs the child's task in memory, so a group
re-attached after a restart keeps its children where they are. A move cut short by a
restart is settled from the store: the new placement is recorded as it ships, so it stays
the child's (``group.child_replaced`` with ``recovered``); a child cancelled before its new
placement was submitted is reported as ``group.exception`` (submit it again).
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from federation.core.envelope import ResourceEnvelope
from federation.core.errors import NoFeasibleSiteError
from federation.core.tasks import TaskSpec
from federation.runtime.events import Event, EventCallback
from federation.runtime.group_handles import GroupChild, GroupHandle, group_from_row, group_row
from federation.runtime.group_inputs import ChildNeed, check_needs, stage_in_from
from federation.runtime.group_seam import GroupCoordinator
from federation.runtime.handles import TaskHandle
from federation.runtime.hooks import Hook
from federation.runtime.specs import load_spec
from federation.security.policy import LOCAL_CALLER

__all__ = ["REPLACED", "GroupChild", "GroupHandle", "GroupManager"]

if TYPE_CHECKING:
    from federation.core.snapshot import FederationSnapshot

logger = logging.getLogger(__name__)


REPLACE_MARGIN_S = 30.0
"""Move a queued child only if elsewhere finishes it at least this much sooner."""

RECHECK_S = 30.0
"""A child left queued because it looked about to start is judged again this much later."""

MAX_RECHECKS = 20
"""How many times one placement is judged again (10 minutes at ``RECHECK_S``)."""

REPLACED = "re-placed by its group"
"""The error of a placement its group cancelled to move the child elsewhere."""


class GroupManager:
    """Places groups through a coordinator and watches them (one subscription per group)."""

    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coord = coordinator
        self._lock = threading.Lock()
        self.groups: dict[str, GroupHandle] = {}
        """Open groups (and, without a store, every group)."""
        self.released = 0
        """How many ended groups left memory."""

    def submit(
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
        """Submit every child (each through the caller's policy gate); returns at once.

        ``snapshot``: place the children on this snapshot (default: the coordinator's,
        no older than its probe interval). ``needs``: by child name, the siblings' outputs
        it reads; such a child is placed once those siblings completed
        (:mod:`federation.runtime.group_inputs`). ``workflow``: the caller's named workflow
        whose workspace every child runs in.
        """
        if not children:
            raise ValueError("a group needs at least one child")
        names = [n for n, _, _ in children]
        if len(set(names)) != len(names):
            raise ValueError(f"child names must be unique in a group: {names}")
        needs = needs or {}
        check_needs(names, needs)
        g = GroupHandle(
            id=str(uuid.uuid4()),
            objective=objective,
            distinct_sites=distinct_sites,
            children=[GroupChild(n, t, e, needs=tuple(needs.get(n, ()))) for n, t, e in children],
            caller=caller,
            workflow=workflow,
        )
        g._submitting = True
        self.coord.events.set_owner(g.id, caller)  # the group's events go to its caller
        g.hooks = tuple(hooks)
        for hk in g.hooks:
            self.coord.hooks.add(hk, {g.id})
        with self._lock:
            self.groups[g.id] = g
        self._persist(g, "submitting")
        if on_event is not None:
            self.coord.events.subscribe(on_event, task_id=g.id)
        used: set[str] = set()
        snap = snapshot or self.coord.snapshot()
        for child in g.children:
            if child.waiting:
                continue  # placed once the siblings it needs completed
            env = child.envelope
            if distinct_sites:
                allowed = [s for s in (env.sites or self.coord.backends) if s not in used]
                if allowed:
                    env = env.model_copy(update={"sites": tuple(allowed)})
            assert child.task is not None
            try:
                h = self.coord.submit_task(
                    child.task, env, snapshot=snap, hooks=g.hooks, caller=caller, workflow=workflow
                )
            except NoFeasibleSiteError:
                if env is child.envelope:
                    raise
                h = self.coord.submit_task(
                    child.task,
                    child.envelope,
                    snapshot=snap,
                    hooks=g.hooks,
                    caller=caller,
                    workflow=workflow,
                )
            child.attempts.append(h)
            self._persist(g, "running")
            used.add(h.site)
            h.add_callback(functools.partial(self._on_child_event, g))
        self.coord.events.emit(
            "group.submitted",
            g.id,
            None,
            objective=objective,
            placements={c.name: c.handle.site for c in g.children if c.attempts},
            waiting=[c.name for c in g.children if c.waiting],
        )
        with self._lock:
            g._submitting = False
        # children that finished while their siblings were still being submitted
        done_early = [c for c in g.children if c.attempts and c.handle.done]
        if done_early:
            self._release(g)
            self._evaluate(g)
        return g

    def _release(self, g: GroupHandle) -> None:
        """Place each waiting child whose siblings it needs have all ended: with their
        outputs as its ``stage_in``, or not at all (``group.exception``) if one failed."""
        with self._lock:
            by_name = {c.name: c for c in g.children}

            def ended(name: str) -> bool:
                sib = by_name[name]
                if sib.waiting:
                    return False
                return not sib.attempts or (sib.handle.done and sib.handle.id not in g._replacing)

            ready = [
                c
                for c in g.children
                if c.waiting and not c._releasing and all(ended(n.child) for n in c.needs)
            ]
            for c in ready:
                c._releasing = True
            siblings = {c.name: c.handle if c.attempts else None for c in g.children}
        for child in ready:
            stage_in, why = stage_in_from(child.needs, siblings)
            if why is None:
                env = child.envelope.model_copy(
                    update={"stage_in": child.envelope.stage_in + stage_in}
                )
                child.envelope = env  # a re-placement moves its inputs too
                assert child.task is not None
                try:
                    h = self.coord.submit_task(
                        child.task, env, hooks=g.hooks, caller=g.caller, workflow=g.workflow
                    )
                except Exception as e:  # never lose the group: say what happened
                    why = f"placing it failed: {type(e).__name__}: {e}"
                else:
                    with self._lock:
                        child.attempts.append(h)
                    self._persist(g, "running")
                    h.add_callback(functools.partial(self._on_child_event, g))
                    continue
            with self._lock:
                child.skipped = why
            self._persist(g, "running")
            self.coord.events.emit(
                "group.exception", g.id, None, child=child.name, error=f"not submitted: {why}"
            )

    def _on_child_event(self, g: GroupHandle, ev: Event) -> None:
        if ev.kind == "task.stalled":
            child = next((c for c in g.children if c.attempts and c.handle.id == ev.task_id), None)
            if child is not None:
                self.coord.events.emit(
                    "group.child_stalled",
                    g.id,
                    ev.site,
                    child=child.name,
                    child_task=ev.task_id,
                    reason=ev.detail.get("reason", "stalled"),
                )
            return
        if ev.kind not in ("task.completed", "task.failed"):
            return
        with self._lock:
            current = {c.handle.id for c in g.children if c.attempts}
            if ev.task_id not in current or ev.task_id in g._replacing:
                return  # an attempt being (or already) replaced
        self._release(g)
        self._evaluate(g)

    def _evaluate(self, g: GroupHandle) -> None:
        """After a child ended: end the round, or release a still-queued child."""
        with self._lock:
            if g._submitting:
                return  # submit() evaluates once every child has been submitted
            terminal = [
                c
                for c in g.children
                if (c.attempts and c.handle.done) or not c.attempts
                if not c.waiting
            ]
            queued = [c for c in g.children if c.attempts and c.handle.state == "queued"]
            finished = len(terminal) == len(g.children) and not g._ending
            if finished:
                g._ending = True
        if finished:
            self._end_round(g)
            return
        if len(terminal) == len(g.children):
            return
        # every sibling but the still-queued ones has finished: release the soft constraint
        if queued and len(terminal) + len(queued) == len(g.children):
            for child in queued:
                self._judge(g, child, child.handle)

    def _judge(self, g: GroupHandle, child: GroupChild, placement: TaskHandle) -> None:
        """Judge ``placement`` of ``child`` off this thread (it probes), unless it is being
        judged already or waits for its recheck."""
        with self._lock:
            if placement.id in g._judging:
                return
            g._judging.add(placement.id)
        threading.Thread(target=self._replace, args=(g, child), daemon=True).start()

    def _stalled_child(self, g: GroupHandle, child: GroupChild, reason: str) -> None:
        """Report, once per placement, a child still queued after its siblings finished."""
        with self._lock:
            if child.handle.id in g._stalled:
                return
            g._stalled.add(child.handle.id)
        self.coord.events.emit(
            "group.child_stalled",
            g.id,
            child.handle.site,
            child=child.name,
            child_task=child.handle.id,
            reason=reason,
        )

    def _replace(self, g: GroupHandle, child: GroupChild) -> None:
        old = child.handle
        try:
            self._move(g, child)
        except Exception as e:  # never lose a group to a failure while moving a child
            logger.exception("re-placing %s of group %s failed", child.name, g.id)
            try:
                self.coord.events.emit(
                    "group.exception",
                    g.id,
                    None,
                    child=child.name,
                    error=f"re-placement failed: {type(e).__name__}: {e}",
                )
                self._evaluate(g)  # the child's last placement may have ended the round
            except Exception:  # the coordinator closed meanwhile (its store and probes gone)
                logger.warning("group %s: re-placement ended by the coordinator's close", g.id)
        finally:
            with self._lock:
                g._judging.discard(old.id)

    def _move(self, g: GroupHandle, child: GroupChild) -> None:
        """Judge a child still queued after its siblings finished; move it if that pays.

        A child about to start where it is (its worker still booting, a free node there)
        is left alone and not reported. One predicted to wait is reported as stalled
        (``group.child_stalled``) and, in a group that asked for distinct systems, moved
        when another site finishes it at least ``REPLACE_MARGIN_S`` sooner.
        """
        old = child.handle
        snap = self.coord.inspect_federation()
        stalled = "still queued after its siblings finished"
        try:
            decision = self.coord.plan(child.envelope, snap)
        except NoFeasibleSiteError as e:
            self._stalled_child(g, child, f"{stalled}; no site can take it now: {e}")
            return
        here = [c for c in decision.candidates if c.site == old.site]
        if here and min(c.predicted_wait_s for c in here) <= REPLACE_MARGIN_S:
            self._recheck_later(g, child, old)
            return  # about to start where it is (e.g. a worker still booting)
        best = decision.chosen.predicted_completion_s
        if decision.chosen.site == old.site or (
            here and min(c.predicted_completion_s for c in here) <= best + REPLACE_MARGIN_S
        ):
            self._stalled_child(g, child, f"{stalled}; no other site finishes it sooner")
            return  # still the best place (or moving gains too little): leave it queued
        self._stalled_child(g, child, stalled)
        if not g.distinct_sites or child.task is None:
            return  # only a soft distinct-systems constraint is released
        with self._lock:
            g._replacing.add(old.id)
        if not self.coord.cancel(old, reason=REPLACED):
            with self._lock:
                g._replacing.discard(old.id)
            return  # it started meanwhile

        def record(ev: Event) -> None:
            # the new placement is in the store and about to ship: record the move now, so a
            # coordinator killed before submit_task returns still finds the child's new task
            if ev.kind == "task.queued":
                self._record_move(g, child, old, self.coord._handle(ev.task_id))

        new = self.coord.submit_task(
            child.task,
            child.envelope,
            snapshot=snap,
            hooks=g.hooks,
            caller=g.caller,
            on_event=record,
            workflow=g.workflow,
        )
        self._record_move(g, child, old, new)  # (once: a task held by policy is never queued)
        self._announce_move(g, child, old, new)
        new.add_callback(functools.partial(self._on_child_event, g))
        with self._lock:  # its new site's worker needs a moment: judged at its recheck
            g._judging.add(new.id)
        self._recheck_later(g, child, new)

    def _recheck_later(self, g: GroupHandle, child: GroupChild, old: TaskHandle) -> None:
        """Judge the child again later, should it still not have started by then."""
        with self._lock:
            n = g._rechecks.get(old.id, 0)
            if n >= MAX_RECHECKS:
                return
            g._rechecks[old.id] = n + 1

        def due() -> None:  # on the coordinator's timer thread: judge off it (it probes)
            with self._lock:
                g._judging.discard(old.id)
            if child.handle is old and old.state == "queued" and not g.done:
                self._judge(g, child, old)

        self.coord.milestones.timers.call_later(RECHECK_S, due)

    def _announce_move(
        self, g: GroupHandle, child: GroupChild, old: TaskHandle, new: TaskHandle, **extra: Any
    ) -> None:
        self.coord.events.emit(
            "group.child_replaced",
            g.id,
            new.site,
            child=child.name,
            from_site=old.site,
            to_site=new.site,
            old_task=old.id,
            new_task=new.id,
            **extra,
        )

    def _record_move(
        self, g: GroupHandle, child: GroupChild, old: TaskHandle, new: TaskHandle
    ) -> None:
        with self._lock:
            if any(h.id == new.id for h in child.attempts):
                return
            child.attempts.append(new)
            g.replacements.append({"child": child.name, "from": old.site, "to": new.site})
        self._persist(g, "running")

    # --- durability -------------------------------------------------------------------------
    def _persist(self, g: GroupHandle, state: str) -> None:
        store = self.coord.store
        if store is None:
            return
        with self._lock:
            row = group_row(g, state)
        store.upsert_group(row)

    def recover(self) -> list[GroupHandle]:
        """Re-attach the groups of an earlier coordinator (call after task recovery).

        Returns the groups whose round had not ended; each gets ``group.round_terminal``
        once its last child ends (at once if they all ended while nobody watched). A child
        whose task never reached the store is reported as ``group.exception``.
        """
        store = self.coord.store
        if store is None:
            return []
        history = self.coord.events.history()
        announced = {e.task_id for e in history if e.kind == "group.round_terminal"}
        reopened: list[GroupHandle] = []
        for row in store.groups():
            if row["id"] in self.groups:
                continue
            self.coord.events.set_owner(row["id"], row.get("owner") or LOCAL_CALLER)
            if row["id"] in announced:  # ended: stays in the store (get reads it back)
                continue
            g = group_from_row(row, self.coord.task)
            with self._lock:
                self.groups[g.id] = g
            for child in g.children:
                if not child.attempts and not child.needs:
                    self.coord.events.emit(
                        "group.exception",
                        g.id,
                        None,
                        child=child.name,
                        error="the coordinator stopped before this child was submitted; "
                        "submit it again",
                    )
            reopened.append(g)
            unmoved = self._recover_moves(g, history)
            for child in g.children:  # re-placeable again: its spec is kept in the store
                if child.attempts and child.task is None:
                    child.task = child.handle.task or self._kept_spec(child.handle.id)
            live = [c for c in g.children if c.attempts and c not in unmoved]
            with self._lock:  # judged once, when every child is attached (and moved)
                g._submitting = True
            for child in live:
                child.handle.add_callback(functools.partial(self._on_child_event, g))
            for child in unmoved:
                self._resume_move(g, child)
            with self._lock:
                g._submitting = False
            self._release(g)  # waiting children whose siblings ended meanwhile
            self._evaluate(g)
        return reopened

    def _kept_spec(self, task_id: str) -> TaskSpec | None:
        store = self.coord.store
        row = store.task(task_id) if store is not None else None
        return load_spec(row.get("spec")) if row is not None else None

    def _resume_move(self, g: GroupHandle, child: GroupChild) -> None:
        """Finish a move an earlier coordinator stopped in the middle of: its queued
        placement was cancelled and no new one submitted. Placed again, away from the site
        it was moved from; if that cannot be done, a ``group.exception`` says so."""
        old = child.handle
        sites = tuple(s for s in (child.envelope.sites or self.coord.backends) if s != old.site)
        why = "no other site is allowed" if not sites else "its task was not kept"
        if sites and child.task is not None:
            env = child.envelope.model_copy(update={"sites": sites})

            def record(ev: Event) -> None:
                if ev.kind == "task.queued":
                    self._record_move(g, child, old, self.coord._handle(ev.task_id))

            try:
                new = self.coord.submit_task(
                    child.task,
                    env,
                    hooks=g.hooks,
                    caller=g.caller,
                    on_event=record,
                    workflow=g.workflow,
                )
            except Exception as e:  # never lose the group: say what happened
                why = f"placing it again failed: {type(e).__name__}: {e}"
            else:
                self._record_move(g, child, old, new)
                self._announce_move(g, child, old, new, recovered=True)
                new.add_callback(functools.partial(self._on_child_event, g))
                return
        self.coord.events.emit(
            "group.exception",
            g.id,
            old.site,
            child=child.name,
            child_task=old.id,
            error="the coordinator stopped while re-placing this child: its queued task on "
            f"{old.site} was cancelled and it could not be placed again ({why}); submit it again",
        )

    def _recover_moves(self, g: GroupHandle, history: list[Event]) -> list[GroupChild]:
        """Report the re-placements an earlier coordinator stopped in the middle of (once);
        the children whose move must still be made (cancelled, not yet placed again)."""
        unmoved: list[GroupChild] = []
        mine = [e for e in history if e.task_id == g.id]
        announced = {e.detail.get("new_task") for e in mine if e.kind == "group.child_replaced"}
        reported = {e.detail.get("child") for e in mine if e.kind == "group.exception"}
        for c in g.children:
            # recorded as the new placement shipped, then stopped before announcing the move
            for old, new in zip(c.attempts, c.attempts[1:], strict=False):
                if new.id not in announced:
                    self._announce_move(g, c, old, new, recovered=True)
            if c.attempts and c.name not in reported:
                h = c.handle
                if h.state == "failed" and h.error == REPLACED:
                    # cancelled to be moved, then stopped before the new placement was made
                    c.task = c.task or self._kept_spec(h.id)
                    unmoved.append(c)
        return unmoved

    def _end_round(self, g: GroupHandle) -> None:
        """Record and announce the round's end, leave memory, then release ``wait()`` (in
        that order, so a caller woken by ``wait()`` finds ``group.round_terminal`` in the
        history and the group released)."""
        self._persist(g, "terminal")
        self.coord.events.emit(
            "group.round_terminal", g.id, None, state=g.state(), replacements=len(g.replacements)
        )
        if self.coord.store is not None:  # ended: read back from the store (get), not kept
            with self._lock:
                if self.groups.get(g.id) is g:
                    del self.groups[g.id]
                    self.released += 1
        g._done.set()  # last: a caller woken here finds the group released too

    def get(self, group_id: str) -> GroupHandle:
        """A group by id: an open one from memory, an ended one (or an earlier
        coordinator's) read back from the store."""
        with self._lock:
            g = self.groups.get(group_id)
        if g is not None:
            return g
        store = self.coord.store
        row = store.group(group_id) if store is not None else None
        if row is None:
            raise KeyError(f"unknown group {group_id!r}; use the id submit_group returned")
        g = group_from_row(row, self.coord.task)
        if row["state"] == "terminal":
            g._ending = True
            g._done.set()
        return g
