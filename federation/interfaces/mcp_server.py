"""The federation as MCP tools, for agents: inspect, draft, submit (tasks, groups), move
data, await, get, cancel.

Runs over stdio (``federation mcp``, or the ``federation-mcp`` script) or streamable HTTP
(``--transport http``, bearer tokens from ``federation token issue``). Backed by an embedded
coordinator over the local sites by default, or by a running HTTP service (``--service URL
--token T``).

Over HTTP each tool acts for the token's caller (its policy and audit trail); over stdio
for the user who started the server. Every tool answers in well under a second, except
``await_event``, which blocks at most its ``timeout_s`` (default 20 s, at most 50 s: below
the usual MCP client timeouts). Tasks are shell commands or catalog functions by name: no
code travels over MCP.
"""

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.mcpserver.resolve import Resolve
from mcp.types import ToolAnnotations
from pydantic import Field, JsonValue, ValidationError

from federation.core.envelope import ResourceEnvelope
from federation.core.snapshot import FederationSnapshot
from federation.core.workspace import PathBase
from federation.interfaces.mcp_sampling import ask_client_model, proposal_from
from federation.interfaces.mcp_strict import StrictMCPServer, argument_errors, bad_arguments
from federation.interfaces.mcp_text import GROUP_HINT, INSTRUCTIONS, TASK_HINT, TRANSFER_HINT
from federation.interfaces.service.errors import OpsError
from federation.interfaces.service.models import (
    MAX_GROUP_CHILDREN,
    CancelResponse,
    DraftRequest,
    EventsPage,
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
)
from federation.interfaces.service.ops import Operations
from federation.interfaces.snapshot_cache import FederationView, SnapshotKeeper
from federation.placement.drafting import EnvelopeDraft, Proposal, TaskHints
from federation.runtime.catalog import FunctionInfo
from federation.runtime.events import EventKind

logger = logging.getLogger("federation.mcp")

DEFAULT_AWAIT_S = 20.0
MAX_AWAIT_S = 50.0
DEFAULT_HTTP_PORT = 8766
READY_TIMEOUT_S = 120.0
PROGRESS_EVERY_S = 5.0
"""While await_event waits, a client that sent a progressToken hears from it this often."""
SNAPSHOT_MAX_AGE_S = 15.0
"""inspect_federation answers with a snapshot this old at most before refreshing it (in the
background: the answer is the one it has, with its age)."""
RESOURCE_WAIT_S = 10.0
"""Reading ``federation://snapshot`` before the first probe is in waits this long at most."""
SNAPSHOT_URI = "federation://snapshot"
TASK_URI = "federation://tasks/{task_id}"

AwaitOps = Callable[[], Awaitable[Operations]]


def _tool_error(e: OpsError) -> ToolError:
    b = e.body
    text = f"{b.error}: {b.message}"
    if b.hint:
        text += f"\nWhat to do: {b.hint}"
    if b.details:
        text += f"\nDetails: {json.dumps(b.details, default=str)[:4000]}"
    return ToolError(text)


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


def _annotations(
    title: str,
    *,
    read_only: bool,
    destructive: bool = False,
    idempotent: bool = False,
    open_world: bool = True,
) -> ToolAnnotations:
    """Hints for clients. The tools act on (or report) remote sites, an open world, except
    where said; the read-only ones are idempotent (their answers change as the federation
    does, not because they were called)."""
    return ToolAnnotations(
        title=title,
        read_only_hint=read_only,
        destructive_hint=None if read_only else destructive,
        idempotent_hint=True if read_only else idempotent,
        open_world_hint=open_world,
    )


async def _report_waiting(ctx: Context, after: int, timeout_s: float) -> None:
    """Progress notifications every :data:`PROGRESS_EVERY_S` until cancelled: seconds waited
    (of ``timeout_s``) and what for. The SDK sends them only when the client asked (sent a
    progressToken with the call); otherwise each report is a no-op."""
    start = time.monotonic()
    while True:
        await anyio.sleep(PROGRESS_EVERY_S)
        waited = min(time.monotonic() - start, timeout_s)
        try:
            await ctx.report_progress(
                round(waited, 1),
                timeout_s,
                f"waiting for events after cursor {after}: {waited:.0f} s of {timeout_s:.0f} s",
            )
        except Exception:  # the client went away: the wait ends with the request
            logger.debug("progress notification not sent", exc_info=True)
            return


async def _run(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return await anyio.to_thread.run_sync(lambda: fn(*args))
    except OpsError as e:
        raise _tool_error(e) from e


def ops_probe(get_ops: AwaitOps) -> Callable[[bool], FederationSnapshot]:
    """``inspect`` of the operations ``get_ops()`` yields, callable from any thread."""

    def probe(refresh: bool) -> FederationSnapshot:
        ops = anyio.run(get_ops)
        return ops.inspect(refresh)

    return probe


def build_server(
    get_ops: AwaitOps, name: str = "federation", *, keeper: SnapshotKeeper | None = None
) -> MCPServer:
    """An MCP server whose tools call the operations that ``get_ops()`` yields.

    ``keeper`` holds the snapshot inspect_federation answers with; by default a new one that
    starts probing at once (in the background)."""
    mcp = StrictMCPServer(name, instructions=INSTRUCTIONS, log_level="WARNING")
    snapshots = keeper or SnapshotKeeper(ops_probe(get_ops), max_age_s=SNAPSHOT_MAX_AGE_S)

    @mcp.tool(
        title="Inspect the federation",
        annotations=_annotations("Inspect the federation", read_only=True),
        description=(
            "Show every site and partition of the federation: reachable or not (with the "
            "error), CPUs/memory/GPUs total and idle, running and pending jobs, max walltime, "
            "its storage (free bytes) and your `workspace` there (where your tasks run). "
            "Answers at once from the freshest probe, with `age_s` (how old it is; an old one "
            "is refreshed in the background: ask again for the newer one). Right after the "
            "server starts, status may be `probing` (no probe back yet): ask again in a few "
            "seconds. refresh=true probes every site now, which takes a few seconds."
        ),
    )
    async def inspect_federation(
        refresh: Annotated[bool, Field(description="probe the sites now (slower)")] = False,
        ctx: Context | None = None,
    ) -> FederationView:
        if refresh:
            await get_ops()
            await _run(snapshots.refresh_now)
        view: FederationView = await anyio.to_thread.run_sync(snapshots.view)
        return view.for_caller(caller_of(ctx))

    @mcp.tool(
        title="List catalog functions",
        annotations=_annotations("List catalog functions", read_only=True, open_world=False),
        description=(
            "List the catalog: functions that submit_task can run by name, each with its "
            "parameters, a JSON schema of its arguments and what it returns."
        ),
    )
    async def list_functions() -> list[FunctionInfo]:
        ops = await get_ops()
        result: list[FunctionInfo] = await _run(ops.functions)
        return result

    @mcp.tool(
        title="Draft a resource envelope",
        annotations=_annotations("Draft a resource envelope", read_only=True),
        description=(
            "Propose a resource envelope (CPU/GPU/memory/walltime bounds) for a task "
            "described in words, plus optional hints, validated against the sites. Returns "
            "the envelope, its rationale and confidence, and a validation: which "
            "site/partitions can host it, why the others cannot, and (if none can) the "
            "bound to relax and the nearest feasible envelope. Nothing is submitted. Numbers "
            "the description states (cores, nodes, GPUs with type and memory, RAM, duration, "
            "'CPU only') are used as stated. A client that offers sampling is asked for the "
            "draft by its own model, validated the same way (`drafted_by` says who drafted it)."
        ),
    )
    async def draft_envelope(
        description: Annotated[
            str, Field(min_length=1, max_length=10_000, description="what the task does")
        ],
        hints: Annotated[
            TaskHints | None, Field(description="what you know beyond the description")
        ] = None,
        sampled: Annotated[object, Resolve(ask_client_model)] = None,
    ) -> EnvelopeDraft:
        ops = await get_ops()
        proposal = proposal_from(sampled)  # type: ignore[arg-type]
        req = DraftRequest(description=description, hints=hints)
        if isinstance(proposal, Proposal):
            req = req.model_copy(update={"proposal": proposal})
        draft: EnvelopeDraft = await _run(ops.draft, req)
        if isinstance(proposal, str):
            why = {"drafted_by": f"rules: {proposal}"}
            draft = draft.model_copy(update={"rationale": draft.rationale | why})
        return draft

    @mcp.tool(
        title="Submit a task",
        annotations=_annotations(
            "Submit a task", read_only=False, destructive=False, idempotent=False
        ),
        description=(
            "Submit a task within a resource envelope; returns AT ONCE (it does not wait for "
            "the task) with task_id, the chosen site/partition, the granted shape, the "
            "decision trace (why this site, why not each other) and `cursor`. Give exactly "
            "one of `command` (a shell command run in the Slurm allocation) or `function` "
            "(a catalog name from list_functions, with JSON `args`/`kwargs`). Then call "
            "await_event(after=cursor, task_ids=[task_id]). The task runs in your workspace "
            "on its site (a command's working directory; $FEDERATION_WORKSPACE). Inputs "
            "elsewhere: list them in the envelope's `stage_in` ({site, path in your "
            "workspace there, size_bytes}); placement counts moving them, and the task starts "
            "once they arrived (task.staging, task.staged events). Fails, with nothing "
            "submitted, on a bad envelope or arguments, or when no site can host the envelope "
            "(the error gives the reason per site). With dry_run=true nothing is submitted: "
            "the answer (task_id '') gives the placement and, in `job`, the node class and "
            "the exact sbatch options the job would carry."
        ),
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
        workflow: Annotated[
            str | None,
            Field(max_length=128, description="run in this named workflow's workspace"),
        ] = None,
        dry_run: Annotated[
            bool, Field(description="only show where it would go and the job it would be")
        ] = False,
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
                workflow=workflow,
            )
        except ValidationError as e:
            raise bad_arguments(argument_errors(e), TASK_HINT) from e
        ops = await get_ops()
        resp: SubmitResponse = await _run(ops.submit, req, caller_of(ctx), dry_run)
        return resp

    @mcp.tool(
        title="Submit a group of tasks",
        annotations=_annotations(
            "Submit a group of tasks", read_only=False, destructive=False, idempotent=False
        ),
        description=(
            "Submit related tasks as a group; returns AT ONCE with group_id, each child's "
            "name, task_id and placement, and `cursor`. Each child is like a submit_task "
            "call (`command` or `function` + `args`/`kwargs`, `envelope`, `name`); a child's "
            "`needs` ([{child, path}]) names siblings' output files it reads: it is placed "
            "once they completed, with those files moved to its site first (state 'waiting' "
            "until then; not run, with a group.exception, if one failed). With "
            "distinct_sites=true (default) children go to different sites while feasible, "
            "and a child still queued after all its siblings finished is moved to wherever "
            "it starts first (a group.child_replaced event). Then await_event(after=cursor, "
            "task_ids=[group_id]): a group id matches the group's events and all its "
            "children's; group.round_terminal means every child is done. If any child is "
            f"malformed or fits no site, nothing is submitted. At most {MAX_GROUP_CHILDREN} "
            "children."
        ),
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
        workflow: Annotated[
            str | None,
            Field(max_length=128, description="every child runs in this workflow's workspace"),
        ] = None,
        ctx: Context | None = None,
    ) -> GroupResponse:
        try:
            req = GroupRequest(
                children=children,
                objective=objective,
                distinct_sites=distinct_sites,
                workflow=workflow,
            )
        except ValidationError as e:
            raise bad_arguments(argument_errors(e), GROUP_HINT) from e
        ops = await get_ops()
        resp: GroupResponse = await _run(ops.submit_group, req, caller_of(ctx))
        return resp

    @mcp.tool(
        title="Get a group",
        annotations=_annotations("Get a group", read_only=True),
        description=(
            "A group's children now, at once (no waiting): each child's current task_id, "
            "state, site and earlier attempts, the re-placements so far, and done=true "
            "once every child completed or failed. Use get_result(task_id) for a child's "
            "output."
        ),
    )
    async def get_group(
        group_id: Annotated[str, Field(description="the group_id submit_group returned")],
        ctx: Context | None = None,
    ) -> GroupView:
        ops = await get_ops()
        view: GroupView = await _run(ops.group, group_id, caller_of(ctx))
        return view

    @mcp.tool(
        title="Move data between sites",
        annotations=_annotations(
            "Move data between sites", read_only=False, destructive=True, idempotent=False
        ),
        description=(
            "Start copying a file or directory from one site's storage to another's (Globus "
            "Transfer); returns AT ONCE with transfer_id, its state and `cursor`, before any "
            "byte moves. Paths are relative to your workspace on each site (where your "
            "tasks run; get_result's `outputs` name the files a task wrote there), or with "
            "paths='storage' to the site's storage root (shared data). Then "
            "await_event(after=cursor, task_ids=[transfer_id]) for transfer.progress, "
            "transfer.completed or transfer.failed; get_transfer for the details. Use it to "
            "stage inputs where a task will run, or bring results back."
        ),
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
        paths: Annotated[
            PathBase,
            Field(
                description="workspace (default): relative to your workspace; storage: "
                "relative to the storage root"
            ),
        ] = "workspace",
        workflow: Annotated[
            str | None, Field(max_length=128, description="a named workflow's workspace")
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
                paths=paths,
                workflow=workflow,
            )
        except ValidationError as e:
            raise bad_arguments(argument_errors(e), TRANSFER_HINT) from e
        ops = await get_ops()
        resp: TransferResponse = await _run(ops.move_data, req, caller_of(ctx))
        return resp

    @mcp.tool(
        title="Get a transfer",
        annotations=_annotations("Get a transfer", read_only=True),
        description=(
            "A transfer's state and details (files and bytes moved, errors), at once; it "
            "does not wait. To wait, use await_event with task_ids=[transfer_id]."
        ),
    )
    async def get_transfer(
        transfer_id: Annotated[str, Field(description="the transfer_id move_data returned")],
        ctx: Context | None = None,
    ) -> TransferView:
        ops = await get_ops()
        view: TransferView = await _run(ops.transfer, transfer_id, caller_of(ctx))
        return view

    @mcp.tool(
        title="Get a task's result",
        annotations=_annotations("Get a task's result", read_only=True),
        description=(
            "A task's state (held for an operator, queued, running, completed, failed) and "
            "placement, at once; it does not wait. Once done, `result` holds the manifest: "
            "value (when JSON, else value_repr), error and remote_traceback, "
            "stdout/stderr/returncode for commands, Slurm job id, queue wait and runtime, "
            "`outputs` (the files it created or changed in your workspace: path relative to "
            "it, size, sha256; name them in move_data or a later task's stage_in), and its "
            "events. To wait for a task, use await_event."
        ),
    )
    async def get_result(
        task_id: Annotated[str, Field(description="the task_id submit_task returned")],
        ctx: Context | None = None,
    ) -> TaskStatus:
        ops = await get_ops()
        status: TaskStatus = await _run(ops.status, task_id, caller_of(ctx))
        return status

    @mcp.tool(
        title="Await events",
        annotations=_annotations("Await events", read_only=True),
        description=(
            "Wait for events (task.queued, task.started, task.completed, task.failed, "
            "group.*, transfer.*) after the cursor `after`; task_ids may hold task, group "
            "and transfer ids. Returns as soon as at least one matching event "
            f"exists, or after timeout_s (default {DEFAULT_AWAIT_S:.0f}, at most "
            f"{MAX_AWAIT_S:.0f} s) with timed_out=true and no events. Only your own events: "
            "the cursor counts them (1, 2, 3, ...). Always pass the returned `cursor` as "
            "`after` on the next call: no event is missed or repeated. Start from the cursor "
            "submit_task returned. A cursor past the end of your log (the server restarted "
            "without its store) is an error, cursor_ahead, naming where to resume."
        ),
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
        page: EventsPage | None = None

        async def wait() -> None:
            nonlocal page
            page = await ops.events(after, task_ids, kinds, timeout_s, caller=caller_of(ctx))
            tg.cancel_scope.cancel()

        try:
            async with anyio.create_task_group() as tg:
                if ctx is not None and timeout_s > 0:
                    tg.start_soon(_report_waiting, ctx, after, timeout_s)
                tg.start_soon(wait)
        except OpsError as e:
            raise _tool_error(e) from e
        except BaseExceptionGroup as eg:
            if len(eg.exceptions) == 1 and isinstance(eg.exceptions[0], OpsError):
                raise _tool_error(eg.exceptions[0]) from eg.exceptions[0]
            raise
        assert page is not None
        return page

    @mcp.tool(
        title="Cancel a task",
        annotations=_annotations(
            "Cancel a task", read_only=False, destructive=True, idempotent=True
        ),
        description=(
            "Cancel a task that has not started running. Returns cancelled=true if it was "
            "withdrawn, else false with the reason (already running or finished)."
        ),
    )
    async def cancel(
        task_id: Annotated[str, Field(description="the task_id submit_task returned")],
        ctx: Context | None = None,
    ) -> CancelResponse:
        ops = await get_ops()
        resp: CancelResponse = await _run(ops.cancel, task_id, caller_of(ctx))
        return resp

    @mcp.resource(
        SNAPSHOT_URI,
        name="federation-snapshot",
        title="Federation snapshot",
        description=(
            "The freshest full snapshot of every site (partitions, nodes, jobs, health) as "
            "JSON; `taken_at` says when the probes ran. inspect_federation gives a compact "
            "view of the same."
        ),
        mime_type="application/json",
    )
    async def snapshot_resource() -> str:
        snap = await anyio.to_thread.run_sync(snapshots.wait, RESOURCE_WAIT_S)
        if snap is None:
            snapshots.refresh_in_background()
            raise ResourceError(
                "probing the sites is in progress (no snapshot yet); read it again shortly"
            )
        if (snapshots.age_s() or 0.0) > snapshots.max_age_s:
            snapshots.refresh_in_background()
        return snap.model_dump_json()

    @mcp.resource(
        TASK_URI,
        name="task-manifest",
        title="Task manifest",
        description=(
            "One of your tasks as JSON: state, placement and, once it is done, its result "
            "manifest (value, error, stdout/stderr, Slurm job id, timings, events); as "
            "get_result answers."
        ),
        mime_type="application/json",
    )
    async def task_resource(task_id: str, ctx: Context) -> str:
        ops = await get_ops()
        try:
            status: TaskStatus = await anyio.to_thread.run_sync(
                lambda: ops.status(task_id, caller_of(ctx))
            )
        except OpsError as e:
            raise ResourceError(str(_tool_error(e))) from e
        return status.model_dump_json()

    return mcp
