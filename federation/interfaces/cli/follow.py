"""Following work as it runs: live event lines under a spinner, waiting for ids to end on
the service's event stream or this process's event bus."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from federation.interfaces.cli.output import (
    EXIT_OK,
    EXIT_TASK_FAILED,
    emit_json,
    make_console,
    ops_failure,
)
from federation.interfaces.cli.render import human_bytes
from federation.interfaces.service.errors import OpsError
from federation.runtime.events import Event

if TYPE_CHECKING:
    from federation.interfaces.service.client import ServiceClient
    from federation.interfaces.service.ops import LocalOps
    from federation.runtime.coordinator import Coordinator
    from federation.runtime.handles import TaskHandle


def await_compute_id(handle: TaskHandle, timeout_s: float) -> bool:
    """Wait (briefly) until the service acknowledged the submission with a task id.

    The SDK executor submits in a background thread; leaving before that would drop the
    task. A failed submission shows up as the task's ``failed`` event.
    """
    deadline = time.monotonic() + timeout_s
    while handle.compute_task_id is None and not handle.done:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return handle.compute_task_id is not None


class LiveEvents:
    """Print each event as its callback fires, under a spinner saying where the task is."""

    def __init__(self, console: Console, enabled: bool) -> None:
        self.console = console
        self.enabled = enabled
        self._t0 = datetime.now(UTC)
        self._lock = threading.Lock()
        self._progress: Progress | None = None
        self._task: Any = None
        self._pending: list[Event] = []

    def __enter__(self) -> LiveEvents:
        if not self.enabled:
            return self
        progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        with self._lock:
            self._progress = progress
            self._task = progress.add_task("waiting for the task", total=None)
            pending, self._pending = self._pending, []
        progress.start()
        for ev in pending:
            self._show(ev)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            progress, self._progress = self._progress, None
        if progress is not None:
            progress.stop()

    def on_event(self, ev: Event) -> None:
        if not self.enabled:
            return
        with self._lock:
            if self._progress is None:
                self._pending.append(ev)  # before the spinner starts: shown when it does
                return
        self._show(ev)

    def _show(self, ev: Event) -> None:
        kind = ev.kind.removeprefix("task.")
        last = kind.rsplit(".", 1)[-1]
        style = {
            "completed": "green",
            "round_terminal": "green",
            "failed": "red",
            "started": "cyan",
            "retried": "yellow",
            "child_replaced": "yellow",
        }.get(last, "")
        d = ev.detail
        detail = ", ".join(f"{k}={v}" for k, v in d.items())
        at = (ev.at - self._t0).total_seconds()
        who = f"{ev.task_id[:8]} "
        self.console.print(
            f"+{at:6.1f}s  [{style or 'default'}]{kind:<9}[/]  {who}{ev.site or '-'}  {detail}",
            highlight=False,
        )
        moved = f"{d.get('files', 0)} files, {human_bytes(d.get('bytes_transferred'))}"
        status = {
            "queued": f"queued on {ev.site}",
            "started": f"running on {ev.site} (Slurm job {d.get('slurm_job_id')})",
            "retried": f"re-placed on {ev.site} after {d.get('failure', 'a failure')}",
            "transfer.submitted": f"copying {d.get('source')} -> {d.get('destination')}",
            "transfer.progress": f"copying: {moved} so far",
            "group.submitted": "group placed; waiting for its children",
            "group.child_replaced": f"{d.get('child')} moved to {d.get('to_site')}",
        }.get(kind, kind)
        with self._lock:
            if self._progress is not None:
                self._progress.update(self._task, description=status)


TERMINAL_KINDS = frozenset(
    {
        "task.completed",
        "task.failed",
        "transfer.completed",
        "transfer.failed",
        "group.round_terminal",
    }
)
FAILED_KINDS = frozenset({"task.failed", "transfer.failed"})


def _failed(ev: Event) -> bool:
    if ev.kind in FAILED_KINDS:
        return True
    if ev.kind == "group.round_terminal":
        states = ev.detail.get("state") or {}
        return any(v != "completed" for v in dict(states).values())
    return False


def follow(
    events: Callable[[threading.Event], Iterator[Event]],
    ids: set[str],
    live: LiveEvents,
    *,
    timeout_s: float,
    as_json: bool,
) -> tuple[set[str], bool]:
    """Show events until every id in ``ids`` ended (or ``timeout_s``); (ended, any failed).

    ``events(stop)`` yields the events and ends soon after ``stop`` is set. A thread reads
    them, so the deadline holds even when nothing happens."""
    import queue

    q: queue.Queue[Event | BaseException | None] = queue.Queue()
    stop = threading.Event()

    def pump() -> None:
        try:
            for ev in events(stop):
                q.put(ev)
                if stop.is_set():
                    return
        except BaseException as e:
            q.put(e)
        q.put(None)

    threading.Thread(target=pump, name="federation-watch", daemon=True).start()
    ended: set[str] = set()
    failed = False
    deadline = time.monotonic() + timeout_s
    try:
        with live:
            while ended < ids:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    item = q.get(timeout=remaining)
                except queue.Empty:
                    break
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                if as_json:
                    sys.stdout.write(item.model_dump_json() + "\n")
                    sys.stdout.flush()
                live.on_event(item)
                if item.kind in TERMINAL_KINDS and item.task_id in ids:
                    ended.add(item.task_id)
                    failed = failed or _failed(item)
                elif item.kind == "task.failed":
                    failed = True  # a group's child
    finally:
        stop.set()
    return ended, failed


def watch_service(
    client: ServiceClient,
    ids: list[str],
    after: int,
    *,
    timeout_s: float,
    as_json: bool,
    event_lines: bool | None = None,
) -> int:
    """Follow ``ids`` on the service's stream; ``event_lines``: print each event as a JSON
    line (default: with ``as_json``)."""
    live = LiveEvents(make_console(stderr=as_json), enabled=not as_json)
    lines = as_json if event_lines is None else event_lines
    try:
        ended, failed = follow(
            lambda stop: client.stream_events(after, ids, stop=stop),
            set(ids),
            live,
            timeout_s=timeout_s,
            as_json=lines,
        )
    except OpsError as e:
        raise ops_failure(e, as_json) from e
    if ended < set(ids):
        msg = f"not finished after {timeout_s:g} s: {sorted(set(ids) - ended)}"
        if as_json:
            emit_json({"status": "timeout", "pending": sorted(set(ids) - ended)})
        else:
            make_console(stderr=True).print(f"[yellow]{msg}[/yellow]", highlight=False)
        return EXIT_TASK_FAILED
    return EXIT_TASK_FAILED if failed else EXIT_OK


def bus_events(
    coord: Coordinator, after: int, ops: LocalOps, ids: set[str], stop: threading.Event
) -> Iterator[Event]:
    """This process's events after ``after`` for ``ids`` (groups expanded), as they come."""
    cursor = after
    while not stop.is_set():
        found = coord.events.await_event(cursor, task_ids=ops.expand_ids(ids), timeout_s=1.0)
        for ev in found:
            cursor = max(cursor, ev.seq)
            yield ev
