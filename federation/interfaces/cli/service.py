"""CLI pieces for the service: ``serve``, ``token issue|revoke|list``, and for a caller of
a ``service.auth: globus`` service, ``token globus`` (a Globus token for its scope) and
``token logout``.

Mounted into the main CLI with :func:`register` (or piece by piece: ``serve_command`` as a
command, ``token_app`` as the ``token`` group). ``federation mcp`` is
:mod:`federation.interfaces.mcp_cli`'s.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from federation.security.tokens import TokenStore

HomeOpt = Annotated[
    Path | None,
    typer.Option(help="federation home (default: $FEDERATION_HOME or ~/.federation)"),
]
SiteOpt = Annotated[
    list[str] | None, typer.Option("--site", "-s", help="limit to these sites (repeatable)")
]

token_app = typer.Typer(
    help="Bearer tokens for `federation serve` and the MCP HTTP transport.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def serve_command(
    host: Annotated[str, typer.Option(help="bind address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port")] = 8765,
    home: HomeOpt = None,
    site: SiteOpt = None,
    no_up: Annotated[bool, typer.Option("--no-up", help="do not bring the sites up")] = False,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
    config: Annotated[
        Path | None,
        typer.Option(
            envvar="FEDERATION_CONFIG",
            help="serve the sites of this federation.yaml (local and Globus cloud sites) "
            "instead of the embedded local federation ($FEDERATION_CONFIG)",
            show_default=False,
        ),
    ] = None,
    placement: Annotated[
        str | None,
        typer.Option(
            help="placement policy: auto (the learned twin; hedges only where copies can "
            "be withdrawn), earliest-start, shortest-queue, best-feasible, twin-hedge, "
            "twin-watch or fixed:<site> (default: the config's `placement`, else auto)",
            show_default=False,
        ),
    ] = None,
    in_memory: Annotated[
        bool,
        typer.Option(
            "--in-memory",
            help="keep tasks, groups, transfers and events in memory only: lost when the "
            "service stops (default: durable in <home>/coordinator.db, re-attached and "
            "resumed on restart)",
        ),
    ] = False,
) -> None:
    """Serve the HTTP API (bearer tokens from `federation token issue`).

    Durable by default: tasks, groups, transfers and events are kept in
    $FEDERATION_HOME/coordinator.db, a restarted service re-attaches to the tasks left in
    flight, and callers' event cursors continue (--in-memory: nothing kept). Every
    submission passes the caller policy gate ($FEDERATION_HOME/policy.yaml and token
    policies; see docs/security.md) and is written to the audit log.
    """
    from federation.core.errors import BadEnvelopeError, ConfigError, StoreInUseError
    from federation.interfaces.service.server import serve
    from federation.placement.policies import get_policy

    if placement is not None and placement != "auto":
        try:
            get_policy(placement)
        except BadEnvelopeError as e:
            raise typer.BadParameter(str(e), param_hint="--placement") from e
    try:
        serve(
            host,
            port,
            home,
            site or None,
            bring_up=not no_up,
            log_level=log_level,
            config=config,
            placement=placement,
            in_memory=in_memory,
        )
    except ConfigError as e:
        raise typer.BadParameter(str(e), param_hint="--config") from e
    except StoreInUseError as e:
        typer.echo(f"federation serve: {e}", err=True)
        raise typer.Exit(2) from e


def _store(home: Path | None) -> TokenStore:
    from federation.security.tokens import TokenStore, default_token_db

    return TokenStore(default_token_db(home))


@token_app.command("issue")
def token_issue(
    name: Annotated[str, typer.Argument(help="who the token is for (shown in logs and lists)")],
    home: HomeOpt = None,
) -> None:
    """Issue a token; it is printed once and stored only as a hash."""
    try:
        issued = _store(home).issue(name)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="NAME") from e
    err = Console(stderr=True)
    err.print(f"issued token [bold]{issued.id}[/bold] for {issued.name}; it is shown only once:")
    sys.stdout.write(issued.token + "\n")


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(metavar="ID", help="the id from `token list`")],
    home: HomeOpt = None,
) -> None:
    """Revoke a token by id; requests with it get 401 from then on."""
    if not _store(home).revoke(token_id):
        Console(stderr=True).print(f"[red]error:[/red] no active token with id {token_id!r}")
        raise typer.Exit(1)
    Console().print(f"revoked {token_id}")


@token_app.command("list")
def token_list(
    home: HomeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """List tokens (ids, names, dates; never the secrets)."""
    infos = _store(home).list_tokens()
    if as_json:
        sys.stdout.write(json.dumps([i.model_dump(mode="json") for i in infos], indent=2) + "\n")
        return
    table = Table(title="tokens")
    for col in ("id", "name", "created", "last used", "state"):
        table.add_column(col)
    for i in infos:
        table.add_row(
            i.id,
            i.name,
            i.created_at.strftime("%Y-%m-%d %H:%M"),
            i.last_used_at.strftime("%Y-%m-%d %H:%M") if i.last_used_at else "-",
            "[green]active[/green]" if i.active else "[red]revoked[/red]",
        )
    Console().print(table)


ScopeOpt = Annotated[
    str,
    typer.Option(
        envvar="FEDERATION_SERVICE_SCOPE",
        help="the service's Globus scope (its operator says which; $FEDERATION_SERVICE_SCOPE)",
        show_default=False,
    ),
]
NativeOpt = Annotated[
    str | None,
    typer.Option(
        "--client-id",
        help="the native-app client to log in with (default: the Globus Compute SDK's)",
        show_default=False,
    ),
]
StorageOpt = Annotated[
    Path | None,
    typer.Option(help="token file (.json or .db); default: where globus-sdk keeps them"),
]


@token_app.command("globus")
def token_globus(
    scope: ScopeOpt,
    client_id: NativeOpt = None,
    token_storage: StorageOpt = None,
    force: Annotated[bool, typer.Option(help="log in again even if tokens are stored")] = False,
) -> None:
    """Print a Globus access token for a `service.auth: globus` service's scope.

    Logs you in on this terminal the first time (a URL to open, a code to paste back);
    later runs refresh the stored token. Use it as the bearer token:
    `export FEDERATION_TOKEN=$(federation token globus --scope SCOPE)`.
    """
    import uuid

    from federation.core.errors import FederationError
    from federation.sites.globus_auth import service_app, service_token

    try:
        cid = uuid.UUID(client_id) if client_id else None
        app = service_app(scope, client_id=cid, token_storage=token_storage)
        token = service_token(app, scope, force=force)
    except (FederationError, ValueError) as e:
        Console(stderr=True).print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from e
    sys.stdout.write(token + "\n")


@token_app.command("logout")
def token_logout(
    service: Annotated[
        str, typer.Option(envvar="FEDERATION_SERVICE", help="the service ($FEDERATION_SERVICE)")
    ],
    token: Annotated[
        str, typer.Option(envvar="FEDERATION_TOKEN", help="your token for it", show_default=False)
    ],
    scope: Annotated[
        str | None,
        typer.Option(
            envvar="FEDERATION_SERVICE_SCOPE",
            help="also revoke and delete your own stored token for this scope",
            show_default=False,
        ),
    ] = None,
    client_id: NativeOpt = None,
    token_storage: StorageOpt = None,
    force: Annotated[
        bool, typer.Option(help="log out even with tasks or transfers still open")
    ] = False,
) -> None:
    """Log out of a `service.auth: globus` service: it revokes and deletes the Globus
    tokens it holds for you; with --scope, your own token for it is revoked here too."""
    import uuid

    from federation.interfaces.service.client import ServiceClient
    from federation.interfaces.service.errors import OpsError

    err = Console(stderr=True)
    client = ServiceClient(service, token)
    try:
        done = client.logout(force=force)
    except OpsError as e:
        b = e.body
        err.print(f"[red]error:[/red] {b.error}: {b.message}" + (f" ({b.hint})" if b.hint else ""))
        raise typer.Exit(2) from e
    finally:
        client.close()
    err.print(
        f"logged out {done.caller}: {done.revoked} token(s) revoked, {done.deleted} deleted"
        + (f"; not revoked: {', '.join(done.failed)}" if done.failed else "")
    )
    if scope:
        from federation.sites.globus_auth import service_app

        cid = uuid.UUID(client_id) if client_id else None
        service_app(scope, client_id=cid, token_storage=token_storage, interactive=False).logout()
        err.print(f"your own token for {scope} revoked and deleted")


def register(app: typer.Typer) -> None:
    """Mount ``serve`` and ``token ...`` on ``app``."""
    app.command("serve")(serve_command)
    app.add_typer(token_app, name="token")
