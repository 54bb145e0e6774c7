"""draft_envelope over MCP asks the client's model when the client offers sampling (issue 35,
item 1), and falls back to the rules otherwise.

A real in-memory MCP client session over the in-process federation (no Slurm): a client
whose ``sampling_callback`` answers with a JSON envelope gets that envelope, validated
against the sites; one that answers garbage, an invalid envelope or a GPU type no site has,
or no client sampling at all, gets the rules' draft with the reason in its rationale. Both
ways the SDK carries sampling are exercised: inside the tool call's result (protocol
2026-07-28, the default) and as a request of the server's own during the call (``legacy``),
where a failing or silent model falls back too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from mcp import Client, types

from federation.interfaces import mcp_sampling
from federation.interfaces.mcp_server import build_server
from federation.interfaces.service.ops import LocalOps

TEXT = "Train a ResNet on 4 A100 GPUs for 6 hours"
GOOD = {
    "workload_class": "ddp-training",
    "gpus_min": 4,
    "gpus_max": 4,
    "gpu_types": ["a100"],
    "cpus_min": 16,
    "cpus_max": 32,
    "mem_gb_min": 128,
    "walltime_s": 6 * 3600,
    "rationale": {"gpus": "'4 A100 GPUs'", "walltime_s": "'6 hours'"},
    "confidence": 0.85,
}


@pytest.fixture(scope="module")
def ops() -> Iterator[LocalOps]:
    from inprocess import inprocess_coordinator

    coord = inprocess_coordinator(("local", "delta"))
    o = LocalOps(coord, refresh_s=3600)
    yield o
    o.close()
    coord.close()


def _answering(text: str, asked: list[Any] | None = None, delay_s: float = 0.0) -> Any:
    async def callback(ctx: Any, params: types.CreateMessageRequestParams) -> Any:
        if asked is not None:
            asked.append(params)
        await anyio.sleep(delay_s)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=text), model="test-model"
        )

    return callback


def _draft(ops: LocalOps, text: str = TEXT, **client: Any) -> dict[str, Any]:
    async def get_ops() -> LocalOps:
        return ops

    async def main() -> dict[str, Any]:
        async with Client(build_server(get_ops), **client) as c:
            r = await c.call_tool("draft_envelope", {"description": text})
            assert not r.is_error, r.content
            assert isinstance(r.structured_content, dict)
            return r.structured_content

    return anyio.run(main)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_client_that_samples_drafts_through_its_model(ops: LocalOps, mode: str) -> None:
    asked: list[types.CreateMessageRequestParams] = []
    d = _draft(ops, sampling_callback=_answering(json.dumps(GOOD), asked), mode=mode)
    assert d["drafted_by"] == "sampling: test-model"
    env = d["envelope"]
    assert (env["gpus_min"], env["gpu_types"], env["cpus_max"], env["mem_gb_min"]) == (
        4,
        ["a100"],
        32,
        128.0,
    )
    assert d["workload_class"] == "ddp-training" and d["confidence"] == 0.85
    assert d["rationale"] == GOOD["rationale"]  # agrees with the text: nothing flagged
    assert d["validation"]["feasible"] == ["delta/gpuA100x4"]
    assert d["stated"]["gpus"] == "4 A100 GPUs"
    (params,) = asked  # asked once, with the schema in the system prompt and the text
    assert params.system_prompt is not None and "walltime_s" in params.system_prompt
    first = params.messages[0].content
    assert isinstance(first, types.TextContent) and TEXT in first.text


def test_a_model_that_ignores_the_stated_numbers_is_flagged(ops: LocalOps) -> None:
    two = GOOD | {"gpus_min": 2, "gpus_max": 2, "walltime_s": 3600}
    d = _draft(ops, sampling_callback=_answering(f"Here you go:\n```json\n{json.dumps(two)}\n```"))
    assert d["drafted_by"] == "sampling: test-model" and d["envelope"]["gpus_min"] == 2
    differs = d["rationale"]["differs_from_description"]
    assert "gpus: the description says '4 A100 GPUs' (4/4)" in differs
    assert "walltime_s: the description says '6 hours' (21600)" in differs
    assert d["confidence"] == pytest.approx(0.85 * 0.8)


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("I would use four A100s for about six hours.", "not JSON"),
        ("[1, 2]", "not an object"),
        (json.dumps(GOOD | {"cpus_min": 64, "cpus_max": 8}), "invalid envelope"),
        (json.dumps(GOOD | {"walltime_s": -5}), "invalid envelope"),
        (json.dumps(GOOD | {"gpu_types": ["b200"]}), "unknown GPU type"),
    ],
)
def test_an_answer_that_is_not_a_valid_envelope_falls_back_to_the_rules(
    ops: LocalOps, answer: str, why: str
) -> None:
    d = _draft(ops, sampling_callback=_answering(answer))
    assert d["drafted_by"] == "rules"
    assert (
        d["rationale"]["drafted_by"].startswith("rules: ") and why in d["rationale"]["drafted_by"]
    )
    env = d["envelope"]  # the rules' draft honours the text
    assert (env["gpus_min"], env["gpu_types"], env["walltime_s"]) == (4, ["a100"], 21600)


def test_without_sampling_the_rules_draft_and_say_so(ops: LocalOps) -> None:
    d = _draft(ops)
    assert d["drafted_by"] == "rules"
    assert d["rationale"]["drafted_by"] == "rules: the client offers no sampling"
    assert d["envelope"]["gpus_min"] == 4


def test_legacy_sampling_errors_and_timeouts_fall_back(
    ops: LocalOps, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refuses(ctx: Any, params: Any) -> types.ErrorData:
        return types.ErrorData(code=-1, message="the user declined")

    d = _draft(ops, sampling_callback=refuses, mode="legacy")
    assert d["drafted_by"] == "rules" and "the user declined" in d["rationale"]["drafted_by"]
    monkeypatch.setattr(mcp_sampling, "SAMPLING_TIMEOUT_S", 0.3)
    slow = _answering(json.dumps(GOOD), delay_s=5)
    d = _draft(ops, sampling_callback=slow, mode="legacy")
    assert d["rationale"]["drafted_by"] == "rules: the client's model did not answer within 0.3 s"
