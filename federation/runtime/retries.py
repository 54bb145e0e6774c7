"""Retries: a task whose infrastructure failed runs again on another feasible site, and a
lost result stream is re-attached (the task did not fail: its result is fetched again).

A task killed at its walltime is not a broken site: it needs more time. Its retry asks for a
longer walltime (:func:`grown_walltime_s`: twice what it ran, at least twice what it had, in
whole minutes, never beyond the longest limit of a partition it may use), may run on the
same site, and is placed only where a partition allows that walltime. At the longest limit
already, it is not retried: it fails saying what to do instead.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from federation.core.envelope import MAX_WALLTIME_S
from federation.core.errors import NoFeasibleSiteError
from federation.core.failures import Failure
from federation.runtime.crashpoints import crash_point
from federation.runtime.errortext import first_line
from federation.runtime.handles import TaskHandle
from federation.runtime.provenance import fetch_accounting

if TYPE_CHECKING:
    from federation.core.envelope import ResourceEnvelope
    from federation.core.tasks import TaskSpec
    from federation.runtime.context import Runtime
    from federation.runtime.lifecycle import Lifecycle
    from federation.runtime.registry import TaskRegistry
    from federation.runtime.shipping import Shipping

MAX_REATTACHES = 5
REATTACH_DELAY_S = 0.5
"""A lost result stream is re-attached after 0.5 s, then 1, 2, 4, 8 s (at most 5 times)."""


def grown_walltime_s(old_s: int, ran_s: float | None, limit_s: int) -> int | None:
    """The walltime a task killed at ``old_s`` asks for next: twice what it ran (``ran_s``,
    when its start is known) and at least twice ``old_s``, rounded up to whole minutes
    (Slurm's unit), at most ``limit_s``; None when that is no longer than ``old_s``."""
    want = max(2.0 * old_s, 2.0 * (ran_s or 0.0))
    new = min(int(math.ceil(want / 60.0) * 60), limit_s)
    return new if new > old_s else None


class Retries:
    """Runs failed attempts again (within ``retry_budget``) and re-attaches lost streams."""

    def __init__(self, rt: Runtime, reg: TaskRegistry, life: Lifecycle, shipping: Shipping) -> None:
        self.rt = rt
        self.reg = reg
        self.life = life
        self.shipping = shipping
        self.stage: Callable[[TaskHandle, TaskSpec], bool] | None = None
        """Stages a retried task's inputs to its new site and ships it on arrival (True),
        or leaves it to be shipped at once (False): :meth:`.staging.Staging.stage_if_needed`."""

    # --- a lost result stream ---------------------------------------------------------------
    def reattach(
        self,
        handle: TaskHandle,
        site: str,
        cid: str | None,
        exc: BaseException,
        gone: Callable[[str], None],
        found: Callable[[Future[Any]], None],
    ) -> bool:
        """The SDK's result stream died (its futures fail with "SDK thread quit
        unexpectedly"): the task itself did not fail and may still run or have ended at the
        site. Fetch it again from the task group, off the SDK's thread, a few times with
        backoff; False (then it fails, saying so) when that is used up. ``found`` gets the
        new future; ``gone`` the reason, when the site no longer knows the task."""
        with self.reg.lock:
            tries = handle._reattaches
            if cid is None or tries >= MAX_REATTACHES:
                return False
            handle._reattaches += 1
        handle.notes.append(
            f"result stream from {site} lost ({first_line(exc)}); re-attaching to its task "
            f"{cid} (try {tries + 1} of {MAX_REATTACHES})"
        )
        delay = min(30.0, REATTACH_DELAY_S * 2**tries)
        timer = threading.Timer(delay, self._do_reattach, (handle, cid, site, exc, gone, found))
        timer.daemon = True
        timer.start()
        return True

    def _do_reattach(
        self,
        handle: TaskHandle,
        cid: str,
        site: str,
        exc: BaseException,
        gone: Callable[[str], None],
        found: Callable[[Future[Any]], None],
    ) -> None:
        try:
            fut = self.rt.site_for(handle.caller, site).reattach([cid]).get(cid)
            why = "the site no longer knows it"
        except Exception as e:  # the service is unreachable just now: try again later
            fut, why = None, f"{type(e).__name__}: {e}"
            if self.reattach(handle, site, cid, exc, gone, found):
                return
        if fut is None:
            message = f"lost the result stream from {site} and could not re-attach to {cid}"
            gone(f"{message}: {why}")
            return
        found(fut)

    # --- running again elsewhere -------------------------------------------------------------
    def retry_off_thread(
        self, handle: TaskHandle, failure: Failure, message: str, traceback: str
    ) -> None:
        """:meth:`retry_or_fail` off the SDK's result thread: placing again probes the
        sites, whose results arrive on that very thread."""
        threading.Thread(
            target=self.retry_or_fail,
            args=(handle, failure, message, traceback),
            daemon=True,
            name=f"retry-{handle.id[:8]}",
        ).start()

    def retry_or_fail(
        self, handle: TaskHandle, failure: Failure, message: str, traceback: str
    ) -> None:
        failure, ran_s = self.timed_out(handle, failure)
        self._retry_or_fail(handle, failure, message, traceback, ran_s)

    def _retry_or_fail(
        self,
        handle: TaskHandle,
        failure: Failure,
        message: str,
        traceback: str,
        ran_s: float | None,
    ) -> None:
        seen = len(handle.notes)
        if not self.retry(handle, failure, traceback, ran_s):
            hint = next((n for n in handle.notes[seen:] if "not retried" in n), None)
            if failure.cls == "walltime" and hint is not None:
                message = f"{message} ({hint})"  # what to do, in the error itself
            self.life.fail(handle, message, traceback, failure=failure.cls)

    def signalled(self, handle: TaskHandle, message: str, stderr: str, value: object) -> None:
        """:meth:`judge_signalled` off the SDK's result thread (it asks the site)."""
        threading.Thread(
            target=self.judge_signalled,
            args=(handle, message, stderr, value),
            daemon=True,
            name=f"signalled-{handle.id[:8]}",
        ).start()

    def judge_signalled(self, handle: TaskHandle, message: str, stderr: str, value: object) -> None:
        """A shell command killed by a signal (SIGTERM/SIGKILL): Slurm signals a job's
        processes when it hits its limit, and the worker may still report the command's
        end. One whose job ``sacct`` shows ``TIMEOUT`` is retried longer; any other is the
        command's own failure."""
        plain = Failure(cls="user_error", retryable=False, message=message)
        failure, ran_s = self.timed_out(handle, plain, settle_s=20.0)
        if failure.cls != "walltime" or handle.task is None:
            self.life.fail(handle, message, stderr, value=value)
            return
        self._retry_or_fail(handle, failure, message, stderr, ran_s)

    def timed_out(
        self, handle: TaskHandle, failure: Failure, settle_s: float = 0.0
    ) -> tuple[Failure, float | None]:
        """The failure as the site's accounting tells it, and how long a job killed at its
        limit ran (``sacct`` Elapsed; None when unknown). The engine reports a batch job
        killed at its limit as a lost manager, and a command it signalled as the command's
        own end: one whose job ``sacct`` shows ``TIMEOUT`` is a walltime failure (retried
        longer, not elsewhere). ``settle_s``: how long to wait for accounting that still
        shows the job running (slurmdbd is updated after the kill)."""
        if not handle.slurm_job_ids:
            return failure, None
        if failure.cls not in ("endpoint_lost", "walltime") and settle_s <= 0:
            return failure, None
        job = handle.slurm_job_ids[-1]
        known = handle.site in self.rt.backends
        backend = self.rt.site_for(handle.caller, handle.site) if known else None
        deadline = time.monotonic() + settle_s
        while True:
            acct = fetch_accounting(handle.site, backend, [job], started=True)
            timeout = next((j for j in acct.jobs if j.state.upper().startswith("TIMEOUT")), None)
            live = any(j.state.upper() in ("RUNNING", "COMPLETING") for j in acct.jobs)
            if timeout is not None or not live or time.monotonic() >= deadline:
                break
            time.sleep(2.0)
        if timeout is None:
            return failure, None
        ran = timeout.elapsed_s
        if ran is None and timeout.start_time is not None and timeout.end_time is not None:
            ran = int((timeout.end_time - timeout.start_time).total_seconds())
        if failure.cls != "walltime":
            said = "a lost manager" if failure.cls == "endpoint_lost" else failure.message
            handle.notes.append(
                f"sacct on {handle.site}: job {job} TIMEOUT after {ran} s (killed at its "
                f"walltime; the engine reported {said})"
            )
            failure = Failure(cls="walltime", retryable=True, message=failure.message)
        return failure, None if ran is None else float(ran)

    def retry(
        self, handle: TaskHandle, failure: Failure, traceback: str, ran_s: float | None = None
    ) -> bool:
        """Run a task whose infrastructure failed again, on another feasible site; one
        killed at its walltime (after ``ran_s``, if known) asks for a longer one, anywhere
        a partition allows it (its own site too)."""
        tried = [a["site"] for a in handle.attempts] + [handle.site]
        tried += [c.site for c in handle.copies]
        if handle.task is None or len(handle.attempts) >= self.rt.retry_budget:
            if failure.cls == "walltime" and handle.task is not None:
                handle.notes.append(
                    f"killed at its walltime of {handle.shape.walltime_s} s on {handle.site} "
                    f"after {len(handle.attempts)} retries: not retried (the retry budget is "
                    "used up); submit it again with a longer walltime_s"
                )
            return False
        env = handle.envelope
        if failure.cls == "walltime":  # not a broken site: the task needs more time
            longer = self._longer(handle, env, ran_s)
            if longer is None:
                return False
            env = longer
            others = tuple(env.sites or self.rt.backends)
        else:
            others = tuple(s for s in (env.sites or self.rt.backends) if s not in tried)
        if not others:
            handle.notes.append(f"{failure.cls} on {handle.site}; no other allowed site to retry")
            return False
        try:
            decision = self.rt.plan(env.model_copy(update={"sites": others}))
        except NoFeasibleSiteError:
            handle.notes.append(f"{failure.cls} on {handle.site}; no other feasible site")
            return False
        if not self.shipping.admit(handle, decision.chosen.shape, "retry"):
            return False
        old_site = handle.site
        shape = decision.chosen.shape
        store = self.rt.store

        def update() -> None:
            handle.attempts.append(
                {
                    "site": handle.site,
                    "partition": handle.partition,
                    "compute_task_id": handle.compute_task_id,
                    "slurm_job_id": handle.slurm_job_id,
                    "failure": failure.cls,
                    "error": failure.message,
                    "ended_at": datetime.now(UTC).isoformat(),
                }
            )
            handle.decision = decision
            handle.envelope = env
            handle.started_at = None
            handle.slurm_job_id = None

        def persist() -> None:  # the attempt is on record before the retry is shipped
            if store is not None:
                store.update_task(
                    handle.id,
                    site=shape.site,
                    decision=decision.model_dump_json(),
                    state="queued",
                    started_at=None,
                    slurm_job_id=None,
                    compute_task_id=None,
                    attempts=json.dumps(handle.attempts, default=str),
                )

        def detail() -> dict[str, Any]:
            return {
                "failure": failure.cls,
                "from_site": old_site,
                "to_site": shape.site,
                "attempt": len(handle.attempts) + 1,
                "walltime_s": shape.walltime_s,
            }

        if not self.life.requeue(handle, update, persist, detail):
            return False  # it ended meanwhile (failed: its end is told once)
        crash_point("retry")
        task = handle.task
        assert task is not None  # checked above: a task without its spec is not retried
        if self.stage is not None and self.stage(handle, task):
            with self.reg.lock:  # its inputs move to the new site first; shipped on arrival
                self.reg.unindexed[handle.id] = handle
            return True
        try:
            fut = self.shipping.send(handle, lambda: self.shipping.submit_to(handle, task, shape))
        except Exception as e:
            self.life.fail(handle, f"retry on {shape.site} could not be submitted: {e}", traceback)
            return True
        handle.future = fut
        with self.reg.lock:  # its start is reported under the new compute task id
            self.reg.unindexed[handle.id] = handle
        self.shipping.follow(handle, fut)
        return True

    def _longer(
        self, handle: TaskHandle, env: ResourceEnvelope, ran_s: float | None
    ) -> ResourceEnvelope | None:
        """``env`` with the walltime a task killed at its limit asks for next (a note on the
        task either way); None when no partition it may use allows more. What it ran: the
        job's own elapsed time (``ran_s``), else since its start was reported, else unknown
        (then twice the walltime it had)."""
        old = handle.decision.chosen.shape.walltime_s
        ran = ran_s
        if ran is None and handle.started_at is not None:
            ran = (datetime.now(UTC) - handle.started_at).total_seconds()
        allowed = set(env.sites or self.rt.backends)
        longest = max(
            (
                p.max_walltime_s
                for name, b in self.rt.backends.items()
                if name in allowed
                for p in b.spec.partitions
                if not env.partitions or {p.name, f"{name}:{p.name}"} & set(env.partitions)
            ),
            default=old,
        )
        limit = min(MAX_WALLTIME_S, longest)
        new = grown_walltime_s(old, ran, limit)
        where = f"{handle.site}/{handle.partition}"
        if new is None:
            handle.notes.append(
                f"killed at its walltime of {old} s on {where}: it needs more than {limit} s, "
                "the longest walltime any partition it may use allows, so it is not retried. "
                "Split the work into shorter tasks, or checkpoint it and resubmit to continue "
                "from the checkpoint, or allow sites/partitions with a longer limit"
            )
            return None
        ran_text = f", ran {ran:.0f} s" if ran is not None else ""
        handle.notes.append(
            f"killed at its walltime on {where}{ran_text}: retried with walltime {old} s -> "
            f"{new} s (at most {limit} s, the longest limit of a partition it may use)"
        )
        return env.model_copy(update={"walltime_s": new})
