"""What the MCP server tells agents: its instructions and the hints its argument errors carry."""

from __future__ import annotations

INSTRUCTIONS = """\
Run work on a federation of Slurm supercomputers (each behind a Globus Compute endpoint).
The loop: inspect_federation (what is free where) -> draft_envelope (resource bounds for
your task, validated against the sites) -> submit_task (returns at once with a task_id,
the placement and a cursor) -> await_event(after=cursor, task_ids=[task_id]) repeatedly,
passing back the cursor it returns, until a task.completed or task.failed event ->
get_result(task_id) for the output (also the resource federation://tasks/{task_id}; the
whole snapshot is federation://snapshot). A task is a shell `command` or a catalog `function`
(list_functions) with JSON arguments. Related tasks: submit_group (one group_id; await
its events with task_ids=[group_id]; get_group). Files: each of your tasks runs in your
workspace on its site (a shell task's working directory; $FEDERATION_WORKSPACE), and
get_result lists the files it wrote there (`outputs`, paths relative to the workspace).
Name those paths in move_data (a transfer_id; await transfer.* events; get_transfer), or
as a later task's envelope `stage_in` inputs ({site, path, size_bytes}): the coordinator
then moves them to wherever that task is placed before it starts. submit_task with
dry_run=true submits nothing: it shows where the task would go and the Slurm job it would
be (node class, exact sbatch options). Nothing here blocks except await_event, and that at
most its timeout_s."""

TASK_HINT = (
    "give exactly one of `command` (a shell command) or `function` (a list_functions name, "
    "with JSON `args`/`kwargs`), and an `envelope` (draft_envelope proposes one)"
)
GROUP_HINT = f"fix the named children: each is a submit_task call's arguments. {TASK_HINT}"
TRANSFER_HINT = (
    "name sites inspect_federation lists, and paths relative to your workspace there "
    "(as get_result's `outputs` list them), or with paths='storage' to the storage root"
)

__all__ = ["GROUP_HINT", "INSTRUCTIONS", "TASK_HINT", "TRANSFER_HINT"]
