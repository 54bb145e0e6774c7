"""``federation.yaml``: validation with clear errors, and backends built from it."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from globus_compute_sdk import Client

from federation.core.errors import ConfigError
from federation.deploy.config import Deployment, FederationConfig, find_config, load_config
from federation.sites.cloud import CloudSite
from federation.sites.compute import ComputeSite
from federation.sites.globus_auth import AuthSettings

REPO = Path(__file__).resolve().parents[1]
EID = "11111111-1111-1111-1111-111111111111"


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "federation.yaml"
    p.write_text(text)
    return p


def test_the_shipped_example_is_valid() -> None:
    cfg = load_config(REPO / "federation.example.yaml")
    assert cfg.sites["delta"].backend == "globus"
    assert cfg.sites["delta"].endpoint_id == uuid.UUID(EID)
    assert cfg.sites["delta"].budgets() == {"bbka-delta-cpu": 50000, "bbka-delta-gpu": 2000}
    assert cfg.sites["local"].backend == "local"
    assert cfg.auth.mode == "client_credentials"


def test_errors_name_the_file_and_every_bad_field(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
sites:
  delta:
    backend: globus
    endpoint_id: not-a-uuid
    budget_core_hours: -5
  anvil:
    backend: globus
""",
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert str(path) in text and "3 problem(s)" in text
    assert "sites.delta.endpoint_id" in text
    assert "sites.delta.budget_core_hours" in text
    assert "sites.anvil: backend globus needs endpoint_id" in text


def test_unknown_site_lists_the_known_ones(tmp_path: Path) -> None:
    path = write(tmp_path, "sites:\n  frontera:\n    backend: local\n")
    with pytest.raises(ConfigError, match=r"unknown site\(s\) frontera; known: anvil, delta"):
        load_config(path)


def test_collection_prefix_must_be_absolute_without_traversal(tmp_path: Path) -> None:
    for bad in ("projects/x", "/projects/../etc"):
        path = write(
            tmp_path,
            f"sites:\n  delta:\n    backend: globus\n    endpoint_id: {EID}\n"
            f"    collection_path_prefix: {bad}\n",
        )
        with pytest.raises(ConfigError, match="collection_path_prefix"):
            load_config(path)
    ok = write(
        tmp_path,
        f"sites:\n  delta:\n    backend: globus\n    endpoint_id: {EID}\n"
        f"    transfer_collection_id: {EID}\n    collection_path_prefix: /projects/bbka\n",
    )
    assert load_config(ok).sites["delta"].collection_path_prefix == "/projects/bbka/"


def test_unknown_keys_and_bad_yaml_are_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"sites\.local\.endpoint: Extra inputs"):
        load_config(write(tmp_path, "sites:\n  local:\n    endpoint: x\n"))
    with pytest.raises(ConfigError, match=r"federation\.yaml line \d+: not valid YAML"):
        load_config(write(tmp_path, "sites:\n  - [unclosed\n"))
    with pytest.raises(ConfigError, match=r"no federation\.yaml found"):
        find_config(tmp_path / "missing.yaml")


def test_client_credentials_needs_client_id(tmp_path: Path) -> None:
    path = write(tmp_path, "auth:\n  mode: client_credentials\nsites:\n  local: {}\n")
    with pytest.raises(ConfigError, match=r"auth: mode client_credentials needs client_id"):
        load_config(path)


def test_config_env_var_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "sites:\n  local: {}\n")
    monkeypatch.setenv("FEDERATION_CONFIG", str(path))
    assert find_config() == path


def _deployment(tmp_path: Path, delta_backend: str) -> tuple[Deployment, list[AuthSettings]]:
    delta = (
        f"    backend: globus\n    endpoint_id: {EID}\n"
        if delta_backend == "globus"
        else "    backend: local\n"
    )
    cfg = load_config(
        write(
            tmp_path,
            f"sites:\n  delta:\n{delta}    account: bbka-delta\n    budget_core_hours: 100\n"
            "  local:\n    backend: local\n",
        )
    )
    made: list[AuthSettings] = []

    def client_factory(auth: AuthSettings) -> Client:
        made.append(auth)
        import globus_sdk

        return Client(authorizer=globus_sdk.NullAuthorizer(), do_version_check=False)

    return Deployment(cfg, home=tmp_path / "home", client_factory=client_factory), made


@pytest.mark.parametrize("backend", ["local", "globus"])
def test_switching_a_site_to_the_cloud_is_one_line(tmp_path: Path, backend: str) -> None:
    dep, made = _deployment(tmp_path, backend)
    try:
        backends = {b.name: b for b in dep.backends(uuid.uuid4())}
        assert list(backends) == ["delta", "local"]
        delta = backends["delta"]
        assert isinstance(delta, ComputeSite)
        assert delta.account == "bbka-delta" and delta.budgets == {"bbka-delta": 100}
        assert delta.accounts == ("bbka-delta", "bbka-delta-gpu")  # sshare reads both
        assert not isinstance(backends["local"], CloudSite)
        if backend == "globus":
            assert isinstance(delta, CloudSite)
            assert delta.endpoint_id == uuid.UUID(EID)
            assert len(made) == 1  # one cloud Client for every cloud site
        else:
            assert not isinstance(delta, CloudSite)
            assert made == []  # no Globus login for an all-local federation
            assert dep.service is not None
    finally:
        dep.close()


def _site(name: str, entry: str) -> str:
    return f"sites:\n  {name}:\n    backend: local\n{entry}"


def test_budgets_are_per_account_in_each_sites_units(tmp_path: Path) -> None:
    both = "    budget: {bbka-delta-cpu: 50000, BBKA-Delta-GPU: 300}\n"
    cfg = load_config(write(tmp_path, _site("delta", both)))
    assert cfg.sites["delta"].budgets() == {"bbka-delta-cpu": 50000, "BBKA-Delta-GPU": 300}
    one = load_config(write(tmp_path, _site("vista", "    budget: 120\n")))  # node-hours
    assert one.sites["vista"].budgets() == {"default": 120}
    with pytest.raises(ConfigError, match=r"bbka-delta-tpu is not an account delta charges"):
        load_config(write(tmp_path, _site("delta", "    budget: {bbka-delta-tpu: 1}\n")))
    with pytest.raises(ConfigError, match=r"sites\.delta\.budget\.default"):
        load_config(write(tmp_path, _site("delta", "    budget: {default: -1}\n")))


def test_budget_core_hours_still_loads_where_it_means_core_hours(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, _site("delta", "    budget_core_hours: 500\n")))
    assert cfg.sites["delta"].budgets() == {"default": 500}  # bbka-delta-cpu: core-hours
    gpu = _site("anvil", "    budget_core_hours: 500\n")
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, gpu))
    assert (
        "anvil's default account cis230000-gpu bills gpu-hours, not core-hours; write "
        "`budget: {cis230000-gpu: N}` with N in gpu-hours" in str(err.value)
    )
    with pytest.raises(ConfigError, match=r"ASC23000 bills node-hours"):
        load_config(write(tmp_path, _site("vista", "    budget_core_hours: 5\n")))
    twice = "    budget_core_hours: 5\n    budget: {default: 6}\n"
    with pytest.raises(ConfigError, match=r"keep only budget"):
        load_config(write(tmp_path, _site("delta", twice)))


def test_model_round_trip_keeps_ids() -> None:
    cfg = FederationConfig.model_validate(
        {"sites": {"delta": {"backend": "globus", "endpoint_id": EID}}}
    )
    again = FederationConfig.model_validate(cfg.model_dump(mode="json"))
    assert again == cfg


def test_placement_policy_is_named_in_the_config_and_checked(tmp_path: Path) -> None:
    # the example names the default: auto (copies only where they can be withdrawn)
    assert load_config(REPO / "federation.example.yaml").placement == "auto"
    path = write(tmp_path, "sites:\n  local:\n    backend: local\n")
    assert load_config(path).placement == "auto"
    bad = write(tmp_path, "placement: fastest\nsites:\n  local:\n    backend: local\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    text = str(err.value)
    assert "placement" in text and "unknown placement policy 'fastest'" in text
    assert "twin-watch" in text  # the error lists the names that work


def test_serve_refuses_an_unknown_placement_before_starting_anything() -> None:
    from typer.testing import CliRunner

    from federation.interfaces.cli.main import app

    res = CliRunner().invoke(app, ["serve", "--placement", "fastest", "--no-up"])
    assert res.exit_code == 2
    out = " ".join(res.output.split())
    assert "--placement" in out and "unknown placement policy" in out
