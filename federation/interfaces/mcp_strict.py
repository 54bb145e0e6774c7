"""An MCP server whose tools refuse what they were not asked for, and say how to fix it.

The SDK's tools ignore arguments they do not have (``{"envelope": {...}, "walltime_s":
7200}`` would run the task with the default walltime, silently) and report bad arguments
as pydantic's text (with links and the model's internal name). :class:`StrictMCPServer`
refuses unknown arguments before the tool runs, and words every argument error as the
service does: ``bad_request``, the fields and what was wrong with each, and what to do.
"""

from __future__ import annotations

import re
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, InputRequiredResult
from pydantic import ValidationError

__all__ = ["StrictMCPServer", "argument_errors", "bad_arguments"]

ARGUMENT_HINT = (
    "fix the named argument(s) and call again; the tool's input schema lists every "
    "argument with its type and bounds"
)


def _clean(text: str) -> str:
    """pydantic's message without its links and input echoes (one line per problem)."""
    lines = [ln.strip() for ln in str(text).splitlines()]
    kept = [ln for ln in lines if ln and not ln.startswith("For further information")]
    return re.sub(r"\s*\[type=[^\]]*\]", "", " ".join(kept))


def argument_errors(e: ValidationError) -> str:
    """``loc: message`` for each error, ``;``-separated."""
    parts = []
    for err in e.errors(include_url=False, include_input=False):
        loc = ".".join(str(p) for p in err["loc"])
        msg = _clean(err["msg"])
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def bad_arguments(what: str, hint: str = ARGUMENT_HINT) -> ToolError:
    """The tool error for arguments that cannot be used: what was wrong, what to do (the
    SDK puts ``Error executing tool <name>:`` in front when a tool raises it)."""
    return ToolError(f"bad_request: {what}\nWhat to do: {hint}")


class StrictMCPServer(MCPServer):
    """:class:`MCPServer` that refuses unknown arguments and words argument errors."""

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        context: Context[Any, Any] | None = None,
    ) -> CallToolResult | InputRequiredResult:
        schema = self._tool_input_schema(name)
        if schema is None:
            tools = sorted(t.name for t in await self.list_tools())
            raise ToolError(f"Unknown tool: {name}\nWhat to do: call one of {', '.join(tools)}")
        known = sorted(schema.get("properties", {}))
        unknown = sorted(set(arguments) - set(known))
        if unknown:
            raise _named(
                name,
                bad_arguments(
                    f"unknown argument(s) {unknown}",
                    f"use only the arguments {name} has: {', '.join(known) or '(none)'}",
                ),
            )
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise
        except ToolError as e:
            cause = e.__cause__
            if isinstance(cause, ValidationError):  # the arguments against the input schema
                raise _named(name, bad_arguments(argument_errors(cause))) from cause
            raise


def _named(tool: str, e: ToolError) -> ToolError:
    return ToolError(f"Error executing tool {tool}: {e}")
