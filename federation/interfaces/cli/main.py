"""Command line for humans: ``federation demo``, ``sites ...``, ``inspect``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import click
import typer
from rich.table import Table

from federation.core.charge import unit_label
from federation.core.errors import FederationError
from federation.core.snapshot import FederationSnapshot
from federation.interfaces.cli.config import config_app
from federation.interfaces.cli.policy import register as register_policy
from federation.interfaces.cli.service import register as register_service
from federation.interfaces.cli.sites import sites_app
from federation.interfaces.cli.tasks import register as register_tasks
from federation.interfaces.mcp_cli import mcp_command

app = typer.Typer(
    help="Agentic control of federated HPC resources (Globus Compute + Slurm).",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.add_typer(sites_app, name="sites")
app.add_typer(config_app, name="config")
register_service(app)  # serve, token
app.command("mcp")(mcp_command)  # the MCP server (federation-mcp is the same command)
register_tasks(app)  # draft, submit, group, move, result, watch
register_policy(app)  # policy show|check|set|list|approve|reject|audit


PathOpt = Annotated[
    str | None,
    typer.Option(
        "--path",
        envvar="FEDERATION_PATH",
        help="how the local sites are reached: embedded (the offline service's shortcuts) or "
        "cloud (exactly what real endpoints offer, through the strict stand-in of the Globus "
        "Compute service) ($FEDERATION_PATH; default: cloud for demo, embedded otherwise)",
        show_default=False,
    ),
]


@app.command()
def demo(
    site: Annotated[
        list[str] | None, typer.Option(help="limit to these sites (repeatable)")
    ] = None,
    no_load: Annotated[bool, typer.Option(help="do not add background queue load")] = False,
    path: PathOpt = None,
) -> None:
    """Run the main job: bring the local federation up and run a round of tasks."""
    from federation.interfaces.demo import run_demo

    raise typer.Exit(run_demo(sites=site or None, load=not no_load, path=path))


@app.command()
def inspect(
    site: Annotated[
        list[str] | None, typer.Option(help="limit to these sites (repeatable)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the snapshot as JSON")] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            envvar="FEDERATION_CONFIG",
            help="federation.yaml: probe the sites it names ($FEDERATION_CONFIG); "
            "default: the embedded local federation",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Probe every site through its endpoint and print the snapshot.

    Exit codes: 0 every site answered; 1 a site did not (one line each on stderr: what
    failed and what to check); 2 the sites could not be reached at all (no route to
    Globus, a refused token: one line per site) or the config is invalid."""
    from federation.deploy.connect import connect
    from federation.interfaces.demo import snapshot_table, wide_console
    from federation.interfaces.reach import probe_failures

    try:
        conn = connect(config, sites=site or None)
    except (FederationError, ValueError) as e:
        raise _unreached(config, e) from None
    with conn:
        snap = conn.coord.inspect_federation()
    if as_json:
        sys.stdout.write(json.dumps(snap.model_dump(mode="json"), indent=2) + "\n")
    else:
        console = wide_console()
        console.print(snapshot_table(snap))
        console.print(credit_table(snap))
    down = probe_failures(snap)
    for u in down:
        typer.echo(u.line(), err=True)
    raise typer.Exit(1 if down else 0)


def _unreached(config: Path | None, err: Exception) -> typer.Exit:
    """Print why connecting failed, one line per site where it is about the sites (no
    route to Globus, a refused token), and the exit (2) that says so."""
    from federation.deploy.connect import configured
    from federation.interfaces.reach import connect_failures

    lines = connect_failures(configured(config), err) if isinstance(err, FederationError) else []
    if not lines:
        typer.echo(f"error: {err}", err=True)
    for u in lines:
        typer.echo(u.line(), err=True)
    return typer.Exit(2)


@app.command()
def doctor(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            envvar="FEDERATION_CONFIG",
            help="federation.yaml: check the sites it names ($FEDERATION_CONFIG); default: "
            "the embedded local federation",
            show_default=False,
        ),
    ] = None,
    site: Annotated[
        list[str] | None, typer.Option(help="check only these sites (repeatable)")
    ] = None,
    task_timeout_s: Annotated[
        float, typer.Option(help="how long a tiny task may wait in a queue before a warning")
    ] = 300.0,
    as_json: Annotated[bool, typer.Option("--json", help="print the checks as JSON")] = False,
    path: PathOpt = None,
    offline: Annotated[
        bool,
        typer.Option(
            "--offline",
            help="check only what needs no network: each site's folder, endpoint files, "
            "template and stored tokens (nothing is contacted or started)",
        ),
    ] = False,
) -> None:
    """Check every site end to end and say what to fix: endpoint online, the workers'
    Python, a tiny task in a Slurm job, cancel, a data transfer (--offline: the site
    folders, endpoint files and stored tokens only).

    Exit codes: 0 every check passed (warnings allowed), 1 a check failed, 2 the sites
    could not be reached at all (one line per site: no route to Globus, a refused token)
    or the config is invalid."""
    from rich.console import Console

    from federation.deploy.connect import configured, connect
    from federation.interfaces.doctor import Check, Doctor, SiteReport

    console = Console(stderr=as_json)
    style = {"ok": "green", "warn": "yellow", "fail": "red", "skipped": "dim"}

    def show(c: Check) -> None:
        if not as_json:
            console.print(
                f"[{style[c.status]}]{c.status:>7}[/]  {c.site:<8} {c.check:<9} {c.detail} "
                f"[dim]({c.seconds:.1f} s)[/]"
            )

    reports: list[SiteReport]
    if offline:
        from federation.interfaces.doctor_offline import offline_reports

        cfg = configured(config)
        if not as_json:
            where = str(cfg) if cfg else "the package's example sites"
            console.print(f"[bold]federation doctor --offline[/bold]: {where}")
        try:
            reports = offline_reports(cfg, on_check=show)
        except FederationError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from e
        reports = [r for r in reports if not site or r.site in site]
    else:
        try:
            conn = connect(config, local_path=path)
        except (FederationError, ValueError) as e:
            raise _unreached(config, e) from None
        with conn:
            where = str(conn.config) if conn.config else "the embedded local federation"
            if not as_json:
                console.print(f"[bold]federation doctor[/bold]: {where}")
            doctor_ = Doctor(conn.coord, task_timeout_s=task_timeout_s, on_check=show)
            reports = doctor_.run(site or None)
    if as_json:
        doc = [
            {"site": r.site, "ok": r.ok, "checks": [c.model_dump() for c in r.checks]}
            for r in reports
        ]
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    bad = [r.site for r in reports if not r.ok]
    if not as_json:
        console.print(
            "[green]every site passed[/green]"
            if not bad
            else f"[red]to fix: {', '.join(bad)}[/red] (see the lines marked fail)"
        )
    raise typer.Exit(1 if bad else 0)


def credit_table(snap: FederationSnapshot) -> Table:
    """One row per account a site charges: its allocation (sshare + configured budget), in
    the unit the site bills that account's partitions in."""

    def amount(v: float | None) -> str:
        return "-" if v is None else f"{v:,.1f}"

    t = Table(title="Credit scope (in each site's own units)", header_style="bold")
    cols = ("site", "account", "partitions", "unit", "used", "limit", "remaining")
    for col in (*cols, "fairshare", "source"):
        t.add_column(col, justify="right" if col in ("used", "limit", "remaining") else "left")
    for s in snap.sites:
        if not s.allocations:
            t.add_row(s.site, "-", "-", "-", "-", "-", "-", "-", "not reported")
        for a in s.allocations:
            fs = "-" if a.fairshare is None else f"{a.fairshare:.3f}"
            t.add_row(
                s.site,
                a.account,
                ",".join(a.partitions) or "-",
                unit_label(a.unit) if a.unit else "billing units",
                amount(a.used_units),
                amount(a.limit_units),
                amount(a.remaining_units),
                fs,
                a.source,
            )
    return t


@app.command()
def login(
    config: Annotated[
        str | None, typer.Option(help="federation.yaml (default: the usual places)")
    ] = None,
    force: Annotated[bool, typer.Option(help="log in again even if tokens are stored")] = False,
    scope: Annotated[
        list[str] | None, typer.Option(help="an extra scope a Globus error asked for")
    ] = None,
) -> None:
    """Log in to Globus (user: native-app flow here; client_credentials: fetch tokens)."""
    from federation.deploy.config import load_config
    from federation.sites.globus_auth import login as globus_login

    settings = load_config(config).auth
    servers = globus_login(settings, force=force, extra_scopes=scope or None)
    typer.echo(
        f"logged in ({settings.mode}); tokens for {', '.join(servers)} in "
        f"{settings.storage_description}"
    )


def main() -> None:
    """Entry point: usage errors print one clear message and exit 2, not a traceback."""
    from rich.console import Console

    from federation.core.errors import FederationError

    try:
        # without standalone mode click returns a typer.Exit's code instead of exiting
        code = app(standalone_mode=False)
    except FederationError as e:
        Console(stderr=True).print(f"[red]error:[/red] {e}", highlight=False)
        sys.exit(2)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (click.exceptions.ClickException, typer.TyperException) as e:
        # typer >= 0.20 raises its own (vendored) click's exceptions, not click's
        show = getattr(e, "show", None)
        if callable(show):
            show()
        else:
            typer.echo(f"Error: {e.format_message()}", err=True)
        sys.exit(e.exit_code)
    except (click.exceptions.Abort, typer.Abort):
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
