"""The index of our queued copies answers what looking at every live task answers
(runtime.queued_index): the most late queued copy per shape, through placements, hedges,
starts, wins, cancels that fail, retries placed again, and tasks done and forgotten."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from federation.core.envelope import ResourceEnvelope, Shape
from federation.placement.candidates import Candidate, PlacementDecision
from federation.placement.lateness import QueuedCopy
from federation.runtime.events import EventBus
from federation.runtime.handles import TaskCopy, TaskHandle
from federation.runtime.queued_index import QueuedIndex
from federation.runtime.registry import TaskRegistry

NOW = datetime.now(UTC)
SHAPES = [
    Shape(site=s, partition="p", nodes=1, cpus=c, mem_gb=4, gpus=0, walltime_s=600)
    for s in ("a", "b")
    for c in (1, 2)
]


def _cand(shape: Shape, wait_s: float) -> Candidate:
    return Candidate.model_construct(
        site=shape.site, partition=shape.partition, shape=shape, predicted_wait_s=wait_s
    )


def _decision(shape: Shape, wait_s: float) -> PlacementDecision:
    return PlacementDecision.model_construct(chosen=_cand(shape, wait_s), hedges=())


def _full_scan(reg: TaskRegistry, now: float) -> dict[Shape, float]:
    """Every live task looked at (what Hedging.queued_copies did before the index)."""
    worst: dict[Shape, float] = {}
    for h in reg.handles.values():
        if h.done:
            continue
        found: list[tuple[Shape, float, datetime]] = []
        if h.copies:
            found = [
                (c.candidate.shape, c.candidate.predicted_wait_s, c.submitted_at)
                for c in h.copies
                if c.state == "queued"
            ]
        elif h.state == "queued" and h.started_at is None:
            c = h.decision.chosen
            found = [(c.shape, c.predicted_wait_s, h.submitted_at)]
        for shape, p, since in found:
            late = now - since.timestamp() - p
            if late > 0:
                worst[shape] = max(worst.get(shape, 0.0), late)
    return worst


def _late(copies: list[QueuedCopy]) -> dict[Shape, float]:
    return {c.shape: c.queued_s - c.predicted_wait_s for c in copies}


step = st.tuples(
    st.sampled_from(["place", "hedge", "start", "win", "cancelling", "back", "retry", "done"]),
    st.integers(0, 7),
    st.integers(0, 3),
    st.integers(-600, 600),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(step, min_size=1, max_size=40))
def test_the_index_answers_what_a_full_scan_answers(steps: list[tuple[str, int, int, int]]) -> None:
    reg, bus = TaskRegistry(), EventBus()
    index = QueuedIndex(reg)
    made: list[TaskHandle] = []
    for what, which, shape_i, ago_s in steps:
        shape, at = SHAPES[shape_i], NOW - timedelta(seconds=abs(ago_s))
        wait_s = float(max(0, ago_s))
        h = made[which % len(made)] if made else None
        if what == "place" or h is None:
            h = TaskHandle(
                id=f"t{len(made)}",
                label="x",
                envelope=ResourceEnvelope(),
                decision=_decision(shape, wait_s),
                code_hash="",
                is_shell=True,
                bus=bus,
                submitted_at=at,
            )
            made.append(h)
            reg.handles[h.id] = h
        elif what == "hedge" and not h.done:
            first = h.copies or [TaskCopy(index=0, candidate=h.decision.chosen)]
            c = TaskCopy(index=len(first), candidate=_cand(shape, wait_s))
            c.submitted_at = max(h.submitted_at, at)
            h.copies = [*first, c]
        elif what == "start":
            h.state, h.started_at = "running", NOW
        elif what in ("win", "cancelling", "back") and h.copies:
            c = h.copies[shape_i % len(h.copies)]
            if what == "back":  # a cancel that failed: only a cancelling copy is queued again
                c.state = "queued" if c.state == "cancelling" else c.state
            elif c.state in ("queued", "cancelling"):  # ended copies stay ended
                c.state = "won" if what == "win" else "cancelling"
        elif what == "retry" and not h.done:
            h.decision, h.state, h.started_at = _decision(shape, wait_s), "queued", None
            h.copies = []
        elif what == "done":
            h._done.set()
            if which % 2:
                reg.handles.pop(h.id, None)  # released: the store keeps it
        now = datetime.now(UTC).timestamp()
        got, want = _late(index.late()), _full_scan(reg, now)
        assert got.keys() == want.keys()
        for k in want:
            assert abs(got[k] - want[k]) < 1.0, (k, got[k], want[k])


def test_tasks_that_end_behind_a_long_queued_one_are_not_kept() -> None:
    reg, bus = TaskRegistry(), EventBus()
    index = QueuedIndex(reg)

    def place(i: int, ago_s: float) -> TaskHandle:
        h = TaskHandle(
            id=f"t{i}",
            label="x",
            envelope=ResourceEnvelope(),
            decision=_decision(SHAPES[0], 0.0),
            code_hash="",
            is_shell=True,
            bus=bus,
            submitted_at=NOW - timedelta(seconds=ago_s),
        )
        reg.handles[h.id] = h
        return h

    place(0, 3600)  # queued an hour: the front of its shape's list, read on every decision
    for batch in range(3):
        later = [place(1 + batch * 100 + i, 10) for i in range(100)]
        assert len(index.late()) == 1
        for h in later:  # they end and the registry forgets them (the store keeps them)
            h._done.set()
            del reg.handles[h.id]
        index.late()
    assert index.size() <= 1 + 64  # the front one, and fewer than a sweep's worth
