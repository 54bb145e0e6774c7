"""``federation policy ...``: caller policies, tasks held for approval, and the audit log.

Held tasks listed and decided here are those of durable coordinators (the store in
``$FEDERATION_HOME/coordinator.db``); a running service's held tasks are decided through its
HTTP API (``/v1/policy/...``) or ``--service URL``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from federation.runtime.coordinator import Coordinator
    from federation.security import HeldTask

HomeOpt = Annotated[
    Path | None,
    typer.Option(help="federation home (default: $FEDERATION_HOME or ~/.federation)"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]
ServiceOpt = Annotated[
    str | None, typer.Option(help="decide on a running service at this URL instead")
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        envvar="FEDERATION_TOKEN", help="operator token for --service", show_default=False
    ),
]

policy_app = typer.Typer(
    help="Caller policies, tasks held for an operator, and the audit log.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def _home(home: Path | None) -> Path:
    from federation.deploy.local import federation_home

    return home or federation_home()


def _held_rows(held: list[HeldTask]) -> list[dict[str, Any]]:
    return [
        {
            "task_id": h.task_id,
            "caller": h.caller,
            "label": h.label,
            "shape": h.decision.chosen.shape.describe(),
            "why": h.why,
            "held_at": h.held_at.isoformat(),
            "state": h.state,
        }
        for h in held
    ]


def _print_rows(rows: list[dict[str, Any]], title: str, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2, default=str) + "\n")
        return
    table = Table(title=title)
    cols = list(rows[0]) if rows else ["(none)"]
    for c in cols:
        table.add_column(c, overflow="fold")
    for r in rows:
        table.add_row(*(str(r[c]) if r[c] is not None else "-" for c in cols))
    Console().print(table)


def _service(url: str, token: str | None, method: str, path: str, **kw: Any) -> Any:
    import httpx

    if not token:
        raise typer.BadParameter("--service needs --token (or $FEDERATION_TOKEN)")
    r = httpx.request(
        method, url.rstrip("/") + path, headers={"Authorization": f"Bearer {token}"}, **kw
    )
    if r.status_code >= 400:
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        Console(stderr=True).print(
            f"[red]error:[/red] {body.get('message', r.text)}", highlight=False
        )
        raise typer.Exit(2)
    return r.json()


@policy_app.command("show")
def show(
    caller: Annotated[str | None, typer.Argument(help="one caller (default: all)")] = None,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The policies in force: policy.yaml entries, caller policies kept with tokens, default."""
    from federation.security import PolicyGate

    gate = PolicyGate.from_home(_home(home))
    names = set(gate.policies.callers)
    if gate.tokens is not None:
        names |= set(gate.tokens.caller_policies())  # type: ignore[attr-defined]
    if caller is not None:
        names = {caller}
    out: dict[str, Any] = {}
    for n in sorted(names):
        pol = gate.policy_for(n)
        out[n] = pol.model_dump(mode="json", exclude_defaults=True) if pol else None
    if caller is None:
        d = gate.policies.default
        out["(default)"] = d.model_dump(mode="json", exclude_defaults=True) if d else None
    sys.stdout.write(json.dumps(out, indent=2) + "\n")


@policy_app.command("check")
def check(path: Annotated[Path, typer.Argument(help="a policy file (YAML or JSON)")]) -> None:
    """Validate a policy file; exits 2 with the bad field named."""
    from federation.security import load_policies

    ps = load_policies(path)
    Console().print(
        f"ok: {len(ps.callers)} caller(s); default: "
        + ("refuse unknown callers" if ps.default is None else "a default policy")
    )


@policy_app.command("set")
def set_policy(
    caller: Annotated[str, typer.Argument(help="the caller (token name)")],
    path: Annotated[
        Path | None, typer.Argument(help="YAML/JSON file with one CallerPolicy")
    ] = None,
    clear: Annotated[bool, typer.Option(help="remove the caller's policy")] = False,
    home: HomeOpt = None,
) -> None:
    """Keep a policy with a caller's tokens (applies to every token of that caller)."""
    import yaml
    from pydantic import ValidationError

    from federation.security import CallerPolicy
    from federation.security.tokens import TokenStore, default_token_db

    store = TokenStore(default_token_db(_home(home)))
    if clear:
        store.set_policy(caller, None)
        Console().print(f"removed the policy of {caller}")
        return
    if path is None:
        raise typer.BadParameter("give a policy file, or --clear")
    try:
        pol = CallerPolicy.model_validate(yaml.safe_load(path.read_text()) or {})
        store.set_policy(caller, pol)
    except (OSError, yaml.YAMLError, ValidationError, ValueError) as e:
        raise typer.BadParameter(str(e), param_hint="PATH") from e
    Console().print(f"policy of {caller}: {pol.model_dump(mode='json', exclude_defaults=True)}")


@policy_app.command("list")
def list_held(
    home: HomeOpt = None,
    as_json: JsonOpt = False,
    service: ServiceOpt = None,
    token: TokenOpt = None,
) -> None:
    """Tasks held for an operator's decision (nothing has been shipped for them)."""
    if service:
        rows = _service(service, token, "GET", "/v1/policy/pending")
    else:
        from federation.security import HeldTasks

        db = _home(home) / "coordinator.db"
        rows = _held_rows(HeldTasks(db).pending()) if db.exists() else []
    _print_rows(rows, "held for approval", as_json)


def _local_coordinator(home: Path, with_sites: bool) -> Coordinator:
    from federation.core.errors import StoreInUseError
    from federation.deploy.connect import hold_store
    from federation.runtime.coordinator import Coordinator
    from federation.runtime.store import Store
    from federation.security import PolicyGate

    try:  # a running `serve` or `mcp` holds it: its held tasks are decided through it
        hold_store(home / "coordinator.db")()
    except StoreInUseError as e:
        typer.echo(f"{e}; decide on a running service's tasks with --service URL", err=True)
        raise typer.Exit(2) from e
    gate = PolicyGate.from_home(home)
    if with_sites:
        from federation.deploy.local import LocalSites

        local = LocalSites(home=home)
        local.up()
        return local.connect(durable=True, gate=gate)
    return Coordinator([], store=Store(home / "coordinator.db"), gate=gate)


@policy_app.command("approve")
def approve(
    task_id: Annotated[str, typer.Argument(help="a task id from `policy list`")],
    home: HomeOpt = None,
    service: ServiceOpt = None,
    token: TokenOpt = None,
    actor: Annotated[str, typer.Option(help="who approves (recorded)")] = "operator",
) -> None:
    """Ship a held task on the shape it was placed on."""
    if service:
        out = _service(service, token, "POST", f"/v1/policy/{task_id}/approve")
        Console().print(f"approved {task_id}: {out.get('granted', '')}")
        return
    coord = _local_coordinator(_home(home), with_sites=True)
    try:
        h = coord.approve(task_id, actor=actor)
        Console().print(f"approved {task_id}: shipped to {h.shape.describe()}")
    finally:
        coord.close()


@policy_app.command("reject")
def reject(
    task_id: Annotated[str, typer.Argument(help="a task id from `policy list`")],
    reason: Annotated[str, typer.Option(help="why (the task fails with it)")] = "rejected",
    home: HomeOpt = None,
    service: ServiceOpt = None,
    token: TokenOpt = None,
    actor: Annotated[str, typer.Option(help="who rejects (recorded)")] = "operator",
) -> None:
    """Fail a held task with a reason; nothing is shipped."""
    if service:
        _service(service, token, "POST", f"/v1/policy/{task_id}/reject", json={"reason": reason})
        Console().print(f"rejected {task_id}: {reason}")
        return
    coord = _local_coordinator(_home(home), with_sites=False)
    coord.reject(task_id, reason, actor=actor)
    Console().print(f"rejected {task_id}: {reason}")


@policy_app.command("audit")
def audit(
    home: HomeOpt = None,
    caller: Annotated[str | None, typer.Option(help="only this caller")] = None,
    task_id: Annotated[str | None, typer.Option("--task", help="only this task")] = None,
    limit: Annotated[int, typer.Option(help="the newest N records")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Who ran what where: every policy decision, oldest first."""
    from federation.security import AuditLog
    from federation.security.audit import default_audit_db

    path = default_audit_db(_home(home))
    recs = (
        AuditLog(path).records(caller=caller, task_id=task_id, limit=limit) if path.exists() else []
    )
    if as_json:
        rows = [r.model_dump(mode="json") for r in recs]
    else:
        rows = [
            {
                "at": r.at.strftime("%Y-%m-%d %H:%M:%S"),
                "caller": r.caller,
                "task": (r.task_id or "-")[:8],
                "what": r.what[:40],
                "where": r.shape or "-",
                "node-h": f"{r.node_hours:.2f}" if r.node_hours is not None else "-",
                "decision": r.decision,
                "rules": ",".join(r.rules) or "-",
                "by": r.actor or "-",
            }
            for r in recs
        ]
    _print_rows(rows, "audit log", as_json)


def register(app: typer.Typer) -> None:
    """Mount ``policy ...`` on ``app``."""
    app.add_typer(policy_app, name="policy")
