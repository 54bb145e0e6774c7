"""Our copies queued past their predicted waits, kept sorted instead of found again.

A :class:`~federation.placement.lateness.LateBoard` reads, on every decision, the most late
of our queued copies per shape. Found by looking at every live task's copies, that read grew
with the tasks a service holds (1,000 queued tasks: a third of each submission's time). A
read still checks each live task against what it last saw of it (one dictionary look-up),
and reads only the tasks that changed. This index keeps, per shape, every copy (and every
task placed once, its own one copy) ever seen, in the order they become due
(``submitted_at`` plus predicted wait, which never change), and reads each shape from its
earliest: the most late queued copy is the first that is still queued. Copies that can never
be queued again (ended, won, cancelled, their task done or forgotten) are dropped as the
read passes them; one that may be queued again (``cancelling``, a task running that a retry
may place again) is kept and passed over.

A task is (re)read whenever its decision or its list of copies is not the one last seen: a
retry, a re-placement or a hedge shows up on the next read.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from federation.placement.lateness import QueuedCopy

if TYPE_CHECKING:
    from federation.core.envelope import Shape
    from federation.placement.candidates import PlacementDecision
    from federation.runtime.handles import TaskCopy, TaskHandle
    from federation.runtime.registry import TaskRegistry

_GONE = frozenset({"won", "cancelled", "abandoned", "failed"})
SWEEP_AFTER = 64
"""Tasks forgotten by the registry before every list is swept of their entries."""


@dataclass(frozen=True)
class _Entry:
    due: float  # epoch seconds: submitted_at + predicted wait
    order: int  # ties keep their arrival order
    predicted_s: float
    handle: TaskHandle
    copy: TaskCopy | None
    decision: PlacementDecision  # the decision a task without copies was placed by

    def __lt__(self, other: _Entry) -> bool:
        return (self.due, self.order) < (other.due, other.order)


class QueuedIndex:
    """Per shape, every copy in the order it becomes late; see the module's note."""

    def __init__(self, reg: TaskRegistry) -> None:
        self.reg = reg
        self._by_shape: dict[Shape, list[_Entry]] = {}
        self._seen: dict[str, tuple[PlacementDecision, int]] = {}  # task -> (decision, copies)
        self._keys: set[tuple[int, int, int]] = set()  # the entries in, by identity
        self._order = itertools.count()
        self._gone = 0  # tasks forgotten since the lists were last swept
        self._lock = threading.Lock()

    def late(self) -> list[QueuedCopy]:
        """The most late queued copy per shape now (as ``Hedging.queued_copies``)."""
        now = datetime.now(UTC).timestamp()
        with self.reg.lock:
            live = dict(self.reg.handles)
        out: list[QueuedCopy] = []
        with self._lock:
            seen = self._seen
            for h in live.values():  # the common case inline: a task seen as it is
                mark = seen.get(h.id)
                if mark is None or mark[0] is not h.decision or mark[1] != len(h.copies):
                    self._see(h)
            for shape, entries in list(self._by_shape.items()):
                first = self._first_queued(entries, live)
                if not entries:
                    del self._by_shape[shape]
                if first is not None and now - first.due > 0:
                    late_s = now - first.due
                    out.append(QueuedCopy(shape, first.predicted_s, first.predicted_s + late_s))
            gone = [t for t in self._seen if t not in live]
            for tid in gone:
                del self._seen[tid]
            self._gone += len(gone)
            if self._gone > SWEEP_AFTER:
                self._sweep(live)
        return out

    def _sweep(self, live: dict[str, TaskHandle]) -> None:
        """Drop every entry of a task done or forgotten, wherever it is in its list (a read
        only passes the front: behind a copy queued for hours, ended tasks would pile up)."""
        for shape, entries in list(self._by_shape.items()):
            kept = []
            for e in entries:
                if live.get(e.handle.id) is e.handle and not e.handle.done:
                    kept.append(e)
                else:
                    self._keys.discard((id(e.handle), id(e.copy), id(e.decision)))
            if kept:
                self._by_shape[shape] = kept
            else:
                del self._by_shape[shape]
        self._gone = 0

    def size(self) -> int:
        """Entries held (every shape's list)."""
        with self._lock:
            return sum(len(v) for v in self._by_shape.values())

    def _see(self, h: TaskHandle) -> None:
        self._seen[h.id] = (h.decision, len(h.copies))
        if h.copies:
            for c in h.copies:
                p = c.candidate.predicted_wait_s
                self._add(c.candidate.shape, c.submitted_at.timestamp() + p, p, h, c)
        else:
            chosen = h.decision.chosen
            p = chosen.predicted_wait_s
            self._add(chosen.shape, h.submitted_at.timestamp() + p, p, h, None)

    def _add(self, shape: Shape, due: float, p: float, h: TaskHandle, c: TaskCopy | None) -> None:
        key = (id(h), id(c), id(h.decision))
        if key in self._keys:
            return  # a task read again (a copy added): its earlier copies are in already
        self._keys.add(key)
        entries = self._by_shape.setdefault(shape, [])
        bisect.insort(entries, _Entry(due, next(self._order), p, h, c, h.decision))

    def _first_queued(self, entries: list[_Entry], live: dict[str, TaskHandle]) -> _Entry | None:
        """The earliest entry still queued; drops the ones passed that never can be."""
        i = 0
        while i < len(entries):
            e = entries[i]
            if self._never_again(e, live):
                self._keys.discard((id(e.handle), id(e.copy), id(e.decision)))
                del entries[i]
                continue
            h = e.handle
            if e.copy is not None and e.copy.state == "queued":
                return e
            if e.copy is None and h.state == "queued" and h.started_at is None:
                return e
            i += 1
        return None

    @staticmethod
    def _never_again(e: _Entry, live: dict[str, TaskHandle]) -> bool:
        h = e.handle
        if live.get(h.id) is not h or h.done:
            return True
        if e.copy is not None:
            return e.copy.state in _GONE or not any(x is e.copy for x in h.copies)
        return bool(h.copies) or h.decision is not e.decision
