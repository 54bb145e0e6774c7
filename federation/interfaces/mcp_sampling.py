"""draft_envelope through the MCP client's own model (sampling), when the client offers it.

The draft_envelope tool asks the client's model for a JSON envelope (``sampling/
createMessage``) only when the client declared the ``sampling`` capability. The answer is
validated against the envelope's schema here, and against the sites by the same
``draft_envelope`` the rules go through (a :class:`~federation.placement.drafting.Proposal`);
on no capability, an error, a timeout or an answer that is not a valid envelope the rules
draft it, and the rationale's ``drafted_by`` says why.

The SDK carries the request the way the negotiated protocol does: from 2026-07-28 inside
the tool call's result (the client answers and calls again; a client whose model fails
ends its own call there), before that as a request of the server's own during the call,
which this module bounds by :data:`SAMPLING_TIMEOUT_S` and whose errors fall back.
"""

from __future__ import annotations

import json
import logging
import re
import warnings
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.resolve import Sample
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types import CreateMessageResult, SamplingMessage, TextContent
from pydantic import ValidationError

from federation.core.envelope import ResourceEnvelope
from federation.placement.drafting import Proposal, TaskHints

logger = logging.getLogger("federation.mcp")

SAMPLING_TIMEOUT_S = 30.0
"""How long a draft waits for the client's model (older protocols; see the module doc)."""
MAX_TOKENS = 800
INPUT_REQUIRED_VERSION = "2026-07-28"
"""The first protocol revision that carries sampling inside the tool call's result."""
ANSWER_FIELDS = (
    "cpus_min",
    "cpus_max",
    "gpus_min",
    "gpus_max",
    "mem_gb_min",
    "mem_gb_max",
    "nodes",
    "walltime_s",
    "gpu_types",
    "gpu_mem_gb_min",
    "arch",
    "rationale",
    "confidence",
)
WORKLOAD_CLASSES = ("cpu-prep", "inference", "ddp-training", "mpi", "generic")
SYSTEM_PROMPT = (
    "You size HPC batch jobs. Answer with one JSON object and nothing else, with these "
    "keys: workload_class (one of " + ", ".join(WORKLOAD_CLASSES) + "), and the resource "
    "envelope: cpus_min, cpus_max (CPU cores per node), gpus_min, gpus_max (GPUs per node), "
    "mem_gb_min, mem_gb_max (host memory per node, GB), nodes, walltime_s (seconds, at least "
    "60), gpu_types (lowercase names like 'a100'; [] for any), gpu_mem_gb_min (GB per GPU, "
    "or null), rationale (an object: bound name -> the words of the description it came "
    "from, or why), confidence (0 to 1). Every number the description states (cores, nodes, "
    "GPUs, their type and memory, RAM, duration) must be used as stated; 'CPU only' or 'no "
    "GPU' means gpus_min = gpus_max = 0. Use null for a maximum you cannot bound."
)
_FENCE = re.compile(r"```(?:json)?\s*(\{.*\})\s*```", re.S)


def _request_text(description: str, hints: TaskHints | None) -> str:
    text = f"Task description:\n{description}"
    if hints is not None and (known := hints.model_dump(exclude_defaults=True)):
        text += f"\n\nKnown beyond the description (JSON): {json.dumps(known, sort_keys=True)}"
    return text


def sample_request(description: str, hints: TaskHints | None) -> Sample:
    """The question put to the client's model (the same words on every round)."""
    return Sample(
        [
            SamplingMessage(
                role="user",
                content=TextContent(type="text", text=_request_text(description, hints)),
            )
        ],
        max_tokens=MAX_TOKENS,
        system_prompt=SYSTEM_PROMPT,
        temperature=0.0,
    )


def offers_sampling(ctx: Context | None) -> bool:
    """Whether the client declared the sampling capability."""
    try:
        caps = ctx.client_capabilities if ctx is not None else None
    except (ValueError, LookupError):  # not inside a request
        return False
    return caps is not None and caps.sampling is not None


def _uses_input_required(ctx: Context) -> bool:
    version = ctx.protocol_version  # dated revisions (YYYY-MM-DD) order as strings
    return version is not None and version >= INPUT_REQUIRED_VERSION


async def ask_client_model(
    description: str, hints: TaskHints | None, ctx: Context
) -> CreateMessageResult | Sample | str | None:
    """The resolver behind draft_envelope's ``sampled`` argument.

    None when the client offers no sampling; the :class:`Sample` marker on protocols where
    the SDK carries it in the tool's result; on older ones the model's answer, asked here
    with a timeout, or a string saying why there is none."""
    if not offers_sampling(ctx):
        return None
    request = sample_request(description, hints)
    if _uses_input_required(ctx):
        return request
    p = request.params
    try:
        with anyio.fail_after(SAMPLING_TIMEOUT_S), warnings.catch_warnings():
            # sampling is deprecated from protocol 2026-07-28 on; this path is the older ones'
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            result: CreateMessageResult = await ctx.session.create_message(
                p.messages,
                max_tokens=p.max_tokens,
                system_prompt=p.system_prompt,
                temperature=p.temperature,
                related_request_id=ctx.request_id,
            )
        return result
    except TimeoutError:
        return f"the client's model did not answer within {SAMPLING_TIMEOUT_S:g} s"
    except Exception as e:  # an MCP error, a closed session: the rules draft instead
        logger.info("sampling for a draft failed", exc_info=True)
        return f"sampling failed: {type(e).__name__}: {e}"[:300]


def proposal_from(answer: CreateMessageResult | Sample | str | None) -> Proposal | str:
    """The model's answer as a proposal, or why it is not one."""
    if answer is None:
        return "the client offers no sampling"
    if isinstance(answer, str):
        return answer
    if not isinstance(answer, CreateMessageResult):
        return "no answer from the client's model"
    content = answer.content
    if not isinstance(content, TextContent):
        return f"the client's model answered with {content.type} content, not JSON text"
    text = content.text.strip()
    if m := _FENCE.search(text):
        text = m.group(1)
    try:
        doc: Any = json.loads(text)
    except ValueError:
        return f"the client's model answered {_short(text)}, not JSON"
    if not isinstance(doc, dict):
        return "the client's model answered JSON that is not an object"
    cls = doc.get("workload_class", "generic")
    fields = {k: v for k, v in doc.items() if k in ANSWER_FIELDS and v is not None}
    if isinstance(fields.get("rationale"), dict):
        fields["rationale"] = {str(k): str(v)[:500] for k, v in fields["rationale"].items()}
    else:
        fields.pop("rationale", None)
    try:
        env = ResourceEnvelope(**fields)
        return Proposal(
            envelope=env,
            workload_class=cls if cls in WORKLOAD_CLASSES else "generic",
            source=f"sampling: {answer.model}"[:200],
        )
    except (ValueError, ValidationError) as e:
        return f"the client's model proposed an invalid envelope ({_short(str(e), 300)})"


def _short(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= n else text[:n] + "...")
