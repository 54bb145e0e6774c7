"""The in-process notebook future: a ``concurrent.futures.Future`` for one federated task.

:class:`~federation.interfaces.jupyter.executor.FederatedExecutor` returns one at once and
places the task in the background; the future is *placing* until the coordinator has its
handle (or refused it: the placement error is then the future's exception).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from federation.core.envelope import ResourceEnvelope
from federation.core.errors import TaskFailedError
from federation.interfaces.jupyter.placement import Placement
from federation.placement.candidates import PlacementDecision
from federation.runtime.coordinator import Coordinator
from federation.runtime.events import Event, EventCallback
from federation.runtime.handles import TaskHandle, TaskResult

__all__ = ["TaskFuture"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class TaskFuture(Future[Any]):
    """A ``concurrent.futures.Future`` for one federated task.

    It is *running* once the task's Slurm job has picked it up (``task.started``), and done
    when the task completed (``result()`` is the return value), failed (``exception()`` is a
    :class:`TaskFailedError` with the remote traceback), or was cancelled before it started.
    A task the federation could not place (e.g.
    :class:`~federation.core.errors.NoFeasibleSiteError`) is done with that exception.

    The task is placed in the background: :attr:`placed` says whether that is over, and
    :meth:`wait_placed` waits for it. The provenance properties (``handle``, ``task_id``,
    ``placement``, ``decision``, ...) wait for the placement, and raise its error if it failed.
    """

    def __init__(self, coordinator: Coordinator) -> None:
        super().__init__()
        self._coordinator = coordinator
        self._handle: TaskHandle | None = None
        self._early: list[Event] = []
        self._attach_lock = threading.Lock()
        self._cancel_requested = False
        self._event_callbacks: list[Callable[[Event], None]] = []
        self._placed = threading.Event()
        self._placement_error: BaseException | None = None
        self._submit_lock = threading.RLock()
        """Held while the task is handed to the coordinator, so a cancel either comes before
        (and nothing is submitted) or after (and the coordinator cancels the handle)."""
        self._abandoned = False

    # --- wiring (called by the executor) --------------------------------------------------
    def _on_event(self, ev: Event) -> None:
        """The coordinator's ``on_event`` hook: subscribed before submission, so no event
        can be missed; events that arrive before the handle is known are replayed."""
        with self._attach_lock:
            if self._handle is None:
                self._early.append(ev)
                return
        self._apply(ev)

    def _attach(self, handle: TaskHandle) -> None:
        with self._attach_lock:
            self._handle = handle
            early, self._early = self._early, []
        self._placed.set()
        for ev in early:
            self._apply(ev)

    def _place(self, prepare: Callable[[], _T], submit: Callable[[_T], TaskHandle]) -> None:
        """Place the task (on the executor's placement thread) unless it was cancelled first.

        ``prepare`` (drafting, probing) runs unlocked, so a cancel meanwhile is immediate;
        ``submit(prepared)`` hands the task to the coordinator under the submit lock. Any
        error of either becomes the future's exception.
        """
        try:
            if self._abandoned:
                return
            prepared = prepare()
            with self._submit_lock:
                if self._abandoned:
                    return
                self._attach(submit(prepared))
        except BaseException as e:
            if not self._abandoned:
                self._placement_error = e
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                self.set_exception(e)  # unless cancelled meanwhile
        finally:
            self._placed.set()

    def _apply(self, ev: Event) -> None:
        for deliver in list(self._event_callbacks):  # before the future settles
            deliver(ev)
        if ev.kind == "task.started":
            if not self.done() and not self.running():  # a retry starts a second time
                self.set_running_or_notify_cancel()
        elif ev.kind in ("task.completed", "task.failed"):
            self._settle()

    def _settle(self) -> None:
        h = self.handle
        try:
            if h.state == "completed":
                self.set_result(h.value)
                return
            error = h.error or "failed"
            cancelling = self._cancel_requested or error.startswith("cancelled")
            if cancelling and Future.cancel(self):
                self.set_running_or_notify_cancel()
                return
            self.set_exception(
                TaskFailedError(
                    f"task {h.id} ({h.label}) failed on {h.site}/{h.partition}: {error}",
                    h.remote_traceback,
                )
            )
        except concurrent.futures.InvalidStateError:
            pass  # already settled (e.g. cancelled while the result was on its way)

    # --- placement ------------------------------------------------------------------------
    @property
    def placed(self) -> bool:
        """True once the background placement is over (placed, refused or abandoned)."""
        return self._placed.is_set()

    def wait_placed(self, timeout: float | None = None) -> bool:
        """Wait until the background placement is over; False if ``timeout`` passed first."""
        return self._placed.wait(timeout)

    def _placed_handle(self) -> TaskHandle | None:
        """The handle once placed (waits); None if placement failed or was abandoned."""
        self._placed.wait()
        return self._handle

    # --- identity and provenance ----------------------------------------------------------
    @property
    def handle(self) -> TaskHandle:
        """The coordinator's live handle of this task (waits for the placement)."""
        handle = self._placed_handle()
        if handle is not None:
            return handle
        if self._placement_error is not None:
            raise self._placement_error
        raise concurrent.futures.CancelledError("the task was cancelled before it was submitted")

    @property
    def task_id(self) -> str:
        """The coordinator's task id (also in every event's ``task_id``)."""
        return self.handle.id

    @property
    def compute_task_id(self) -> str | None:
        """The Globus Compute task id (None until the service has accepted the task)."""
        return self.handle.compute_task_id

    @property
    def label(self) -> str:
        return self.handle.label

    @property
    def decision(self) -> PlacementDecision:
        return self.handle.decision

    @property
    def envelope(self) -> ResourceEnvelope:
        return self.handle.envelope

    @property
    def placement(self) -> Placement:
        """Where the task was placed (waits for the background placement)."""
        d = self.handle.decision.chosen
        return Placement(d.site, d.partition, d.shape, d.predicted_wait_s)

    @property
    def state(self) -> str:
        """``queued``, ``running``, ``completed``, ``failed`` or ``cancelled``."""
        if self.cancelled():
            return "cancelled"
        handle = self._placed_handle()
        return "failed" if handle is None else handle.state

    @property
    def slurm_job_id(self) -> str | None:
        return self.handle.slurm_job_id

    @property
    def events(self) -> list[Event]:
        """This task's events so far, in order (none if it was never submitted)."""
        handle = self._placed_handle()
        return [] if handle is None else self._coordinator.events.history(handle.id)

    def add_event_callback(self, callback: EventCallback) -> None:
        """Call ``callback(event)`` for each of this task's events (past ones first).

        A terminal event reaches the callback before the future is done, so whoever waits
        on the future sees what its callbacks did. Waits for the placement; a task that was
        never submitted has no events.
        """
        handle = self._placed_handle()
        if handle is None:
            return
        lock = threading.Lock()
        last = [0]

        def deliver(ev: Event) -> None:
            with lock:  # the replay below and live events, each once and in order
                if ev.seq <= last[0]:
                    return
                last[0] = ev.seq
                try:
                    callback(ev)
                except Exception:
                    logger.exception("event callback %r failed on %s", callback, ev.kind)

        with lock:
            with self._attach_lock:
                self._event_callbacks.append(deliver)
            past = self._coordinator.events.history(handle.id)
            for ev in past:
                if ev.seq > last[0]:
                    last[0] = ev.seq
                    try:
                        callback(ev)
                    except Exception:
                        logger.exception("event callback %r failed on %s", callback, ev.kind)

    def explain(self) -> str:
        """The placement decision trace: why this site, why not each other one."""
        return self.decision.explain()

    def manifest(self, timeout: float | None = None) -> TaskResult:
        """The result manifest (value, site, shape, Slurm job id, times, events)."""
        concurrent.futures.wait([self], timeout)
        return self.handle.manifest()

    # --- cancellation ---------------------------------------------------------------------
    def cancel(self) -> bool:
        """Cancel the task if its job has not started; False if it is running or done.

        While the task is still being placed, nothing is submitted and the future is
        cancelled at once; while it is being handed to the coordinator, this waits for that.
        """
        if self.done():
            return self.cancelled()
        if self.running():
            return False
        with self._submit_lock:
            if self._handle is None:
                if self._placed.is_set():  # placement failed: the future is done
                    return self.cancelled()
                self._abandoned = True
                if Future.cancel(self):
                    self.set_running_or_notify_cancel()
                self._placed.set()
                return self.cancelled()
        handle = self._handle
        self._cancel_requested = True
        if not self._coordinator.cancel(handle):
            self._cancel_requested = False
            return False
        # The coordinator reported the cancellation as an event; make sure we settled.
        if not self.done() and Future.cancel(self):
            self.set_running_or_notify_cancel()
        return self.cancelled()

    def __repr__(self) -> str:
        if self._handle is None:
            if not self._placed.is_set():
                return "<TaskFuture (placing)>"
            return "<TaskFuture (not submitted)>"
        return f"<TaskFuture {self.label} {self.state} at {self.placement} id={self.task_id}>"
