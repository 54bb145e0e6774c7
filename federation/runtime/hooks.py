"""Webhook and command hooks: deliver events to something outside the process.

A hook is a :class:`WebhookHook` (HTTP POST of the event's JSON, with retries and a
timeout, through ``httpx``) or a :class:`CommandHook` (a command run with the event's JSON
on stdin). Each filters by event kind, and is registered globally, for one task or for a
group (its own events and those of its children, replacements included).

Delivery never blocks whoever emitted the event (e.g. the SDK's result thread): events are
queued and delivered by a small pool of worker threads, in order per hook. A hook that still
fails after its retries is logged and recorded as a ``hook.failed`` event, never dropped
silently. ``hook.failed`` events are not delivered to hooks unless a hook asks for that kind.
"""

from __future__ import annotations

import logging
import queue
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import httpx
import tenacity
from pydantic import Field, TypeAdapter

from federation.core.model import Frozen
from federation.runtime.events import Event, EventBus

logger = logging.getLogger(__name__)


class WebhookHook(Frozen):
    """POST each matching event as JSON to ``url``."""

    type: Literal["webhook"] = "webhook"
    url: str = Field(pattern=r"^https?://")
    kinds: frozenset[str] | None = None
    """Only these event kinds (all kinds but ``hook.failed`` when None)."""
    timeout_s: float = Field(default=5.0, gt=0)
    retries: int = Field(default=3, ge=0, description="further tries after the first")
    backoff_s: float = Field(default=0.5, ge=0, description="doubled after every try")
    headers: dict[str, str] = Field(default_factory=dict)

    def describe(self) -> str:
        return f"webhook {self.url}"


class CommandHook(Frozen):
    """Run ``argv`` with each matching event's JSON on stdin; exit code 0 is success."""

    type: Literal["command"] = "command"
    argv: tuple[str, ...] = Field(min_length=1)
    kinds: frozenset[str] | None = None
    timeout_s: float = Field(default=30.0, gt=0)
    retries: int = Field(default=0, ge=0)
    backoff_s: float = Field(default=0.5, ge=0)

    def describe(self) -> str:
        return f"command {self.argv[0]}"


Hook = WebhookHook | CommandHook
_HOOK: TypeAdapter[Hook] = TypeAdapter(Hook)


class HookStore(Protocol):
    """Where task and group hooks are kept across restarts (the coordinator's store)."""

    def insert_hook(self, hook_json: str, ids: Sequence[str]) -> int: ...

    def update_hook_ids(self, row_id: int, ids: Sequence[str]) -> None: ...

    def hooks(self) -> list[tuple[int, str, list[str]]]: ...


class HookError(Exception):
    """One delivery attempt failed (the message says how)."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(eq=False)
class Registration:
    """A hook and its scope; ``task_ids`` None means every task (a global hook)."""

    hook: Hook
    task_ids: set[str] | None = None
    delivered: int = 0
    failed: int = 0
    _queue: queue.SimpleQueue[Event] = field(default_factory=queue.SimpleQueue)
    _busy: bool = False
    _row: int | None = None
    """Its row in the store (a task or group hook the store keeps), if any."""
    _store: HookStore | None = None

    def wants(self, ev: Event) -> bool:
        kinds = self.hook.kinds
        if kinds is None:
            if ev.kind == "hook.failed":
                return False
        elif ev.kind not in kinds:
            return False
        return self.task_ids is None or ev.task_id in self.task_ids

    def include(self, task_id: str) -> None:
        """Widen a task or group hook to one more task (a group's new child)."""
        if self.task_ids is not None:
            self.task_ids.add(task_id)
            if self._store is not None and self._row is not None:
                self._store.update_hook_ids(self._row, sorted(self.task_ids))


class HookRunner:
    """Delivers events to registered hooks off the emitting thread."""

    def __init__(self, bus: EventBus, workers: int = 2) -> None:
        self.bus = bus
        self.store: HookStore | None = None
        """Keeps task and group hooks across restarts (set by a durable coordinator)."""
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._regs: list[Registration] = []
        self._ready: queue.SimpleQueue[Registration | None] = queue.SimpleQueue()
        self._pending = 0
        self._workers = workers
        self._threads: list[threading.Thread] = []
        self._http: httpx.Client | None = None
        bus.subscribe(self._on_event)

    def add(self, hook: Hook, task_ids: set[str] | None = None) -> Registration:
        """Register ``hook`` for every task (``task_ids`` None) or for these tasks only.

        With a :attr:`store`, a task or group hook is kept there and registered again after
        a restart (:meth:`restore`), except a webhook with ``headers`` (they may carry
        credentials, which are never written to disk: such a hook is registered again by
        its owner after a restart). Global hooks come from configuration at each start."""
        reg = Registration(hook, None if task_ids is None else set(task_ids))
        store = self.store
        keep = not (isinstance(hook, WebhookHook) and hook.headers)
        if store is not None and reg.task_ids is not None and keep:
            reg._row = store.insert_hook(hook.model_dump_json(), sorted(reg.task_ids))
            reg._store = store
        with self._lock:
            self._regs.append(reg)
        return reg

    def restore(self, open_ids: set[str]) -> list[Registration]:
        """After a restart: register again the kept hooks of tasks or groups still open."""
        store = self.store
        if store is None:
            return []
        out: list[Registration] = []
        for row, text, ids in store.hooks():
            if not open_ids.intersection(ids):
                continue  # its tasks ended before the restart: nothing more to deliver
            try:
                hook = _HOOK.validate_json(text)
            except ValueError as e:
                logger.warning("hook %s in the store no longer validates: %s", row, e)
                continue
            reg = Registration(hook, set(ids), _row=row, _store=store)
            with self._lock:
                self._regs.append(reg)
            out.append(reg)
        return out

    def remove(self, reg: Registration) -> None:
        with self._lock:
            if reg in self._regs:
                self._regs.remove(reg)

    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait until every queued delivery has been made (or has failed)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout=timeout_s)

    def close(self) -> None:
        for _ in self._threads:
            self._ready.put(None)
        if self._http is not None:
            self._http.close()

    # --- delivery ---------------------------------------------------------------------------
    def _on_event(self, ev: Event) -> None:
        with self._lock:
            regs = [r for r in self._regs if r.wants(ev)]
            if not regs:
                return
            self._pending += len(regs)
            while len(self._threads) < self._workers:
                t = threading.Thread(
                    target=self._work, name=f"hooks-{len(self._threads)}", daemon=True
                )
                self._threads.append(t)
                t.start()
            ready = []
            for r in regs:
                r._queue.put(ev)
                if not r._busy:  # one worker per registration at a time: in order per hook
                    r._busy = True
                    ready.append(r)
        for r in ready:
            self._ready.put(r)

    def _work(self) -> None:
        while True:
            reg = self._ready.get()
            if reg is None:
                return
            while True:
                try:
                    ev = reg._queue.get_nowait()
                except queue.Empty:
                    with self._lock:
                        if reg._queue.empty():
                            reg._busy = False
                            break
                    continue
                try:
                    self._deliver(reg, ev)
                finally:
                    with self._idle:
                        self._pending -= 1
                        self._idle.notify_all()

    def _deliver(self, reg: Registration, ev: Event) -> None:
        hook = reg.hook
        body = ev.model_dump_json()
        errors: list[str] = []

        def attempt() -> None:
            try:
                if isinstance(hook, WebhookHook):
                    self._post(hook, body)
                else:
                    _run_command(hook, body)
            except HookError as e:
                errors.append(str(e))
                raise

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(hook.retries + 1),
            wait=tenacity.wait_exponential(multiplier=hook.backoff_s, exp_base=2, min=0),
            retry=tenacity.retry_if_exception(lambda e: isinstance(e, HookError) and e.retryable),
            reraise=True,
        )
        try:
            retrying(attempt)
        except HookError:
            pass
        else:
            reg.delivered += 1
            return
        reg.failed += 1
        logger.warning(
            "%s failed to deliver %s #%d after %d tries: %s",
            hook.describe(),
            ev.kind,
            ev.seq,
            len(errors),
            errors[-1],
        )
        if ev.kind == "hook.failed":
            return  # reporting a failed report would never end
        self.bus.emit(
            "hook.failed",
            ev.task_id,
            ev.site,
            hook=hook.describe(),
            event_seq=ev.seq,
            event_kind=ev.kind,
            tries=len(errors),
            error=errors[-1],
        )

    def _post(self, hook: WebhookHook, body: str) -> None:
        if self._http is None:
            self._http = httpx.Client()
        try:
            resp = self._http.post(
                hook.url,
                content=body,
                headers={"content-type": "application/json", **hook.headers},
                timeout=hook.timeout_s,
            )
        except httpx.TimeoutException:
            raise HookError(f"no answer within {hook.timeout_s:g} s") from None
        except httpx.HTTPError as e:
            raise HookError(f"{type(e).__name__}: {e}") from None
        if resp.status_code >= 300:
            retryable = resp.status_code >= 500 or resp.status_code == 429
            raise HookError(f"HTTP {resp.status_code} {resp.reason_phrase}", retryable=retryable)


def _run_command(hook: CommandHook, body: str) -> None:
    try:
        proc = subprocess.run(
            list(hook.argv),
            input=body,
            capture_output=True,
            text=True,
            timeout=hook.timeout_s,
            check=False,
        )
    except FileNotFoundError:
        raise HookError(f"{hook.argv[0]}: command not found", retryable=False) from None
    except subprocess.TimeoutExpired:
        raise HookError(f"did not finish within {hook.timeout_s:g} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr or "").strip().splitlines()
        why = f": {tail[-1]}" if tail else ""
        raise HookError(f"exited with {proc.returncode}{why}")
