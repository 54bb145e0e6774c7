"""``federation draft`` (an envelope for a described task) and ``federation submit`` (a
shell command placed on the federation)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError

from federation.core.envelope import ResourceEnvelope
from federation.core.errors import FederationError
from federation.core.tasks import ShellTask
from federation.interfaces.cli.follow import LiveEvents, await_compute_id, watch_service
from federation.interfaces.cli.output import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_TASK_FAILED,
    ConfigOpt,
    HomeOpt,
    JsonOpt,
    ServiceOpt,
    SiteOpt,
    TokenOpt,
    emit_json,
    fail,
    local_federation,
    make_console,
    ops_failure,
    pydantic_message,
    service_client,
)
from federation.interfaces.cli.render import (
    print_draft,
    print_placement,
    print_result,
    print_status,
    result_doc,
)
from federation.interfaces.service.errors import OpsError
from federation.placement.drafting import TaskHints, draft_envelope

if TYPE_CHECKING:
    from federation.interfaces.service.client import ServiceClient
    from federation.runtime.coordinator import Coordinator


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
        raise fail(f"invalid hint: {pydantic_message(e)}", as_json) from e
    except FederationError as e:
        raise fail(str(e), as_json) from e
    if as_json:
        emit_json(result.model_dump(mode="json"))
        return
    print_draft(make_console(), description, result)


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
    node_class: Annotated[
        list[str] | None,
        typer.Option(help="allowed node class, 'site:class' or 'class' (repeatable)"),
    ] = None,
    qos: Annotated[list[str] | None, typer.Option(help="allowed QOS (repeatable)")] = None,
    envelope: Annotated[
        Path | None,
        typer.Option(
            help="JSON file with an envelope (or the output of `draft --json`); "
            "replaces the resource options"
        ),
    ] = None,
    name: Annotated[str, typer.Option(help="task label (default: the command's first word)")] = "",
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="submit nothing: print the placement, the node class and the exact sbatch "
            "options the job would carry",
        ),
    ] = False,
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
    With --dry-run nothing is submitted: it prints where the task would go, its node class
    and the sbatch options its job would carry (read off the site's endpoint template).

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
                node_classes=tuple(node_class or ()),
                qos=tuple(qos or ()),
            )
        )
        task = ShellTask(command=cmd, name=name)
    except (FederationError, ValidationError, ValueError, OSError) as e:
        raise fail(str(e), as_json) from e
    if service:
        client = service_client(service, token, as_json)
        try:
            if dry_run:
                raise typer.Exit(_dry_run_remote(client, task, env, as_json))
            code = _submit_remote(
                client, task, env, wait=wait, timeout_s=timeout_s, as_json=as_json
            )
        except OpsError as e:
            raise ops_failure(e, as_json) from e
        finally:
            client.close()
        raise typer.Exit(code)
    with local_federation(home, as_json, config) as coord:
        if dry_run:
            code = _dry_run(coord, task, env, as_json)
        else:
            code = _submit(coord, task, env, wait=wait, timeout_s=timeout_s, as_json=as_json)
    raise typer.Exit(code)


def _dry_run(coord: Coordinator, task: ShellTask, env: ResourceEnvelope, as_json: bool) -> int:
    try:
        dry = coord.dry_run(task, env)
    except FederationError as e:
        raise fail(str(e), as_json) from e
    if as_json:
        emit_json(dry.model_dump(mode="json"))
    else:
        make_console().print(dry.text(), highlight=False, markup=False)
    return EXIT_OK


def _dry_run_remote(
    client: ServiceClient, task: ShellTask, env: ResourceEnvelope, as_json: bool
) -> int:
    from federation.interfaces.service.models import TaskRequest

    sub = client.submit(
        TaskRequest(command=task.command, name=task.name, envelope=env), dry_run=True
    )
    if as_json:
        emit_json(sub.model_dump(mode="json"))
    else:
        make_console().print(sub.explain, highlight=False, markup=False)
    return EXIT_OK


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
    console = make_console()
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
            emit_json(doc | {"waited": False})
        else:
            console.print(f"follow it: federation watch {sub.task_id}", highlight=False)
        return EXIT_OK
    code = watch_service(
        client, [sub.task_id], sub.cursor, timeout_s=timeout_s, as_json=as_json, event_lines=False
    )
    st = client.status(sub.task_id)
    if as_json:
        emit_json(doc | {"waited": True, "status": st.model_dump(mode="json")})
    else:
        print_status(console, st)
    return code


def _load_envelope(path: Path) -> ResourceEnvelope:
    doc = json.loads(path.read_text())
    if isinstance(doc, dict) and "envelope" in doc and "validation" in doc:
        doc = doc["envelope"]  # the output of `draft --json`
    return ResourceEnvelope(**doc)


def _submit(
    coord: Coordinator,
    task: ShellTask,
    env: ResourceEnvelope,
    *,
    wait: bool,
    timeout_s: float,
    as_json: bool,
) -> int:
    console = make_console()
    live = LiveEvents(console, enabled=wait and not as_json)
    try:
        handle = coord.submit_task(task, env, on_event=live.on_event)
    except FederationError as e:
        raise fail(str(e), as_json) from e
    accepted = await_compute_id(handle, 30.0)
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
        print_placement(console, handle, accepted)
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
            emit_json(doc | {"waited": False, "note": note})
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
            emit_json(doc | {"waited": True, "status": "timeout", "error": msg})
        else:
            console.print(f"[red]{msg}[/red]", highlight=False)
        return EXIT_TASK_FAILED
    res = coord.get_result(handle)
    if as_json:
        emit_json(doc | {"waited": True, "result": result_doc(res)})
    else:
        print_result(console, res)
    return EXIT_OK if res.status == "completed" else EXIT_TASK_FAILED
