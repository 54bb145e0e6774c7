"""What the work commands share: exit codes, common options, console and JSON output,
error exits, the service client and this process's own coordinator."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console

from federation.core.errors import FederationError
from federation.interfaces.service.errors import OpsError

if TYPE_CHECKING:
    from federation.interfaces.service.client import ServiceClient
    from federation.runtime.coordinator import Coordinator

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


def make_console(stderr: bool = False) -> Console:
    probe = Console(stderr=stderr)
    if probe.is_terminal and probe.width >= 100:
        return probe
    return Console(stderr=stderr, width=120)


def emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    sys.stdout.flush()


def fail(message: str, as_json: bool, code: int = EXIT_ERROR) -> typer.Exit:
    if as_json:
        emit_json({"error": message, "exit_code": code})
    else:
        make_console(stderr=True).print(
            f"[red]error:[/red] {message}", highlight=False, markup=True
        )
    return typer.Exit(code)


def pydantic_message(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"])
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


@contextmanager
def local_federation(
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
        raise fail(f"{where} unavailable: {e}", as_json) from e
    except Exception as e:
        raise fail(
            f"{where} unavailable ({type(e).__name__}: {e}); check `federation sites status`",
            as_json,
        ) from e
    with conn:
        yield conn.coord


def service_client(service: str | None, token: str | None, as_json: bool) -> ServiceClient:
    from federation.interfaces.service.client import ServiceClient

    if not service:
        raise fail(
            "this needs a running coordinator service: pass --service URL (or set "
            "$FEDERATION_SERVICE) and --token (or $FEDERATION_TOKEN); start one with "
            "`federation serve` and issue a token with `federation token issue NAME`. Without "
            "a service, each command runs its own coordinator and only `--wait` on the "
            "command that submitted can follow the work.",
            as_json,
        )
    if not token:
        raise fail(
            f"--service {service} needs a bearer token: pass --token or set $FEDERATION_TOKEN "
            "(`federation token issue NAME` on the service's machine prints one)",
            as_json,
        )
    return ServiceClient(service, token)


def ops_failure(e: OpsError, as_json: bool) -> typer.Exit:
    b = e.body
    msg = f"{b.error}: {b.message}" + (f" ({b.hint})" if b.hint else "")
    if as_json:
        emit_json({"error": b.error, "message": b.message, "hint": b.hint, "exit_code": 2})
        return typer.Exit(EXIT_ERROR)
    return fail(msg, as_json)
