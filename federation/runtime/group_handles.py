"""A group's handle and its children, and their rows in the store (:mod:`.groups`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import TaskSpec
from federation.runtime.group_inputs import ChildNeed
from federation.runtime.handles import TaskHandle
from federation.runtime.hooks import Hook
from federation.runtime.specs import dump_spec, load_spec
from federation.security.policy import LOCAL_CALLER


@dataclass
class GroupChild:
    """One child: what it is, its envelope, and the handles of each placement it had."""

    name: str
    task: TaskSpec | None
    """After a restart, from the spec the store keeps (None for a record from before
    specs were kept: such a child cannot be re-placed)."""
    envelope: ResourceEnvelope
    attempts: list[TaskHandle] = field(default_factory=list)
    needs: tuple[ChildNeed, ...] = ()
    """Siblings' outputs it reads: placed once they completed (:mod:`.group_inputs`)."""
    skipped: str | None = None
    """Why a child with needs was not submitted (an input sibling failed, ...)."""
    _releasing: bool = False

    @property
    def handle(self) -> TaskHandle:
        return self.attempts[-1]

    @property
    def waiting(self) -> bool:
        """Not placed yet: waiting for the siblings it needs."""
        return bool(self.needs) and not self.attempts and self.skipped is None


@dataclass
class GroupHandle:
    """A submitted group; ``wait()`` returns when every child is terminal."""

    id: str
    objective: str
    distinct_sites: bool
    children: list[GroupChild]
    replacements: list[dict[str, str]] = field(default_factory=list)
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    hooks: tuple[Hook, ...] = ()
    """Hooks for the group's events; each child is submitted with them too."""
    caller: str = LOCAL_CALLER
    """Whose policy every child (and every re-placement) is checked against."""
    workflow: str | None = None
    """The caller's named workflow whose workspace every child runs in (None: theirs)."""
    _done: threading.Event = field(default_factory=threading.Event)
    _replacing: set[str] = field(default_factory=set)
    _stalled: set[str] = field(default_factory=set)
    _judging: set[str] = field(default_factory=set)
    """Placements being judged, or placed by a move and judged at their recheck: a sibling's
    end does not judge them again meanwhile (two judges of one child race)."""
    _rechecks: dict[str, int] = field(default_factory=dict)
    """How often each placement left queued as 'about to start' was judged again."""
    _ending: bool = False
    """Set (under the manager's lock) by whoever ends the round, so it ends once."""
    _submitting: bool = False
    """True while children are still being submitted: no round can end before that."""

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout_s: float | None = None) -> bool:
        return self._done.wait(timeout_s)

    def state(self) -> dict[str, str]:
        return {c.name: _child_state(c) for c in self.children}

    def task_ids(self) -> list[str]:
        """Every task of the group, earlier placements included."""
        return [h.id for c in self.children for h in c.attempts]


def _child_state(c: GroupChild) -> str:
    if c.attempts:
        return c.handle.state
    if c.waiting:
        return "waiting"
    return "skipped" if c.skipped is not None else "lost"


def group_row(g: GroupHandle, state: str) -> dict[str, Any]:
    """The group's row in the store (a waiting child keeps its task spec and needs, so a
    restarted coordinator places it when its siblings are done)."""
    children = []
    for c in g.children:
        row: dict[str, Any] = {
            "name": c.name,
            "envelope": c.envelope.model_dump(mode="json"),
            "task_ids": [h.id for h in c.attempts],
        }
        if c.needs:
            row["needs"] = [n.model_dump() for n in c.needs]
            row["skipped"] = c.skipped
            if c.waiting and c.task is not None:
                row["spec"] = dump_spec(c.task)
        if g.workflow is not None:
            row["workflow"] = g.workflow
        children.append(row)
    return {
        "id": g.id,
        "objective": g.objective,
        "distinct_sites": int(g.distinct_sites),
        "children": json.dumps(children),
        "replacements": json.dumps(list(g.replacements)),
        "state": state,
        "created_at": g.created_at.isoformat(),
        "owner": g.caller,
    }


def group_from_row(row: dict[str, Any], find: Callable[[str], TaskHandle | None]) -> GroupHandle:
    children = []
    workflow = None
    for c in json.loads(row["children"]):
        attempts = [h for t in c["task_ids"] if (h := find(t)) is not None]
        env = ResourceEnvelope.model_validate(c["envelope"])
        needs = tuple(ChildNeed.model_validate(n) for n in c.get("needs") or ())
        task = load_spec(c["spec"]) if c.get("spec") else None
        children.append(GroupChild(c["name"], task, env, attempts, needs, c.get("skipped")))
        workflow = workflow or c.get("workflow")
    return GroupHandle(
        id=row["id"],
        objective=row["objective"],
        distinct_sites=bool(row["distinct_sites"]),
        children=children,
        replacements=list(json.loads(row["replacements"])),
        created_at=datetime.fromisoformat(row["created_at"]),
        caller=row.get("owner") or LOCAL_CALLER,
        workflow=workflow,
    )
