"""The house rules: layers (import-linter), module size, and a base install without extras.

``scripts/test`` also runs ``lint-imports`` and ``deptry`` before pytest; these tests say
the same from inside the suite, with the reason in the failure.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "federation"
MAX_LINES = 600

EXTRAS_ONLY = (
    "pandas",
    "matplotlib",
    "fastapi",
    "globus_compute_endpoint",
    "parsl",
)
"""Top-level modules that come only with an extra ([jupyter], [service], [endpoint])."""

BASE_MODULES = (
    "federation",
    "federation.runtime.coordinator",
    "federation.deploy.config",
    "federation.deploy.local",
    "federation.interfaces.cli.main",
    "federation.interfaces.mcp_server",
    "federation.interfaces.mcp_run",
    "federation.interfaces.service.client",
    "federation.interfaces.service.ops",
    "federation.placement.twin",
    "federation.sim",
)
"""What a base install (coordinator, CLI, MCP server) must import without any extra."""

_BLOCKER = """
import importlib, importlib.abc, sys
BLOCK = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCK:
            raise ImportError(f"{name} is not installed (blocked by the test)")
sys.meta_path.insert(0, Block())
for mod in sys.argv[2:]:
    importlib.import_module(mod)
"""


def test_no_module_over_600_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these by concept (at most {MAX_LINES} lines): {long}"


def test_layer_contracts_hold() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("import-linter is not installed: pip install -e '.[dev]'")
    r = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


@pytest.mark.parametrize("module", BASE_MODULES)
def test_base_install_imports_without_extras(module: str) -> None:
    r = subprocess.run(
        [sys.executable, "-c", _BLOCKER, ",".join(EXTRAS_ONLY), module],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-3000:]


def test_a_feature_without_its_extra_names_the_extra() -> None:
    code = (
        "from datetime import datetime, UTC\n"
        "from federation.core.snapshot import FederationSnapshot\n"
        "from federation.core.optional import MissingExtraError\n"
        "try:\n"
        "    FederationSnapshot(taken_at=datetime.now(UTC), sites=()).partitions_frame()\n"
        "except MissingExtraError as e:\n"
        "    print(e)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", _BLOCKER + "\n" + code, ",".join(EXTRAS_ONLY)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "pip install 'federation[jupyter]'" in r.stdout
