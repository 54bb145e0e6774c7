"""The task registry: the live task handles of one coordinator, indexed by task id and by
their Globus Compute task ids (a site reports by the latter), under the coordinator's lock."""

from __future__ import annotations

import threading
from collections.abc import Callable

from federation.core.errors import FederationError
from federation.runtime.handles import TaskCopy, TaskHandle


class TaskRegistry:
    """Every task handle, by id; the indexes site reports are matched against.

    ``lock`` is the coordinator's one lock: every component takes this same object.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.handles: dict[str, TaskHandle] = {}
        self.by_compute_id: dict[str, TaskHandle] = {}
        self.unindexed: dict[str, TaskHandle] = {}
        """Handles whose Globus Compute task id was not yet seen by the index."""
        self.early_starts: dict[str, str | None] = {}
        """Start reports that arrived before their task's id was on its future (the submit
        reply still in flight), by compute task id: the result may overtake the retry."""
        self.copy_ids: dict[str, tuple[TaskHandle, TaskCopy]] = {}
        """Hedged copies by their Globus Compute task id."""
        self.hedged: dict[str, TaskHandle] = {}
        """Hedged handles with a copy whose Globus Compute task id is not indexed yet."""
        self.lookup: Callable[[str], TaskHandle | None] | None = None
        """Reads a finished task back from the store (set when there is one): finished
        handles are then :meth:`release`-d from memory and looked up here."""
        self.released = 0
        """How many finished handles left memory."""

    def registered(self, h: TaskHandle) -> bool:
        """Whether ``h`` itself is the handle on record under its id."""
        return self.handles.get(h.id) is h

    def get(self, handle: TaskHandle | str) -> TaskHandle:
        h = self.find(handle) if isinstance(handle, str) else handle
        if h is None:
            raise FederationError(
                f"unknown task handle {handle!r}; use the id submit_task returned"
            )
        return h

    def find(self, task_id: str) -> TaskHandle | None:
        """The handle of ``task_id``: in memory while open, else read back from the store
        (a new object each time: a finished task no longer changes)."""
        h = self.handles.get(task_id)
        if h is None and self.lookup is not None:
            h = self.lookup(task_id)
        return h

    def all(self) -> list[TaskHandle]:
        """The handles in memory: open tasks (and, without a store, every task)."""
        with self.lock:
            return list(self.handles.values())

    def release(self, h: TaskHandle, then: Callable[[], None] | None = None) -> bool:
        """Drop finished ``h`` from memory and from every index; the store keeps it and
        :meth:`find` reads it back. Not while a copy of it may still be submitted,
        queued or being cancelled (its reports are matched here), nor without a store.
        ``then`` (e.g. forget its history) runs before :attr:`released` counts it, so a
        reader who sees the count sees everything released."""
        if self.lookup is None or not h.done:
            return False
        with self.lock:
            if self.handles.get(h.id) is not h:
                return False
            if any(c._sending or c.state in ("queued", "cancelling") for c in h.copies):
                return False
            del self.handles[h.id]
            self.unindexed.pop(h.id, None)
            self.hedged.pop(h.id, None)
            for cid in {h.compute_task_id, *(c.compute_task_id for c in h.copies)}:
                if cid is not None:
                    if self.by_compute_id.get(cid) is h:
                        del self.by_compute_id[cid]
                    self.copy_ids.pop(cid, None)
                    self.early_starts.pop(cid, None)
            if then is not None:
                then()
            self.released += 1
        return True

    def handle_for_compute_id(self, tid: str) -> TaskHandle | None:
        with self.lock:
            h = self.by_compute_id.get(tid)
            if h is not None:
                return h
            for cand in list(self.unindexed.values()):  # only handles not indexed yet
                cid = cand.compute_task_id
                if cid is not None:
                    self.by_compute_id[cid] = cand
                    del self.unindexed[cand.id]
            return self.by_compute_id.get(tid)

    def copy_for_compute_id(self, tid: str) -> tuple[TaskHandle, TaskCopy] | None:
        with self.lock:
            hit = self.copy_ids.get(tid)
            if hit is not None or not self.hedged:
                return hit
            for h in list(self.hedged.values()):
                pending = False
                for c in h.copies:
                    cid = c.compute_task_id
                    if cid is not None:
                        self.copy_ids.setdefault(cid, (h, c))
                    elif c.state in ("queued", "cancelling") or c._sending:
                        pending = True
                if not pending:
                    del self.hedged[h.id]
            return self.copy_ids.get(tid)
