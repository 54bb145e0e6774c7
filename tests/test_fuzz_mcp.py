"""Every MCP tool, fuzzed: a bad call is a tool error that says what to do, and leaves no trace.

For each tool, ``TOOL_FUZZ`` gives a strategy per argument (good values, wrong types, NaN and
huge numbers, unicode, path tricks, real and guessed ids); calls also drop arguments, add
unknown ones, or pass arbitrary JSON. The server is the real one (``build_server``) over a
durable in-process coordinator (tests/fuzzing.py), driven by an in-memory MCP client as an
agent would. Each refused call must be an ``is_error`` result whose text names the problem
and says what to do (``What to do:``), never an internal error or a traceback, and must
leave the store, the token and held tables, the event log and the coordinator's memory
unchanged (a policy refusal adds its ``denied`` audit row). A call that is valid by chance
is let through.

``test_every_tool_has_a_fuzz_strategy`` lists the server's tools and their input schemas:
a tool or an argument without a strategy here fails it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from fuzzing import (
    Field,
    FuzzWorld,
    bad_numbers,
    build_world,
    close_world,
    draft_fields,
    event_kinds,
    group_fields,
    id_field,
    json_values,
    model_dicts,
    nasty_text,
    omit,
    task_fields,
    transfer_fields,
    unchanged,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from federation.interfaces.mcp_server import build_server
from federation.interfaces.service.models import EVENT_KINDS
from federation.interfaces.service.ops import Operations

EXAMPLES = int(os.environ.get("FEDERATION_FUZZ_EXAMPLES", "50"))
"""Examples per route or tool (more: ``FEDERATION_FUZZ_EXAMPLES=500``)."""


numbers = Field(omit, st.integers(-(10**30), 10**30) | st.floats() | bad_numbers | json_values)
event_ids = id_field("task", "group", "transfer", "held")

TOOL_FUZZ: dict[str, dict[str, Field]] = {
    "inspect_federation": {"refresh": Field(omit | st.booleans(), json_values)},
    "list_functions": {},
    "draft_envelope": draft_fields(),
    "submit_task": task_fields() | {"dry_run": Field(omit | st.booleans(), json_values)},
    "submit_group": group_fields(),
    "get_group": {"group_id": id_field("group", "task")},
    "move_data": transfer_fields(),
    "get_transfer": {"transfer_id": id_field("transfer", "task")},
    "get_result": {"task_id": id_field("task", "held", "group")},
    "await_event": {
        "after": Field(omit | st.integers(0, 5), numbers.bad),
        "task_ids": Field(
            omit | st.lists(event_ids.good, max_size=2),
            st.lists(event_ids.bad, min_size=1) | json_values,
        ),
        "kinds": Field(
            omit | st.lists(event_kinds.filter(lambda k: k in EVENT_KINDS), max_size=2),
            st.lists(event_kinds | nasty_text, min_size=1) | json_values,
        ),
        "timeout_s": Field(st.just(0), numbers.bad),
    },
    "cancel": {"task_id": id_field("task", "held")},
}
CREATES = {"submit_task", "submit_group", "move_data"}


@dataclass
class Mcp:
    world: FuzzWorld
    portal: BlockingPortal
    client: Client
    baseline: dict[str, Any]

    def __repr__(self) -> str:
        return f"Mcp({self.world.home})"

    def call(self, tool: str, args: dict[str, Any]) -> Any:
        return self.portal.call(self.client.call_tool, tool, args)


@pytest.fixture(scope="module")
def mcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mcp]:
    world = build_world(tmp_path_factory.mktemp("fuzz-mcp"), owner="mcp")

    async def get_ops() -> Operations:
        return world.ops

    server = build_server(get_ops)
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Client(server)) as client,
    ):
        yield Mcp(world, portal, client, world.settle())
    close_world(world)


def test_every_tool_has_a_fuzz_strategy(mcp: Mcp) -> None:
    tools = {t.name: t for t in mcp.portal.call(mcp.client.list_tools).tools}
    missing = sorted(set(tools) - set(TOOL_FUZZ))
    assert not missing, f"MCP tools without a fuzz strategy: {missing}; add them to TOOL_FUZZ"
    assert not set(TOOL_FUZZ) - set(tools), sorted(set(TOOL_FUZZ) - set(tools))
    for name, tool in tools.items():
        args = set(tool.input_schema.get("properties", {}))
        assert args == set(TOOL_FUZZ[name]), f"{name}: arguments {args}, fuzzed {TOOL_FUZZ[name]}"


def _fill(value: Any, world: FuzzWorld) -> Any:
    if isinstance(value, str):
        for kind, real in world.ids.items():
            value = value.replace(f"<{kind}>", real)
        return value
    if isinstance(value, list):
        return [_fill(v, world) for v in value]
    return value


@st.composite
def calls(draw: st.DrawFn, tool: str, world: FuzzWorld) -> dict[str, Any]:
    args = {k: _fill(v, world) for k, v in draw(model_dicts(TOOL_FUZZ[tool])).items()}
    if tool == "await_event":  # a valid wait must not make the test wait
        try:
            if 0 <= float(args.get("timeout_s", 0)) <= 50:
                args["timeout_s"] = 0
        except (TypeError, ValueError, OverflowError):
            pass
    return args


def _check(m: Mcp, tool: str, args: dict[str, Any]) -> None:
    res = m.call(tool, args)
    text = " ".join(getattr(c, "text", "") for c in res.content)
    if res.is_error:
        assert "Traceback" not in text and "internal_error" not in text, (args, text)
        assert text.startswith(f"Error executing tool {tool}: ") and ": " in text[30:], (
            f"{tool}({args}) failed without saying why: {text!r}"
        )
        assert "What to do:" in text, f"{tool}({args}): says what is wrong, not what to do: {text}"
    if tool in CREATES and not res.is_error:
        m.baseline = m.world.settle()
        return
    after = m.world.fingerprint()
    changed = unchanged(m.baseline, after, policy_refusal="policy_violation" in text)
    assert not changed, f"{tool}({args}) -> {text[:300]} recorded something: {changed}"
    m.baseline = after


@pytest.mark.parametrize("tool", sorted(TOOL_FUZZ))
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_bad_tool_calls_are_clear_tool_errors_and_leave_no_trace(
    mcp: Mcp, tool: str, data: st.DataObject
) -> None:
    _check(mcp, tool, data.draw(calls(tool, mcp.world)))


KNOWN_BAD: list[tuple[str, dict[str, Any], str]] = [
    # (tool, arguments, a word the error must contain)
    ("submit_task", {"envelope": {}, "command": "true", "walltime_s": 7200}, "walltime_s"),
    ("submit_task", {"envelope": {"cpus_min": "lots"}, "command": "true"}, "cpus_min"),
    ("submit_task", {"envelope": {}, "command": "true", "function": "square"}, "exactly one"),
    ("submit_task", {"envelope": {}, "function": "square", "args": ["x"]}, "bad_function"),
    ("submit_task", {"envelope": {}, "command": "rm -rf /"}, "policy_violation"),
    ("submit_task", {"envelope": {"sites": ["nowhere"]}, "command": "true"}, "unknown_site"),
    ("submit_task", {"envelope": {"gpus_min": 1024}, "command": "true"}, "no_feasible_site"),
    ("submit_task", {"envelope": {}, "command": " \t"}, "blank"),
    ("submit_group", {"children": [{"command": "true"}]}, "envelope"),
    (
        "submit_group",
        {"children": [{"command": "true", "envelope": {}}, {"command": "id", "envelope": {}}]},
        "policy_violation",
    ),
    (
        "move_data",
        {"source_site": "local", "source_path": "../x", "dest_site": "delta", "dest_path": "y"},
        "bad_path",
    ),
    (
        "move_data",
        {
            "source_site": "local",
            "source_path": "missing.txt",
            "dest_site": "delta",
            "dest_path": "y",
        },
        "data_not_found",
    ),
    ("await_event", {"after": -1, "timeout_s": 0}, "after"),
    ("await_event", {"kinds": ["task.*"], "timeout_s": 0}, "kinds"),
    ("await_event", {"task_ids": ["<held>"], "timeout_s": 0}, "unknown_task"),
    ("get_result", {"task_id": "<held>"}, "unknown_task"),
    ("cancel", {"task_id": "<held>"}, "unknown_task"),
    ("list_functions", {"verbose": True}, "verbose"),
]


@pytest.mark.parametrize(("tool", "args", "word"), KNOWN_BAD)
def test_known_bad_calls(mcp: Mcp, tool: str, args: dict[str, Any], word: str) -> None:
    args = {k: _fill(v, mcp.world) for k, v in args.items()}
    res = mcp.call(tool, args)
    text = " ".join(getattr(c, "text", "") for c in res.content)
    assert res.is_error and word in text, text
    _check(mcp, tool, args)


def test_unknown_tool_says_which_exist(mcp: Mcp) -> None:
    res = mcp.call("submit_job", {})
    text = res.content[0].text
    assert res.is_error and "Unknown tool" in text and "submit_task" in text, text
