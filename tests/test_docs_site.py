"""The docs site's generated parts match the code, and the README stays a front door.

The site itself is built by ``scripts/test`` (``mkdocs build --strict``: a broken link, a
missing page or an unrenderable docstring fails it); these checks need no mkdocs.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import anyio

import federation

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mcp_tools_hook", DOCS / "hooks" / "mcp_tools.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mcp_tools_page_lists_every_tool_with_its_schemas() -> None:
    hook = _hook()
    page = hook.render()
    tools = anyio.run(hook._server().list_tools)
    assert len(tools) >= 11
    sections = page.split("\n## ")
    for tool in tools:
        (section,) = [s for s in sections if s.startswith(f"{tool.name}\n")]
        for name in tool.input_schema.get("properties", {}):
            assert f"| `{name}` |" in section, (tool.name, name)
        for schema in (tool.input_schema, tool.output_schema):
            if schema:
                block = "\n".join(
                    f"    {line}" for line in json.dumps(schema, indent=2).splitlines()
                )
                assert block in section, tool.name
    assert "federation://snapshot" in page and "federation://tasks/{task_id}" in page


def test_api_reference_covers_every_public_name() -> None:
    api = (DOCS / "api.md").read_text()
    documented = {
        line.removeprefix("::: federation.")
        for line in api.splitlines()
        if line.startswith("::: federation.")
    }
    assert documented == set(federation.__all__)


def test_readme_is_short_and_says_what_and_how() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert "scripts/demo" in readme and "scripts/test" in readme
    for page in ("getting-started", "python", "jupyter", "cli", "service-mcp", "deploy"):
        assert f"(docs/{page}.md)" in readme, page
    for page in readme.split("(docs/")[1:]:
        assert (DOCS / page.split(")")[0].split("#")[0]).is_file(), page[:40]
