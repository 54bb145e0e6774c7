"""A deployment's sites are folders its federation.yaml names, anywhere on disk.

``sites new`` writes a starting folder; a ``sites_dir`` (relative to the file) or a site's
own ``path`` names it; config check, ``sites list`` and the offline doctor read it; the
package's example sites are the fallback, and an unknown site says where it was looked for.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from federation.core.errors import ConfigError
from federation.core.spec import PACKAGE_SITES, load_site
from federation.deploy.config import load_config
from federation.interfaces.cli.main import app as cli_app
from federation.sites.endpoint_config import render_user_config
from federation.sites.user_config import shape_to_user_config


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli_app, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_the_example_sites_are_package_data() -> None:
    assert PACKAGE_SITES.parent.name == "federation" and PACKAGE_SITES.name == "sites_data"
    spec = load_site("delta")
    assert spec.config_dir == (PACKAGE_SITES / "delta").resolve()


def test_a_new_site_in_a_sites_dir_passes_config_check(tmp_path: Path) -> None:
    code, out, _ = run("sites", "new", "mysite", "--dir", str(tmp_path / "centre"))
    assert code == 0, out
    folder = tmp_path / "centre" / "mysite"
    names = sorted(p.name for p in folder.iterdir())
    assert names == [
        "config.yaml",
        "site.yaml",
        "user_config_schema.json",
        "user_config_template.yaml.j2",
    ]
    text = (folder / "site.yaml").read_text()
    for line in text.splitlines():  # every field set is explained on its line
        if line and not line.startswith((" ", "#", "-", "partitions:")):
            assert "#" in line, line
    # relative to the file, not to the working directory
    cfg_dir = tmp_path / "etc"
    cfg_dir.mkdir()
    config = cfg_dir / "federation.yaml"
    config.write_text("sites_dir: ../centre\nsites:\n  mysite: {}\n  local: {}\n")
    cfg = load_config(config)
    assert cfg.specs["mysite"].config_dir == folder.resolve()
    assert cfg.specs["local"].config_dir == (PACKAGE_SITES / "local").resolve()
    code, out, err = run("config", "check", "--config", str(config))
    assert code == 0, err
    assert f"site folder {folder.resolve()}" in out
    # the endpoint renders a task for it through its own loader
    spec = cfg.specs["mysite"]
    rendered = render_user_config(spec, shape_to_user_config("cpu", 1, 2, 4, 0, 600, site=spec))
    assert 'partition: "cpu"' in rendered and 'account: "myproject"' in rendered
    code, out, _ = run("sites", "list", "--config", str(config), "--json")
    listed = {s["name"]: s for s in json.loads(out)}
    assert listed["mysite"]["source"] == "sites_dir" and listed["mysite"]["backend"] == "local"
    assert listed["delta"]["source"] == "package" and listed["delta"]["backend"] is None
    code, out, _ = run("doctor", "--offline", "--config", str(config), "--json")
    assert code == 0, out
    assert {r["site"]: r["ok"] for r in json.loads(out)} == {"mysite": True, "local": True}


def test_a_site_path_wins_and_its_name_must_agree(tmp_path: Path) -> None:
    shutil.copytree(PACKAGE_SITES / "vista", tmp_path / "vista-copy")
    config = tmp_path / "federation.yaml"
    config.write_text("sites:\n  vista:\n    path: vista-copy\n")
    assert load_config(config).specs["vista"].config_dir == (tmp_path / "vista-copy").resolve()
    config.write_text("sites:\n  other:\n    path: vista-copy\n")
    with pytest.raises(ConfigError, match=r"describes site 'vista', not 'other'"):
        load_config(config)


def test_a_stale_endpoint_file_fails_the_offline_doctor(tmp_path: Path) -> None:
    assert run("sites", "new", "mysite", "--dir", str(tmp_path))[0] == 0
    site_yaml = tmp_path / "mysite" / "site.yaml"
    site_yaml.write_text(site_yaml.read_text().replace("cpus_per_node: 64", "cpus_per_node: 32"))
    config = tmp_path / "federation.yaml"
    config.write_text(f"sites_dir: {tmp_path}\nsites:\n  mysite: {{}}\n")
    code, out, _ = run("doctor", "--offline", "--config", str(config), "--json")
    assert code == 1
    checks = {c["check"]: c for c in json.loads(out)[0]["checks"]}
    assert checks["files"]["status"] == "fail"
    assert "federation sites generate-configs --root" in checks["files"]["detail"]


def test_an_unknown_site_says_where_it_looked_and_how_to_add_one(tmp_path: Path) -> None:
    (tmp_path / "sites").mkdir()
    config = tmp_path / "federation.yaml"
    config.write_text("sites_dir: sites\nsites:\n  frontera: {}\n")
    with pytest.raises(ConfigError) as err:
        load_config(config)
    text = str(err.value)
    assert "unknown site(s) frontera; known: anvil, delta" in text
    assert f"{(tmp_path / 'sites').resolve()} (sites_dir)" in text
    assert str(PACKAGE_SITES) in text and "federation sites new NAME --dir DIR" in text


def test_a_missing_sites_dir_is_named(tmp_path: Path) -> None:
    config = tmp_path / "federation.yaml"
    config.write_text("sites_dir: nowhere\nsites:\n  local: {}\n")
    with pytest.raises(ConfigError, match=r"sites_dir: .*nowhere is not a folder"):
        load_config(config)


def test_sites_new_never_overwrites_a_sites_facts(tmp_path: Path) -> None:
    assert run("sites", "new", "mysite", "--dir", str(tmp_path))[0] == 0
    code, _, err = run("sites", "new", "mysite", "--dir", str(tmp_path))
    assert code == 1 and "exists" in err and "--force" in err
    code, _, err = run("sites", "new", "My-Site", "--dir", str(tmp_path))
    assert code == 1 and "lower case" in err
