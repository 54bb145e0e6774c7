"""The local Slurm federation: rendered configs (fast) and the real clusters (``slurm``)."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from federation.core.errors import SiteUnavailableError, UnknownSiteError
from federation.core.spec import SiteSpec, load_site, load_sites
from federation.localslurm import LocalFederation, MissingBinaryError, accounts
from federation.localslurm.cluster import node_ready
from federation.localslurm.layout import Layout, Ports
from federation.localslurm.process import pid_running
from federation.localslurm.render import render_site, render_slurmdbd
from federation.localslurm.topology import (
    DEFAULT_PARTITION,
    ENFORCE_PARTITION_ACCOUNTS,
    ClusterSpec,
    cluster_spec,
    node_groups,
    node_name,
    site_partition_qos,
    slurm_duration,
)

SPECS = load_sites()


def _layout(spec: SiteSpec) -> dict[str, list[str]]:
    """Partition -> its node names, as the cluster is laid out from the site's classes: one
    kind of node per class (classes that name no partition share theirs by hardware and
    features, in DEFAULT_PARTITION)."""
    parts: dict[str, list[str]] = {}
    for g in node_groups(spec):
        names = [node_name(spec.name, g.cls.name, i) for i in range(1, g.cls.nodes_local + 1)]
        parts.setdefault(g.partition, []).extend(names)
    return parts


def _conf_lines(text: str, key: str) -> list[dict[str, str]]:
    """``key=...`` lines of a Slurm config file, as dicts of their ``k=v`` words."""
    out = []
    for line in text.splitlines():
        if line.startswith(f"{key}="):
            out.append(dict(word.split("=", 1) for word in line.split()))
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    layout = Layout.for_home(tmp_path_factory.mktemp("home"))
    return {s.name: render_site(cluster_spec(s, Ports()), layout, Ports(), "tester") for s in SPECS}


# ---------------------------------------------------------------- fast: rendered configs


def test_every_site_renders_one_cluster(rendered: dict[str, dict[str, str]]) -> None:
    assert set(rendered) == {s.name for s in SPECS}
    for site, files in rendered.items():
        conf = files["slurm.conf"]
        assert f"ClusterName={site}\n" in conf
        assert "SlurmdSpoolDir=" in conf and "/spool/%n" in conf
        assert "AccountingStorageType=accounting_storage/slurmdbd" in conf
        assert "SelectType=select/cons_tres" in conf
        assert re.search(r"^SchedulerParameters=bf_interval=\d", conf, re.M)
        assert "AuthInfo=socket=" in conf and "AccountingStoragePass=" in conf


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_node_lines_match_site_yaml(spec: SiteSpec, rendered: dict[str, dict[str, str]]) -> None:
    nodes = _conf_lines(rendered[spec.name]["slurm.conf"], "NodeName")
    groups = node_groups(spec)
    assert len(nodes) == sum(g.cls.nodes_local for g in groups)
    assert len(groups) == len(spec.partitions) or spec.name == "perlmutter"  # shared nodes
    by_name = {n["NodeName"]: n for n in nodes}
    for g in groups:
        p = g.cls
        for i in range(1, p.nodes_local + 1):
            node = by_name[node_name(spec.name, p.name, i)]
            assert node["NodeHostname"] == "localhost" and node["NodeAddr"] == "127.0.0.1"
            assert node["CPUs"] == str(p.cpus_per_node)
            assert node["RealMemory"] == str(p.mem_gb_per_node * 1024)
            # the partition's features, then those its --constraint names (Delta: scratch)
            want = list(dict.fromkeys([*p.features, *spec.constraint_features(p.name)]))
            assert node["Features"].split(",") == want
            if p.gpu_type:
                assert node["Gres"] == f"gpu:{p.gpu_type}:{p.gpus_per_node}"
            else:
                assert "Gres" not in node
    for p in spec.partitions:  # every class's constraint is met by nodes of its partition
        part = set(_layout(spec)[p.partition or DEFAULT_PARTITION])
        feats = spec.constraint_features(p.name)
        fit = [n for n in part if set(feats) <= set(by_name[n]["Features"].split(","))]
        assert len(fit) >= p.nodes_local, (p.name, feats)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_partitions_match_site_yaml(spec: SiteSpec, rendered: dict[str, dict[str, str]]) -> None:
    parts = _conf_lines(rendered[spec.name]["slurm.conf"], "PartitionName")
    layout = _layout(spec)
    assert [p["PartitionName"] for p in parts] == list(layout)
    for line in parts:
        name = line["PartitionName"]
        classes = [p for p in spec.partitions if (p.partition or DEFAULT_PARTITION) == name]
        assert line["MaxTime"] == slurm_duration(max(p.max_walltime_s for p in classes))
        assert line["DefMemPerCPU"] == str(
            min(p.mem_gb_per_node * 1024 // p.cpus_per_node for p in classes)
        )
        assert line["Nodes"].split(",") == layout[name]
    assert [p["Default"] for p in parts].count("YES") == 1
    if DEFAULT_PARTITION in layout:  # jobs that name no partition land there
        assert next(p for p in parts if p["Default"] == "YES")["PartitionName"] == DEFAULT_PARTITION
    restricted = ENFORCE_PARTITION_ACCOUNTS and len(spec.accounts) > 1
    assert all(("AllowAccounts" in line) is restricted for line in parts)


def test_constrained_jobs_find_their_feature() -> None:
    delta = cluster_spec(load_site("delta"), Ports())
    assert all("scratch" in n.features for n in delta.nodes)
    vista = cluster_spec(load_site("vista"), Ports())
    assert not any("scratch" in n.features for n in vista.nodes)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_partition_accounts_when_enforced(spec: SiteSpec, tmp_path: Path) -> None:
    cluster = cluster_spec(spec, Ports(), enforce_partition_accounts=True)
    conf = render_site(cluster, Layout.for_home(tmp_path), Ports(), "tester")["slurm.conf"]
    for line in _conf_lines(conf, "PartitionName"):
        name = line["PartitionName"]
        classes = [p for p in spec.partitions if (p.partition or DEFAULT_PARTITION) == name]
        if len(spec.accounts) > 1:  # Delta: -cpu on cpu, -gpu on the GPU partitions
            want = sorted({spec.account_for(p.name).lower() for p in classes})
            assert line["AllowAccounts"].split(",") == want
        else:  # one account: association enforcement alone refuses any other
            assert "AllowAccounts" not in line


def _register(
    monkeypatch: pytest.MonkeyPatch,
    sites: list[SiteSpec],
    *,
    clusters: set[str],
    assocs: set[tuple[str, str]],
    names: set[str],
    user_assocs: dict[tuple[str, str], str],
    qos: dict[str, tuple[int | None, int | None, int | None, bool]] | None = None,
) -> list[list[list[str]]]:
    """The sacctmgr writes ``register`` makes, step by step, against slurmdbd holding
    ``clusters``, account ``assocs`` and account records ``names``, with the user's
    associations ``user_assocs`` ((cluster, account) -> default account) and the QOS
    ``qos`` (name -> per-user limits; default: every partition QOS, as the sites set it)."""
    if qos is None:
        qos = {q.name: q.limits for s in sites for q in site_partition_qos(s)}
    ran: list[list[list[str]]] = []
    monkeypatch.setattr(accounts, "_qos_limits", lambda env: dict(qos))
    monkeypatch.setattr(accounts, "_clusters", lambda env: clusters)
    monkeypatch.setattr(accounts, "_accounts", lambda env: set(assocs))
    monkeypatch.setattr(accounts, "_account_names", lambda env: names)
    with_qos = {k: (v, {"normal"}) for k, v in user_assocs.items()}
    monkeypatch.setattr(accounts, "_user_assocs", lambda env, user: dict(with_qos))
    monkeypatch.setattr(accounts, "_each", lambda cmds, env: ran.append(cmds))
    accounts.register(sites, "me", {})
    return ran


def _add_user(accounts_: str, cluster: str, default: str) -> list[str]:
    return [
        "add",
        "user",
        "me",
        f"account={accounts_}",
        f"cluster={cluster}",
        f"defaultaccount={default}",
    ]


def _set_default(cluster: str, default: str) -> list[str]:
    return [
        "modify",
        "user",
        "where",
        "name=me",
        f"cluster={cluster}",
        "set",
        f"defaultaccount={default}",
    ]


def test_register_adds_every_partition_account(monkeypatch: pytest.MonkeyPatch) -> None:
    ran = _register(
        monkeypatch,
        [load_site("delta"), load_site("vista")],
        clusters={"delta"},
        assocs={("delta", "bbka-delta"), ("delta", "bbka-delta-cpu")},
        names={"bbka-delta", "bbka-delta-cpu", "root"},
        # the user is associated with an account Delta no longer charges, and it is the default
        user_assocs={("delta", "bbka-delta"): "bbka-delta"},
    )
    assert ran[0] == [["add", "cluster", "vista"]]
    added = {c[2] for c in ran[1]}
    assert added == {"bbka-delta-gpu", "asc23000"}  # bbka-delta-cpu existed
    assert sorted(ran[2]) == [
        _add_user("asc23000", "vista", "asc23000"),
        _add_user("bbka-delta-cpu,bbka-delta-gpu", "delta", "bbka-delta-cpu"),
    ]
    assert ran[3] == [_set_default("delta", "bbka-delta-cpu")]
    assert len(ran) == 4


def test_register_repairs_a_half_added_account(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen on a fresh machine: concurrent ``add account`` requests left bbka-delta-cpu's
    association without its account record; ``add user`` then refused it."""
    ran = _register(
        monkeypatch,
        [load_site("delta")],
        clusters={"delta"},
        assocs={("delta", "root"), ("delta", "bbka-delta-cpu"), ("delta", "bbka-delta-gpu")},
        names={"root", "bbka-delta-gpu"},
        user_assocs={("delta", "root"): "root", ("delta", "bbka-delta-gpu"): "root"},
    )
    assert ran[0] == [["delete", "account", "bbka-delta-cpu", "cluster=delta"]]
    assert [c[2] for c in ran[1]] == ["bbka-delta-cpu"]
    assert ran[2] == [_add_user("bbka-delta-cpu", "delta", "bbka-delta-cpu")]
    assert ran[3] == [_set_default("delta", "bbka-delta-cpu")]
    assert len(ran) == 4


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_gres_conf_gives_every_gpu_a_device_file(
    spec: SiteSpec, rendered: dict[str, dict[str, str]]
) -> None:
    gres = _conf_lines(rendered[spec.name]["gres.conf"], "NodeName")
    gpu_nodes = {
        node_name(spec.name, g.cls.name, i): g.cls
        for g in node_groups(spec)
        if g.cls.gpu_type
        for i in range(1, g.cls.nodes_local + 1)
    }
    assert {g["NodeName"] for g in gres} == set(gpu_nodes)
    for g in gres:
        p = gpu_nodes[g["NodeName"]]
        assert g["Name"] == "gpu" and g["Type"] == p.gpu_type
        m = re.search(r"/nvidia(?:(\d)|\[0-(\d)\])$", g["File"])
        assert m is not None, g["File"]
        assert (1 if m.group(1) else int(m.group(2)) + 1) == p.gpus_per_node
    if spec.gpu_types:
        tres = re.search(r"^AccountingStorageTRES=(.*)$", rendered[spec.name]["slurm.conf"], re.M)
        assert tres is not None
        assert {"gres/gpu", *(f"gres/gpu:{t}" for t in spec.gpu_types)} <= set(
            tres.group(1).split(",")
        )


def test_ports_are_unique_across_sites() -> None:
    ports = Ports()
    clusters = [cluster_spec(s, ports) for s in SPECS]
    used = [ports.mariadb, ports.slurmdbd]
    for c in clusters:
        used += [c.ctld_port, *(n.port for n in c.nodes)]
    assert len(used) == len(set(used))
    assert all(1024 < p < 32768 for p in used)  # below the ephemeral range


def test_node_names_are_readable_and_unique() -> None:
    names = [n.name for s in SPECS for n in cluster_spec(s, Ports()).nodes]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"[a-z][a-z0-9-]*-\d\d", n) for n in names), names
    assert "delta-gpua100x4-01" in names and "vista-gh-dev-01" in names


def test_slurm_duration() -> None:
    assert slurm_duration(172800) == "2-00:00:00"
    assert slurm_duration(7200) == "0-02:00:00"
    assert slurm_duration(90061) == "1-01:01:01"


def test_slurmdbd_conf_points_at_private_mariadb(tmp_path: Path) -> None:
    layout, ports = Layout.for_home(tmp_path), Ports(20000)
    text = render_slurmdbd(layout, ports, "tester", "slurm", "secret")
    assert "DbdPort=20001\n" in text and "StoragePort=20000\n" in text
    assert "StorageHost=127.0.0.1\n" in text and "StoragePass=secret\n" in text
    assert f"AuthInfo=socket={layout.munge_socket}\n" in text


def test_socket_paths_stay_short(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*(["very-long-folder-name"] * 6))
    layout = Layout.for_home(deep)
    assert len(str(layout.munge_socket)) < 100 and len(str(layout.db_socket)) < 100
    assert layout.run_dir != layout.root / "run"


def test_node_ready_states() -> None:
    for ok in ("idle", "mixed", "allocated", "drained", "completing", "idle~"):
        assert node_ready(ok), ok
    for bad in ("down", "down*", "idle*", "unknown", "inval", "missing"):
        assert not node_ready(bad), bad


def test_zombie_counts_as_stopped() -> None:
    child = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 5
        while pid_running(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not pid_running(child.pid)  # exited but not reaped yet: a zombie
    finally:
        child.wait()


def test_env_slurm_conf_and_unknown_site(tmp_path: Path) -> None:
    fed = LocalFederation(home=tmp_path, sites=["local", "delta"])
    assert fed.sites == ["local", "delta"]
    assert fed.env("delta") == {"SLURM_CONF": str(fed.slurm_conf("delta"))}
    assert fed.slurm_conf("delta") == tmp_path.resolve() / "slurm/sites/delta/etc/slurm.conf"
    with pytest.raises(UnknownSiteError):
        fed.env("nowhere")


def test_missing_binary_says_what_to_do() -> None:
    err = MissingBinaryError("slurmctld", "slurm-wlm")
    assert isinstance(err, SiteUnavailableError)
    assert "scripts/bootstrap.sh" in str(err) and "slurm-wlm" in str(err)


def test_status_without_daemons(tmp_path: Path) -> None:
    from federation.interfaces.cli.sites import sites_app

    result = CliRunner().invoke(
        sites_app, ["status", "--json", "--home", str(tmp_path), "--site", "local"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (site,) = doc["sites"]
    assert site["site"] == "local" and site["controller_up"] is False
    assert site["nodes_total"] == 3 and "federation sites up" in site["error"]
    assert {d["name"] for d in doc["services"]} == {"munged", "mariadbd", "slurmdbd"}
    assert not any(d["running"] for d in doc["services"])


# ---------------------------------------------------------------- slurm: real clusters


@pytest.fixture()
def fed(local_federation: Any) -> LocalFederation:
    assert isinstance(local_federation, LocalFederation)
    return local_federation


@pytest.fixture()
def jobs(fed: LocalFederation) -> Iterator[list[tuple[str, str]]]:
    """(site, job id) of submitted jobs; cancelled after the test."""
    submitted: list[tuple[str, str]] = []
    yield submitted
    # a held job is never released: one scancel lost to a busy controller (a loaded 2-core
    # machine) left one queued for every later test; ask again until squeue has none left
    left = list(submitted)
    for _ in range(20):
        for site, job in left:
            fed.run(site, ["scancel", job])
        left = [
            (site, job)
            for site, job in left
            if fed.run(
                site, ["squeue", "-h", "-t", "PD,R,CG,S", "-j", job, "-o", "%i"]
            ).stdout.strip()
        ]
        if not left:
            return
        time.sleep(0.5)
    raise AssertionError(f"jobs not cancelled after 20 tries: {left}")


def _sbatch(fed: LocalFederation, site: str, args: list[str], jobs: list[tuple[str, str]]) -> str:
    proc = fed.run(site, ["sbatch", "--parsable", *args])
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip().split(";")[0]
    jobs.append((site, job))
    return job


def _wait_gone(fed: LocalFederation, site: str, job: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = fed.run(site, ["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip()
        if state in ("", "COMPLETED", "FAILED", "CANCELLED"):
            return
        time.sleep(0.1)
    pytest.fail(f"job {job} on {site} still {state} after {timeout_s} s")


def _cluster(fed: LocalFederation, site: str) -> ClusterSpec:
    return fed.clusters[site].spec


@pytest.mark.slurm
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_sinfo_partitions_and_nodes(fed: LocalFederation, spec: SiteSpec) -> None:
    out = fed.run(spec.name, ["sinfo", "-h", "-o", "%R|%D|%l"]).stdout
    counts: dict[str, int] = {}
    for line in out.split():
        part, n, _limit = line.split("|")
        counts[part] = counts.get(part, 0) + int(n)
    assert counts == {part: len(nodes) for part, nodes in _layout(spec).items()}


@pytest.mark.slurm
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_gpu_gres_and_features_per_node(fed: LocalFederation, spec: SiteSpec) -> None:
    out = fed.run(spec.name, ["sinfo", "-N", "-h", "-o", "%N|%G|%f"]).stdout
    rows = {n: (g, f) for n, g, f in (line.split("|") for line in out.split())}
    for node in _cluster(fed, spec.name).nodes:
        gres, features = rows[node.name]
        assert (gres.split("(")[0] if node.gres else gres) == (node.gres or "(null)")
        assert features.split(",") == list(node.features)


@pytest.mark.slurm
def test_shaped_job_sees_its_allocation(
    fed: LocalFederation, jobs: list[tuple[str, str]], tmp_path: Path
) -> None:
    spec = fed.clusters["delta"].spec.site
    out = tmp_path / "env.txt"
    job = _sbatch(  # as the endpoint template submits it: --gpus-per-node, never --gres
        fed,
        "delta",
        [
            "--partition=gpuA100x4",
            "--gpus-per-node=2",
            "--constraint=scratch",
            "--cpus-per-task=4",
            "--mem=8G",
            f"--account={spec.account_for('gpuA100x4')}",
            "--time=5",
            f"--output={out}",
            f"--chdir={tmp_path}",
            "--wrap",
            "env | sort",
        ],
        jobs,
    )
    _wait_gone(fed, "delta", job)
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    assert env["SLURM_JOB_PARTITION"] == "gpuA100x4"
    assert env["SLURM_CPUS_PER_TASK"] == "4" and env["SLURM_CPUS_ON_NODE"] == "4"
    assert env["SLURM_MEM_PER_NODE"] == "8192"
    # two GPUs of the node, whichever an earlier job left free, and the job is shown them
    gpus = env["SLURM_JOB_GPUS"].split(",")
    assert len(set(gpus)) == 2 and all(g.isdigit() and int(g) < 4 for g in gpus), gpus
    assert env["CUDA_VISIBLE_DEVICES"] == env["SLURM_JOB_GPUS"]
    assert env["SLURM_JOB_ACCOUNT"] == spec.account_for("gpuA100x4").lower()
    assert env["SLURM_JOB_NODELIST"].startswith("delta-gpua100x4-")

    deadline, state = time.monotonic() + 60, ""
    while time.monotonic() < deadline:  # the completion record reaches slurmdbd shortly after
        state = fed.run(
            "delta", ["sacct", "-n", "-X", "-P", "-j", job, "-o", "state,partition,alloctres"]
        ).stdout.strip()
        if state.startswith("COMPLETED|gpuA100x4|"):
            break
        time.sleep(0.2)
    status, partition, tres = state.split("|")
    assert status == "COMPLETED" and partition == "gpuA100x4"
    assert "gres/gpu:a100=2" in tres and "cpu=4" in tres


@pytest.mark.slurm
def test_wrong_account_is_rejected(fed: LocalFederation) -> None:
    proc = fed.run("vista", ["sbatch", "--account=nobody-here", "--wrap", "true"])
    assert proc.returncode != 0 and "Invalid account" in proc.stderr


@pytest.mark.slurm
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_partition_takes_its_own_account(
    fed: LocalFederation, spec: SiteSpec, jobs: list[tuple[str, str]]
) -> None:
    for p in spec.partitions:
        opts = spec.submit_options(p.name)
        args = [f"--account={opts.account}", "--hold", "--time=1"]
        if opts.partition:  # a class that names none goes to the default (Perlmutter)
            args.append(f"--partition={opts.partition}")
        if opts.constraint:
            args.append(f"--constraint={opts.constraint}")
        if opts.qos:
            args.append(f"--qos={opts.qos}")
        if p.gpus_per_node and opts.gpu_request == "gpus-per-node":
            args.append(f"--gpus-per-node={p.gpus_per_node}")
        _sbatch(fed, spec.name, [*args, "--output=/dev/null", "--wrap", "true"], jobs)


@pytest.mark.slurm
@pytest.mark.skipif(not ENFORCE_PARTITION_ACCOUNTS, reason="AllowAccounts not rendered yet")
def test_gpu_job_charged_to_the_cpu_account_is_refused(fed: LocalFederation) -> None:
    delta = fed.clusters["delta"].spec.site
    proc = fed.run(
        "delta",
        [
            "sbatch",
            "--partition=gpuA100x4",
            f"--account={delta.account_for('cpu')}",
            "--gpus-per-node=1",
            "--wrap",
            "true",
        ],
    )
    assert proc.returncode != 0 and "account" in proc.stderr.lower(), proc.stderr


@pytest.mark.slurm
def test_vista_gpu_partition_needs_no_gpu_request(
    fed: LocalFederation, jobs: list[tuple[str, str]], tmp_path: Path
) -> None:
    """As the Vista template submits: partition, account, no --gres/--gpus and no --mem."""
    out = tmp_path / "env.txt"
    job = _sbatch(
        fed,
        "vista",
        [
            "--partition=gh",
            "--account=ASC23000",
            "--cpus-per-task=2",
            "--time=2",
            f"--output={out}",
            "--wrap",
            "echo partition=$SLURM_JOB_PARTITION",
        ],
        jobs,
    )
    _wait_gone(fed, "vista", job)
    assert out.read_text().strip() == "partition=gh"


@pytest.mark.slurm
def test_squeue_start_estimate_behind_full_partition(
    fed: LocalFederation, jobs: list[tuple[str, str]]
) -> None:
    # gg, whose two nodes one job fills: gh-dev runs one job per user (its QOS), and a job
    # held back by a QOS limit gets no start estimate
    common = ["--partition=gg", "--exclusive", "--time=2", "--output=/dev/null"]
    nodes = load_site("vista").partition("gg").nodes_local
    filler = _sbatch(fed, "vista", [*common, f"--nodes={nodes}", "--wrap", "sleep 60"], jobs)

    def state(job: str) -> str:
        res = fed.run("vista", ["squeue", "-h", "-j", job, "-o", "%T %r"])
        return f"{res.stdout.strip()} {res.stderr.strip()}".strip()

    deadline = time.monotonic() + 60  # an earlier test's job may hold gg a little longer
    while not state(filler).startswith("RUNNING") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert state(filler).startswith("RUNNING"), f"the filler {filler}: {state(filler)}"
    waiter = _sbatch(fed, "vista", [*common, "--wrap", "true"], jobs)
    # the estimate comes from the backfill pass (every few seconds, later on a loaded host)
    deadline, start = time.monotonic() + 60, "N/A"
    while time.monotonic() < deadline:
        start = fed.run("vista", ["squeue", "--start", "-h", "-j", waiter, "-o", "%S"]).stdout
        start = start.strip()
        if start not in ("", "N/A"):
            break
        time.sleep(0.5)
    assert start not in ("", "N/A"), (
        f"no start estimate for job {waiter} within 60 s: it is {state(waiter)!r}, "
        f"the filler {filler} {state(filler)!r}"
    )
    assert datetime.fromisoformat(start) > datetime.now()


@pytest.mark.slurm
def test_one_slurmdbd_serves_all_clusters(fed: LocalFederation) -> None:
    out = fed.run("local", ["squeue", "-M", "all"]).stdout
    for spec in SPECS:
        assert f"CLUSTER: {spec.name}" in out
    clusters = fed.run("local", ["sacctmgr", "-nP", "show", "clusters", "format=cluster"]).stdout
    assert {s.name for s in SPECS} <= set(clusters.split())


@pytest.mark.slurm
def test_up_again_is_idempotent_and_fast(fed: LocalFederation) -> None:
    pids = {d.name: d.pid() for c in fed.clusters.values() for d in c.daemons()}
    t0 = time.monotonic()
    steps = fed.up()
    assert time.monotonic() - t0 < 3 and steps["total"] < 3
    assert {d.name: d.pid() for c in fed.clusters.values() for d in c.daemons()} == pids


@pytest.mark.slurm
def test_up_restarts_only_a_dead_daemon(fed: LocalFederation) -> None:
    cluster = fed.clusters["deltaai"]
    victim = cluster.slurmd(cluster.spec.nodes[-1].name)
    others = {d.name: d.pid() for c in fed.clusters.values() for d in c.daemons()}
    old = victim.signal_stop()
    assert old is not None
    deadline = time.monotonic() + 10
    while pid_running(old) and time.monotonic() < deadline:
        time.sleep(0.05)
    fed.up()
    new = {d.name: d.pid() for c in fed.clusters.values() for d in c.daemons()}
    assert new[victim.name] not in (None, old)
    assert {k: v for k, v in new.items() if k != victim.name} == {
        k: v for k, v in others.items() if k != victim.name
    }


@pytest.mark.slurm
def test_status_reports_every_site_up(fed: LocalFederation) -> None:
    statuses = {s.site: s for s in fed.status()}
    assert set(statuses) == set(fed.sites)
    for site, st in statuses.items():
        assert st.controller_up and st.error is None, st
        assert st.nodes_total == len(_cluster(fed, site).nodes)
        assert sum(st.nodes_by_state.values()) == st.nodes_total
        assert all(node_ready(s) for s in st.nodes_by_state), st.nodes_by_state
        assert st.slurm_conf == fed.slurm_conf(site) and st.slurm_conf.is_file()
    assert all(d.running for d in fed.services())
    conf = fed.run("anvil", ["scontrol", "show", "config"]).stdout
    assert re.search(r"^ClusterName\s*=\s*anvil$", conf, re.M)
