"""submit_group: related tasks under one objective, with hard and soft constraints.

Hard constraints live in each child's envelope (sites, architecture, GPU type). The soft
constraint here is *distinct systems*: children are spread over different sites while that
is feasible. When a child is still queued after all its siblings have finished, the soft
constraint is released and the child re-placed: its queued job is cancelled and it is
resubmitted wherever it would now start first; the move is recorded as an event (the
paper's example: child c3 queued on Anvil, re-placed on Vista once its siblings were done).
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from federation.envelope import ResourceEnvelope
from federation.errors import NoFeasibleSiteError
from federation.events import Event, EventCallback
from federation.handles import TaskHandle
from federation.tasks import TaskSpec

if TYPE_CHECKING:
    from federation.coordinator import Coordinator

logger = logging.getLogger(__name__)


REPLACE_MARGIN_S = 30.0
"""Move a queued child only if elsewhere finishes it at least this much sooner."""


@dataclass
class GroupChild:
    """One child: what it is, its envelope, and the handles of each placement it had."""

    name: str
    task: TaskSpec
    envelope: ResourceEnvelope
    attempts: list[TaskHandle] = field(default_factory=list)

    @property
    def handle(self) -> TaskHandle:
        return self.attempts[-1]


@dataclass
class GroupHandle:
    """A submitted group; ``wait()`` returns when every child is terminal."""

    id: str
    objective: str
    distinct_sites: bool
    children: list[GroupChild]
    replacements: list[dict[str, str]] = field(default_factory=list)
    _done: threading.Event = field(default_factory=threading.Event)
    _replacing: set[str] = field(default_factory=set)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout_s: float | None = None) -> bool:
        return self._done.wait(timeout_s)

    def state(self) -> dict[str, str]:
        return {c.name: c.handle.state for c in self.children}


class GroupManager:
    """Places groups through a coordinator and watches them (one subscription per group)."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.coord = coordinator
        self._lock = threading.Lock()
        self.groups: dict[str, GroupHandle] = {}

    def submit(
        self,
        children: list[tuple[str, TaskSpec, ResourceEnvelope]],
        *,
        objective: str = "",
        distinct_sites: bool = True,
        on_event: EventCallback | None = None,
    ) -> GroupHandle:
        if not children:
            raise ValueError("a group needs at least one child")
        g = GroupHandle(
            id=str(uuid.uuid4()),
            objective=objective,
            distinct_sites=distinct_sites,
            children=[GroupChild(n, t, e) for n, t, e in children],
        )
        with self._lock:
            self.groups[g.id] = g
        if on_event is not None:
            self.coord.events.subscribe(on_event, task_id=g.id)
        used: set[str] = set()
        snap = self.coord.inspect_federation()
        for child in g.children:
            env = child.envelope
            if distinct_sites:
                allowed = [s for s in (env.sites or self.coord.backends) if s not in used]
                if allowed:
                    env = env.model_copy(update={"sites": tuple(allowed)})
            try:
                h = self.coord.submit_task(child.task, env, snapshot=snap)
            except NoFeasibleSiteError:
                if env is child.envelope:
                    raise
                h = self.coord.submit_task(child.task, child.envelope, snapshot=snap)
            child.attempts.append(h)
            used.add(h.site)
            h.add_callback(functools.partial(self._on_child_event, g))
        self.coord.events.emit(
            "group.submitted",
            g.id,
            None,
            objective=objective,
            placements={c.name: c.handle.site for c in g.children},
        )
        return g

    def _on_child_event(self, g: GroupHandle, ev: Event) -> None:
        if ev.kind not in ("task.completed", "task.failed"):
            return
        with self._lock:
            current = {c.handle.id for c in g.children}
            if ev.task_id not in current or ev.task_id in g._replacing:
                return  # an attempt being (or already) replaced
            terminal = [c for c in g.children if c.handle.done]
            queued = [c for c in g.children if c.handle.state == "queued"]
        if len(terminal) == len(g.children):
            if not g.done:
                g._done.set()
                self.coord.events.emit(
                    "group.round_terminal",
                    g.id,
                    None,
                    state=g.state(),
                    replacements=len(g.replacements),
                )
            return
        # every sibling but the still-queued ones has finished: release the soft constraint
        if g.distinct_sites and queued and len(terminal) + len(queued) == len(g.children):
            for child in queued:
                threading.Thread(target=self._replace, args=(g, child), daemon=True).start()

    def _replace(self, g: GroupHandle, child: GroupChild) -> None:
        old = child.handle
        snap = self.coord.inspect_federation()
        try:
            decision = self.coord.plan(child.envelope, snap)
        except NoFeasibleSiteError:
            return
        if decision.chosen.site == old.site:
            return  # still the best place: leave it queued
        here = [c.predicted_completion_s for c in decision.candidates if c.site == old.site]
        if here and min(here) <= decision.chosen.predicted_completion_s + REPLACE_MARGIN_S:
            return  # about to start where it is (e.g. a worker still booting): moving costs more
        with self._lock:
            g._replacing.add(old.id)
        if not self.coord.cancel(old, reason="re-placed by its group"):
            with self._lock:
                g._replacing.discard(old.id)
            return  # it started meanwhile
        new = self.coord.submit_task(child.task, child.envelope, snapshot=snap)
        with self._lock:
            child.attempts.append(new)
            g.replacements.append({"child": child.name, "from": old.site, "to": new.site})
        self.coord.events.emit(
            "group.child_replaced",
            g.id,
            new.site,
            child=child.name,
            from_site=old.site,
            to_site=new.site,
            old_task=old.id,
            new_task=new.id,
        )
        new.add_callback(functools.partial(self._on_child_event, g))
