"""MkDocs hook: the page `mcp-tools.md`, written at build time from the real MCP server.

The server is built exactly as ``federation mcp`` builds it (``build_server``), with
operations that are never called and a snapshot keeper that never starts: listing its tools
and resources needs no Slurm, no endpoint and no network. Each tool's name, title,
description, annotations and input and output schemas are the ones an agent's client
receives, so the page cannot drift from the code.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PAGE = "mcp-tools.md"
ROOT = Path(__file__).resolve().parents[2]


def _server() -> Any:
    """The real MCP server, over operations it never reaches."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from federation.core.snapshot import FederationSnapshot
    from federation.interfaces.mcp_server import build_server
    from federation.interfaces.service.ops import Operations
    from federation.interfaces.snapshot_cache import SnapshotKeeper

    async def no_ops() -> Operations:
        raise RuntimeError("the docs build lists tools; it calls none")

    def no_probe(refresh: bool) -> FederationSnapshot:
        raise RuntimeError("the docs build does not probe")

    return build_server(no_ops, keeper=SnapshotKeeper(no_probe, start=False))


def type_of(schema: dict[str, Any]) -> str:
    """A short reading of a JSON schema's type: ``integer``, ``array of string``, ..."""
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return "any JSON" if name == "JsonValue" else name
    if "enum" in schema:
        return "one of " + ", ".join(f"`{v}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    if "anyOf" in schema:
        parts = [type_of(s) for s in schema["anyOf"]]
        return " or ".join(dict.fromkeys(parts))
    t = schema.get("type")
    if t == "array":
        items = schema.get("items")
        return f"array of {type_of(items)}" if isinstance(items, dict) and items else "array"
    if t == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {type_of(schema['additionalProperties'])}"
    if isinstance(t, list):
        return " or ".join(str(x) for x in t)
    return str(t) if t else "any JSON"


def _bounds(schema: dict[str, Any]) -> str:
    """The schema's numeric and length bounds, e.g. ``0 <= x <= 50``."""
    words = {
        "minimum": ">= {}",
        "exclusiveMinimum": "> {}",
        "maximum": "<= {}",
        "exclusiveMaximum": "< {}",
        "minLength": "length >= {}",
        "maxLength": "length <= {}",
        "minItems": "items >= {}",
        "maxItems": "items <= {}",
    }
    return ", ".join(w.format(schema[k]) for k, w in words.items() if k in schema)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def arguments_table(schema: dict[str, Any]) -> list[str]:
    """One row per top-level argument: name, type, required or default, description."""
    props: dict[str, dict[str, Any]] = schema.get("properties", {})
    if not props:
        return ["No arguments."]
    required = set(schema.get("required", []))
    rows = [
        "| argument | type | required / default | bounds | description |",
        "|---|---|---|---|---|",
    ]
    for name, prop in props.items():
        if name in required:
            need = "required"
        else:
            need = f"`{json.dumps(prop.get('default'))}`" if "default" in prop else "optional"
        bounds = _bounds(prop) or _cell(
            "; ".join(b for b in (_bounds(s) for s in prop.get("anyOf", [])) if b)
        )
        rows.append(
            f"| `{name}` | {_cell(type_of(prop))} | {need} | {bounds} "
            f"| {_cell(prop.get('description', ''))} |"
        )
    return rows


def _hints(annotations: Any) -> str:
    if annotations is None:
        return "no annotations"

    def yes(v: bool | None) -> str:
        return "-" if v is None else ("yes" if v else "no")

    return (
        f"read-only: {yes(annotations.read_only_hint)}; "
        f"destructive: {yes(annotations.destructive_hint)}; "
        f"idempotent: {yes(annotations.idempotent_hint)}; "
        f"open world: {yes(annotations.open_world_hint)}"
    )


def _schema_block(title: str, schema: dict[str, Any] | None) -> list[str]:
    if not schema:
        return []
    text = json.dumps(schema, indent=2, ensure_ascii=False)
    return (
        [f'??? note "{title}"', "", "    ```json"]
        + [f"    {line}" for line in text.splitlines()]
        + ["    ```", ""]
    )


def render() -> str:
    """The whole page, as Markdown."""
    import anyio

    from federation.interfaces.mcp_text import INSTRUCTIONS

    server = _server()
    tools = anyio.run(server.list_tools)
    resources = anyio.run(server.list_resources)
    templates = anyio.run(server.list_resource_templates)
    out = [
        "# MCP tools",
        "",
        "Every tool the MCP server (`federation mcp`) offers, as its client receives it:",
        "description, annotations, arguments, and the input and output JSON schemas.",
        "This page is generated at each build from the server itself",
        "(`docs/hooks/mcp_tools.py` lists the tools of `build_server`, as `federation mcp`",
        "builds it). How to run the server and connect an agent:",
        "[Service and MCP](service-mcp.md).",
        "",
        "| tool | what it does |",
        "|---|---|",
    ]
    out += [f"| [`{t.name}`](#{t.name}) | {_cell(t.title or '')} |" for t in tools]
    out += ["", "## What the server tells the agent", "", "```text", INSTRUCTIONS, "```", ""]
    for t in tools:
        out += [
            f"## {t.name}",
            "",
            f"**{t.title}.** {_cell(t.description or '')}",
            "",
            f"Hints: {_hints(t.annotations)}.",
            "",
            *arguments_table(t.input_schema),
            "",
            *_schema_block("Input schema", t.input_schema),
            *_schema_block("Output schema", t.output_schema),
        ]
    out += ["## Resources", "", "| URI | name | what it holds |", "|---|---|---|"]
    out += [f"| `{r.uri}` | {r.name} | {_cell(r.description or '')} |" for r in resources]
    out += [f"| `{r.uri_template}` | {r.name} | {_cell(r.description or '')} |" for r in templates]
    return "\n".join(out) + "\n"


def on_files(files: Any, config: Any) -> Any:
    """Add the generated page to the site (it is not written into ``docs/``)."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=render()))
    return files
