"""Security policy: per-caller limits enforced before anything ships, held tasks, audit log.

Runs on the in-process federation (real Coordinator, placement, store and event bus; the
sites run tasks on threads), so it needs no Slurm.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from inprocess import FixedCoordinator, ThreadSite, idle_snapshot, inprocess_coordinator
from typer.testing import CliRunner

from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.snapshot import AllocationScope, FederationSnapshot
from federation.core.spec import load_sites
from federation.core.tasks import PythonTask, ShellTask
from federation.interfaces.service.app import create_app
from federation.runtime.store import Store
from federation.security import (
    LOCAL_CALLER,
    AuditLog,
    CallerPolicy,
    PolicyGate,
    PolicySet,
    PolicyViolationError,
    load_policies,
)
from federation.security.caller import PolicyFileError
from federation.security.tokens import TokenStore
from functions.workloads import square

ONE_HOUR = ResourceEnvelope(cpus_min=4, walltime_s=3600)


def _coord(policies: dict[str, CallerPolicy], **kw: Any) -> FixedCoordinator:
    coord = inprocess_coordinator(("local", "delta"))
    coord.gate = PolicyGate(PolicySet(callers=policies), **kw)
    return coord


def _shipped(coord: FixedCoordinator) -> int:
    """How many tasks reached any site (ThreadSite keeps every submitted future)."""
    return sum(len(b._futures) for b in coord.backends.values() if isinstance(b, ThreadSite))


@pytest.fixture
def closing() -> Iterator[list[FixedCoordinator]]:
    made: list[FixedCoordinator] = []
    yield made
    for c in made:
        c.close()


# --- the policy file -------------------------------------------------------------------------


def test_policy_file_loads_and_bad_files_name_the_field(tmp_path: Path) -> None:
    good = tmp_path / "policy.yaml"
    good.write_text(
        "default: null\n"
        "callers:\n"
        "  alice: {allowed_sites: [delta], max_gpus_per_task: 4, on_exceed: hold}\n"
        "  ops: {operator: true}\n"
    )
    ps = load_policies(good)
    assert ps.default is None
    assert ps.callers["alice"].allowed_sites == ("delta",)
    assert ps.callers["alice"].on_exceed == "hold" and ps.callers["ops"].operator
    bad = tmp_path / "bad.yaml"
    bad.write_text("callers:\n  bob: {max_gpus_per_task: -1}\n")
    with pytest.raises(PolicyFileError, match=r"callers\.bob\.max_gpus_per_task"):
        load_policies(bad)
    typo = tmp_path / "typo.json"
    typo.write_text('{"callers": {"bob": {"max_gpu": 1}}}')
    with pytest.raises(PolicyFileError, match="max_gpu"):
        load_policies(typo)
    with pytest.raises(PolicyFileError, match="cannot read"):
        load_policies(tmp_path / "missing.yaml")


# --- allowed, denied -------------------------------------------------------------------------


def test_allowed_sites_narrow_placement_and_deny_other_sites(
    closing: list[FixedCoordinator],
) -> None:
    coord = _coord({"alice": CallerPolicy(allowed_sites=("delta",))})
    closing.append(coord)
    h = coord.submit_task(PythonTask(square, (3,)), ONE_HOUR, caller="alice")
    assert h.site == "delta"  # narrowed before placement: local was never a candidate
    assert coord.result_value(h, timeout_s=30) == 9
    with pytest.raises(PolicyViolationError) as ei:
        coord.submit_task(
            PythonTask(square, (3,)),
            ONE_HOUR.model_copy(update={"sites": ("local",)}),
            caller="alice",
        )
    assert "allowed_sites" in str(ei.value) and "['delta']" in str(ei.value)
    assert _shipped(coord) == 1
    # the in-process caller has no limits unless the policy names it
    assert coord.submit_task(PythonTask(square, (2,)), ONE_HOUR).site in ("local", "delta")
    decisions = [r.decision for r in coord.gate.audit.records(caller="alice")]
    assert decisions == ["allowed", "denied"]


def test_gpu_and_node_hour_limits_say_which_rule_and_limit(
    closing: list[FixedCoordinator],
) -> None:
    coord = _coord({"bob": CallerPolicy(max_gpus_per_task=1, max_node_hours_per_task=2)})
    closing.append(coord)
    with pytest.raises(PolicyViolationError) as ei:
        coord.submit_task(PythonTask(square, (1,)), ResourceEnvelope(gpus_min=2), caller="bob")
    assert ei.value.findings[0].rule == "max_gpus_per_task"
    assert ei.value.findings[0].limit == "1 GPUs" and "2 GPUs asked" in str(ei.value)
    long = ResourceEnvelope(walltime_s=3 * 3600)
    with pytest.raises(PolicyViolationError) as ei:
        coord.submit_task(PythonTask(square, (1,)), long, caller="bob")
    (f,) = ei.value.findings
    assert f.rule == "max_node_hours_per_task" and f.limit == "2 node-hours"
    assert "3.00 node-hours" in f.message
    assert _shipped(coord) == 0
    # one GPU fits: the envelope's GPU maximum was capped, so placement never exceeds it
    h = coord.submit_task(PythonTask(square, (4,)), ResourceEnvelope(gpus_min=1), caller="bob")
    assert h.shape.gpus * h.shape.nodes == 1


def test_daily_node_hours_are_counted_from_the_audit_log(
    closing: list[FixedCoordinator],
) -> None:
    coord = _coord({"carol": CallerPolicy(max_node_hours_per_day=2.5)})
    closing.append(coord)
    for i in range(2):
        coord.submit_task(PythonTask(square, (i,)), ONE_HOUR, caller="carol")
    assert coord.gate.audit.node_hours_last_day("carol") == pytest.approx(2.0)
    with pytest.raises(PolicyViolationError, match=r"daily limit of 2\.5") as ei:
        coord.submit_task(PythonTask(square, (9,)), ONE_HOUR, caller="carol")
    assert ei.value.findings[0].value == "2.00 used + 1.00 asked"
    assert _shipped(coord) == 2
    # someone else's usage does not count against carol, nor hers against them
    coord.gate.policies.callers["dave"] = CallerPolicy(max_node_hours_per_day=1)
    coord.submit_task(PythonTask(square, (1,)), ONE_HOUR, caller="dave")


def test_commands_and_functions_allowlists(closing: list[FixedCoordinator]) -> None:
    coord = _coord(
        {
            "agent": CallerPolicy(
                allowed_commands=("echo *", "hostname"), allowed_functions=("square",)
            )
        }
    )
    closing.append(coord)
    for cmd, needle in [
        ("echo hi; rm -rf ~", "chains or redirects"),
        ("echo $(cat /etc/shadow)", "chains or redirects"),
        ("echo a > /etc/passwd", "chains or redirects"),
        ("hostname\nrm -rf ~", "chains or redirects"),
        ("ls /", "matches none of the allowed commands"),
    ]:
        with pytest.raises(PolicyViolationError, match=needle):
            coord.submit_task(ShellTask(command=cmd), ONE_HOUR, caller="agent")
    from functions.workloads import report_allocation

    with pytest.raises(PolicyViolationError, match="'report_allocation' is not among"):
        coord.submit_task(PythonTask(report_allocation), ONE_HOUR, caller="agent")
    assert _shipped(coord) == 0
    h = coord.submit_task(PythonTask(square, (5,)), ONE_HOUR, caller="agent")
    assert coord.result_value(h, timeout_s=30) == 25


def test_unknown_callers_are_refused_when_there_is_no_default(
    closing: list[FixedCoordinator],
) -> None:
    coord = inprocess_coordinator()
    closing.append(coord)
    coord.gate = PolicyGate(PolicySet(callers={}, default=None))
    with pytest.raises(PolicyViolationError, match="no policy for caller 'mallory'"):
        coord.submit_task(PythonTask(square, (1,)), ONE_HOUR, caller="mallory")
    (rec,) = coord.gate.audit.records()
    assert rec.decision == "denied" and rec.rules == ("unknown_caller",)


# --- unresolved: held, approved, rejected ----------------------------------------------------


def test_exceeding_a_hold_limit_holds_the_task_until_approved(
    closing: list[FixedCoordinator],
) -> None:
    coord = _coord({"erin": CallerPolicy(max_node_hours_per_task=0.5, on_exceed="hold")})
    closing.append(coord)
    h = coord.submit_task(PythonTask(square, (6,)), ONE_HOUR, caller="erin")
    assert _shipped(coord) == 0 and not h.done and h.state == "held"
    (ev,) = [e for e in coord.history(h.id) if e.kind.startswith("policy.")]
    assert ev.kind == "policy.unresolved" and ev.detail["rules"] == ["max_node_hours_per_task"]
    assert [t.task_id for t in coord.pending_policy()] == [h.id]
    assert "task.queued" not in [e.kind for e in coord.history(h.id)]

    approved = coord.approve(h.id, actor="op")
    assert approved is h and h.state != "held"
    assert coord.result_value(h, timeout_s=30) == 36 and h.state == "completed"
    kinds = [e.kind for e in coord.history(h.id)]
    assert kinds[:3] == ["policy.unresolved", "policy.approved", "task.queued"]
    assert coord.pending_policy() == []
    recs = coord.gate.audit.records(task_id=h.id)
    assert [r.decision for r in recs] == ["unresolved", "approved"] and recs[1].actor == "op"
    with pytest.raises(Exception, match="not held for approval"):
        coord.approve(h.id)


def test_rejected_task_fails_with_the_reason_and_never_ships(
    closing: list[FixedCoordinator],
) -> None:
    coord = _coord({"frank": CallerPolicy(require_approval=True)})
    closing.append(coord)
    h = coord.submit_task(ShellTask(command="echo hi"), ONE_HOUR, caller="frank")
    coord.reject(h.id, "not during the maintenance window", actor="op")
    res = coord.get_result(h, timeout_s=5)
    assert res.status == "failed" and "not during the maintenance window" in (res.error or "")
    kinds = [e.kind for e in coord.history(h.id)]
    assert kinds == ["policy.unresolved", "policy.rejected", "task.failed"]
    assert _shipped(coord) == 0


def test_cancelling_a_held_task_rejects_it(closing: list[FixedCoordinator]) -> None:
    coord = _coord({"hana": CallerPolicy(require_approval=True)})
    closing.append(coord)
    h = coord.submit_task(ShellTask(command="echo hi"), ONE_HOUR, caller="hana")
    assert h.state == "held"
    assert coord.cancel(h, "changed my mind") is True
    res = coord.get_result(h, timeout_s=5)
    assert res.status == "failed" and "changed my mind" in (res.error or "")
    assert [e.kind for e in coord.history(h.id)] == [
        "policy.unresolved",
        "policy.rejected",
        "task.failed",
    ]
    assert coord.pending_policy() == [] and _shipped(coord) == 0
    assert coord.cancel(h) is False  # already failed
    with pytest.raises(Exception, match="not held for approval"):
        coord.approve(h.id)


def _with_allocations(snap: FederationSnapshot, site: str, *scopes: AllocationScope) -> Any:
    sites = tuple(
        s.model_copy(update={"allocations": scopes}) if s.site == site else s for s in snap.sites
    )
    return snap.model_copy(update={"sites": sites})


def _cpu_credit(used: float, limit: float) -> AllocationScope:
    return AllocationScope(
        account="bbka-delta-cpu",
        unit="core-hours",
        partitions=("cpu",),
        used_units=used,
        limit_units=limit,
    )


def test_budget_rule_holds_a_task_the_allocation_cannot_pay_for(
    closing: list[FixedCoordinator],
) -> None:
    coord = inprocess_coordinator(("delta",))
    closing.append(coord)
    snap = idle_snapshot(load_sites(["delta"]))
    env = ResourceEnvelope(cpus_min=8, cpus_max=8, walltime_s=2 * 3600)  # 16 core-hours
    poor = _with_allocations(snap, "delta", _cpu_credit(used=990, limit=1000))
    h = coord.submit_task(PythonTask(square, (2,)), env, snapshot=poor)
    assert _shipped(coord) == 0
    (ev,) = [e for e in coord.history(h.id) if e.kind == "policy.unresolved"]
    assert ev.detail["rules"] == ["allocation_budget"]
    assert ev.detail["reason"] == (
        "16.00 core-hours would exceed the 10.00 core-hours left in allocation "
        "bbka-delta-cpu on delta"
    )
    rich = _with_allocations(snap, "delta", _cpu_credit(used=100, limit=1000))
    ok = coord.submit_task(PythonTask(square, (3,)), env, snapshot=rich)
    assert coord.result_value(ok, timeout_s=30) == 9
    no_limit = _with_allocations(snap, "delta", AllocationScope(account="bbka-delta-cpu"))
    coord.submit_task(PythonTask(square, (4,)), env, snapshot=no_limit)
    assert _shipped(coord) == 2  # an allocation without a known limit holds nothing
    (rec,) = coord.gate.audit.records(task_id=ok.id)
    assert (rec.charge, rec.charge_unit, rec.core_hours) == (16.0, "core-hours", 16.0)


def _shape(site: str, partition: str, **kw: Any) -> Shape:
    return Shape(site=site, partition=partition, **{"nodes": 1, "mem_gb": 1, "gpus": 0, **kw})


def test_budget_rule_charges_gpu_hours_against_the_gpu_account() -> None:
    gate = PolicyGate()
    snap = idle_snapshot(load_sites(["delta"]))
    gpu_credit = AllocationScope(
        account="bbka-delta-gpu",
        unit="gpu-hours",
        partitions=("gpuA100x4", "gpuA40x4"),
        used_units=96.5,
        limit_units=100.0,
    )
    both = _with_allocations(snap, "delta", _cpu_credit(used=0, limit=10**6), gpu_credit)
    three_gpus = _shape("delta", "gpuA100x4", cpus=16, gpus=3, walltime_s=4 * 3600)
    out = gate.evaluate(LOCAL_CALLER, PythonTask(square), three_gpus, both)
    assert out.verdict == "unresolved" and (out.charge, out.charge_unit) == (12.0, "gpu-hours")
    (f,) = out.findings
    assert f.rule == "allocation_budget" and f.message == (
        "12.00 GPU-hours would exceed the 3.50 GPU-hours left in allocation bbka-delta-gpu on delta"
    )
    # the CPU account's plenty does not pay for GPUs; the GPU account's little is no
    # reason to hold a CPU task
    cpu_task = _shape("delta", "cpu", cpus=64, walltime_s=4 * 3600)  # 256 core-hours
    assert gate.evaluate(LOCAL_CALLER, PythonTask(square), cpu_task, both).verdict == "allowed"
    one_gpu = _shape("delta", "gpuA40x4", cpus=16, gpus=1, walltime_s=3 * 3600)  # 3 GPU-h
    assert gate.evaluate(LOCAL_CALLER, PythonTask(square), one_gpu, both).verdict == "allowed"


def test_budget_rule_charges_node_hours_on_vista() -> None:
    gate = PolicyGate()
    snap = idle_snapshot(load_sites(["vista"]))
    credit = AllocationScope(
        account="ASC23000",
        unit="node-hours",
        partitions=("gh", "gh-dev", "gg"),
        used_units=9.0,
        limit_units=10.0,
    )
    poor = _with_allocations(snap, "vista", credit)
    two_nodes = _shape("vista", "gh", nodes=2, cpus=1, gpus=1, walltime_s=3600)
    out = gate.evaluate(LOCAL_CALLER, PythonTask(square), two_nodes, poor)
    assert (out.charge, out.charge_unit) == (2.0, "node-hours")  # whole nodes, 1 CPU asked
    assert out.findings[0].message == (
        "2.00 node-hours would exceed the 1.00 node-hours left in allocation ASC23000 on vista"
    )
    short = _shape("vista", "gh", nodes=2, cpus=1, gpus=1, walltime_s=60)  # 0.25 h minimum
    assert gate.evaluate(LOCAL_CALLER, PythonTask(square), short, poor).charge == 0.5
    assert gate.evaluate(LOCAL_CALLER, PythonTask(square), short, poor).verdict == "allowed"
    gg = _shape("vista", "gg", nodes=3, cpus=1, walltime_s=3600)  # 0.33 SU per node-hour
    assert gate.evaluate(LOCAL_CALLER, PythonTask(square), gg, poor).verdict == "allowed"


def test_held_tasks_survive_a_restart_in_the_store(
    tmp_path: Path, closing: list[FixedCoordinator]
) -> None:
    def make() -> FixedCoordinator:
        backends = [ThreadSite(s) for s in load_sites(["local"])]
        c = FixedCoordinator(
            backends,
            store=Store(tmp_path / "coordinator.db"),
            gate=PolicyGate(
                PolicySet(callers={"gina": CallerPolicy(require_approval=True)}),
                AuditLog(tmp_path / "audit.db"),
            ),
        )
        for b in backends:
            b.coord = c
        closing.append(c)
        return c

    first = make()
    kept = first.submit_task(PythonTask(square, (7,)), ONE_HOUR, caller="gina")
    dropped = first.submit_task(ShellTask(command="echo x"), ONE_HOUR, caller="gina")
    first.close()

    second = make()
    assert {t.task_id for t in second.pending_policy()} == {kept.id, dropped.id}
    second.recover()
    assert {h.id for h in second.handles()} >= {kept.id, dropped.id}
    assert {h.state for h in second.handles() if h.id in (kept.id, dropped.id)} == {"held"}
    h = second.approve(kept.id)
    assert second.result_value(h, timeout_s=30) == 49
    second.reject(dropped.id, "no")
    assert second.pending_policy() == []
    audit = AuditLog(tmp_path / "audit.db").records()
    assert [r.decision for r in audit] == ["unresolved", "unresolved", "approved", "rejected"]
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        sqlite3.connect(tmp_path / "audit.db").execute("DELETE FROM audit")


# --- tokens scoped per caller, over HTTP ------------------------------------------------------


def test_token_policies_apply_to_http_callers(
    tmp_path: Path, closing: list[FixedCoordinator]
) -> None:
    tokens = TokenStore(tmp_path / "tokens.db")
    agent = tokens.issue(
        "agent", policy=CallerPolicy(allowed_sites=("delta",), max_gpus_per_task=0)
    )
    other = tokens.issue("agent")  # a second token of the same caller: same policy
    assert tokens.policy_for("agent") == CallerPolicy(allowed_sites=("delta",), max_gpus_per_task=0)
    coord = inprocess_coordinator(("local", "delta"))
    closing.append(coord)
    coord.gate = PolicyGate(tokens=tokens)
    app = create_app(coord, tokens, refresh_s=3600)
    with TestClient(app) as client:
        for tok in (agent.token, other.token):
            r = client.post(
                "/v1/tasks",
                json={"function": "square", "args": [3], "envelope": {"sites": ["local"]}},
                headers={"Authorization": f"Bearer {tok}"},
            )
            assert r.status_code == 403, r.text
            body = r.json()
            assert (
                body["error"] == "policy_violation" and "allowed_sites" in body["details"]["rules"]
            )
        r = client.post(
            "/v1/tasks",
            json={"function": "square", "args": [3], "envelope": {"gpus_min": 1}},
            headers={"Authorization": f"Bearer {agent.token}"},
        )
        assert r.status_code == 403 and "max_gpus_per_task" in r.json()["details"]["rules"]
        assert _shipped(coord) == 0
        r = client.post(
            "/v1/tasks",
            json={"function": "square", "args": [3], "envelope": {}},
            headers={"Authorization": f"Bearer {agent.token}"},
        )
        assert r.status_code == 202, r.text
        assert r.json()["site"] == "delta"
    assert [r.caller for r in coord.gate.audit.records()] == ["agent"] * 4


# --- the CLI ------------------------------------------------------------------------------------


def test_policy_cli_lists_rejects_and_shows_the_audit(
    tmp_path: Path, closing: list[FixedCoordinator]
) -> None:
    import json

    import typer

    from federation.interfaces.cli.policy import register

    (tmp_path / "policy.yaml").write_text("callers:\n  hank: {require_approval: true}\n")
    backends = [ThreadSite(s) for s in load_sites(["local"])]
    coord = FixedCoordinator(
        backends, store=Store(tmp_path / "coordinator.db"), gate=PolicyGate.from_home(tmp_path)
    )
    closing.append(coord)
    h = coord.submit_task(ShellTask(command="echo hi"), ONE_HOUR, caller="hank")

    app = typer.Typer()
    register(app)
    run = CliRunner().invoke
    home = ["--home", str(tmp_path)]
    listed = run(app, ["policy", "list", "--json", *home])
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.stdout)
    assert row["task_id"] == h.id and row["caller"] == "hank" and "operator" in row["why"]
    shown = json.loads(run(app, ["policy", "show", "hank", *home]).stdout)
    assert shown == {"hank": {"require_approval": True}}
    rej = run(app, ["policy", "reject", h.id, "--reason", "too late", *home])
    assert rej.exit_code == 0, rej.output
    assert json.loads(run(app, ["policy", "list", "--json", *home]).stdout) == []
    audit = json.loads(run(app, ["policy", "audit", "--json", *home]).stdout)
    assert [a["decision"] for a in audit] == ["unresolved", "rejected"]
    assert audit[1]["message"] == "rejected by operator: too late"
    (tmp_path / "bad.yaml").write_text("callers: [1, 2]\n")
    assert run(app, ["policy", "check", str(tmp_path / "bad.yaml")]).exit_code != 0
    pol = tmp_path / "ivy.yaml"
    pol.write_text("allowed_sites: [delta]\n")
    assert run(app, ["policy", "set", "ivy", str(pol), *home]).exit_code == 0
    assert json.loads(run(app, ["policy", "show", "ivy", *home]).stdout) == {
        "ivy": {"allowed_sites": ["delta"]}
    }


def test_operators_decide_held_tasks_over_http(
    tmp_path: Path, closing: list[FixedCoordinator]
) -> None:
    tokens = TokenStore(tmp_path / "tokens.db")
    agent = tokens.issue("agent", policy=CallerPolicy(require_approval=True))
    op = tokens.issue("op", policy=CallerPolicy(operator=True))
    coord = inprocess_coordinator(("local",))
    closing.append(coord)
    coord.gate = PolicyGate(tokens=tokens)
    as_agent = {"Authorization": f"Bearer {agent.token}"}
    as_op = {"Authorization": f"Bearer {op.token}"}
    with TestClient(create_app(coord, tokens, refresh_s=3600)) as client:
        ids = []
        for x in (2, 3):
            r = client.post(
                "/v1/tasks",
                json={"function": "square", "args": [x], "envelope": {}},
                headers=as_agent,
            )
            assert r.status_code == 202, r.text
            ids.append(r.json()["task_id"])
        assert _shipped(coord) == 0
        assert client.get("/v1/policy/pending", headers=as_agent).status_code == 403
        pending = client.get("/v1/policy/pending", headers=as_op).json()
        assert [p["task_id"] for p in pending] == ids
        assert pending[0]["rules"] == ["require_approval"]
        assert client.post(f"/v1/policy/{ids[0]}/approve", headers=as_agent).status_code == 403
        ok = client.post(f"/v1/policy/{ids[0]}/approve", headers=as_op)
        assert ok.status_code == 200, ok.text
        assert coord.result_value(coord._handle(ids[0]), timeout_s=30) == 4
        no = client.post(f"/v1/policy/{ids[1]}/reject", json={"reason": "budget"}, headers=as_op)
        assert no.status_code == 200 and no.json()["state"] == "failed"
        assert "budget" in no.json()["result"]["error"]
        again = client.post(f"/v1/policy/{ids[1]}/approve", headers=as_op)
        assert again.status_code == 409 and again.json()["error"] == "not_held"
        assert client.post("/v1/policy/nope/approve", headers=as_op).status_code == 404
        assert _shipped(coord) == 1


# --- further copies and retries are put to the caller's policy too ---------------------------


def _node_fails() -> int:
    raise RuntimeError("batch job ended: NODE_FAIL")  # an infrastructure failure: retried


def test_hedge_copies_are_put_to_the_callers_policy(closing: list[FixedCoordinator]) -> None:
    """A hedge copy is one more hour on another site: within erin's daily 1.5 node-hours the
    chosen copy fits (1.0), the hedge would not (2.0), so it is refused, audited and not
    shipped; frank (no limit) gets both copies, and both count in the audit."""
    from federation.placement.candidates import snapshot_wait
    from federation.placement.policies import twin_hedge

    coord = _coord({"erin": CallerPolicy(max_node_hours_per_day=1.5), "frank": CallerPolicy()})
    closing.append(coord)
    coord.policy = twin_hedge(snapshot_wait, None)  # idle sites: always a copy elsewhere
    h = coord.submit_task(PythonTask(square, (3,)), ONE_HOUR, caller="erin")
    assert coord.result_value(h, timeout_s=30) == 9
    assert not h.decision.hedges and not h.copies  # shipped once, as an unhedged task
    (ev,) = [e for e in coord.history(h.id) if e.kind == "policy.copy_refused"]
    assert "hedge copy" in ev.detail["reason"] and "daily limit of 1.5" in ev.detail["reason"]
    recs = coord.gate.audit.records(task_id=h.id)
    assert [r.decision for r in recs] == ["allowed", "denied"]
    assert recs[1].label.endswith("(hedge copy)") and recs[1].site != recs[0].site
    assert coord.gate.audit.node_hours_last_day("erin") == pytest.approx(1.0)
    assert any("not shipped" in n for n in h.notes)
    g = coord.submit_task(PythonTask(square, (4,)), ONE_HOUR, caller="frank")
    assert coord.result_value(g, timeout_s=30) == 16
    assert len(g.copies) == 2
    assert [r.decision for r in coord.gate.audit.records(task_id=g.id)] == ["allowed"] * 2
    assert coord.gate.audit.node_hours_last_day("frank") == pytest.approx(2.0)
    assert _shipped(coord) == 3


def test_a_retry_is_put_to_the_callers_policy(closing: list[FixedCoordinator]) -> None:
    """After a node failure the task would run again elsewhere: gina's daily limit has room
    for one hour only, so the retry is refused and the task fails with its own error;
    hal's is retried (``task.retried``) and audited as a second allowed hour."""
    coord = _coord({"gina": CallerPolicy(max_node_hours_per_day=1.5), "hal": CallerPolicy()})
    closing.append(coord)
    h = coord.submit_task(PythonTask(_node_fails), ONE_HOUR, caller="gina")
    assert h.wait(30)
    assert h.state == "failed" and "NODE_FAIL" in (h.error or "")
    kinds = [e.kind for e in coord.history(h.id)]
    assert "policy.copy_refused" in kinds and "task.retried" not in kinds
    recs = coord.gate.audit.records(task_id=h.id)
    assert [r.decision for r in recs] == ["allowed", "denied"]
    assert recs[1].label.endswith("(retry)")
    assert _shipped(coord) == 1
    g = coord.submit_task(PythonTask(_node_fails), ONE_HOUR, caller="hal")
    assert g.wait(30)
    assert "task.retried" in [e.kind for e in coord.history(g.id)]
    assert [r.decision for r in coord.gate.audit.records(task_id=g.id)] == ["allowed"] * 2
    assert _shipped(coord) == 3
