"""Task handles (live, in-process) and result manifests (plain data)."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import ConfigDict, Field

from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.model import Frozen
from federation.core.workspace import OutputFile
from federation.placement.candidates import Candidate, PlacementDecision
from federation.runtime.events import Event, EventBus, EventCallback
from federation.runtime.milestones import Milestones
from federation.runtime.provenance import Accounting
from federation.runtime.results import ResultRef

TaskState = Literal["held", "queued", "running", "completed", "failed"]
"""The states of :mod:`federation.runtime.lifecycle`. ``held``: placed, not shipped: the
policy gate holds it for an operator (approve or reject)."""
CopyState = Literal["queued", "won", "cancelling", "cancelled", "abandoned", "failed"]
"""A hedged copy: queued; ``won`` (started first: the task's placement); ``cancelling``
(a cancel is on its way to the site); ``cancelled`` (the site confirmed it never ran);
``abandoned`` (lost the race, but the site could not cancel it: it may run, and its result
is ignored); ``failed`` (could not be submitted, or failed before any copy started)."""


@dataclass(eq=False)
class TaskCopy:
    """One copy of a hedged task (``PlacementDecision.hedges``): the same task at one site.

    Index 0 is the decision's ``chosen`` candidate, 1.. its hedges in order.
    """

    index: int
    candidate: Candidate
    future: Future[Any] | None = None
    state: CopyState = "queued"
    submitted_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    ended_at: datetime | None = None
    error: str | None = None
    _recovered_compute_id: str | None = None
    _generation: int = 0
    """Its shipment's tag generation (a restart that withdrew one ships the next)."""
    _sending: bool = False
    """Being submitted right now (its future not yet known)."""
    _parked_start: bool = False
    _parked_job: str | None = None
    """A start report (and its Slurm job) that arrived while a cancel was on its way
    (replayed if the cancel fails)."""
    _parked_done: Future[Any] | None = None
    """A result that arrived while a cancel was on its way (replayed if it fails)."""

    @property
    def compute_task_id(self) -> str | None:
        tid = getattr(self.future, "task_id", None)
        return self._recovered_compute_id if tid is None else str(tid)

    @property
    def site(self) -> str:
        return self.candidate.site

    @property
    def partition(self) -> str:
        return self.candidate.partition

    @property
    def queued(self) -> bool:
        return self.state == "queued"

    @property
    def cancelling(self) -> bool:
        """A cancel is on its way to the site (another copy won, or ``cancel``)."""
        return self.state == "cancelling"

    @property
    def live(self) -> bool:
        """Still in the race (queued at its site, or the winner)."""
        return self.state in ("queued", "won")

    def summary(self) -> dict[str, Any]:
        """Plain data for the result manifest."""
        held = None
        if self.ended_at is not None:
            held = round((self.ended_at - self.submitted_at).total_seconds(), 3)
        return {
            "index": self.index,
            "site": self.site,
            "partition": self.partition,
            "shape": self.candidate.shape.describe(),
            "compute_task_id": self.compute_task_id,
            "state": self.state,
            "held_s": held,
            "error": self.error,
        }


class TaskResult(Frozen):
    """What ran, where, how long it waited, and what came back."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    task_id: str
    label: str
    status: Literal["completed", "failed"]
    value: Any = None
    value_ref: ResultRef | None = None
    """Set when the value was too large to return inline: where it was written on the
    site's storage (``value`` holds it loaded back, after checking size and digest)."""
    outputs: tuple[OutputFile, ...] = ()
    """The files the task created or changed in its workspace (path relative to it, size,
    sha256), so the next step names them; at most 100 (``outputs_more`` counts the rest)."""
    outputs_more: int = 0
    error: str | None = None
    remote_traceback: str = ""
    stdout: str | None = None
    stderr: str | None = None
    returncode: int | None = None
    site: str
    partition: str
    shape: Shape
    envelope: ResourceEnvelope
    decision: PlacementDecision
    code_hash: str
    compute_task_id: str | None = None
    slurm_job_id: str | None = None
    slurm_job_ids: tuple[str, ...] = ()
    """Every Slurm job this task ran in, earlier attempts first."""
    submitted_at: datetime
    started_at: datetime | None = None
    completed_at: datetime
    queue_wait_s: float | None = Field(default=None, ge=0)
    accounting: Accounting | None = None
    """The scheduler's own record of those jobs (``sacct``: submit, start and end times,
    node list), where the site has accounting."""
    milestones: tuple[str, ...] = ()
    events: tuple[Event, ...] = ()
    attempts: tuple[dict[str, Any], ...] = ()
    """Earlier attempts (site, failure class, error) before the one reported here."""
    copies: tuple[dict[str, Any], ...] = ()
    """Hedged copies (site, state: won, cancelled, abandoned, failed; queue time held)."""


@dataclass(eq=False)
class TaskHandle:
    """A submitted task. ``add_callback`` resumes you on each of its events."""

    id: str
    label: str
    envelope: ResourceEnvelope
    decision: PlacementDecision
    code_hash: str
    is_shell: bool
    bus: EventBus
    future: Future[Any] | None = None
    state: TaskState = "queued"
    submitted_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    started_at: datetime | None = None
    completed_at: datetime | None = None
    slurm_job_id: str | None = None
    value: Any = None
    value_ref: ResultRef | None = None
    outputs: tuple[OutputFile, ...] = ()
    """The files it created or changed in its workspace (see :class:`TaskResult`)."""
    outputs_more: int = 0
    accounting: Accounting | None = None
    wants: Milestones | None = None
    """The milestones requested on submit (and their margins)."""
    error: str | None = None
    remote_traceback: str = ""
    _done: threading.Event = field(default_factory=threading.Event)
    moving: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)
    """Held for one state move, check to event (:meth:`Lifecycle.transition`)."""
    _recovered_compute_id: str | None = None
    _generation: int = 0
    """Its shipment's tag generation (a restart that withdrew one ships the next)."""
    _reattaches: int = 0
    """Times its result stream was lost and it was re-attached (bounded)."""
    cancel_reason: str | None = None
    task: Any = None
    """The task itself, kept in memory so an infrastructure failure can be retried."""
    attempts: list[dict[str, Any]] = field(default_factory=list)
    """Earlier placements of this task that failed for infrastructure reasons."""
    notes: list[str] = field(default_factory=list)
    caller: str = "local"
    """Whose task it is: every further copy or retry is put to that caller's policy too."""
    workflow: str | None = None
    """The caller's named workflow whose workspace it runs in (None: the caller's own)."""
    refused: set[Shape] = field(default_factory=set)
    """Shapes the caller's policy refused a further copy or retry on (not proposed again)."""
    copies: list[TaskCopy] = field(default_factory=list)
    """Hedged copies (empty for a task placed once). Until one starts, ``future`` is None
    and ``decision.chosen`` is the first choice; the first copy to start becomes the
    placement (``decision.chosen``, ``future``) and the others are cancelled."""

    @property
    def single(self) -> bool:
        """Shipped as one copy (watched, never hedged): it is told, failed and recovered as a
        task placed once is, in the single path's words."""
        return len(self.copies) == 1

    @property
    def winner(self) -> TaskCopy | None:
        """The hedged copy that started first (None: not hedged, or none started yet)."""
        return next((c for c in self.copies if c.state == "won"), None)

    @property
    def compute_task_id(self) -> str | None:
        tid = getattr(self.future, "task_id", None)
        if tid is None:
            return self._recovered_compute_id
        return str(tid)

    def __post_init__(self) -> None:
        if self.state in ("completed", "failed"):  # read back from the store: told already
            self._done.set()
        else:
            self.bus.subscribe(self._track, task_id=self.id)

    def _track(self, ev: Event) -> None:
        # ``state`` is moved by :mod:`federation.runtime.lifecycle`; done once the end is told
        if ev.kind in ("task.completed", "task.failed"):
            self._done.set()

    @property
    def shape(self) -> Shape:
        return self.decision.chosen.shape

    @property
    def site(self) -> str:
        return self.shape.site

    @property
    def partition(self) -> str:
        return self.shape.partition

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def runtime_s(self) -> float | None:
        if self.completed_at is None:
            return None
        start = self.started_at or self.submitted_at
        return round((self.completed_at - start).total_seconds(), 3)

    def add_callback(self, callback: EventCallback) -> None:
        """Call ``callback(event)`` for this task's events, past ones first (no race)."""
        self.bus.subscribe(callback, task_id=self.id, replay=True)

    def wait(self, timeout_s: float | None = None) -> bool:
        return self._done.wait(timeout_s)

    @property
    def slurm_job_ids(self) -> tuple[str, ...]:
        ids = [a.get("slurm_job_id") for a in self.attempts] + [self.slurm_job_id]
        return tuple(dict.fromkeys(str(j) for j in ids if j))

    def manifest(self, *, load: bool = True) -> TaskResult:
        """The result manifest; ``load`` reads a value spilled to site storage back in."""
        if not self.done or self.completed_at is None:
            raise RuntimeError(f"task {self.id} is still {self.state}")
        value = self.value
        if self.value_ref is not None and load and self.value is None:
            value = self.value = self.value_ref.load()
        stdout = stderr = None
        rc = None
        if self.is_shell and value is not None:
            stdout, stderr, rc = value.stdout, value.stderr, value.returncode
            value = None
        wait = None
        if self.started_at is not None:
            wait = max(0.0, (self.started_at - self.submitted_at).total_seconds())
        return TaskResult(
            task_id=self.id,
            label=self.label,
            status="completed" if self.state == "completed" else "failed",
            value=value,
            error=self.error,
            remote_traceback=self.remote_traceback,
            stdout=stdout,
            stderr=stderr,
            returncode=rc,
            site=self.site,
            partition=self.partition,
            shape=self.shape,
            envelope=self.envelope,
            decision=self.decision,
            code_hash=self.code_hash,
            compute_task_id=self.compute_task_id,
            slurm_job_id=self.slurm_job_id,
            slurm_job_ids=self.slurm_job_ids,
            accounting=self.accounting,
            milestones=self.wants.names if self.wants else (),
            value_ref=self.value_ref,
            outputs=self.outputs,
            outputs_more=self.outputs_more,
            submitted_at=self.submitted_at,
            started_at=self.started_at,
            completed_at=self.completed_at,
            queue_wait_s=wait,
            events=tuple(self.bus.history(self.id)),
            attempts=tuple(self.attempts),
            copies=tuple(c.summary() for c in self.copies),
        )
