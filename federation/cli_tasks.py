"""``federation draft | submit | result | watch``: tasks from the command line.

``register(app)`` adds the commands to a typer app (``federation.cli`` calls it).

Exit codes: 0 ok; 1 the task failed (or did not finish within ``--timeout-s``); 2 usage or
federation error (bad envelope, no feasible site, unknown site, federation down).

Each invocation is its own process with its own embedded coordinator (and in-process Globus
Compute service), so a task can only be followed by the process that submitted it:
``submit --wait`` streams its events and prints its result. ``result`` and ``watch`` for a
task submitted by another process need a long-lived coordinator (the HTTP service); they do
not talk to it yet, so they say so and exit 2 rather than pretend.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from federation.drafting import EnvelopeDraft, TaskHints, draft_envelope
from federation.envelope import ResourceEnvelope
from federation.errors import FederationError
from federation.events import Event
from federation.jupyter import envelope_rows
from federation.tasks import ShellTask

if TYPE_CHECKING:
    from federation.coordinator import Coordinator
    from federation.handles import TaskHandle, TaskResult

EXIT_OK, EXIT_TASK_FAILED, EXIT_ERROR = 0, 1, 2

NO_SERVICE = (
    "following a task across invocations needs a long-lived coordinator, i.e. the HTTP "
    "service, and this command does not talk to it yet: every other `federation` invocation "
    "runs its own embedded coordinator, and only the process that submitted a task can follow "
    "it. Use `federation submit --wait ...` to stream a task's events and get its result, or "
    "the Python API / notebook (federation.jupyter.FederatedExecutor) to keep tasks across calls."
)

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
    from federation.sites.spec import load_sites

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
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Place a shell command on the federation and run it in a Slurm job of matching shape.

    Prints the placement and its decision trace (why this site, why not each other one).
    With --wait it streams the task's events as they arrive (queued, started with its
    Slurm job id, completed or failed) and prints the result: exit code 0 if the command
    succeeded, 1 if it failed. Without --wait the job still runs on the chosen site, but
    this process's coordinator ends with it, so no later command can collect the result
    (that needs the HTTP service; `result`/`watch` do not use it yet).
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
    with _federation(home, as_json) as coord:
        code = _submit(coord, task, env, wait=wait, timeout_s=timeout_s, as_json=as_json)
    raise typer.Exit(code)


def _load_envelope(path: Path) -> ResourceEnvelope:
    doc = json.loads(path.read_text())
    if isinstance(doc, dict) and "envelope" in doc and "validation" in doc:
        doc = doc["envelope"]  # the output of `draft --json`
    return ResourceEnvelope(**doc)


@contextmanager
def _federation(home: Path | None, as_json: bool) -> Iterator[Coordinator]:
    from federation.local import LocalSites

    local = LocalSites(home=home)
    try:
        local.up()
        coord = local.connect(telemetry=True)
    except FederationError as e:
        raise _error(f"local federation unavailable: {e}", as_json) from e
    except Exception as e:
        raise _error(
            f"local federation unavailable ({type(e).__name__}: {e}); "
            "check `federation sites status`",
            as_json,
        ) from e
    try:
        yield coord
    finally:
        coord.close()
        if local.service is not None:
            local.service.close()


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
            "not waiting: the job runs on its site, but this process's coordinator ends now, "
            "so no later command can collect its result; use --wait"
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
        style = {"completed": "green", "failed": "red", "started": "cyan", "retried": "yellow"}.get(
            kind, ""
        )
        detail = ", ".join(f"{k}={v}" for k, v in ev.detail.items())
        at = (ev.at - self._t0).total_seconds()
        self.console.print(
            f"+{at:6.1f}s  [{style or 'default'}]{kind:<9}[/]  {ev.site or '-'}  {detail}",
            highlight=False,
        )
        status = {
            "queued": f"queued on {ev.site}",
            "started": f"running on {ev.site} (Slurm job {ev.detail.get('slurm_job_id')})",
            "retried": f"re-placed on {ev.site} after {ev.detail.get('failure', 'a failure')}",
        }.get(kind, kind)
        with self._lock:
            if self._progress is not None:
                self._progress.update(self._task, description=status)


# --- result / watch: honest about what one process can do -------------------------------------
def result(
    task_id: Annotated[str, typer.Argument(help="a task id printed by `submit`")],
    as_json: JsonOpt = False,
) -> None:
    """Not available yet: fetching a task of another process needs the HTTP service.

    This command does not talk to the service yet, and every other invocation runs its own
    coordinator; use `submit --wait` to get a task's result.
    """
    raise _error(f"cannot fetch task {task_id}: {NO_SERVICE}", as_json)


def watch(
    task_id: Annotated[str, typer.Argument(help="a task id printed by `submit`")],
    as_json: JsonOpt = False,
) -> None:
    """Not available yet: watching a task of another process needs the HTTP service.

    `submit --wait` watches the task it submits (live events with a spinner).
    """
    raise _error(f"cannot watch task {task_id}: {NO_SERVICE}", as_json)


def register(app: typer.Typer) -> None:
    """Add ``draft``, ``submit``, ``result`` and ``watch`` to ``app``."""
    app.command("draft")(draft)
    app.command("submit")(submit)
    app.command("result")(result)
    app.command("watch")(watch)


__all__ = [
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_TASK_FAILED",
    "draft",
    "envelope_rows",
    "register",
    "result",
    "submit",
    "watch",
]
