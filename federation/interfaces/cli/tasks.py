"""``federation draft | submit | group | move | result | watch``: work from the command line.

``register(app)`` adds the commands to a typer app (``federation.interfaces.cli.main`` calls it).

Two ways to run: with ``--service URL`` (or ``$FEDERATION_SERVICE``) and a token (``--token``
or ``$FEDERATION_TOKEN``), commands talk to a running ``federation serve``, whose coordinator
outlives them, so ``result`` and ``watch`` can follow work submitted earlier or elsewhere.
Without a service, ``submit``, ``group`` and ``move`` run their own coordinator in this
process over the local sites and follow their work with ``--wait``; ``result`` and ``watch``
need the service (there is nothing to follow across processes otherwise) and say so.

Exit codes: 0 ok; 1 the task (a child, the transfer) failed, or did not finish within
``--timeout-s``; 2 usage or federation error (bad envelope, no feasible site, unknown site or
id, service unreachable); 3 (``result`` only) still queued or running.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from federation.core.envelope import ResourceEnvelope
from federation.core.errors import FederationError
from federation.core.tasks import ShellTask
from federation.interfaces.jupyter.executor import envelope_rows
from federation.interfaces.service.errors import OpsError
from federation.placement.drafting import EnvelopeDraft, TaskHints, draft_envelope
from federation.runtime.events import Event

if TYPE_CHECKING:
    from federation.interfaces.service.client import ServiceClient
    from federation.interfaces.service.models import (
        GroupRequest,
        GroupResponse,
        GroupView,
        TaskStatus,
        TransferRequest,
        TransferView,
    )
    from federation.interfaces.service.ops import LocalOps
    from federation.runtime.coordinator import Coordinator
    from federation.runtime.handles import TaskHandle, TaskResult

EXIT_OK, EXIT_TASK_FAILED, EXIT_ERROR, EXIT_NOT_DONE = 0, 1, 2, 3

SiteOpt = Annotated[
    list[str] | None, typer.Option("--site", "-s", help="allowed site (repeatable; default any)")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable JSON on stdout")]
HomeOpt = Annotated[
    Path | None,
    typer.Option(
        help="runtime root of the local sites (default: $FEDERATION_HOME or ~/.federation)"
    ),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        envvar="FEDERATION_CONFIG",
        help="federation.yaml: act on the sites it names, local and Globus Compute cloud "
        "($FEDERATION_CONFIG); default: the embedded local federation",
        show_default=False,
    ),
]
ServiceOpt = Annotated[
    str | None,
    typer.Option(
        "--service",
        envvar="FEDERATION_SERVICE",
        help="URL of a running `federation serve` ($FEDERATION_SERVICE); without it the "
        "command runs its own coordinator in this process",
        show_default=False,
    ),
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="FEDERATION_TOKEN",
        help="bearer token for --service ($FEDERATION_TOKEN; `federation token issue`)",
        show_default=False,
    ),
]


def _console(stderr: bool = False) -> Console:
    probe = Console(stderr=stderr)
    if probe.is_terminal and probe.width >= 100:
        return probe
    return Console(stderr=stderr, width=120)


def _emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    sys.stdout.flush()


def _error(message: str, as_json: bool, code: int = EXIT_ERROR) -> typer.Exit:
    if as_json:
        _emit_json({"error": message, "exit_code": code})
    else:
        _console(stderr=True).print(f"[red]error:[/red] {message}", highlight=False, markup=True)
    return typer.Exit(code)


# --- draft ------------------------------------------------------------------------------------
def draft(
    description: Annotated[str, typer.Argument(help="what the task does, in plain words")],
    hint_class: Annotated[
        str | None,
        typer.Option(
            "--hint-class",
            help="workload class: cpu-prep, inference, ddp-training, mpi or generic",
        ),
    ] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs the task uses")] = None,
    nodes: Annotated[int | None, typer.Option(help="nodes (MPI tasks)")] = None,
    input_gb: Annotated[float | None, typer.Option(help="input data size, GB")] = None,
    model_gb: Annotated[float | None, typer.Option(help="model size, GB")] = None,
    runtime_s: Annotated[
        float | None, typer.Option(help="a previous run's duration, seconds")
    ] = None,
    framework: Annotated[str | None, typer.Option(help="e.g. pytorch, jax, mpi4py")] = None,
    gpu_type: Annotated[
        list[str] | None, typer.Option("--gpu-type", help="acceptable GPU type (repeatable)")
    ] = None,
    arch: Annotated[
        list[str] | None, typer.Option(help="acceptable architecture: x86_64, aarch64")
    ] = None,
    site: SiteOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Draft a resource envelope for a described task and validate it against the sites.

    Prints the envelope's bounds with the rationale for each, the confidence, and which
    site/partitions can host it (or the bound to relax and the nearest envelope that fits).
    Reads only the site descriptions: no Slurm needed.
    """
    from federation.core.spec import load_sites

    try:
        hints = TaskHints.model_validate(
            {
                k: v
                for k, v in {
                    "workload_class": hint_class,
                    "gpus": gpus,
                    "nodes": nodes,
                    "input_size_gb": input_gb,
                    "model_size_gb": model_gb,
                    "known_runtime_s": runtime_s,
                    "framework": framework,
                    "gpu_types": tuple(gpu_type or ()),
                    "arch": tuple(arch or ()),
                }.items()
                if v is not None
            }
        )
        specs = load_sites(site or None)
        result = draft_envelope(description, specs, hints)
    except ValidationError as e:
        raise _error(f"invalid hint: {_pydantic_message(e)}", as_json) from e
    except FederationError as e:
        raise _error(str(e), as_json) from e
    if as_json:
        _emit_json(result.model_dump(mode="json"))
        return
    _print_draft(_console(), description, result)


def _pydantic_message(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"])
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def _print_draft(console: Console, description: str, d: EnvelopeDraft) -> None:
    t = Table(
        title=f"Envelope for: {description}",
        caption=f"workload class {d.workload_class}, confidence {d.confidence:.0%}",
    )
    t.add_column("bound")
    t.add_column("value")
    t.add_column("rationale")
    for bound, value in envelope_rows(d.envelope):
        key = bound.removesuffix("_s").removesuffix("_min")
        why = d.rationale.get(bound) or d.rationale.get(key) or ""
        t.add_row(bound, value, why)
    console.print(t)
    if "workload_class" in d.rationale:
        console.print(f"class: {d.rationale['workload_class']}", highlight=False)
    v = d.validation
    if v.feasible:
        console.print(f"[green]feasible[/green] on {len(v.feasible)}: {', '.join(v.feasible)}")
    else:
        console.print(
            f"[red]no site can host it[/red]; the bound to relax: {v.unsatisfiable_bound}"
        )
        if v.nearest is not None:
            near = ", ".join(f"{b}={val}" for b, val in envelope_rows(v.nearest))
            console.print(f"nearest feasible envelope: {near}", highlight=False)
    for where, why in v.rejected.items():
        console.print(f"  not {where}: {why}", highlight=False, style="dim")


# --- submit -----------------------------------------------------------------------------------
def submit(
    cmd: Annotated[str, typer.Option("--cmd", "-c", help="shell command to run in the job")],
    cpus: Annotated[int, typer.Option(help="CPUs (minimum)")] = 1,
    cpus_max: Annotated[int | None, typer.Option(help="CPUs (maximum)")] = None,
    gpus: Annotated[int, typer.Option(help="GPUs per node")] = 0,
    gpu_type: Annotated[
        list[str] | None, typer.Option("--gpu-type", help="acceptable GPU type (repeatable)")
    ] = None,
    mem_gb: Annotated[float, typer.Option(help="memory per node, GB (minimum)")] = 2.0,
    walltime_s: Annotated[int, typer.Option(help="walltime, seconds (>= 60)")] = 600,
    nodes: Annotated[int, typer.Option(help="nodes")] = 1,
    site: SiteOpt = None,
    partition: Annotated[
        list[str] | None,
        typer.Option(help="allowed partition, 'site:partition' or 'partition' (repeatable)"),
    ] = None,
    envelope: Annotated[
        Path | None,
        typer.Option(
            help="JSON file with an envelope (or the output of `draft --json`); "
            "replaces the resource options"
        ),
    ] = None,
    name: Annotated[str, typer.Option(help="task label (default: the command's first word)")] = "",
    wait: Annotated[
        bool, typer.Option("--wait", "-w", help="stream events as they arrive, then the result")
    ] = False,
    timeout_s: Annotated[float, typer.Option(help="with --wait: give up after this long")] = 900,
    service: ServiceOpt = None,
    token: TokenOpt = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Place a shell command on the federation and run it in a Slurm job of matching shape.

    Prints the placement and its decision trace (why this site, why not each other one).
    With --wait it streams the task's events as they arrive (queued, started with its
    Slurm job id, completed or failed) and prints the result. With --service the task runs
    on the coordinator service, so `result ID` / `watch ID` can follow it later; without,
    this process's coordinator ends with the command, so use --wait to see the result.

    Exit codes: 0 submitted (with --wait: the command succeeded); 1 it failed, or
    --timeout-s passed; 2 usage or federation error (bad envelope, no feasible site).
    """
    try:
        env = (
            _load_envelope(envelope)
            if envelope
            else ResourceEnvelope(
                cpus_min=cpus,
                cpus_max=cpus_max,
                gpus_min=gpus,
                gpus_max=gpus if gpus else None,
                gpu_types=tuple(gpu_type or ()),
                mem_gb_min=mem_gb,
                walltime_s=walltime_s,
                nodes=nodes,
                sites=tuple(site or ()),
                partitions=tuple(partition or ()),
            )
        )
        task = ShellTask(command=cmd, name=name)
    except (FederationError, ValidationError, ValueError, OSError) as e:
        raise _error(str(e), as_json) from e
    if service:
        client = _client(service, token, as_json)
        try:
            code = _submit_remote(
                client, task, env, wait=wait, timeout_s=timeout_s, as_json=as_json
            )
        except OpsError as e:
            raise _ops_error(e, as_json) from e
        finally:
            client.close()
        raise typer.Exit(code)
    with _federation(home, as_json, config) as coord:
        code = _submit(coord, task, env, wait=wait, timeout_s=timeout_s, as_json=as_json)
    raise typer.Exit(code)


def _submit_remote(
    client: ServiceClient,
    task: ShellTask,
    env: ResourceEnvelope,
    *,
    wait: bool,
    timeout_s: float,
    as_json: bool,
) -> int:
    from federation.interfaces.service.models import TaskRequest

    sub = client.submit(TaskRequest(command=task.command, name=task.name, envelope=env))
    doc = sub.model_dump(mode="json")
    console = _console()
    if not as_json:
        console.print(
            f"[bold]{sub.label}[/bold] placed on [bold]{sub.granted}[/bold], "
            f"predicted wait {sub.predicted_wait_s:.0f} s",
            highlight=False,
        )
        console.print(f"task id {sub.task_id}", highlight=False)
        console.print("decision trace:", style="bold")
        console.print(sub.explain, highlight=False, markup=False)
    if not wait:
        if as_json:
            _emit_json(doc | {"waited": False})
        else:
            console.print(f"follow it: federation watch {sub.task_id}", highlight=False)
        return EXIT_OK
    code = _watch_service(
        client, [sub.task_id], sub.cursor, timeout_s=timeout_s, as_json=as_json, event_lines=False
    )
    st = client.status(sub.task_id)
    if as_json:
        _emit_json(doc | {"waited": True, "status": st.model_dump(mode="json")})
    else:
        _print_status(console, st)
    return code


def _load_envelope(path: Path) -> ResourceEnvelope:
    doc = json.loads(path.read_text())
    if isinstance(doc, dict) and "envelope" in doc and "validation" in doc:
        doc = doc["envelope"]  # the output of `draft --json`
    return ResourceEnvelope(**doc)


@contextmanager
def _federation(
    home: Path | None, as_json: bool, config: Path | None = None, *, bring_up: bool = True
) -> Iterator[Coordinator]:
    """A coordinator in this process: over ``config``'s sites, or the embedded federation.

    With a config it is durable (``coordinator.db`` in the deployment's home), so a later
    ``result --config`` finds what this one submitted."""
    from federation.deploy.connect import configured, connect

    where = f"the federation of {config}" if config else "local federation"
    try:
        conn = connect(config, home=home, bring_up=bring_up, durable=configured(config) is not None)
    except FederationError as e:
        raise _error(f"{where} unavailable: {e}", as_json) from e
    except Exception as e:
        raise _error(
            f"{where} unavailable ({type(e).__name__}: {e}); check `federation sites status`",
            as_json,
        ) from e
    with conn:
        yield conn.coord


def _submit(
    coord: Coordinator,
    task: ShellTask,
    env: ResourceEnvelope,
    *,
    wait: bool,
    timeout_s: float,
    as_json: bool,
) -> int:
    console = _console()
    live = _LiveEvents(console, enabled=wait and not as_json)
    try:
        handle = coord.submit_task(task, env, on_event=live.on_event)
    except FederationError as e:
        raise _error(str(e), as_json) from e
    accepted = _await_compute_id(handle, 30.0)
    doc: dict[str, Any] = {
        "task_id": handle.id,
        "compute_task_id": handle.compute_task_id,
        "label": handle.label,
        "placement": handle.shape.model_dump(mode="json"),
        "predicted_wait_s": handle.decision.chosen.predicted_wait_s,
        "decision": handle.decision.model_dump(mode="json"),
        "explain": handle.decision.explain(),
    }
    if not as_json:
        _print_placement(console, handle, accepted)
    if not wait:
        note = (
            "not waiting: the job runs on its site; this process's coordinator ends now and "
            "kept the task in its deployment's coordinator.db: `federation result --config "
            f"FILE {handle.id}` shows it later"
            if coord.store is not None
            else "not waiting: the job runs on its site, but this process's coordinator ends "
            "now, so no later command can collect its result; use --wait"
        )
        if as_json:
            _emit_json(doc | {"waited": False, "note": note})
        else:
            console.print(f"[yellow]{note}[/yellow]", highlight=False)
        return EXIT_OK if accepted else EXIT_ERROR
    with live:
        finished = handle.wait(timeout_s)
    if not finished:
        cancelled = coord.cancel(handle)
        msg = f"task {handle.id} still {handle.state} after {timeout_s:g} s" + (
            "; cancelled" if cancelled else "; could not cancel it (already running)"
        )
        if as_json:
            _emit_json(doc | {"waited": True, "status": "timeout", "error": msg})
        else:
            console.print(f"[red]{msg}[/red]", highlight=False)
        return EXIT_TASK_FAILED
    res = coord.get_result(handle)
    if as_json:
        _emit_json(doc | {"waited": True, "result": _result_doc(res)})
    else:
        _print_result(console, res)
    return EXIT_OK if res.status == "completed" else EXIT_TASK_FAILED


def _await_compute_id(handle: TaskHandle, timeout_s: float) -> bool:
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


def _print_placement(console: Console, handle: TaskHandle, accepted: bool) -> None:
    d = handle.decision
    console.print(
        f"[bold]{handle.label}[/bold] placed on [bold]{handle.shape.describe()}[/bold], "
        f"predicted wait {d.chosen.predicted_wait_s:.0f} s",
        highlight=False,
    )
    console.print(
        f"task id {handle.id}, Globus Compute task {handle.compute_task_id or '(not accepted)'}",
        highlight=False,
    )
    console.print("decision trace:", style="bold")
    console.print(d.explain(), highlight=False, markup=False)
    if not accepted and handle.state == "failed":
        console.print(f"[red]submission failed:[/red] {handle.error}", highlight=False)


def _result_doc(r: TaskResult) -> dict[str, Any]:
    doc = r.model_dump(mode="json", exclude={"decision", "envelope", "value"})
    doc["events"] = [e.model_dump(mode="json") for e in r.events]
    return doc


def _tail(text: str | None, lines: int = 20) -> str:
    if not text:
        return ""
    parts = text.rstrip("\n").splitlines()
    return "\n".join(parts[-lines:])


def _print_result(console: Console, r: TaskResult) -> None:
    ok = r.status == "completed"
    t = Table(title=f"result of {r.label}", show_header=False)
    t.add_column("field", style="bold")
    t.add_column("value")
    t.add_row("status", "[green]completed[/green]" if ok else f"[red]failed[/red]: {r.error}")
    t.add_row("where", f"{r.site}/{r.partition} ({r.shape.describe()})")
    t.add_row("Slurm job", r.slurm_job_id or "-")
    t.add_row("queue wait", "-" if r.queue_wait_s is None else f"{r.queue_wait_s:.1f} s")
    run = (r.completed_at - (r.started_at or r.submitted_at)).total_seconds()
    t.add_row("runtime", f"{run:.1f} s")
    t.add_row("return code", "-" if r.returncode is None else str(r.returncode))
    t.add_row("task id", r.task_id)
    t.add_row("Globus Compute task", r.compute_task_id or "-")
    console.print(t)
    if r.stdout:
        console.rule("stdout", style="dim")
        console.print(_tail(r.stdout), highlight=False, markup=False)
    if r.stderr:
        console.rule("stderr", style="dim")
        console.print(_tail(r.stderr), highlight=False, markup=False)
    if not ok and r.remote_traceback and r.remote_traceback != r.stderr:
        console.rule("remote traceback", style="red")
        console.print(_tail(r.remote_traceback), highlight=False, markup=False)


class _LiveEvents:
    """Print each event as its callback fires, under a spinner saying where the task is."""

    def __init__(self, console: Console, enabled: bool) -> None:
        self.console = console
        self.enabled = enabled
        self._t0 = datetime.now(UTC)
        self._lock = threading.Lock()
        self._progress: Progress | None = None
        self._task: Any = None
        self._pending: list[Event] = []

    def __enter__(self) -> _LiveEvents:
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
        moved = f"{d.get('files', 0)} files, {_bytes(d.get('bytes_transferred'))}"
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


# --- the service: group, move, result, watch --------------------------------------------------
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


def _client(service: str | None, token: str | None, as_json: bool) -> ServiceClient:
    from federation.interfaces.service.client import ServiceClient

    if not service:
        raise _error(
            "this needs a running coordinator service: pass --service URL (or set "
            "$FEDERATION_SERVICE) and --token (or $FEDERATION_TOKEN); start one with "
            "`federation serve` and issue a token with `federation token issue NAME`. Without "
            "a service, each command runs its own coordinator and only `--wait` on the "
            "command that submitted can follow the work.",
            as_json,
        )
    if not token:
        raise _error(
            f"--service {service} needs a bearer token: pass --token or set $FEDERATION_TOKEN "
            "(`federation token issue NAME` on the service's machine prints one)",
            as_json,
        )
    return ServiceClient(service, token)


def _ops_error(e: OpsError, as_json: bool) -> typer.Exit:
    b = e.body
    msg = f"{b.error}: {b.message}" + (f" ({b.hint})" if b.hint else "")
    if as_json:
        _emit_json({"error": b.error, "message": b.message, "hint": b.hint, "exit_code": 2})
        return typer.Exit(EXIT_ERROR)
    return _error(msg, as_json)


def _failed(ev: Event) -> bool:
    if ev.kind in FAILED_KINDS:
        return True
    if ev.kind == "group.round_terminal":
        states = ev.detail.get("state") or {}
        return any(v != "completed" for v in dict(states).values())
    return False


def _follow(
    events: Callable[[threading.Event], Iterator[Event]],
    ids: set[str],
    live: _LiveEvents,
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


def _watch_service(
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
    live = _LiveEvents(_console(stderr=as_json), enabled=not as_json)
    lines = as_json if event_lines is None else event_lines
    try:
        ended, failed = _follow(
            lambda stop: client.stream_events(after, ids, stop=stop),
            set(ids),
            live,
            timeout_s=timeout_s,
            as_json=lines,
        )
    except OpsError as e:
        raise _ops_error(e, as_json) from e
    if ended < set(ids):
        msg = f"not finished after {timeout_s:g} s: {sorted(set(ids) - ended)}"
        if as_json:
            _emit_json({"status": "timeout", "pending": sorted(set(ids) - ended)})
        else:
            _console(stderr=True).print(f"[yellow]{msg}[/yellow]", highlight=False)
        return EXIT_TASK_FAILED
    return EXIT_TASK_FAILED if failed else EXIT_OK


def _kind_of(client: ServiceClient, any_id: str) -> tuple[str, Any]:
    """(``task`` | ``group`` | ``transfer``, its view) for an id the service knows."""
    for kind, get in (
        ("task", client.status),
        ("group", client.group),
        ("transfer", client.transfer),
    ):
        try:
            return kind, get(any_id)
        except OpsError as e:
            if e.status != 404:
                raise
    raise OpsError(
        404,
        "unknown_id",
        f"the service knows no task, group or transfer {any_id!r}",
        "use an id that submit, group or move printed (tasks do not survive a restart)",
    )


def _print_status(console: Console, st: TaskStatus) -> None:
    t = Table(title=f"task {st.label}", show_header=False)
    t.add_column("field", style="bold")
    t.add_column("value")
    r = st.result
    state: str = st.state
    if r is not None and r.status == "failed":
        state = f"[red]failed[/red]: {r.error}"
    elif st.state == "completed":
        state = "[green]completed[/green]"
    t.add_row("state", state)
    t.add_row("where", f"{st.site}/{st.partition} ({st.shape.describe()})")
    t.add_row("Slurm job", st.slurm_job_id or (r.slurm_job_id if r else None) or "-")
    if r is not None:
        t.add_row("queue wait", "-" if r.queue_wait_s is None else f"{r.queue_wait_s:.1f} s")
        t.add_row("runtime", "-" if r.runtime_s is None else f"{r.runtime_s:.1f} s")
        if r.returncode is not None:
            t.add_row("return code", str(r.returncode))
        if r.stdout is None:
            value = json.dumps(r.value) if r.value_is_json else (r.value_repr or "")
            t.add_row("value", value[:2000])
    t.add_row("task id", st.task_id)
    t.add_row("Globus Compute task", st.compute_task_id or "-")
    console.print(t)
    if r is not None:
        for name, text in (("stdout", r.stdout), ("stderr", r.stderr)):
            if text:
                console.rule(name, style="dim")
                console.print(_tail(text), highlight=False, markup=False)
        if r.status == "failed" and r.remote_traceback and r.remote_traceback != r.stderr:
            console.rule("remote traceback", style="red")
            console.print(_tail(r.remote_traceback), highlight=False, markup=False)


def _print_group(console: Console, g: GroupView) -> None:
    t = Table(title=f"group {g.group_id[:8]} {g.objective}".rstrip())
    for col in ("child", "state", "placed on", "predicted wait", "task id", "earlier attempts"):
        t.add_column(col)
    for c in g.children:
        t.add_row(
            c.name,
            c.state,
            c.granted,
            f"{c.predicted_wait_s:.0f} s",
            c.task_id,
            ", ".join(x[:8] for x in c.earlier_task_ids) or "-",
        )
    console.print(t)
    for r in g.replacements:
        console.print(
            f"re-placed {r.get('child')}: {r.get('from')} -> {r.get('to')}", highlight=False
        )
    console.print(f"group id {g.group_id}" + (" (done)" if g.done else ""), highlight=False)


def _print_transfer(console: Console, v: TransferView) -> None:
    d = v.detail
    src, dst = d.get("source") or {}, d.get("destination") or {}

    def where(x: Any) -> str:
        return f"{x.get('site')}:{x.get('path')}" if isinstance(x, dict) else str(x)

    style = {"succeeded": "green", "failed": "red", "cancelled": "red"}.get(v.state, "")
    console.print(
        f"transfer {v.transfer_id}: [{style or 'default'}]{v.state}[/]  "
        f"{where(src)} -> {where(dst)}  {d.get('files', 0)} files "
        f"({d.get('files_skipped', 0)} skipped), {_bytes(d.get('bytes_transferred'))}",
        highlight=False,
    )
    if d.get("error"):
        console.print(f"[red]error:[/red] {d['error']}", highlight=False)


def _bytes(n: Any) -> str:
    size = float(n or 0)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"


RESULT_SETTLE_S = 5.0
"""``result --config``: how long a task re-attached from coordinator.db may take to deliver a
result that arrived while no coordinator was running."""


def result(
    ids: Annotated[list[str], typer.Argument(help="task, group or transfer id(s)")],
    service: ServiceOpt = None,
    token: TokenOpt = None,
    config: ConfigOpt = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a task's result (or a group's children, or a transfer's state), at once.

    Asks the coordinator service (--service URL / $FEDERATION_SERVICE, --token /
    $FEDERATION_TOKEN); or, with --config (or $FEDERATION_CONFIG) and no service, reads the
    deployment's coordinator.db, where `submit --config` keeps its tasks, re-attaching to
    the sites for those still in flight. It does not wait (use `watch` or `submit --wait`).

    Exit codes: 0 every id completed (or succeeded); 1 one failed; 3 one is still queued
    or running; 2 usage error, unknown id, or service unreachable.
    """
    if not service and config is not None:
        with _federation(home, as_json, config, bring_up=False) as coord:
            from federation.interfaces.service.ops import LocalOps

            for any_id in ids:
                with suppress(FederationError, TimeoutError):  # not a task, or in flight
                    coord.get_result(any_id, timeout_s=RESULT_SETTLE_S)
            ops = LocalOps(coord)
            try:
                _show_results(ops, ids, as_json)  # type: ignore[arg-type]
            finally:
                ops.close()
        return
    _show_results(_client(service, token, as_json), ids, as_json)


def _show_results(client: ServiceClient, ids: list[str], as_json: bool) -> None:
    console = _console()
    code = EXIT_OK
    docs: list[dict[str, Any]] = []
    try:
        for any_id in ids:
            kind, view = _kind_of(client, any_id)
            docs.append({"kind": kind} | view.model_dump(mode="json"))
            if kind == "task":
                done, bad = view.done, view.state == "failed"
                if not as_json:
                    _print_status(console, view)
            elif kind == "group":
                done = view.done
                bad = any(c.state == "failed" for c in view.children)
                if not as_json:
                    _print_group(console, view)
            else:
                done, bad = view.done, view.state in ("failed", "cancelled")
                if not as_json:
                    _print_transfer(console, view)
            if bad:
                code = EXIT_TASK_FAILED
            elif not done and code == EXIT_OK:
                code = EXIT_NOT_DONE
    except OpsError as e:
        raise _ops_error(e, as_json) from e
    finally:
        client.close()
    if as_json:
        _emit_json(docs[0] if len(docs) == 1 else docs)
    raise typer.Exit(code)


def watch(
    ids: Annotated[list[str], typer.Argument(help="task, group or transfer id(s)")],
    after: Annotated[
        int, typer.Option(help="event cursor to start after (default 0: replay history first)")
    ] = 0,
    timeout_s: Annotated[float, typer.Option(help="give up after this long")] = 3600,
    service: ServiceOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Stream the events of tasks, groups or transfers live until they all end.

    Follows the service's event stream (server-sent events: pushed as they happen, never
    polled), with a spinner saying where each one is. A group id covers the group and all
    its children. --json prints one event per line (JSON Lines). Ctrl-C stops watching;
    the work goes on.

    Exit codes: 0 all completed; 1 one failed, or --timeout-s passed; 2 usage error,
    unknown id, or service unreachable.
    """
    client = _client(service, token, as_json)
    try:
        code = _watch_service(client, list(ids), after, timeout_s=timeout_s, as_json=as_json)
    finally:
        client.close()
    raise typer.Exit(code)


def group(
    cmd: Annotated[
        list[str] | None,
        typer.Option("--cmd", "-c", help="a child's shell command (repeat: one per child)"),
    ] = None,
    spec: Annotated[
        Path | None,
        typer.Option(
            "--file",
            "-f",
            help="JSON file with the whole group: {children: [{command|function, args, "
            "kwargs, name, envelope}], objective, distinct_sites} (POST /v1/groups's body)",
        ),
    ] = None,
    objective: Annotated[str, typer.Option(help="what the group is for")] = "",
    distinct_sites: Annotated[
        bool, typer.Option(help="spread children over different sites while feasible")
    ] = True,
    cpus: Annotated[int, typer.Option(help="--cmd children: CPUs (minimum)")] = 1,
    gpus: Annotated[int, typer.Option(help="--cmd children: GPUs per node")] = 0,
    mem_gb: Annotated[float, typer.Option(help="--cmd children: memory per node, GB")] = 2.0,
    walltime_s: Annotated[int, typer.Option(help="--cmd children: walltime, seconds")] = 600,
    site: SiteOpt = None,
    wait: Annotated[
        bool, typer.Option("--wait", "-w", help="stream events until every child ended")
    ] = False,
    timeout_s: Annotated[float, typer.Option(help="with --wait: give up after this long")] = 1800,
    service: ServiceOpt = None,
    token: TokenOpt = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit related tasks as one group, on distinct sites while that is feasible.

    Children are `--cmd` commands sharing the resource options, or the children of a
    `--file` (which may also name catalog functions). A child still queued after all its
    siblings finished is re-placed where it starts first. With --service the group runs on
    the coordinator service (follow it later with `watch GROUP_ID`); without, in this
    process (use --wait). Nothing is submitted if any child is malformed or fits nowhere.

    Exit codes: 0 submitted (with --wait: every child completed); 1 a child failed or
    --timeout-s passed; 2 usage or federation error.
    """
    try:
        req = _group_request(
            cmd, spec, objective, distinct_sites, cpus, gpus, mem_gb, walltime_s, site
        )
    except (ValidationError, ValueError, OSError) as e:
        msg = _pydantic_message(e) if isinstance(e, ValidationError) else str(e)
        raise _error(msg, as_json) from e
    if service:
        client = _client(service, token, as_json)
        try:
            g = client.submit_group(req)
            if not (as_json and wait):
                _show_group(g, as_json, service=True)
            code = EXIT_OK
            if wait:
                code = _watch_service(
                    client,
                    [g.group_id],
                    g.cursor,
                    timeout_s=timeout_s,
                    as_json=as_json,
                    event_lines=False,
                )
                final = client.group(g.group_id)
                if as_json:
                    _emit_json(final.model_dump(mode="json"))
                else:
                    _print_group(_console(), final)
        except OpsError as e:
            raise _ops_error(e, as_json) from e
        finally:
            client.close()
        raise typer.Exit(code)
    with _federation(home, as_json, config) as coord:
        code = _group_here(coord, req, wait=wait, timeout_s=timeout_s, as_json=as_json)
    raise typer.Exit(code)


def _group_request(
    cmd: list[str] | None,
    spec: Path | None,
    objective: str,
    distinct_sites: bool,
    cpus: int,
    gpus: int,
    mem_gb: float,
    walltime_s: int,
    site: list[str] | None,
) -> GroupRequest:
    from federation.interfaces.service.models import GroupRequest

    if spec is not None:
        if cmd:
            raise ValueError("give --cmd children or --file, not both")
        doc = json.loads(spec.read_text())
        doc.setdefault("objective", objective)
        return GroupRequest.model_validate(doc)
    if not cmd:
        raise ValueError("a group needs children: --cmd (repeat it) or --file group.json")
    env = {
        "cpus_min": cpus,
        "gpus_min": gpus,
        "gpus_max": gpus if gpus else None,
        "mem_gb_min": mem_gb,
        "walltime_s": walltime_s,
        "sites": list(site or ()),
    }
    return GroupRequest.model_validate(
        {
            "children": [{"command": c, "envelope": env} for c in cmd],
            "objective": objective,
            "distinct_sites": distinct_sites,
        }
    )


def _show_group(g: GroupResponse | GroupView, as_json: bool, *, service: bool) -> None:
    from federation.interfaces.service.models import GroupResponse

    if as_json:
        if isinstance(g, GroupResponse):
            _emit_json(g.model_dump(mode="json"))
        return
    console = _console()
    _print_group(console, g)
    if service:
        console.print(f"follow it: federation watch {g.group_id}", highlight=False)


def _group_here(
    coord: Coordinator, req: GroupRequest, *, wait: bool, timeout_s: float, as_json: bool
) -> int:
    from federation.interfaces.service.models import group_view
    from federation.interfaces.service.ops import LocalOps

    ops = LocalOps(coord, refresh_s=3600)
    try:
        try:
            g = ops.submit_group(req)
        except OpsError as e:
            raise _ops_error(e, as_json) from e
        handle = ops.group_handle(g.group_id)
        for child in handle.children:
            _await_compute_id(child.handle, 30.0)
        if not (as_json and wait):
            _show_group(g, as_json, service=False)
        if not wait:
            if not as_json:
                _console().print(
                    "[yellow]not waiting: this process's coordinator ends now; use --wait, "
                    "or --service to run the group on the coordinator service[/yellow]",
                    highlight=False,
                )
            return EXIT_OK
        live = _LiveEvents(_console(stderr=as_json), enabled=not as_json)
        ended, failed = _follow(
            lambda stop: _bus_events(coord, g.cursor, ops, {g.group_id}, stop),
            {g.group_id},
            live,
            timeout_s=timeout_s,
            as_json=False,
        )
        view = group_view(handle)
        if as_json:
            _emit_json(view.model_dump(mode="json"))
        else:
            _print_group(_console(), view)
        if not ended:
            for child in handle.children:
                coord.cancel(child.handle)
            return EXIT_TASK_FAILED
        return EXIT_TASK_FAILED if failed else EXIT_OK
    finally:
        ops.cache.close()


def _bus_events(
    coord: Coordinator, after: int, ops: LocalOps, ids: set[str], stop: threading.Event
) -> Iterator[Event]:
    """This process's events after ``after`` for ``ids`` (groups expanded), as they come."""
    cursor = after
    while not stop.is_set():
        found = coord.events.await_event(cursor, task_ids=ops.expand_ids(ids), timeout_s=1.0)
        for ev in found:
            cursor = max(cursor, ev.seq)
            yield ev


def move(
    source: Annotated[str, typer.Argument(help="SITE:PATH to copy from")],
    dest: Annotated[str, typer.Argument(help="SITE:PATH to copy to (the full destination path)")],
    label: Annotated[str | None, typer.Option(help="a label for the transfer")] = None,
    sync_level: Annotated[
        str, typer.Option(help="skip what is already there by: exists, size, mtime, checksum")
    ] = "checksum",
    verify_checksum: Annotated[bool, typer.Option(help="verify checksums after copying")] = True,
    deadline_s: Annotated[float | None, typer.Option(help="give up after this long")] = None,
    wait: Annotated[
        bool, typer.Option("--wait", "-w", help="show progress until the transfer ends")
    ] = False,
    timeout_s: Annotated[float, typer.Option(help="with --wait: stop waiting after")] = 3600,
    service: ServiceOpt = None,
    token: TokenOpt = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Copy a file or directory from one site's storage to another's.

    Paths are relative to each site's storage root (its Globus collection; locally
    $FEDERATION_HOME/storage/SITE). Returns once the transfer is recorded and started; with
    --wait it shows progress (files, bytes) until it ends. With --service it runs on the
    coordinator service (follow it later with `watch TRANSFER_ID`).

    Exit codes: 0 started (with --wait: succeeded); 1 the transfer failed or --timeout-s
    passed; 2 usage error (bad path, unknown site, missing source) or service error.
    """
    from federation.interfaces.service.models import TransferRequest

    try:
        (src_site, src_path), (dst_site, dst_path) = _site_path(source), _site_path(dest)
        req = TransferRequest(
            source_site=src_site,
            source_path=src_path,
            dest_site=dst_site,
            dest_path=dst_path,
            label=label,
            sync_level=sync_level,  # type: ignore[arg-type]
            verify_checksum=verify_checksum,
            deadline_s=deadline_s,
        )
    except ValidationError as e:
        raise _error(_pydantic_message(e), as_json) from e
    except ValueError as e:
        raise _error(str(e), as_json) from e
    if service:
        client = _client(service, token, as_json)
        try:
            t = client.move_data(req)
            if as_json and not wait:
                _emit_json(t.model_dump(mode="json"))
            elif not as_json:
                _print_transfer(_console(), t)
            code = EXIT_OK
            if wait:
                code = _watch_service(
                    client,
                    [t.transfer_id],
                    t.cursor,
                    timeout_s=timeout_s,
                    as_json=as_json,
                    event_lines=False,
                )
                final = client.transfer(t.transfer_id)
                if as_json:
                    _emit_json(final.model_dump(mode="json"))
                else:
                    _print_transfer(_console(), final)
            elif not as_json:
                _console().print(f"follow it: federation watch {t.transfer_id}", highlight=False)
        except OpsError as e:
            raise _ops_error(e, as_json) from e
        finally:
            client.close()
        raise typer.Exit(code)
    with _federation(home, as_json, config) as coord:
        code = _move_here(coord, req, wait=wait, timeout_s=timeout_s, as_json=as_json)
    raise typer.Exit(code)


def _site_path(text: str) -> tuple[str, str]:
    site, sep, path = text.partition(":")
    if not sep or not site or not path:
        raise ValueError(f"{text!r} is not SITE:PATH (e.g. delta:inputs/data.csv)")
    return site, path


def _move_here(
    coord: Coordinator, req: TransferRequest, *, wait: bool, timeout_s: float, as_json: bool
) -> int:
    from federation.interfaces.service.ops import LocalOps

    ops = LocalOps(coord, refresh_s=3600)
    try:
        try:
            t = ops.move_data(req)
        except OpsError as e:
            raise _ops_error(e, as_json) from e
        # in this process a local copy ends with the process: follow it either way
        live = _LiveEvents(_console(stderr=as_json), enabled=not as_json)
        ended, failed = _follow(
            lambda stop: _bus_events(coord, t.cursor, ops, {t.transfer_id}, stop),
            {t.transfer_id},
            live,
            timeout_s=timeout_s if wait else 600,
            as_json=False,
        )
        final = ops.transfer(t.transfer_id)
        if as_json:
            _emit_json(final.model_dump(mode="json"))
        else:
            _print_transfer(_console(), final)
        if not ended:
            return EXIT_TASK_FAILED
        return EXIT_TASK_FAILED if failed else EXIT_OK
    finally:
        ops.cache.close()


def register(app: typer.Typer) -> None:
    """Add ``draft``, ``submit``, ``group``, ``move``, ``result`` and ``watch`` to ``app``."""
    app.command("draft")(draft)
    app.command("submit")(submit)
    app.command("group")(group)
    app.command("move")(move)
    app.command("result")(result)
    app.command("watch")(watch)


__all__ = [
    "EXIT_ERROR",
    "EXIT_NOT_DONE",
    "EXIT_OK",
    "EXIT_TASK_FAILED",
    "draft",
    "envelope_rows",
    "group",
    "move",
    "register",
    "result",
    "submit",
    "watch",
]
