"""The wire models of the service and the MCP server: plain JSON in, plain JSON out.

Requests name a shell command or a catalog function (never code); responses are views of
the coordinator's objects in which every field is JSON. The same models give the HTTP
service its OpenAPI schema and the MCP tools their input and output schemas.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

from pydantic import Field, JsonValue, field_validator, model_validator

from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.json_values import json_value
from federation.core.model import Frozen
from federation.core.snapshot import FederationSnapshot
from federation.core.workspace import OutputFile, PathBase, workspace_rel
from federation.placement.candidates import PlacementDecision
from federation.placement.drafting import Proposal, TaskHints
from federation.runtime.dry_run import DryRun, JobPreview
from federation.runtime.events import Event, EventKind
from federation.runtime.group_inputs import ChildNeed, check_needs
from federation.runtime.handles import TaskHandle, TaskResult, TaskState

if TYPE_CHECKING:
    from federation.runtime.groups import GroupHandle

EVENT_KINDS: tuple[EventKind, ...] = get_args(EventKind)


class ErrorBody(Frozen):
    """Every error answer: what was wrong, and what to do about it."""

    error: str = Field(description="machine-readable code, e.g. bad_envelope, unknown_task")
    message: str = Field(description="what was wrong")
    hint: str = Field(default="", description="what to do about it")
    details: dict[str, Any] = Field(default_factory=dict)


class DraftRequest(Frozen):
    """Describe a task in words (plus optional hints); get a validated envelope back."""

    description: str = Field(min_length=1, max_length=10_000)
    hints: TaskHints | None = None
    proposal: Proposal | None = Field(
        default=None,
        description="an envelope proposed elsewhere (the MCP client's model), validated "
        "against the sites instead of drafting by rules; one naming what no site has falls "
        "back to the rules",
    )


class TaskRequest(Frozen):
    """A task to run: exactly one of a shell ``command`` or a catalog ``function``."""

    command: str | None = Field(
        default=None,
        min_length=1,
        max_length=100_000,
        description="shell command run inside the Slurm allocation (bash)",
    )
    function: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="name of a catalog function (see list_functions / GET /v1/functions)",
    )
    args: list[JsonValue] = Field(
        default_factory=list, max_length=1000, description="positional arguments (JSON)"
    )
    kwargs: dict[str, JsonValue] = Field(
        default_factory=dict, description="keyword arguments (JSON)"
    )
    name: str = Field(default="", max_length=200, description="a label for the task")
    envelope: ResourceEnvelope = Field(
        description="resource bounds the task can run within (see draft_envelope); its "
        "`stage_in` names inputs in your workspace on other sites, moved before it starts"
    )
    workflow: str | None = Field(
        default=None,
        max_length=128,
        description="a named workflow: the task runs in that workspace of yours "
        "(default: your own workspace)",
    )
    needs: list[ChildNeed] = Field(
        default_factory=list,
        max_length=100,
        description="group children only: siblings' output files this child reads "
        "([{child, path}]; no path: all the sibling listed); it is placed once they "
        "completed, with those files moved to its site first",
    )

    @field_validator("command")
    @classmethod
    def _not_blank(cls, command: str | None) -> str | None:
        if command is not None and not command.strip():
            raise ValueError("`command` is blank: give the shell command to run")
        return command

    @model_validator(mode="after")
    def _one_kind(self) -> TaskRequest:
        if (self.command is None) == (self.function is None):
            raise ValueError(
                "give exactly one of `command` (a shell command) or `function` "
                "(a catalog function name)"
            )
        if self.command is not None and (self.args or self.kwargs):
            raise ValueError("`args`/`kwargs` go with `function`, not with `command`")
        return self


class SubmitResponse(Frozen):
    """A submitted task: where it was placed, the granted shape, and why."""

    task_id: str = Field(description="the task's id ('' for a dry run: nothing submitted)")
    label: str
    state: TaskState | Literal["not_submitted"]
    site: str
    partition: str
    shape: Shape
    granted: str = Field(description="the granted shape in words")
    predicted_wait_s: float
    decision: PlacementDecision
    explain: str = Field(description="the decision trace: why this site, why not the others")
    code_hash: str
    cursor: int = Field(
        description="event cursor from just before submission: pass it as `after` to "
        "await this task's events"
    )
    submitted_at: datetime
    job: JobPreview | None = Field(
        default=None,
        description="dry run only: the Slurm job it would be (its node class and the exact "
        "sbatch options); `explain` then starts with them and the policy's verdict",
    )


class TaskResultView(Frozen):
    """A finished task's manifest. ``value`` is set only when it is JSON; else ``value_repr``."""

    status: Literal["completed", "failed"]
    value: JsonValue = None
    value_is_json: bool = True
    value_repr: str | None = None
    error: str | None = None
    remote_traceback: str = ""
    stdout: str | None = None
    stderr: str | None = None
    returncode: int | None = None
    compute_task_id: str | None = None
    slurm_job_id: str | None = None
    started_at: datetime | None = None
    completed_at: datetime
    queue_wait_s: float | None = None
    runtime_s: float | None = None
    outputs: tuple[OutputFile, ...] = Field(
        default=(),
        description="files the task created or changed in its workspace (path relative to "
        "it, size, sha256): name them in move_data or a later task's stage_in",
    )
    outputs_more: int = Field(default=0, description="further outputs not listed")
    events: tuple[Event, ...] = ()


class TaskStatus(Frozen):
    """A task's state now; ``result`` is set once it completed or failed."""

    task_id: str
    label: str
    state: TaskState
    done: bool
    site: str
    partition: str
    shape: Shape
    envelope: ResourceEnvelope
    decision: PlacementDecision
    code_hash: str
    compute_task_id: str | None = None
    slurm_job_id: str | None = None
    submitted_at: datetime
    started_at: datetime | None = None
    completed_at: datetime | None = None
    workspace: str = Field(
        default="",
        description="the workspace it runs in, under its site's storage root",
    )
    result: TaskResultView | None = None


class EventsPage(Frozen):
    """Events after the cursor you passed, and the cursor to pass next time."""

    events: tuple[Event, ...]
    cursor: int = Field(description="pass this as `after` next time; no event is missed")
    timed_out: bool = Field(description="true when no matching event came within timeout_s")
    last_seq: int = Field(description="the newest event's seq in the whole log")


class CancelResponse(Frozen):
    task_id: str
    cancelled: bool
    state: TaskState
    message: str


MAX_GROUP_CHILDREN = 64
SyncLevel = Literal["exists", "size", "mtime", "checksum"]


class GroupRequest(Frozen):
    """Related tasks under one objective, spread over distinct sites while that is feasible."""

    children: list[TaskRequest] = Field(
        min_length=1,
        max_length=MAX_GROUP_CHILDREN,
        description="the tasks; each child's `name` is its name in the group (default c1, "
        "c2, ...), unique within the group",
    )
    objective: str = Field(default="", max_length=2000, description="what the group is for")
    distinct_sites: bool = Field(
        default=True,
        description="soft constraint: put children on different sites while feasible; a "
        "child still queued after its siblings finished is re-placed where it starts first",
    )
    workflow: str | None = Field(
        default=None, max_length=128, description="every child runs in this workflow's workspace"
    )

    @field_validator("children")
    @classmethod
    def _unique_names(cls, children: list[TaskRequest]) -> list[TaskRequest]:
        names = child_names(children)
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"child names must be unique in a group; repeated: {twice}")
        check_needs(names, {n: c.needs for n, c in zip(names, children, strict=True) if c.needs})
        return children


def child_names(children: list[TaskRequest]) -> list[str]:
    """Each child's name in its group: its ``name``, or ``c<i>`` (1-based) when unnamed."""
    return [c.name or f"c{i}" for i, c in enumerate(children, 1)]


class GroupChildView(Frozen):
    """One child of a group: its current attempt, and the task ids of earlier ones."""

    name: str
    task_id: str | None = Field(
        default=None, description="the current attempt's task id (None while it waits)"
    )
    state: TaskState | Literal["waiting", "skipped", "lost"]
    site: str | None = None
    partition: str | None = None
    granted: str | None = None
    predicted_wait_s: float | None = None
    needs: tuple[ChildNeed, ...] = Field(default=(), description="siblings' outputs it reads")
    skipped: str | None = Field(default=None, description="why it was not submitted")
    earlier_task_ids: tuple[str, ...] = Field(
        default=(), description="attempts this child had before (re-placed by its group)"
    )


class GroupView(Frozen):
    """A group: its children now, the re-placements so far, and whether all are done."""

    group_id: str
    objective: str
    distinct_sites: bool
    done: bool = Field(description="every child completed or failed")
    children: tuple[GroupChildView, ...]
    replacements: tuple[dict[str, str], ...] = Field(
        default=(), description="children moved to another site: child, from, to"
    )


class GroupResponse(GroupView):
    """A submitted group, with the event cursor to resume from."""

    cursor: int = Field(
        description="event cursor from just before submission: pass it as `after`, with the "
        "group_id in the task id filter, to await the group's and its children's events"
    )


class TransferRequest(Frozen):
    """Copy a file or directory from one site's storage to another's (Globus Transfer)."""

    source_site: str = Field(min_length=1, max_length=100, description="site to copy from")
    source_path: str = Field(
        min_length=1, max_length=4096, description="path on the source site (see `paths`)"
    )
    dest_site: str = Field(min_length=1, max_length=100, description="site to copy to")
    dest_path: str = Field(
        min_length=1, max_length=4096, description="path on the destination site (see `paths`)"
    )
    paths: PathBase = Field(
        default="workspace",
        description="`workspace` (default): both paths are relative to your workspace on "
        "each site, as a task's result `outputs` name them; `storage`: relative to the "
        "site's storage root (shared data; other callers' workspaces are refused)",
    )
    workflow: str | None = Field(
        default=None,
        max_length=128,
        description="the named workflow whose workspace the paths are in (default: yours)",
    )
    label: str | None = Field(default=None, max_length=128, description="a label for it")
    sync_level: SyncLevel = Field(
        default="checksum",
        description="skip files already at the destination that match by: exists, size, "
        "mtime or checksum",
    )
    verify_checksum: bool = Field(default=True, description="verify checksums after copying")
    deadline_s: float | None = Field(
        default=None, gt=0, le=30 * 86400, description="give up after this many seconds"
    )


class TransferView(Frozen):
    """A data movement's state; ``detail`` is everything the transfer reports about itself."""

    transfer_id: str
    state: str
    done: bool
    detail: dict[str, JsonValue] = Field(default_factory=dict)


class TransferResponse(TransferView):
    """A submitted transfer, with the event cursor to resume from."""

    cursor: int = Field(
        description="event cursor from just before submission: pass it as `after`, with the "
        "transfer_id in the task id filter, to await its transfer.* events"
    )


class PartitionSummary(Frozen):
    """One partition's capacity and queue, as last probed."""

    partition: str
    state: str
    default: bool
    max_time_s: int | None
    nodes_total: int
    cpus_total: int
    cpus_idle: int
    mem_gb_total: float
    mem_gb_alloc: float
    gpus_total_by_type: dict[str, int]
    gpus_idle_by_type: dict[str, int]
    jobs_running: int
    jobs_pending: int


class SiteSummary(Frozen):
    site: str
    reachable: bool
    error: str | None = None
    warnings: tuple[str, ...] = ()
    slurm_version: str | None = None
    probe_duration_s: float | None = None
    partitions: tuple[PartitionSummary, ...] = ()
    storage_root: str | None = Field(
        default=None,
        description="the site's storage; your workspace there is workspaces/<you>/default",
    )
    storage_free_bytes: int | None = None
    workspace: str | None = Field(
        default=None,
        description="your workspace on this site: where your tasks run and the paths of "
        "move_data, stage_in and a result's outputs are relative to",
    )

    def for_caller(self, caller: str, workflow: str | None = None) -> SiteSummary:
        """This site as ``caller`` sees it: with their workspace."""
        if self.storage_root is None:
            return self
        ws = f"{self.storage_root.rstrip('/')}/{workspace_rel(caller, workflow)}"
        return self.model_copy(update={"workspace": ws})


class FederationSummary(Frozen):
    """Every site and partition at the last probe (a compact view of the snapshot)."""

    taken_at: datetime
    age_s: float = Field(description="seconds since the probes ran")
    sites: tuple[SiteSummary, ...]


# --- conversions ------------------------------------------------------------------------------


def summarize(snap: FederationSnapshot, caller: str | None = None) -> FederationSummary:
    """The snapshot, compacted (with ``caller``'s workspace on each site, when given)."""
    sites = []
    for s in snap.sites:
        parts = tuple(
            PartitionSummary(
                partition=p.partition,
                state=p.state,
                default=p.default,
                max_time_s=p.max_time_s,
                nodes_total=p.nodes_total,
                cpus_total=p.cpus_total,
                cpus_idle=p.cpus_idle,
                mem_gb_total=p.mem_gb_total,
                mem_gb_alloc=p.mem_gb_alloc,
                gpus_total_by_type=p.gpus_total_by_type,
                gpus_idle_by_type=p.gpus_idle_by_type,
                jobs_running=p.jobs_running,
                jobs_pending=p.jobs_pending,
            )
            for p in s.partitions
        )
        sites.append(
            SiteSummary(
                site=s.site,
                reachable=s.health.reachable,
                error=s.health.error,
                warnings=s.health.warnings,
                slurm_version=s.slurm_version,
                probe_duration_s=s.health.probe_duration_s,
                partitions=parts,
                storage_root=s.storage.root if s.storage else None,
                storage_free_bytes=s.storage.free_bytes if s.storage else None,
            )
        )
    if caller is not None:
        sites = [s.for_caller(caller) for s in sites]
    age = max(0.0, (datetime.now(UTC) - snap.taken_at).total_seconds())
    return FederationSummary(taken_at=snap.taken_at, age_s=round(age, 3), sites=tuple(sites))


def submit_response(handle: TaskHandle, cursor: int) -> SubmitResponse:
    d = handle.decision
    return SubmitResponse(
        task_id=handle.id,
        label=handle.label,
        state=handle.state,
        site=handle.site,
        partition=handle.partition,
        shape=handle.shape,
        granted=handle.shape.describe(),
        predicted_wait_s=d.chosen.predicted_wait_s,
        decision=d,
        explain=d.explain(),
        code_hash=handle.code_hash,
        cursor=cursor,
        submitted_at=handle.submitted_at,
    )


def dry_run_response(dry: DryRun, cursor: int) -> SubmitResponse:
    """A dry run on the wire: a submission that did not happen (no task id)."""
    chosen = dry.decision.chosen
    return SubmitResponse(
        task_id="",
        label=dry.label,
        state="not_submitted",
        site=chosen.site,
        partition=chosen.partition,
        shape=dry.shape,
        granted=dry.shape.describe(),
        predicted_wait_s=chosen.predicted_wait_s,
        decision=dry.decision,
        explain=dry.text(),
        code_hash=dry.code_hash,
        cursor=cursor,
        submitted_at=dry.decision.decided_at,
        job=dry.job,
    )


def result_view(r: TaskResult, runtime_s: float | None) -> TaskResultView:
    value, is_json, text = json_value(r.value)
    return TaskResultView(
        status=r.status,
        value=value,
        value_is_json=is_json,
        value_repr=text,
        error=r.error,
        remote_traceback=r.remote_traceback,
        stdout=r.stdout,
        stderr=r.stderr,
        returncode=r.returncode,
        compute_task_id=r.compute_task_id,
        slurm_job_id=r.slurm_job_id,
        started_at=r.started_at,
        completed_at=r.completed_at,
        queue_wait_s=r.queue_wait_s,
        runtime_s=runtime_s,
        outputs=r.outputs,
        outputs_more=r.outputs_more,
        events=r.events,
    )


def task_status(h: TaskHandle) -> TaskStatus:
    result = result_view(h.manifest(), h.runtime_s) if h.done else None
    return TaskStatus(
        task_id=h.id,
        label=h.label,
        state=h.state,
        done=h.done,
        site=h.site,
        partition=h.partition,
        shape=h.shape,
        envelope=h.envelope,
        decision=h.decision,
        code_hash=h.code_hash,
        compute_task_id=h.compute_task_id,
        slurm_job_id=h.slurm_job_id,
        submitted_at=h.submitted_at,
        started_at=h.started_at,
        completed_at=h.completed_at,
        workspace=str(workspace_rel(h.caller, h.workflow)),
        result=result,
    )


def group_view(g: GroupHandle) -> GroupView:
    children = tuple(
        GroupChildView(
            name=c.name,
            task_id=c.handle.id,
            state=c.handle.state,
            site=c.handle.site,
            partition=c.handle.partition,
            granted=c.handle.shape.describe(),
            predicted_wait_s=c.handle.decision.chosen.predicted_wait_s,
            earlier_task_ids=tuple(a.id for a in c.attempts[:-1]),
            needs=c.needs,
        )
        if c.attempts
        else GroupChildView(
            name=c.name,
            state=g.state()[c.name],  # type: ignore[arg-type]
            needs=c.needs,
            skipped=c.skipped,
        )
        for c in list(g.children)
    )
    return GroupView(
        group_id=g.id,
        objective=g.objective,
        distinct_sites=g.distinct_sites,
        done=g.done,
        children=children,
        replacements=tuple(dict(r) for r in list(g.replacements)),
    )


class TransferLike(Protocol):
    """What the service needs of a transfer handle (``federation.transfer``)."""

    @property
    def id(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def owner(self) -> str: ...

    def as_dict(self) -> dict[str, Any]: ...


TRANSFER_DONE_STATES = frozenset({"completed", "succeeded", "failed", "cancelled"})


def transfer_view(h: TransferLike) -> TransferView:
    detail = json.loads(json.dumps(h.as_dict(), default=str))
    state = str(h.state)
    return TransferView(
        transfer_id=h.id, state=state, done=state in TRANSFER_DONE_STATES, detail=detail
    )


class LogoutResponse(Frozen):
    """What a logout did."""

    caller: str
    revoked: int
    """Tokens revoked at Globus Auth (each resource server's access and refresh token)."""
    deleted: int
    """Token records deleted from the service's store."""
    failed: tuple[str, ...] = ()
    """Tokens Globus Auth could not be asked to revoke (deleted here all the same)."""
    open_work: tuple[str, ...] = ()
    """Your tasks and transfers still open (logged out with ``force``: no longer followed)."""
