"""Per-site templated endpoint configs: generated from site.yaml, rendered and loaded by the
real globus-compute-endpoint 4.19 loader (engines are built, never started, always shut down).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jsonschema
import parsl.addresses
import pytest
import yaml
from globus_compute_endpoint.endpoint.config import CoreEndpointConfig, UserEndpointConfig
from globus_compute_endpoint.endpoint.config.utils import get_config, render_config_user_template
from parsl.launchers import SimpleLauncher, SrunLauncher
from parsl.providers import LocalProvider, SlurmProvider
from parsl.providers.slurm.template import template_string as slurm_template

from federation.core.errors import TemplateVariableError
from federation.core.spec import PartitionSpec, SiteSpec, load_site, load_sites, site_names
from federation.sites.endpoint_config import (
    GENERATED_FILES,
    SCHEMA_FILE,
    TEMPLATE_FILE,
    generate_site_files,
    load_user_config,
    max_blocks,
    offline_mapped_identity,
    render_user_config,
    stale_files,
    walltime_max_pattern,
)
from federation.sites.user_config import shape_to_user_config, walltime_hms

SITES = load_sites()
SITE_NAMES = site_names()
PARTITIONS = [(s.name, p.name) for s in SITES for p in s.partitions]
ADMIN_INIT = 'export PATH="/opt/gce/bin:$PATH"\nexport GLOBUS_COMPUTE_USER_DIR="/tmp/gc dir"'
INTERFACES = {"eth6.560": "10.56.0.7", "ib0": "172.18.0.9"}
"""Stand-ins for the sites' worker interfaces (this machine has neither)."""


def _address_by_interface(ifname: str) -> str:
    if ifname not in INTERFACES:
        raise OSError(19, "No such device")
    return INTERFACES[ifname]


@pytest.fixture(autouse=True)
def _site_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A known endpoint environment: the admin's worker_init prefix, no overrides."""
    for var in (
        "FEDERATION_STRATEGY_PERIOD_S",
        "FEDERATION_MAX_IDLETIME_S",
        "FEDERATION_ENGINE_ADDRESS",
        "FEDERATION_HEARTBEAT_PERIOD_S",
        "FEDERATION_HEARTBEAT_THRESHOLD_S",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("FEDERATION_WORKER_INIT", ADMIN_INIT)
    # the endpoint's loader looks the function up by name in parsl.addresses
    monkeypatch.setattr(parsl.addresses, "address_by_interface", _address_by_interface)


@contextmanager
def loaded(site: SiteSpec, opts: dict[str, Any]) -> Iterator[Any]:
    config = load_user_config(site, opts)
    try:
        yield config
    finally:
        config.engine.shutdown()


def _part(site: str, partition: str) -> tuple[SiteSpec, PartitionSpec]:
    spec = load_site(site)
    return spec, spec.partition(partition)


# --- generated files -------------------------------------------------------------------


@pytest.mark.parametrize("site", SITE_NAMES)
def test_committed_files_equal_generated(site: str) -> None:
    spec = load_site(site)
    fresh = generate_site_files(spec)
    assert sorted(fresh) == sorted(GENERATED_FILES)
    for name, content in fresh.items():
        committed = (spec.config_dir / name).read_text()
        assert committed == content, (
            f"{spec.config_dir / name} is stale: run federation sites generate-configs"
        )
    assert stale_files(spec) == []


def test_generate_configs_regenerates_and_checks(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from federation.interfaces.cli.sites import sites_app

    def generate(*args: str) -> int:
        res = CliRunner().invoke(sites_app, ["generate-configs", *args, "--root", str(tmp_path)])
        return res.exit_code

    for site in SITE_NAMES:
        (tmp_path / site).mkdir()
        shutil.copy(load_site(site).config_dir / "site.yaml", tmp_path / site / "site.yaml")
    assert generate("--check") == 1  # nothing generated yet
    assert generate() == 0
    assert generate("--check") == 0
    for site in SITE_NAMES:
        for name in GENERATED_FILES:
            expected = (load_site(site).config_dir / name).read_text()
            assert (tmp_path / site / name).read_text() == expected


@pytest.mark.parametrize("site", SITE_NAMES)
def test_parent_config_loads_as_core_endpoint_config(site: str) -> None:
    spec = load_site(site)
    config = get_config(spec.config_dir)
    assert type(config) is CoreEndpointConfig
    assert config.display_name and site in config.display_name
    assert config.pam.enable is False
    assert config.public is (spec.access == "multi-user")
    assert config.amqp_port == spec.amqp_port == 443
    assert "multi_user" not in (spec.config_dir / "config.yaml").read_text().split("#")[0]


@pytest.mark.parametrize("site", SITE_NAMES)
def test_schema_is_valid_and_bounded(site: str) -> None:
    spec = load_site(site)
    schema = json.loads((spec.config_dir / SCHEMA_FILE).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert props["partition"]["enum"] == [p.name for p in spec.partitions]
    assert props["profile"]["enum"] == ["task", "probe"]
    assert props["cpus"]["maximum"] == max(p.cpus_per_node for p in spec.partitions)
    assert props["gpus"]["maximum"] == max(p.gpus_per_node for p in spec.partitions)
    assert props["nodes"]["maximum"] == max(p.nodes_real for p in spec.partitions)
    assert props["mem_gb"]["maximum"] == max(p.mem_gb_per_node for p in spec.partitions)
    assert props["worker_init"]["maxLength"] > 0


# --- task profile ------------------------------------------------------------------------


@pytest.mark.parametrize(("site", "partition"), PARTITIONS)
def test_task_profile_full_node(site: str, partition: str) -> None:
    spec, p = _part(site, partition)
    opts = shape_to_user_config(
        partition=p.name,
        nodes=1,
        cpus=p.cpus_per_node,
        mem_gb=p.mem_gb_per_node,
        gpus=p.gpus_per_node,
        walltime_s=p.max_walltime_s,
        worker_init="module load foo/1.2",
    )
    with loaded(spec, opts) as config:
        assert isinstance(config, UserEndpointConfig)
        engine = config.engine
        assert type(engine).__name__ == "GlobusComputeEngine"
        assert engine.executor.max_workers_per_node == 1
        assert engine._job_status_kwargs["strategy_period"] == 0.5
        assert engine._job_status_kwargs["max_idletime"] == 5.0
        assert engine.executor.heartbeat_period == 30
        assert engine.executor.heartbeat_threshold == 120
        prov = engine.executor.provider
        assert isinstance(prov, SlurmProvider)
        opts = spec.submit_options(p.name)
        assert prov.partition == p.partition  # None: the class names none (Perlmutter)
        assert prov.account == spec.account_for(p.name)
        assert (prov.qos, prov.constraint) == (opts.qos, opts.constraint)
        assert prov.cmd_timeout == spec.slurm_cmd_timeout_s == 60
        assert prov.cores_per_node == p.cpus_per_node
        if opts.mem_request == "allowed":
            assert prov.mem_per_node == p.mem_gb_per_node
        else:  # Vista: the scheduler refuses --mem, the node is whole
            assert prov.mem_per_node is None
        assert prov.walltime == walltime_hms(p.max_walltime_s)
        assert prov.exclusive is False
        assert "--exclusive" not in prov.scheduler_options
        # a shape's blocks grow with its tasks up to the partition's per-user job limit
        assert (prov.init_blocks, prov.min_blocks, prov.max_blocks) == (0, 0, max_blocks(p))
        if p.max_running_jobs_per_user is not None:
            assert prov.max_blocks == p.max_running_jobs_per_user
        assert prov.nodes_per_block == 1
        assert isinstance(prov.launcher, SimpleLauncher)
        # GPUs as each site documents them: --gpus-per-node=N, or implied by the partition
        assert "--gres" not in prov.scheduler_options and prov.gres is None
        by_node = p.gpus_per_node if opts.gpu_request == "gpus-per-node" else None
        assert prov.gpus_per_node == (by_node or None)
        gpu_line = f"#SBATCH --gpus-per-node={p.gpus_per_node}\n"
        assert (gpu_line in prov.scheduler_options) is bool(by_node)
        assert prov.worker_init.startswith(ADMIN_INIT + "\nmodule load foo/1.2")
        # by interface where the site's is published; else unset (FEDERATION_ENGINE_ADDRESS)
        assert engine.executor.address == INTERFACES.get(spec.engine_ifname or "")


@pytest.mark.parametrize(
    ("site", "partition"), [sp for sp in PARTITIONS if _part(*sp)[1].nodes_real >= 2]
)
def test_task_profile_multi_node_uses_srun(site: str, partition: str) -> None:
    spec, p = _part(site, partition)
    opts = shape_to_user_config(
        partition=p.name, nodes=2, cpus=1, mem_gb=1, gpus=0, walltime_s=90, account="proj-7.x_y"
    )
    with loaded(spec, opts) as config:
        prov = config.engine.executor.provider
        assert prov.nodes_per_block == 2
        assert isinstance(prov.launcher, SrunLauncher)
        assert prov.account == "proj-7.x_y"
        assert prov.walltime == "00:01:30"
        assert "--gres" not in prov.scheduler_options
        assert prov.worker_init.rstrip("\n") == ADMIN_INIT


@pytest.mark.parametrize("site", SITE_NAMES)
def test_task_profile_defaults(site: str) -> None:
    spec = load_site(site)
    p = spec.partitions[0]
    with loaded(spec, {"partition": p.name}) as config:
        prov = config.engine.executor.provider
        assert isinstance(prov, SlurmProvider)
        assert (prov.nodes_per_block, prov.cores_per_node, prov.mem_per_node) == (1, 1, None)
        # the site's default: an hour, or its shortest class limit (Perlmutter's debug)
        shortest = min(c.max_walltime_s for c in spec.partitions)
        assert prov.walltime == walltime_hms(min(3600, shortest))
        assert prov.account == spec.account_for(p.name)
        assert "--gres" not in prov.scheduler_options
        assert "--job-name" not in prov.scheduler_options


def test_engine_settings_from_site_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDERATION_STRATEGY_PERIOD_S", "2")
    monkeypatch.setenv("FEDERATION_MAX_IDLETIME_S", "30")
    monkeypatch.setenv("FEDERATION_ENGINE_ADDRESS", "127.0.0.1")
    monkeypatch.setenv("FEDERATION_HEARTBEAT_PERIOD_S", "10")
    monkeypatch.setenv("FEDERATION_HEARTBEAT_THRESHOLD_S", "45")
    monkeypatch.delenv("FEDERATION_WORKER_INIT")
    with loaded(load_site("local"), {"partition": "gpu", "gpus": 2}) as config:
        assert config.engine.executor.heartbeat_period == 10
        assert config.engine.executor.heartbeat_threshold == 45
        assert config.engine._job_status_kwargs["strategy_period"] == 2.0
        assert config.engine._job_status_kwargs["max_idletime"] == 30.0
        assert config.engine.executor.address == "127.0.0.1"
        prov = config.engine.executor.provider
        assert prov.worker_init.strip() == ""
        assert "#SBATCH --gpus-per-node=2\n" in prov.scheduler_options
        assert "--gres" not in prov.scheduler_options


@pytest.mark.parametrize(("cap", "expected"), [("4", 4), ("100", 20), ("0", 20), ("many", 20)])
def test_the_site_may_cap_a_shapes_blocks(
    monkeypatch: pytest.MonkeyPatch, cap: str, expected: int
) -> None:
    """FEDERATION_MAX_BLOCKS lowers a shape's block bound (Vista gh: its per-user limit
    of 20), never raises it; 0 or a non-number leaves the class's own bound."""
    monkeypatch.setenv("FEDERATION_MAX_BLOCKS", cap)
    rendered = yaml.safe_load(render_user_config(load_site("vista"), {"partition": "gh"}))
    assert rendered["engine"]["provider"]["max_blocks"] == expected


@pytest.mark.parametrize(("poll", "expected"), [("", 10), ("50", 50), ("0", 10), ("soon", 10)])
def test_the_site_may_slow_its_engines_idle_looks(
    monkeypatch: pytest.MonkeyPatch, poll: str, expected: int
) -> None:
    """FEDERATION_POLL_PERIOD_MS reaches the real engine (the config loader builds it): its
    interchange and worker pools sleep that long between looks when nothing arrives; unset,
    0 or a non-number keeps parsl's 10 ms."""
    monkeypatch.setenv("FEDERATION_POLL_PERIOD_MS", poll)
    with loaded(load_site("local"), {"partition": "debug"}) as config:
        assert config.engine.executor.poll_period == expected


def test_bad_environment_values_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDERATION_STRATEGY_PERIOD_S", "soon")
    monkeypatch.setenv("FEDERATION_MAX_IDLETIME_S", "-4")
    monkeypatch.setenv("FEDERATION_HEARTBEAT_PERIOD_S", "often")
    monkeypatch.setenv("FEDERATION_HEARTBEAT_THRESHOLD_S", "1")  # below 2 periods: raised
    rendered = yaml.safe_load(render_user_config(load_site("local"), {"partition": "debug"}))
    kwargs = rendered["engine"]["job_status_kwargs"]
    assert kwargs == {"strategy_period": 0.5, "max_idletime": 0.0}
    assert (rendered["engine"]["heartbeat_period"], rendered["engine"]["heartbeat_threshold"]) == (
        30,
        60,
    )


# --- probe profile -----------------------------------------------------------------------


@pytest.mark.parametrize("site", SITE_NAMES)
def test_probe_profile(site: str) -> None:
    with loaded(load_site(site), {"profile": "probe"}) as config:
        engine = config.engine
        assert type(engine).__name__ == "GlobusComputeEngine"
        assert 1 <= engine.executor.max_workers_per_node <= 4
        prov = engine.executor.provider
        assert isinstance(prov, LocalProvider)
        assert (prov.init_blocks, prov.min_blocks, prov.max_blocks) == (1, 1, 1)
        assert prov.worker_init.rstrip("\n") == ADMIN_INIT


# --- invalid variables -------------------------------------------------------------------

INVALID: list[tuple[str, dict[str, Any], str, str]] = [
    # (site, user_opts, variable named in the message, a fragment of the allowed range)
    ("local", {"partition": "gpuA100x4"}, "partition", "debug, gpu"),
    ("delta", {"partition": "gpuA100x4", "cpus": 65}, "cpus", "at most 64"),
    ("delta", {"partition": "cpu", "cpus": 129}, "cpus", "at most 128"),
    ("delta", {"partition": "cpu", "gpus": 1}, "gpus", "no GPUs"),
    ("vista", {"partition": "gg", "gpus": 1}, "gpus", "no GPUs"),
    ("delta", {"partition": "gpuA40x4", "gpus": 5}, "gpus", "at most 4"),
    ("vista", {"partition": "gh", "gpus": 2}, "gpus", "at most 1"),
    ("local", {"partition": "gpu", "nodes": 2}, "nodes", "at most 1"),
    ("local", {"partition": "debug", "nodes": 0}, "nodes", "minimum 1"),
    ("local", {"partition": "debug", "mem_gb": 17}, "mem_gb", "at most 16"),
    ("local", {"partition": "debug", "walltime": "01:00:01"}, "walltime", "at most 01:00:00"),
    ("vista", {"partition": "gh-dev", "walltime": "2:00:01"}, "walltime", "at most 02:00:00"),
    ("delta", {"partition": "cpu", "walltime": "049:00:00"}, "walltime", "at most 48:00:00"),
    ("delta", {"partition": "cpu", "walltime": "1:00"}, "walltime", "H:MM:SS"),
    ("delta", {"partition": "cpu", "walltime": "01:60:00"}, "walltime", "H:MM:SS"),
    ("delta", {"partition": "cpu", "walltime": "1000:00:00"}, "walltime", "H:MM:SS"),
    ("delta", {"partition": "cpu", "walltime": 3600}, "walltime", "type string"),
    ("delta", {"partition": "cpu", "walltime": "01:00:00\nengine: {}"}, "walltime", "H:MM:SS"),
    ("delta", {"partition": "cpu", "walltime": "01:00:00\n"}, "walltime", "H:MM:SS"),
    (
        "delta",
        {"partition": "cpu", "walltime": "\u0661:\u0660\u0660:\u0660\u0660"},
        "walltime",
        "H:MM:SS",
    ),
    ("delta", {"partition": "cpu", "worker_init": "; rm -rf /"}, "worker_init", "no quotes"),
    (
        "delta",
        {"partition": "cpu", "worker_init": "module load x; rm -rf /"},
        "worker_init",
        "no quotes",
    ),
    ("delta", {"partition": "cpu", "worker_init": "echo $(id)"}, "worker_init", "no quotes"),
    ("delta", {"partition": "cpu", "worker_init": "echo `id`"}, "worker_init", "no quotes"),
    (
        "delta",
        {"partition": "cpu", "worker_init": "a && b | c > /etc/x"},
        "worker_init",
        "no quotes",
    ),
    (
        "delta",
        {"partition": "cpu", "worker_init": "module load x\nrm -rf /"},
        "worker_init",
        "no quotes",
    ),
    ("delta", {"partition": "cpu", "worker_init": 'x"\nengine: {}'}, "worker_init", "no quotes"),
    ("delta", {"partition": "cpu", "worker_init": "module load x\n"}, "worker_init", "no quotes"),
    ("delta", {"partition": "cpu", "worker_init": "x" * 10_000}, "worker_init", "512"),
    (
        "delta",
        {"partition": "cpu", "worker_init": "m\u00f6dule load x"},
        "worker_init",
        "no quotes",
    ),
    ("delta", {"partition": "cpu", "account": "x\nengine: {}"}, "account", "1-64"),
    ("delta", {"partition": "cpu", "account": "acct; rm -rf /"}, "account", "1-64"),
    ("delta", {"partition": "cpu", "account": "$(id)"}, "account", "1-64"),
    ("delta", {"partition": "cpu", "account": "a" * 65}, "account", "1-64"),
    ("delta", {"partition": "cpu", "account": "\u00e1cct"}, "account", "1-64"),
    ("delta", {"partition": "cpu", "account": ""}, "account", "1-64"),
    ("delta", {"partition": "cpu", "nodes": "2"}, "nodes", "type integer"),
    ("delta", {"partition": "cpu", "nodes": True}, "nodes", "type integer"),
    ("delta", {"partition": "cpu", "gpus": -1}, "gpus", "minimum 0"),
    ("delta", {"partition": "cpu", "profile": "bogus"}, "profile", "probe"),
    (
        "delta",
        {"partition": "cpu", "engine": {"type": "ThreadPoolEngine"}},
        "engine",
        "allowed variables",
    ),
    ("local", {"profile": "probe", "cpus": 2}, "cpus", "not used by profile 'probe'"),
    (
        "local",
        {"profile": "probe", "worker_init": "module load x"},
        "worker_init",
        "not used by profile 'probe'",
    ),
    ("local", {"cpus": 2}, "partition", "debug, gpu"),  # the task profile requires it
    ("local", {"profile": "task"}, "partition", "required"),
    ("delta", {"partition": "cpu", "job_tag": ""}, "job_tag", "1-40"),
    ("delta", {"partition": "cpu", "job_tag": "a" * 41}, "job_tag", "1-40"),
    ("delta", {"partition": "cpu", "job_tag": "x\n#SBATCH --qos=hi"}, "job_tag", "1-40"),
    ("delta", {"partition": "cpu", "job_tag": "x y"}, "job_tag", "1-40"),
    ("delta", {"partition": "cpu", "job_tag": "t;id"}, "job_tag", "1-40"),
    ("delta", {"partition": "cpu", "job_tag": 7}, "job_tag", "type string"),
    ("local", {"profile": "probe", "job_tag": "abc"}, "job_tag", "not used by profile 'probe'"),
    ("local", {"_GC": {"env": {}}, "partition": "debug"}, "_GC", "reserved"),
]


@pytest.mark.parametrize(
    ("site", "opts", "variable", "allowed"),
    INVALID,
    ids=[f"{s}-{v}-{i}" for i, (s, _, v, _) in enumerate(INVALID)],
)
def test_invalid_variables_raise(
    site: str, opts: dict[str, Any], variable: str, allowed: str
) -> None:
    with pytest.raises(TemplateVariableError) as info:
        render_user_config(load_site(site), opts)
    msg = str(info.value)
    assert f"'{variable}'" in msg
    assert allowed in msg
    assert isinstance(info.value, ValueError)


def test_message_names_value_range_and_remedy() -> None:
    with pytest.raises(TemplateVariableError) as info:
        render_user_config(load_site("delta"), {"partition": "gpuA100x4", "cpus": 65, "gpus": 5})
    msg = str(info.value)
    assert "'cpus' = 65" in msg and "at most 64 CPUs per node on partition gpuA100x4" in msg
    assert "'gpus' = 5" in msg and "at most 4 a100 GPUs per node" in msg  # every variable
    assert "Change cpus" in msg and "user_config_schema.json" in msg
    assert isinstance(info.value.__cause__, jsonschema.ValidationError)


def test_huge_value_is_shortened_in_message() -> None:
    with pytest.raises(TemplateVariableError) as info:
        render_user_config(load_site("local"), {"partition": "debug", "account": "a" * 100_000})
    assert len(str(info.value)) < 1000


def test_template_quotes_values_even_without_schema() -> None:
    """Defence in depth: with no schema, an injected value stays one YAML string."""
    spec = load_site("local")
    evil = 'x"\nengine: {type: ThreadPoolEngine}\n#'
    text = render_config_user_template(
        parent_config=get_config(spec.config_dir),
        user_config_template=(spec.config_dir / TEMPLATE_FILE).read_text(),
        user_config_template_path=spec.config_dir / TEMPLATE_FILE,
        mapped_identity=offline_mapped_identity(),
        user_config_schema=None,
        user_opts={"partition": "debug", "account": evil, "walltime": evil},
    )
    conf = yaml.safe_load(text)
    assert conf["engine"]["type"] == "GlobusComputeEngine"
    assert conf["engine"]["provider"]["account"] == evil
    assert conf["engine"]["provider"]["walltime"] == evil


# --- helpers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "hms"),
    [
        (0, "00:00:00"),
        (1, "00:00:01"),
        (59.2, "00:01:00"),
        (90, "00:01:30"),
        (5400, "01:30:00"),
        (86399, "23:59:59"),
        (172800, "48:00:00"),
        (360000, "100:00:00"),
    ],
)
def test_walltime_hms(seconds: float, hms: str) -> None:
    assert walltime_hms(seconds) == hms


def test_walltime_hms_rejects_negative() -> None:
    with pytest.raises(ValueError, match="walltime"):
        walltime_hms(-1)


@pytest.mark.parametrize("max_s", [1, 59, 60, 61, 754, 3599, 3600, 3661, 5430, 7200])
def test_walltime_max_pattern_is_exact(max_s: int) -> None:
    pattern = re.compile(walltime_max_pattern(max_s))
    for s in range(max_s + 400):
        hms = walltime_hms(s)
        h, rest = hms.split(":", 1)
        for text in {hms, f"{int(h)}:{rest}", f"{int(h):03d}:{rest}"}:
            assert bool(pattern.search(text)) is (s <= max_s), text
    assert not pattern.search(walltime_hms(max_s) + "\n")


def test_walltime_max_pattern_48h_boundaries() -> None:
    pattern = re.compile(walltime_max_pattern(172800))
    ok = ["0:00:00", "47:59:59", "48:00:00", "048:00:00", "1:30:00", "01:30:00"]
    bad = ["48:00:01", "48:01:00", "49:00:00", "100:00:00", "480:00:00"]
    assert all(pattern.search(t) for t in ok)
    assert not any(pattern.search(t) for t in bad)


def test_shape_to_user_config() -> None:
    uec = shape_to_user_config(
        partition="gpuA100x4",
        nodes=2,
        cpus=16,
        mem_gb=64,
        gpus=2,
        walltime_s=5400,
        account="bbka-delta-gpu",
    )
    assert uec == {
        "profile": "task",
        "partition": "gpuA100x4",
        "nodes": 2,
        "cpus": 16,
        "mem_gb": 64,
        "gpus": 2,
        "walltime": "01:30:00",
        "account": "bbka-delta-gpu",
    }
    assert "account" not in shape_to_user_config("cpu", 1, 1, 1, 0, 60)
    with pytest.raises(ValueError):
        shape_to_user_config("cpu", 0, 1, 1, 0, 60)


@pytest.mark.parametrize(("site", "partition"), PARTITIONS)
def test_shape_user_config_passes_site_schema(site: str, partition: str) -> None:
    spec, p = _part(site, partition)
    schema = json.loads((spec.config_dir / SCHEMA_FILE).read_text())
    uec = shape_to_user_config(
        p.name,
        p.nodes_real,
        p.cpus_per_node,
        p.mem_gb_per_node,
        p.gpus_per_node,
        p.max_walltime_s,
        spec.default_account,
        "source ~/venv/bin/activate",
    )
    jsonschema.validate(uec, schema)
    too_long = dict(uec, walltime=walltime_hms(p.max_walltime_s + 1))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(too_long, schema)


# --- site submission facts: accounts, GPUs, memory, address, job tag ----------------------


def test_schema_requires_partition_for_task_profile_only() -> None:
    for spec in SITES:
        schema = json.loads((spec.config_dir / SCHEMA_FILE).read_text())
        validator = jsonschema.Draft202012Validator(schema)
        assert not validator.is_valid({})  # profile defaults to task
        assert not validator.is_valid({"profile": "task", "cpus": 1})
        assert validator.is_valid({"profile": "probe"})
        assert validator.is_valid({"partition": spec.partitions[0].name})


def test_delta_charges_cpu_and_gpu_partitions_to_their_own_accounts() -> None:
    delta = load_site("delta")
    assert delta.account_for("cpu") == "bbka-delta-cpu"
    assert delta.account_for("gpuA100x4") == delta.account_for("gpuA40x4") == "bbka-delta-gpu"
    for partition, account in (("cpu", "bbka-delta-cpu"), ("gpuA40x4", "bbka-delta-gpu")):
        uec = shape_to_user_config(partition, 1, 4, 8, 0, 60, site=delta)
        assert uec["account"] == account
        with loaded(delta, {"partition": partition}) as config:  # no account named
            assert config.engine.executor.provider.account == account
    # a caller's own account wins
    assert shape_to_user_config("cpu", 1, 1, 1, 0, 60, "mine", site=delta)["account"] == "mine"


def test_vista_sends_neither_gpus_nor_memory() -> None:
    vista = load_site("vista")
    opts = shape_to_user_config("gh", 2, 72, 100, 1, 3600, site=vista)
    with loaded(vista, opts) as config:
        prov = config.engine.executor.provider
        assert prov.partition == "gh" and prov.account == "ASC23000"
        assert prov.gpus_per_node is None and prov.gres is None and prov.mem_per_node is None
        for option in ("--gpus", "--gres", "--mem"):
            assert option not in prov.scheduler_options


def test_delta_uses_its_interface_and_the_environment_overrides_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    delta = load_site("delta")
    for profile in ({"partition": "cpu"}, {"profile": "probe"}):
        with loaded(delta, profile) as config:
            assert config.engine.executor.address == INTERFACES["eth6.560"]
    monkeypatch.setenv("FEDERATION_ENGINE_ADDRESS", "127.0.0.1")  # the local federation
    rendered = yaml.safe_load(render_user_config(delta, {"partition": "cpu"}))
    assert rendered["engine"]["address"] == "127.0.0.1"
    with loaded(delta, {"partition": "cpu"}) as config:
        assert config.engine.executor.address == "127.0.0.1"


def test_parsl_writes_its_job_name_before_the_scheduler_options() -> None:
    """sbatch takes the last of repeated directives, so ours must come after parsl's."""
    ours = slurm_template.index("${scheduler_options}")
    assert 0 <= slurm_template.index("#SBATCH --job-name=${jobname}") < ours


def test_job_tag_names_the_job_after_the_site_options(tmp_path: Path) -> None:
    base = load_site("delta").model_dump()
    base["scheduler_options"] = ["--requeue"]
    base["partitions"] = list(base["partitions"])
    base["partitions"][1] |= {"scheduler_options": ["--gpu-bind=closest"], "qos": "gpu-hi"}
    spec = SiteSpec.model_validate(base)
    paths = {n: tmp_path / n for n in GENERATED_FILES}
    for name, content in generate_site_files(spec).items():
        paths[name].write_text(content)
    opts = shape_to_user_config("gpuA100x4", 1, 8, 16, 1, 600, site=spec, job_tag="0a1b2c3d")
    assert opts["job_tag"] == "0a1b2c3d"
    config = load_user_config(spec, opts, config_dir=tmp_path)
    try:
        prov = config.engine.executor.provider
        lines = prov.scheduler_options.splitlines()
        assert lines[:3] == [
            "#SBATCH --requeue",
            "#SBATCH --gpu-bind=closest",
            "#SBATCH --job-name=fed.0a1b2c3d",
        ]
        assert "#SBATCH --qos=gpu-hi" in lines and "#SBATCH --constraint=scratch" in lines
        assert "#SBATCH --account=bbka-delta-gpu" in lines
    finally:
        config.engine.shutdown()
    # the cpu partition has only the site's line; no tag, no job-name line
    config = load_user_config(spec, {"partition": "cpu"}, config_dir=tmp_path)
    try:
        prov = config.engine.executor.provider
        assert prov.scheduler_options.splitlines()[0] == "#SBATCH --requeue"
        assert prov.qos is None and "--job-name" not in prov.scheduler_options
    finally:
        config.engine.shutdown()


def test_job_tag_on_a_committed_site() -> None:
    rendered = yaml.safe_load(
        render_user_config(load_site("local"), {"partition": "debug", "job_tag": "a.B_9-z"})
    )
    assert rendered["engine"]["provider"]["scheduler_options"] == "#SBATCH --job-name=fed.a.B_9-z"
