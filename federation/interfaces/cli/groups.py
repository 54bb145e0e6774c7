"""``federation group``: related tasks submitted as one group, on distinct sites while
that is feasible."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError

from federation.interfaces.cli.follow import (
    LiveEvents,
    await_compute_id,
    bus_events,
    follow,
    watch_service,
)
from federation.interfaces.cli.output import (
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
from federation.interfaces.cli.render import print_group
from federation.interfaces.service.errors import OpsError

if TYPE_CHECKING:
    from federation.interfaces.service.models import GroupRequest, GroupResponse, GroupView
    from federation.runtime.coordinator import Coordinator


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
        msg = pydantic_message(e) if isinstance(e, ValidationError) else str(e)
        raise fail(msg, as_json) from e
    if service:
        client = service_client(service, token, as_json)
        try:
            g = client.submit_group(req)
            if not (as_json and wait):
                _show_group(g, as_json, service=True)
            code = EXIT_OK
            if wait:
                code = watch_service(
                    client,
                    [g.group_id],
                    g.cursor,
                    timeout_s=timeout_s,
                    as_json=as_json,
                    event_lines=False,
                )
                final = client.group(g.group_id)
                if as_json:
                    emit_json(final.model_dump(mode="json"))
                else:
                    print_group(make_console(), final)
        except OpsError as e:
            raise ops_failure(e, as_json) from e
        finally:
            client.close()
        raise typer.Exit(code)
    with local_federation(home, as_json, config) as coord:
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
            emit_json(g.model_dump(mode="json"))
        return
    console = make_console()
    print_group(console, g)
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
            raise ops_failure(e, as_json) from e
        handle = ops.group_handle(g.group_id)
        for child in handle.children:
            await_compute_id(child.handle, 30.0)
        if not (as_json and wait):
            _show_group(g, as_json, service=False)
        if not wait:
            if not as_json:
                make_console().print(
                    "[yellow]not waiting: this process's coordinator ends now; use --wait, "
                    "or --service to run the group on the coordinator service[/yellow]",
                    highlight=False,
                )
            return EXIT_OK
        live = LiveEvents(make_console(stderr=as_json), enabled=not as_json)
        ended, failed = follow(
            lambda stop: bus_events(coord, g.cursor, ops, {g.group_id}, stop),
            {g.group_id},
            live,
            timeout_s=timeout_s,
            as_json=False,
        )
        view = group_view(handle)
        if as_json:
            emit_json(view.model_dump(mode="json"))
        else:
            print_group(make_console(), view)
        if not ended:
            for child in handle.children:
                coord.cancel(child.handle)
            return EXIT_TASK_FAILED
        return EXIT_TASK_FAILED if failed else EXIT_OK
    finally:
        ops.cache.close()
