"""The federation as MCP tools, for agents: inspect, draft, submit (tasks, groups), move
data, await, get, cancel.

Runs over stdio (``python -m federation.interfaces.mcp_server``) or streamable HTTP (``--transport
http``, bearer tokens from ``federation token issue``). Backed by an embedded coordinator
over the local sites by default, or by a running HTTP service (``--service URL --token T``).

Over HTTP each tool acts for the token's caller (its policy and audit trail); over stdio
for the user who started the server. Every tool answers in well under a second, except
``await_event``, which blocks at most its ``timeout_s`` (default 20 s, at most 50 s: below
the usual MCP client timeouts). Tasks are shell commands or catalog functions by name: no
code travels over MCP.
"""

import argparse
import json
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, JsonValue, ValidationError

from federation.core.envelope import ResourceEnvelope
from federation.interfaces.service.errors import OpsError
from federation.interfaces.service.models import (
    MAX_GROUP_CHILDREN,
    CancelResponse,
    DraftRequest,
    EventsPage,
    FederationSummary,
    GroupRequest,
    GroupResponse,
    GroupView,
    SubmitResponse,
    SyncLevel,
    TaskRequest,
    TaskStatus,
    TransferRequest,
    TransferResponse,
    TransferView,
    summarize,
)
from federation.interfaces.service.ops import Operations
from federation.placement.drafting import EnvelopeDraft, TaskHints
from federation.runtime.catalog import FunctionInfo
from federation.runtime.events import EventKind

logger = logging.getLogger("federation.mcp")

DEFAULT_AWAIT_S = 20.0
MAX_AWAIT_S = 50.0
DEFAULT_HTTP_PORT = 8766
READY_TIMEOUT_S = 120.0

INSTRUCTIONS = """\
Run work on a federation of Slurm supercomputers (each behind a Globus Compute endpoint).
The loop: inspect_federation (what is free where) -> draft_envelope (resource bounds for
your task, validated against the sites) -> submit_task (returns at once with a task_id,
the placement and a cursor) -> await_event(after=cursor, task_ids=[task_id]) repeatedly,
passing back the cursor it returns, until a task.completed or task.failed event ->
get_result(task_id) for the output. A task is a shell `command` or a catalog `function`
(list_functions) with JSON arguments. Related tasks: submit_group (one group_id; await
its events with task_ids=[group_id]; get_group). Data between sites: move_data (a
transfer_id; await transfer.* events; get_transfer). Nothing here blocks except
await_event, and that at most its timeout_s."""

AwaitOps = Callable[[], Awaitable[Operations]]


def _tool_error(e: OpsError) -> ToolError:
    b = e.body
    text = f"{b.error}: {b.message}"
    if b.hint:
        text += f"\nWhat to do: {b.hint}"
    if b.details:
        text += f"\nDetails: {json.dumps(b.details, default=str)[:4000]}"
    return ToolError(text)


def _messages(e: ValidationError) -> str:
    parts = []
    for err in e.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"])
        parts.append(f"{loc}: {err['msg']}" if loc else err["msg"])
    return "; ".join(parts)


STDIO_CALLER = "mcp"
"""Who submits over stdio: the user who started the server (their own process)."""


def caller_of(ctx: Context | None) -> str:
    """The caller a tool acts for: over HTTP, the name of the bearer token's caller (put on
    the request by the token guard), so that caller's policy and audit trail apply; over
    stdio, :data:`STDIO_CALLER`."""
    try:
        request = ctx.request_context.request if ctx is not None else None
    except ValueError:  # not inside a request
        return STDIO_CALLER
    scope = getattr(request, "scope", None)
    state = scope.get("state") if isinstance(scope, dict) else None
    caller = state.get("caller") if isinstance(state, dict) else None
    return str(caller) if caller else STDIO_CALLER


async def _run(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return await anyio.to_thread.run_sync(lambda: fn(*args))
    except OpsError as e:
        raise _tool_error(e) from e


def build_server(get_ops: AwaitOps, name: str = "federation") -> MCPServer:
    """An MCP server whose tools call the operations that ``get_ops()`` yields."""
    mcp = MCPServer(name, instructions=INSTRUCTIONS, log_level="WARNING")

    @mcp.tool(
        description=(
            "Show every site and partition of the federation: reachable or not (with the "
            "error), CPUs/memory/GPUs total and idle, running and pending jobs, max walltime. "
            "Answers at once from the last probe (refreshed every ~15 s; `age_s` says how "
            "old); refresh=true probes every site now, which takes a few seconds."
        )
    )
    async def inspect_federation(
        refresh: Annotated[bool, Field(description="probe the sites now (slower)")] = False,
    ) -> FederationSummary:
        ops = await get_ops()
        snap = await _run(ops.inspect, refresh)
        return summarize(snap)

    @mcp.tool(
        description=(
            "List the catalog: functions that submit_task can run by name, each with its "
            "parameters, a JSON schema of its arguments and what it returns."
        )
    )
    async def list_functions() -> list[FunctionInfo]:
        ops = await get_ops()
        result: list[FunctionInfo] = await _run(ops.functions)
        return result

    @mcp.tool(
        description=(
            "Propose a resource envelope (CPU/GPU/memory/walltime bounds) for a task "
            "described in words, plus optional hints, validated against the sites. Returns "
            "the envelope, its rationale and confidence, and a validation: which "
            "site/partitions can host it, why the others cannot, and (if none can) the "
            "bound to relax and the nearest feasible envelope. Nothing is submitted."
        )
    )
    async def draft_envelope(
        description: Annotated[
            str, Field(min_length=1, max_length=10_000, description="what the task does")
        ],
        hints: Annotated[
            TaskHints | None, Field(description="what you know beyond the description")
        ] = None,
    ) -> EnvelopeDraft:
        ops = await get_ops()
        draft: EnvelopeDraft = await _run(
            ops.draft, DraftRequest(description=description, hints=hints)
        )
        return draft

    @mcp.tool(
        description=(
            "Submit a task within a resource envelope; returns AT ONCE (it does not wait for "
            "the task) with task_id, the chosen site/partition, the granted shape, the "
            "decision trace (why this site, why not each other) and `cursor`. Give exactly "
            "one of `command` (a shell command run in the Slurm allocation) or `function` "
            "(a catalog name from list_functions, with JSON `args`/`kwargs`). Then call "
            "await_event(after=cursor, task_ids=[task_id]). Fails, with nothing submitted, "
            "on a bad envelope or arguments, or when no site can host the envelope (the "
            "error gives the reason per site)."
        )
    )
    async def submit_task(
        envelope: Annotated[
            ResourceEnvelope,
            Field(description="resource bounds, e.g. the envelope from draft_envelope"),
        ],
        command: Annotated[str | None, Field(description="shell command to run")] = None,
        function: Annotated[str | None, Field(description="catalog function name")] = None,
        args: Annotated[
            list[JsonValue] | None, Field(description="positional arguments of `function`")
        ] = None,
        kwargs: Annotated[
            dict[str, JsonValue] | None, Field(description="keyword arguments of `function`")
        ] = None,
        name: Annotated[str, Field(max_length=200, description="a label for the task")] = "",
        ctx: Context | None = None,
    ) -> SubmitResponse:
        try:
            req = TaskRequest(
                command=command,
                function=function,
                args=args or [],
                kwargs=kwargs or {},
                name=name,
                envelope=envelope,
            )
        except ValidationError as e:
            raise ToolError(f"bad_request: {_messages(e)}") from e
        ops = await get_ops()
        resp: SubmitResponse = await _run(ops.submit, req, caller_of(ctx))
        return resp

    @mcp.tool(
        description=(
            "Submit related tasks as a group; returns AT ONCE with group_id, each child's "
            "name, task_id and placement, and `cursor`. Each child is like a submit_task "
            "call (`command` or `function` + `args`/`kwargs`, `envelope`, `name`). With "
            "distinct_sites=true (default) children go to different sites while feasible, "
            "and a child still queued after all its siblings finished is moved to wherever "
            "it starts first (a group.child_replaced event). Then await_event(after=cursor, "
            "task_ids=[group_id]): a group id matches the group's events and all its "
            "children's; group.round_terminal means every child is done. If any child is "
            f"malformed or fits no site, nothing is submitted. At most {MAX_GROUP_CHILDREN} "
            "children."
        )
    )
    async def submit_group(
        children: Annotated[
            list[TaskRequest],
            Field(
                min_length=1,
                max_length=MAX_GROUP_CHILDREN,
                description="the tasks; `name` is the child's name (default c1, c2, ...)",
            ),
        ],
        objective: Annotated[str, Field(max_length=2000, description="what the group is for")] = "",
        distinct_sites: Annotated[
            bool, Field(description="spread children over different sites while feasible")
        ] = True,
        ctx: Context | None = None,
    ) -> GroupResponse:
        try:
            req = GroupRequest(
                children=children, objective=objective, distinct_sites=distinct_sites
            )
        except ValidationError as e:
            raise ToolError(f"bad_request: {_messages(e)}") from e
        ops = await get_ops()
        resp: GroupResponse = await _run(ops.submit_group, req, caller_of(ctx))
        return resp

    @mcp.tool(
        description=(
            "A group's children now, at once (no waiting): each child's current task_id, "
            "state, site and earlier attempts, the re-placements so far, and done=true "
            "once every child completed or failed. Use get_result(task_id) for a child's "
            "output."
        )
    )
    async def get_group(
        group_id: Annotated[str, Field(description="the group_id submit_group returned")],
        ctx: Context | None = None,
    ) -> GroupView:
        ops = await get_ops()
        view: GroupView = await _run(ops.group, group_id, caller_of(ctx))
        return view

    @mcp.tool(
        description=(
            "Start copying a file or directory from one site's storage to another's (Globus "
            "Transfer); returns AT ONCE with transfer_id, its state and `cursor`, before any "
            "byte moves. Paths are relative to each site's storage root. Then "
            "await_event(after=cursor, task_ids=[transfer_id]) for transfer.progress, "
            "transfer.completed or transfer.failed; get_transfer for the details. Use it to "
            "stage inputs where a task will run, or bring results back."
        )
    )
    async def move_data(
        source_site: Annotated[str, Field(min_length=1, description="site to copy from")],
        source_path: Annotated[str, Field(min_length=1, description="path there")],
        dest_site: Annotated[str, Field(min_length=1, description="site to copy to")],
        dest_path: Annotated[str, Field(min_length=1, description="path there")],
        label: Annotated[str | None, Field(max_length=128, description="a label")] = None,
        sync_level: Annotated[
            SyncLevel,
            Field(description="skip files already there that match by exists/size/mtime/checksum"),
        ] = "checksum",
        verify_checksum: Annotated[bool, Field(description="verify after copying")] = True,
        deadline_s: Annotated[
            float | None, Field(gt=0, description="give up after this many seconds")
        ] = None,
        ctx: Context | None = None,
    ) -> TransferResponse:
        try:
            req = TransferRequest(
                source_site=source_site,
                source_path=source_path,
                dest_site=dest_site,
                dest_path=dest_path,
                label=label,
                sync_level=sync_level,
                verify_checksum=verify_checksum,
                deadline_s=deadline_s,
            )
        except ValidationError as e:
            raise ToolError(f"bad_request: {_messages(e)}") from e
        ops = await get_ops()
        resp: TransferResponse = await _run(ops.move_data, req, caller_of(ctx))
        return resp

    @mcp.tool(
        description=(
            "A transfer's state and details (files and bytes moved, errors), at once; it "
            "does not wait. To wait, use await_event with task_ids=[transfer_id]."
        )
    )
    async def get_transfer(
        transfer_id: Annotated[str, Field(description="the transfer_id move_data returned")],
        ctx: Context | None = None,
    ) -> TransferView:
        ops = await get_ops()
        view: TransferView = await _run(ops.transfer, transfer_id, caller_of(ctx))
        return view

    @mcp.tool(
        description=(
            "A task's state (held for an operator, queued, running, completed, failed) and "
            "placement, at once; it does not wait. Once done, `result` holds the manifest: "
            "value (when JSON, else value_repr), error and remote_traceback, "
            "stdout/stderr/returncode for commands, Slurm job id, queue wait and runtime, "
            "and its events. To wait for a task, use await_event."
        )
    )
    async def get_result(
        task_id: Annotated[str, Field(description="the task_id submit_task returned")],
        ctx: Context | None = None,
    ) -> TaskStatus:
        ops = await get_ops()
        status: TaskStatus = await _run(ops.status, task_id, caller_of(ctx))
        return status

    @mcp.tool(
        description=(
            "Wait for events (task.queued, task.started, task.completed, task.failed, "
            "group.*, transfer.*) after the cursor `after`; task_ids may hold task, group "
            "and transfer ids. Returns as soon as at least one matching event "
            f"exists, or after timeout_s (default {DEFAULT_AWAIT_S:.0f}, at most "
            f"{MAX_AWAIT_S:.0f} s) with timed_out=true and no events. Only your own events: "
            "the cursor counts them (1, 2, 3, ...). Always pass the returned `cursor` as "
            "`after` on the next call: no event is missed or repeated. Start from the cursor "
            "submit_task returned."
        )
    )
    async def await_event(
        after: Annotated[int, Field(ge=0, description="cursor from the last call")] = 0,
        task_ids: Annotated[
            list[str] | None,
            Field(description="only events of these tasks, groups (and their children), transfers"),
        ] = None,
        kinds: Annotated[
            list[EventKind] | None, Field(description="only these kinds of event")
        ] = None,
        timeout_s: Annotated[
            float, Field(ge=0, le=MAX_AWAIT_S, description="longest wait, seconds")
        ] = DEFAULT_AWAIT_S,
        ctx: Context | None = None,
    ) -> EventsPage:
        ops = await get_ops()
        try:
            return await ops.events(after, task_ids, kinds, timeout_s, caller=caller_of(ctx))
        except OpsError as e:
            raise _tool_error(e) from e

    @mcp.tool(
        description=(
            "Cancel a task that has not started running. Returns cancelled=true if it was "
            "withdrawn, else false with the reason (already running or finished)."
        )
    )
    async def cancel(
        task_id: Annotated[str, Field(description="the task_id submit_task returned")],
        ctx: Context | None = None,
    ) -> CancelResponse:
        ops = await get_ops()
        resp: CancelResponse = await _run(ops.cancel, task_id, caller_of(ctx))
        return resp

    return mcp


class Backend:
    """Builds the operations in a background thread, so the MCP handshake answers at once.

    Tools wait for it (the first call after start may take the few seconds of connecting).
    """

    def __init__(self, factory: Callable[[], Operations]) -> None:
        self._factory = factory
        self._ops: Operations | None = None
        self._error: BaseException | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._build, name="federation-backend", daemon=True).start()

    def _build(self) -> None:
        try:
            self._ops = self._factory()
        except BaseException as e:
            logger.exception("could not connect to the federation")
            self._error = e
        finally:
            self._ready.set()

    async def get(self) -> Operations:
        if not self._ready.is_set():
            await anyio.to_thread.run_sync(self._ready.wait, READY_TIMEOUT_S)
        if self._ops is None:
            why = self._error or TimeoutError(f"not connected after {READY_TIMEOUT_S:.0f} s")
            raise ToolError(
                f"the federation is not available: {type(why).__name__}: {why}. "
                "Check `federation sites status` (or the --service URL and token)."
            )
        return self._ops

    def close(self) -> None:
        if self._ops is not None:
            self._ops.close()


def embedded_ops(
    home: Path | None = None,
    sites: list[str] | None = None,
    bring_up: bool = True,
    tokens_db: Path | None = None,
    config: Path | None = None,
) -> Operations:
    """A coordinator in this process, as :class:`LocalOps`: over the sites of ``config``
    (or ``$FEDERATION_CONFIG``), else the embedded local federation; callers' policies from
    ``tokens_db`` (default: the home's token database) and ``home/policy.yaml``."""
    from federation.deploy.connect import connect
    from federation.deploy.local import federation_home
    from federation.interfaces.service.ops import LocalOps
    from federation.security.policy import PolicyGate

    gate = PolicyGate.from_home(home or federation_home(), tokens_db=tokens_db)
    conn = connect(config, home=home, sites=sites, bring_up=bring_up, gate=gate)
    return LocalOps(conn.coord, on_close=conn.close)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="federation-mcp", description="The federation as MCP tools (stdio or HTTP)."
    )
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP transport: bind address")
    p.add_argument("--port", type=int, default=DEFAULT_HTTP_PORT, help="HTTP transport: port")
    p.add_argument("--home", type=Path, default=None, help="federation home ($FEDERATION_HOME)")
    p.add_argument("--site", action="append", default=None, help="limit to these sites")
    p.add_argument("--no-up", action="store_true", help="do not bring the local sites up")
    p.add_argument(
        "--tokens",
        type=Path,
        default=None,
        help="HTTP transport: token database (default: <home>/service/tokens.db)",
    )
    p.add_argument(
        "--config",
        type=Path,
        default=os.environ.get("FEDERATION_CONFIG"),
        help="federation.yaml: act on the sites it names ($FEDERATION_CONFIG; default: the "
        "embedded local federation)",
    )
    p.add_argument("--service", default=None, help="use the HTTP service at this URL")
    p.add_argument(
        "--token",
        default=os.environ.get("FEDERATION_TOKEN"),
        help="bearer token for --service (default: $FEDERATION_TOKEN)",
    )
    a = p.parse_args(argv)
    run(
        transport=a.transport,
        host=a.host,
        port=a.port,
        home=a.home,
        sites=a.site,
        bring_up=not a.no_up,
        service=a.service,
        token=a.token,
        tokens_db=a.tokens,
        config=a.config,
    )


def run(
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = DEFAULT_HTTP_PORT,
    home: Path | None = None,
    sites: list[str] | None = None,
    bring_up: bool = True,
    service: str | None = None,
    token: str | None = None,
    tokens_db: Path | None = None,
    config: Path | None = None,
) -> None:
    """Serve the MCP tools until the client goes away (stdio) or interrupted (HTTP)."""
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from federation.security.tokens import default_token_db, install_redaction

    install_redaction()
    if service:
        if not token:
            raise SystemExit("--service needs --token (or $FEDERATION_TOKEN)")
        from federation.interfaces.service.client import ServiceClient

        url, tok = service, token

        def factory() -> Operations:
            return ServiceClient(url, tok)
    else:

        def factory() -> Operations:
            db = tokens_db if transport == "http" else None
            return embedded_ops(home, sites, bring_up, db, config)

    backend = Backend(factory)
    server = build_server(backend.get)
    try:
        if transport == "stdio":
            server.run("stdio")
        else:
            _serve_http(server, host, port, tokens_db or default_token_db(home))
    finally:
        backend.close()


def _serve_http(server: MCPServer, host: str, port: int, tokens_db: Path) -> None:
    import uvicorn

    from federation.interfaces.service.app import Guard
    from federation.interfaces.service.server import log_config
    from federation.security.tokens import TokenStore

    tokens = TokenStore(tokens_db)
    app = Guard(server.streamable_http_app(host=host), tokens, max_body_bytes=1_000_000)
    uvicorn.run(app, host=host, port=port, log_config=log_config("warning"))


if __name__ == "__main__":
    main()
