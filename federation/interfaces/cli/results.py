"""``federation result`` (where work stands, at once) and ``federation watch`` (its events,
live, until it ends)."""

from __future__ import annotations

from contextlib import suppress
from typing import TYPE_CHECKING, Annotated, Any

import typer

from federation.core.errors import FederationError
from federation.interfaces.cli.follow import watch_service
from federation.interfaces.cli.output import (
    EXIT_NOT_DONE,
    EXIT_OK,
    EXIT_TASK_FAILED,
    ConfigOpt,
    HomeOpt,
    JsonOpt,
    ServiceOpt,
    TokenOpt,
    emit_json,
    local_federation,
    make_console,
    ops_failure,
    service_client,
)
from federation.interfaces.cli.render import print_group, print_status, print_transfer
from federation.interfaces.service.errors import OpsError

if TYPE_CHECKING:
    from federation.interfaces.service.client import ServiceClient


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
        with local_federation(home, as_json, config, bring_up=False) as coord:
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
    _show_results(service_client(service, token, as_json), ids, as_json)


def _show_results(client: ServiceClient, ids: list[str], as_json: bool) -> None:
    console = make_console()
    code = EXIT_OK
    docs: list[dict[str, Any]] = []
    try:
        for any_id in ids:
            kind, view = _kind_of(client, any_id)
            docs.append({"kind": kind} | view.model_dump(mode="json"))
            if kind == "task":
                done, bad = view.done, view.state == "failed"
                if not as_json:
                    print_status(console, view)
            elif kind == "group":
                done = view.done
                bad = any(c.state == "failed" for c in view.children)
                if not as_json:
                    print_group(console, view)
            else:
                done, bad = view.done, view.state in ("failed", "cancelled")
                if not as_json:
                    print_transfer(console, view)
            if bad:
                code = EXIT_TASK_FAILED
            elif not done and code == EXIT_OK:
                code = EXIT_NOT_DONE
    except OpsError as e:
        raise ops_failure(e, as_json) from e
    finally:
        client.close()
    if as_json:
        emit_json(docs[0] if len(docs) == 1 else docs)
    raise typer.Exit(code)


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
    client = service_client(service, token, as_json)
    try:
        code = watch_service(client, list(ids), after, timeout_s=timeout_s, as_json=as_json)
    finally:
        client.close()
    raise typer.Exit(code)
