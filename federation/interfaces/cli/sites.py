"""``federation sites up|down|status``: the local sites, each a real Slurm cluster served by
its own Globus Compute endpoint process; ``federation sites generate-configs``: every site's
Globus Compute endpoint configuration, generated from its ``site.yaml``; ``sites new``: a
commented starting site folder; ``sites list``: the sites a configuration can name."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from federation.core.errors import FederationError

if TYPE_CHECKING:
    from federation.deploy.local import LocalSites

sites_app = typer.Typer(
    help="Run the project's sites as real Slurm clusters on this machine, list the sites, "
    "write a new site's folder and generate the endpoint configs.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

SiteOpt = Annotated[
    list[str] | None, typer.Option("--site", "-s", help="limit to these sites (repeatable)")
]
HomeOpt = Annotated[
    Path | None,
    typer.Option(help="runtime root (default: $FEDERATION_HOME or ~/.federation)"),
]


def _sites(home: Path | None, site: list[str] | None) -> LocalSites:
    from federation.deploy.local import LocalSites

    return LocalSites(home=home, sites=site or None)


def _fail(err: FederationError) -> typer.Exit:
    Console(stderr=True).print(f"[red]error:[/red] {err}", highlight=False)
    return typer.Exit(1)


@sites_app.callback()
def _main(verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@sites_app.command()
def up(site: SiteOpt = None, home: HomeOpt = None) -> None:
    """Start munged, MariaDB, slurmdbd, every site's cluster and endpoint (idempotent)."""
    try:
        local = _sites(home, site)
        steps = local.up()
    except FederationError as e:
        raise _fail(e) from e
    names = [s.name for s in local.specs]
    Console().print(
        f"[green]up[/green]: {len(names)} sites ({', '.join(names)}): Slurm in "
        f"{steps['slurm_s']:.2f} s, endpoints in {steps['endpoints_s']:.2f} s"
    )


@sites_app.command()
def down(site: SiteOpt = None, home: HomeOpt = None) -> None:
    """Stop the endpoints, cancel jobs and stop the daemons that `up` started (idempotent)."""
    try:
        stopped = _sites(home, site).down()
    except FederationError as e:
        raise _fail(e) from e
    Console().print(f"down: stopped {len(stopped)} daemons")


@sites_app.command()
def status(
    site: SiteOpt = None,
    home: HomeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="also list each user endpoint process"),
    ] = False,
) -> None:
    """Show each site's controller and node states, its endpoint and the user endpoint
    processes it runs (count and memory), and the shared daemons."""
    try:
        local = _sites(home, site)
        sites, services = local.slurm.status(), local.slurm.services()
        endpoints = {s.name: local.daemons.pid(s.name) for s in local.specs}
        reports = {s.name: local.daemons.report(s.name) for s in local.specs}
    except FederationError as e:
        raise _fail(e) from e
    if as_json:
        doc = {
            "sites": [s.model_dump(mode="json") for s in sites],
            "services": [d.model_dump(mode="json") for d in services],
            "endpoints": {
                name: {
                    "running": pid is not None,
                    "pid": pid,
                    "rss_mb": (reports.get(name) or {}).get("rss_mb"),
                    "user_endpoints": (reports.get(name) or {}).get("user_endpoints"),
                }
                for name, pid in endpoints.items()
            },
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    table = Table(title="local sites")
    for col in (
        "site",
        "controller",
        "endpoint",
        "user endpoints",
        "nodes",
        "states",
        "slurm.conf / error",
    ):
        table.add_column(col)
    for s in sites:
        states = ", ".join(f"{k}={v}" for k, v in sorted(s.nodes_by_state.items()))
        table.add_row(
            s.site,
            "[green]up[/green]" if s.controller_up else "[red]down[/red]",
            f"[green]pid {endpoints[s.site]}[/green]"
            if endpoints.get(s.site)
            else "[red]down[/red]",
            _ueps_cell(reports.get(s.site)),
            str(s.nodes_total),
            states or "-",
            f"[red]{s.error}[/red]" if s.error else str(s.slurm_conf),
        )
    console = Console()
    console.print(table)
    if verbose:
        console.print(_uep_table(reports))
    for d in services:
        mark = f"[green]running[/green] (pid {d.pid})" if d.running else "[red]stopped[/red]"
        console.print(f"{d.name}: {mark}  log {d.log_file}", highlight=False)


def _ueps_cell(report: dict[str, Any] | None) -> str:
    """'3 (412 MB)': the user endpoint processes and their memory (with their engines')."""
    if report is None:
        return "-"
    ueps = report.get("user_endpoints") or []
    total = sum(float(u.get("rss_mb") or 0) for u in ueps)
    return f"{len(ueps)} ({total:.0f} MB)" if ueps else "0"


def _uep_table(reports: dict[str, dict[str, Any] | None]) -> Table:
    table = Table(title="user endpoint processes")
    cols = ("site", "pid", "identity", "profile", "partition", "state", "open/tasks")
    for col in (*cols, "RSS MB", "procs", "age s", "idle s"):
        table.add_column(col, justify="right" if col not in cols[:6] else "left")
    for site_name, report in sorted(reports.items()):
        for u in (report or {}).get("user_endpoints") or []:
            table.add_row(
                site_name,
                str(u["pid"]),
                str(u["identity"]),
                str(u["profile"]),
                str(u.get("partition") or "-"),
                str(u["state"]),
                f"{u['outstanding']}/{u['tasks']}",
                f"{u['rss_mb']:.0f}",
                str(u["processes"]),
                f"{u['age_s']:.0f}",
                f"{u['idle_s']:.0f}",
            )
    return table


@sites_app.command("generate-configs")
def generate_configs(
    names: Annotated[
        list[str] | None,
        typer.Argument(metavar="[SITES]...", help="sites (default: all)", show_default=False),
    ] = None,
    root: Annotated[
        Path | None,
        typer.Option(
            help="folder of the site folders (default: the package's example sites)",
            show_default=False,
        ),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="only report stale files; exit 1 if any")
    ] = False,
) -> None:
    """Regenerate <site>/{config.yaml,user_config_template.yaml.j2,user_config_schema.json}
    from each site folder's site.yaml."""
    from federation.core.spec import PACKAGE_SITES, load_site, site_names
    from federation.sites.endpoint_config import stale_files, write_site_configs

    base = root if root is not None else PACKAGE_SITES
    stale: list[Path] = []
    for name in names or site_names(base):
        site = load_site(name, base)
        out = base / name
        if check:
            stale += stale_files(site, out)
        else:
            for path in write_site_configs(site, out):
                print(path)
    for path in stale:
        print(f"stale: {path} (run federation sites generate-configs)", file=sys.stderr)
    raise typer.Exit(1 if stale else 0)


@sites_app.command("new")
def new(
    name: Annotated[str, typer.Argument(help="the site's name (lower case letters, digits)")],
    folder: Annotated[
        Path,
        typer.Option("--dir", help="the folder of site folders to write NAME/ into (a sites_dir)"),
    ] = Path("."),
    force: Annotated[bool, typer.Option(help="overwrite an existing site.yaml")] = False,
) -> None:
    """Write a commented starting site folder DIR/NAME/: site.yaml (every field explained)
    and the endpoint files generated from it. Edit site.yaml, regenerate, and name DIR in
    federation.yaml (`sites_dir: DIR`)."""
    from federation.sites.new_site import write_new_site

    target = folder / name
    try:
        written = write_new_site(name, target, force=force)
    except FederationError as e:
        raise _fail(e) from e
    for path in written:
        print(path)
    print(
        f"next: edit {target / 'site.yaml'}, run `federation sites generate-configs --root "
        f"{folder} {name}`, add `sites_dir: {folder.resolve()}` and `{name}:` under `sites:` "
        "in federation.yaml, then `federation config check`",
        file=sys.stderr,
    )


@sites_app.command("list")
def list_sites(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            envvar="FEDERATION_CONFIG",
            help="federation.yaml: its sites (and any other its sites_dir holds); default: "
            "the package's example sites",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """List the sites a federation.yaml can name: each with its folder and where it comes
    from (its own path, the sites_dir, or the package's examples), and, with --config,
    the backend of each one the file uses.

    Exit codes: 0 listed; 2 the config is missing or invalid."""
    from federation.core.errors import ConfigError
    from federation.deploy.config import load_config
    from federation.deploy.site_folders import SiteFolders

    backends: dict[str, str] = {}
    folders = SiteFolders()
    if config is not None:
        try:
            cfg = load_config(config)
        except ConfigError as e:
            raise _fail(e) from e
        folders = cfg.site_folders()
        backends = {n: s.backend for n, s in cfg.sites.items()}
    known = folders.known()
    if as_json:
        doc = [{**s.model_dump(mode="json"), "backend": backends.get(s.name)} for s in known]
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    table = Table(title="sites")
    for col in ("site", "in config", "from", "folder"):
        table.add_column(col)
    for s in known:
        table.add_row(s.name, backends.get(s.name, "-"), s.source, str(s.folder))
    Console(width=200).print(table)
