"""``federation move``: copy a file or directory from one site's storage to another's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError

from federation.interfaces.cli.follow import LiveEvents, bus_events, follow, watch_service
from federation.interfaces.cli.output import (
    EXIT_OK,
    EXIT_TASK_FAILED,
    ConfigOpt,
    HomeOpt,
    JsonOpt,
    ServiceOpt,
    TokenOpt,
    emit_json,
    fail,
    local_federation,
    make_console,
    ops_failure,
    pydantic_message,
    service_client,
)
from federation.interfaces.cli.render import print_transfer
from federation.interfaces.service.errors import OpsError

if TYPE_CHECKING:
    from federation.interfaces.service.models import TransferRequest
    from federation.runtime.coordinator import Coordinator


def move(
    source: Annotated[str, typer.Argument(help="SITE:PATH to copy from")],
    dest: Annotated[str, typer.Argument(help="SITE:PATH to copy to (the full destination path)")],
    label: Annotated[str | None, typer.Option(help="a label for the transfer")] = None,
    sync_level: Annotated[
        str, typer.Option(help="skip what is already there by: exists, size, mtime, checksum")
    ] = "checksum",
    verify_checksum: Annotated[bool, typer.Option(help="verify checksums after copying")] = True,
    deadline_s: Annotated[float | None, typer.Option(help="give up after this long")] = None,
    paths: Annotated[
        str,
        typer.Option(
            help="workspace: PATHs are relative to your workspace on each site (where your "
            "tasks run); storage: relative to the site's storage root (shared data)"
        ),
    ] = "workspace",
    workflow: Annotated[
        str | None, typer.Option(help="with --paths workspace: a named workflow's workspace")
    ] = None,
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

    Paths are relative to your workspace on each site (workspaces/YOU/default under its
    storage root, where your tasks run and their results' outputs are named), or with
    --paths storage to the storage root itself (its Globus collection; locally
    $FEDERATION_HOME/storage/SITE), where other callers' workspaces are refused. Returns
    once the transfer is recorded and started; with
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
            paths=paths,  # type: ignore[arg-type]
            workflow=workflow,
        )
    except ValidationError as e:
        raise fail(pydantic_message(e), as_json) from e
    except ValueError as e:
        raise fail(str(e), as_json) from e
    if service:
        client = service_client(service, token, as_json)
        try:
            t = client.move_data(req)
            if as_json and not wait:
                emit_json(t.model_dump(mode="json"))
            elif not as_json:
                print_transfer(make_console(), t)
            code = EXIT_OK
            if wait:
                code = watch_service(
                    client,
                    [t.transfer_id],
                    t.cursor,
                    timeout_s=timeout_s,
                    as_json=as_json,
                    event_lines=False,
                )
                final = client.transfer(t.transfer_id)
                if as_json:
                    emit_json(final.model_dump(mode="json"))
                else:
                    print_transfer(make_console(), final)
            elif not as_json:
                make_console().print(
                    f"follow it: federation watch {t.transfer_id}", highlight=False
                )
        except OpsError as e:
            raise ops_failure(e, as_json) from e
        finally:
            client.close()
        raise typer.Exit(code)
    with local_federation(home, as_json, config) as coord:
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
            raise ops_failure(e, as_json) from e
        # in this process a local copy ends with the process: follow it either way
        live = LiveEvents(make_console(stderr=as_json), enabled=not as_json)
        ended, failed = follow(
            lambda stop: bus_events(coord, t.cursor, ops, {t.transfer_id}, stop),
            {t.transfer_id},
            live,
            timeout_s=timeout_s if wait else 600,
            as_json=False,
        )
        final = ops.transfer(t.transfer_id)
        if as_json:
            emit_json(final.model_dump(mode="json"))
        else:
            print_transfer(make_console(), final)
        if not ended:
            return EXIT_TASK_FAILED
        return EXIT_TASK_FAILED if failed else EXIT_OK
    finally:
        ops.cache.close()
