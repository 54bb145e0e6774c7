"""Per-user job limits: site.yaml -> partition QOS -> the local clusters refuse and hold jobs.

Fast tests check the limits each site.yaml sets (docs/site-facts.md), the rendered
slurm.conf and the ``sacctmgr`` QOS commands. The ``slurm`` test submits to the real Vista
cluster until Slurm itself refuses a job (``QOSMaxSubmitJobPerUserLimit``) and holds the
rest back (``QOSMaxJobsPerUserLimit``).
"""

from __future__ import annotations

import os
import pwd
import re
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from federation.core.spec import PartitionSpec, SiteSpec, load_site, load_sites
from federation.localslurm import LocalFederation, accounts
from federation.localslurm.layout import Layout, Ports
from federation.localslurm.mariadb import data_dir
from federation.localslurm.render import render_site
from federation.localslurm.topology import (
    PartitionQos,
    cluster_spec,
    site_class_qos,
    site_partition_qos,
)

SPECS = load_sites()
LIMITED = [
    (s, p)
    for s in SPECS
    for p in s.partitions
    if p.max_running_jobs_per_user is not None or p.max_submitted_jobs_per_user is not None
]


def _partition_lines(conf: str) -> dict[str, dict[str, str]]:
    lines = (line for line in conf.splitlines() if line.startswith("PartitionName="))
    words = (dict(w.split("=", 1) for w in line.split()) for line in lines)
    return {w["PartitionName"]: w for w in words}


# ---------------------------------------------------------------- fast


def test_site_yaml_limits_are_the_published_ones() -> None:
    """Vista's Table 4 (Max Jobs per User, Max Submit); Delta, DeltaAI and Anvil publish no
    per-user job count for these partitions (TBD, not found, a dash); local is ours."""
    limits = {
        (s.name, p.name): (p.max_running_jobs_per_user, p.max_submitted_jobs_per_user)
        for s in SPECS
        for p in s.partitions
    }
    assert limits[("vista", "gh")] == (20, 40)
    assert limits[("vista", "gh-dev")] == (1, 3)
    assert limits[("vista", "gg")] == (20, 40)
    unlimited = {k: v for k, v in limits.items() if k[0] != "vista"}
    assert unlimited and all(v == (None, None) for v in unlimited.values()), unlimited


def test_running_limit_cannot_exceed_submit_limit() -> None:
    base: dict[str, Any] = {
        "name": "p",
        "nodes_real": 1,
        "nodes_local": 1,
        "cpus_per_node": 1,
        "mem_gb_per_node": 1,
        "max_walltime_s": 60,
    }
    with pytest.raises(ValueError, match="counts running jobs too"):
        PartitionSpec(**base, max_running_jobs_per_user=5, max_submitted_jobs_per_user=4)
    with pytest.raises(ValueError):
        PartitionSpec(**base, max_submitted_jobs_per_user=0)
    p = PartitionSpec(**base, max_running_jobs_per_user=5)
    assert p.max_submitted_jobs_per_user is None


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_rendered_partitions_name_their_qos(spec: SiteSpec, tmp_path: Path) -> None:
    cluster = cluster_spec(spec, Ports())
    conf = render_site(cluster, Layout.for_home(tmp_path), Ports(), "tester")["slurm.conf"]
    enforce = re.search(r"^AccountingStorageEnforce=(\S+)$", conf, re.M)
    assert enforce is not None
    assert {"associations", "limits", "qos"} <= set(enforce.group(1).split(","))
    lines = _partition_lines(conf)
    by_name = {q.name: q for q in cluster.partition_qos}
    for p in spec.partitions:
        if p.partition is None:  # a class in the default partition: its QOS is its own
            continue
        qos = lines[p.partition].get("QOS")
        if p.max_running_jobs_per_user is None and p.max_submitted_jobs_per_user is None:
            assert qos is None, f"{spec.name} {p.name} has no limits but QOS={qos}"
            continue
        assert qos is not None and qos.startswith(f"{spec.name}-"), qos
        assert by_name[qos].max_jobs_per_user == p.max_running_jobs_per_user
        assert by_name[qos].max_submit_jobs_per_user == p.max_submitted_jobs_per_user


def test_vista_gh_renders_its_limits(tmp_path: Path) -> None:
    cluster = cluster_spec(load_site("vista"), Ports())
    conf = render_site(cluster, Layout.for_home(tmp_path), Ports(), "tester")["slurm.conf"]
    assert _partition_lines(conf)["gh"]["QOS"] == "vista-gh"
    (gh,) = [q for q in cluster.partition_qos if q.name == "vista-gh"]
    assert gh.sacctmgr_limits() == ["MaxJobsPerUser=20", "MaxSubmitJobsPerUser=40"]


def test_qos_limit_words() -> None:
    q = PartitionQos(name="x-p", max_jobs_per_user=5)
    assert q.sacctmgr_limits() == ["MaxJobsPerUser=5"]
    assert q.sacctmgr_limits("-1") == ["MaxJobsPerUser=5", "MaxSubmitJobsPerUser=-1", "MaxWall=-1"]
    debug = PartitionQos(name="debug", max_wall_s=1800)  # a walltime limit is refused over
    assert debug.sacctmgr_limits() == ["MaxWall=0-00:30:00", "Flags=DenyOnLimit"]


def _qos_steps(
    monkeypatch: pytest.MonkeyPatch,
    sites: list[SiteSpec],
    existing: Mapping[str, tuple[int | None, int | None]],
) -> list[list[list[str]]]:
    """The sacctmgr writes ``register`` makes when accounts and users are all in place and
    slurmdbd holds the QOS ``existing`` (per QOS, its per-user limits) and every class QOS
    as the sites set it, on the user's associations."""
    held: dict[str, tuple[int | None, int | None, int | None, bool]]
    held = {n: (*v, None, False) for n, v in existing.items()}
    held |= {q.name: q.limits for s in sites for q in site_class_qos(s)}
    qos_of = {s.name: {"normal", *(q.name for q in site_class_qos(s))} for s in sites}
    ran: list[list[list[str]]] = []
    names = {a.lower() for s in sites for a in s.accounts}
    monkeypatch.setattr(accounts, "_clusters", lambda env: {s.name for s in sites})
    monkeypatch.setattr(
        accounts, "_accounts", lambda env: {(s.name, a.lower()) for s in sites for a in s.accounts}
    )
    monkeypatch.setattr(accounts, "_account_names", lambda env: names | {"root"})
    monkeypatch.setattr(
        accounts,
        "_user_assocs",
        lambda env, user: {
            (s.name, a.lower()): (s.default_account.lower(), qos_of[s.name])
            for s in sites
            for a in s.accounts
        },
    )
    monkeypatch.setattr(accounts, "_qos_limits", lambda env: dict(held))
    monkeypatch.setattr(accounts, "_each", lambda cmds, env: ran.append(cmds))
    accounts.register(sites, "me", {})
    return ran


def test_register_adds_the_missing_partition_qos(monkeypatch: pytest.MonkeyPatch) -> None:
    ran = _qos_steps(monkeypatch, SPECS, {"normal": (None, None)})
    assert ran == [
        [
            ["add", "qos", "vista-gg", "MaxJobsPerUser=20", "MaxSubmitJobsPerUser=40"],
            ["add", "qos", "vista-gh", "MaxJobsPerUser=20", "MaxSubmitJobsPerUser=40"],
            ["add", "qos", "vista-gh-dev", "MaxJobsPerUser=1", "MaxSubmitJobsPerUser=3"],
        ]
    ]


def test_register_corrects_changed_limits_only(monkeypatch: pytest.MonkeyPatch) -> None:
    existing = {"vista-gh": (20, 40), "vista-gh-dev": (1, None), "vista-gg": (10, 40)}
    ran = _qos_steps(monkeypatch, [load_site("vista")], existing)
    set_ = ["MaxJobsPerUser=20", "MaxSubmitJobsPerUser=40", "MaxWall=-1"]
    assert ran == [
        [
            ["modify", "qos", "where", "name=vista-gg", "set", *set_],
            [
                "modify",
                "qos",
                "where",
                "name=vista-gh-dev",
                "set",
                "MaxJobsPerUser=1",
                "MaxSubmitJobsPerUser=3",
                "MaxWall=-1",
            ],
        ]
    ]
    settled = {q.name: (20, 40) for q in site_partition_qos(load_site("vista"))}
    settled["vista-gh-dev"] = (1, 3)
    assert _qos_steps(monkeypatch, [load_site("vista")], settled) == []


def test_changed_limits_register_again_and_restart_the_rewritten_cluster(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The registration stamp names each QOS and its limits, so editing a limit in
    site.yaml reaches slurmdbd on the next ``up``; a cluster whose configs the registration
    wrote is reported, so that ``up`` restarts it even though its files now match."""
    fed = LocalFederation(home=tmp_path, sites=["vista"])
    data_dir(fed.layout).mkdir(parents=True)
    calls: list[list[str]] = []
    monkeypatch.setattr(
        accounts, "register", lambda sites, user, env: calls.append([s.name for s in sites])
    )
    assert fed._register_accounts() == {"vista"}  # wrote vista's slurm.conf for sacctmgr
    assert fed._register_accounts() == set() and len(calls) == 1
    vista = load_site("vista")
    gh = vista.partition("gh").model_copy(update={"max_running_jobs_per_user": 10})
    changed = vista.model_copy(
        update={"partitions": tuple(gh if p.name == "gh" else p for p in vista.partitions)}
    )
    fed.clusters["vista"].spec = cluster_spec(changed, fed.ports)
    fed._register_accounts()
    assert len(calls) == 2


# ---------------------------------------------------------------- slurm: the real Vista


def _our_jobs(fed: LocalFederation, site: str, name: str) -> list[tuple[str, str, str]]:
    """(job id, state, reason) of the jobs called ``name``."""
    out = fed.run(site, ["squeue", "-h", "-n", name, "-o", "%i|%T|%r"]).stdout
    return [(i, st, r) for i, st, r in (line.split("|") for line in out.split())]


def _cancel_all(fed: LocalFederation, site: str, name: str) -> None:
    for _ in range(20):  # a busy controller may lose one scancel: ask until none is left
        fed.run(site, ["scancel", "-n", name])
        if not _our_jobs(fed, site, name):
            return
        time.sleep(0.5)
    raise AssertionError(f"{site}: jobs {name} not cancelled: {_our_jobs(fed, site, name)}")


def _wait_partition_free_of_user(fed: LocalFederation, site: str, partition: str) -> None:
    """The limits count every job of this user in the partition: start from none."""
    user = pwd.getpwuid(os.getuid()).pw_name
    deadline, left = time.monotonic() + 30, ""
    while time.monotonic() < deadline:
        left = fed.run(
            site, ["squeue", "-h", "-u", user, "-p", partition, "-o", "%i %j %T"]
        ).stdout.strip()
        if not left:
            return
        time.sleep(0.5)
    pytest.fail(f"{site} {partition}: jobs of {user} still queued (the limits count them): {left}")


@pytest.mark.slurm
@pytest.mark.parametrize(
    ("spec", "partition"), LIMITED, ids=[f"{s.name}-{p.name}" for s, p in LIMITED]
)
def test_partition_enforces_per_user_job_limits(
    local_federation: Any, spec: SiteSpec, partition: PartitionSpec
) -> None:
    """Vista ``gh``: 40 startable jobs are accepted, the 41st is refused by sbatch with
    Slurm's ``QOSMaxSubmitJobPerUserLimit``; 20 run and the other 20 pend with
    ``QOSMaxJobsPerUserLimit`` while CPUs sit idle."""
    fed: LocalFederation = local_federation
    site, p = spec.name, partition
    running_max, submit_max = p.max_running_jobs_per_user, p.max_submitted_jobs_per_user
    shown = fed.run(site, ["scontrol", "show", "partition", p.name]).stdout
    assert f"QoS={site}-" in shown, shown
    _wait_partition_free_of_user(fed, site, p.name)
    # enough idle CPUs that only the limit, never the nodes, holds a job back
    count = submit_max or (running_max or 0) + 5
    assert p.nodes_local * p.cpus_per_node > count
    name = f"limits-{uuid.uuid4().hex[:8]}"
    args = [
        f"--partition={p.name}",
        f"--account={spec.account_for(p.name)}",
        f"--job-name={name}",
        "--cpus-per-task=1",
        "--time=2",
        "--output=/dev/null",
        "--wrap",
        "sleep 120",
    ]
    try:
        for i in range(count):
            proc = fed.run(site, ["sbatch", "--parsable", *args])
            assert proc.returncode == 0, f"job {i + 1} of {count} refused: {proc.stderr}"
        if submit_max is not None:
            extra = fed.run(site, ["sbatch", "--parsable", *args])
            assert extra.returncode != 0, f"job {submit_max + 1} accepted: {extra.stdout}"
            assert "QOSMaxSubmitJobPerUserLimit" in extra.stderr, extra.stderr
            assert len(_our_jobs(fed, site, name)) == submit_max
        if running_max is None:
            return
        # the scheduler runs every 0.2-1 s: wait until it has placed what it will place
        deadline, jobs, peak = time.monotonic() + 30, _our_jobs(fed, site, name), 0
        while time.monotonic() < deadline:
            jobs = _our_jobs(fed, site, name)
            running = [j for j in jobs if j[1] == "RUNNING"]
            peak = max(peak, len(running))
            held = [j for j in jobs if j[1] == "PENDING" and j[2] == "QOSMaxJobsPerUserLimit"]
            if len(running) == running_max and len(held) == count - running_max:
                break
            time.sleep(0.2)
        time.sleep(2)  # a few more scheduling passes start nothing more
        jobs = _our_jobs(fed, site, name)
        peak = max(peak, sum(j[1] == "RUNNING" for j in jobs))
        states = sorted((st, reason) for _, st, reason in jobs)
        assert peak == running_max, states
        assert states.count(("RUNNING", "None")) == running_max, states
        assert states.count(("PENDING", "QOSMaxJobsPerUserLimit")) == count - running_max, states
    finally:
        _cancel_all(fed, site, name)
