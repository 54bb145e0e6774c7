"""Site reports: what the sites say about a task (it started; its future resolved with a
value or an error), turned into lifecycle transitions, a retry or a re-attach. What a
site's accounting (sacct) says about a task's Slurm jobs is read after the task ended, in
the background (:mod:`federation.runtime.accounting`)."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from federation.core.failures import classify
from federation.runtime.crashpoints import crash_point
from federation.runtime.errortext import first_line, remote, stream_lost
from federation.runtime.handles import TaskHandle
from federation.runtime.results import as_ref, take_outputs

if TYPE_CHECKING:
    from federation.runtime.context import Runtime
    from federation.runtime.hedging import Hedging
    from federation.runtime.lifecycle import Lifecycle
    from federation.runtime.registry import TaskRegistry
    from federation.runtime.retries import Retries


KILLED_CODES = frozenset({-15, -9, 143, 137})
"""A command's exit codes for SIGTERM/SIGKILL (Python's negative codes, a shell's 128+n)."""


class Reports:
    """Matches site reports to tasks (and hedged copies) and settles them."""

    def __init__(
        self,
        rt: Runtime,
        reg: TaskRegistry,
        life: Lifecycle,
        hedging: Hedging,
        retries: Retries,
    ) -> None:
        self.rt = rt
        self.reg = reg
        self.life = life
        self.hedging = hedging
        self.retries = retries

    # --- a start -------------------------------------------------------------------------------
    def notify_started(self, compute_task_id: str, slurm_job_id: str | None) -> None:
        """A site reports a task running (its batch job started and picked it up)."""
        if self.rt.closing and self.rt.store is not None:
            return  # in flight in the store: the next coordinator learns its start
        copy = self.reg.copy_for_compute_id(compute_task_id)
        if copy is not None:
            self.hedging.copy_started(*copy, slurm_job_id)
            return
        handle = self.reg.handle_for_compute_id(compute_task_id)
        if handle is None:
            # The id may not be on the future yet (submit reply still in flight): retry,
            # and keep the report so a result arriving first still starts the task first.
            with self.reg.lock:
                self.reg.early_starts[compute_task_id] = slurm_job_id
            threading.Timer(0.2, self.retry_started, (compute_task_id, slurm_job_id, 25)).start()
            return
        self.life.start(handle, slurm_job_id)

    def retry_started(self, tid: str, job: str | None, tries: int) -> None:
        if self.rt.closing and self.rt.store is not None:
            return
        copy = self.reg.copy_for_compute_id(tid)
        if copy is not None:
            with self.reg.lock:
                self.reg.early_starts.pop(tid, None)
            self.hedging.copy_started(*copy, job)
            return
        handle = self.reg.handle_for_compute_id(tid)
        if handle is not None:
            with self.reg.lock:
                self.reg.early_starts.pop(tid, None)
            self.life.start(handle, job)
        elif tries > 0:
            threading.Timer(0.2, self.retry_started, (tid, job, tries - 1)).start()
        else:
            with self.reg.lock:
                self.reg.early_starts.pop(tid, None)

    def started_before_done(self, handle: TaskHandle) -> None:
        """Announce a start reported before the task's id was known, ahead of its end."""
        cid = handle.compute_task_id
        with self.reg.lock:
            if cid is None or cid not in self.reg.early_starts:
                return
            job = self.reg.early_starts.pop(cid)
        self.life.start(handle, job)

    def ran(self, handle: TaskHandle) -> None:
        """A task whose result (or its own error) came back has run: its start is announced
        before its end, however late (or never) the site's start report arrives."""
        self.started_before_done(handle)
        if handle.started_at is None:
            self.life.start(handle, handle.slurm_job_id, seen="at_end")

    # --- an end ----------------------------------------------------------------------------------
    def on_done(self, handle: TaskHandle, fut: Future[Any]) -> None:
        """The task's future resolved: complete it, fail it, retry it or re-attach it."""
        if handle.state in ("completed", "failed"):
            return  # already settled (e.g. cancelled by request): report once
        if self.rt.closing and self.rt.store is not None and (fut.cancelled() or self.rt.closed):
            # the sites are closing their watchers: the task stays in flight in the store,
            # and the next coordinator re-attaches to it (recover()). A result that did
            # arrive is recorded: the service released it once it was delivered
            return
        self.started_before_done(handle)
        if fut.cancelled():
            self.life.fail(handle, "cancelled", "")
            return
        exc = fut.exception()
        lost = exc is not None and handle.cancel_reason is None and stream_lost(exc)
        if lost and exc is not None and self._reattach(handle, exc):
            return  # not the task's failure: its result is fetched again
        if exc is not None:
            message = handle.cancel_reason or first_line(exc)
            failure = classify(message, str(exc))
            if failure.cls == "user_error" and handle.cancel_reason is None and remote(exc):
                self.ran(handle)  # its own code raised: it ran
            if failure.retryable and handle.task is not None and not self.rt.closing:
                self.retries.retry_off_thread(handle, failure, message, str(exc))
                return
            self.life.fail(handle, message, str(exc), failure=failure.cls)
            return
        value, handle.outputs, handle.outputs_more = take_outputs(fut.result(), handle.is_shell)
        crash_point("result")
        ref = as_ref(value, handle.site)
        if ref is not None:  # too large to return inline: written to the site's storage
            handle.value_ref, value = ref, None
        self.ran(handle)
        if handle.is_shell and getattr(value, "returncode", 0) != 0:
            code = value.returncode
            if code in KILLED_CODES and handle.task is not None and handle.slurm_job_ids:
                # killed by a signal: maybe by Slurm at the job's limit (sacct tells)
                message = f"command exited with {code}"
                self.retries.signalled(handle, message, getattr(value, "stderr", ""), value)
                return
            self.life.fail(
                handle,
                f"command exited with {value.returncode}",
                getattr(value, "stderr", ""),
                value=value,
            )
            return
        self.life.complete(handle, value)

    def _reattach(self, handle: TaskHandle, exc: BaseException) -> bool:
        """Fetch the task's result again after its stream was lost (see ``Retries``)."""

        def found(fut: Future[Any]) -> None:
            handle.future = fut
            fut.add_done_callback(lambda f: self.on_done(handle, f))

        return self.retries.reattach(
            handle,
            handle.site,
            handle.compute_task_id,
            exc,
            gone=lambda message: self.life.fail(handle, message, "", failure="result_stream_lost"),
            found=found,
        )
