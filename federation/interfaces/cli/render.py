"""Tables and lines the work commands print: drafts, placements, results, task status,
groups and transfers."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from federation.core.envelope import envelope_rows
from federation.placement.drafting import EnvelopeDraft

if TYPE_CHECKING:
    from federation.interfaces.service.models import GroupView, TaskStatus, TransferView
    from federation.runtime.handles import TaskHandle, TaskResult


def print_draft(console: Console, description: str, d: EnvelopeDraft) -> None:
    t = Table(
        title=f"Envelope for: {description}",
        caption=f"workload class {d.workload_class}, confidence {d.confidence:.0%}",
    )
    t.add_column("bound")
    t.add_column("value")
    t.add_column("rationale")
    for bound, value in envelope_rows(d.envelope):
        key = bound.removesuffix("_s").removesuffix("_min")
        why = d.rationale.get(bound) or d.rationale.get(key) or ""
        t.add_row(bound, value, why)
    console.print(t)
    if "workload_class" in d.rationale:
        console.print(f"class: {d.rationale['workload_class']}", highlight=False)
    v = d.validation
    if v.feasible:
        console.print(f"[green]feasible[/green] on {len(v.feasible)}: {', '.join(v.feasible)}")
    else:
        console.print(
            f"[red]no site can host it[/red]; the bound to relax: {v.unsatisfiable_bound}"
        )
        if v.nearest is not None:
            near = ", ".join(f"{b}={val}" for b, val in envelope_rows(v.nearest))
            console.print(f"nearest feasible envelope: {near}", highlight=False)
    for where, why in v.rejected.items():
        console.print(f"  not {where}: {why}", highlight=False, style="dim")


def print_placement(console: Console, handle: TaskHandle, accepted: bool) -> None:
    d = handle.decision
    console.print(
        f"[bold]{handle.label}[/bold] placed on [bold]{handle.shape.describe()}[/bold], "
        f"predicted wait {d.chosen.predicted_wait_s:.0f} s",
        highlight=False,
    )
    console.print(
        f"task id {handle.id}, Globus Compute task {handle.compute_task_id or '(not accepted)'}",
        highlight=False,
    )
    console.print("decision trace:", style="bold")
    console.print(d.explain(), highlight=False, markup=False)
    if not accepted and handle.state == "failed":
        console.print(f"[red]submission failed:[/red] {handle.error}", highlight=False)


def result_doc(r: TaskResult) -> dict[str, Any]:
    doc = r.model_dump(mode="json", exclude={"decision", "envelope", "value"})
    doc["events"] = [e.model_dump(mode="json") for e in r.events]
    return doc


def tail(text: str | None, lines: int = 20) -> str:
    if not text:
        return ""
    parts = text.rstrip("\n").splitlines()
    return "\n".join(parts[-lines:])


def print_result(console: Console, r: TaskResult) -> None:
    ok = r.status == "completed"
    t = Table(title=f"result of {r.label}", show_header=False)
    t.add_column("field", style="bold")
    t.add_column("value")
    t.add_row("status", "[green]completed[/green]" if ok else f"[red]failed[/red]: {r.error}")
    t.add_row("where", f"{r.site}/{r.partition} ({r.shape.describe()})")
    t.add_row("Slurm job", r.slurm_job_id or "-")
    t.add_row("queue wait", "-" if r.queue_wait_s is None else f"{r.queue_wait_s:.1f} s")
    run = (r.completed_at - (r.started_at or r.submitted_at)).total_seconds()
    t.add_row("runtime", f"{run:.1f} s")
    t.add_row("return code", "-" if r.returncode is None else str(r.returncode))
    t.add_row("task id", r.task_id)
    t.add_row("Globus Compute task", r.compute_task_id or "-")
    console.print(t)
    if r.stdout:
        console.rule("stdout", style="dim")
        console.print(tail(r.stdout), highlight=False, markup=False)
    if r.stderr:
        console.rule("stderr", style="dim")
        console.print(tail(r.stderr), highlight=False, markup=False)
    if not ok and r.remote_traceback and r.remote_traceback != r.stderr:
        console.rule("remote traceback", style="red")
        console.print(tail(r.remote_traceback), highlight=False, markup=False)


def print_status(console: Console, st: TaskStatus) -> None:
    t = Table(title=f"task {st.label}", show_header=False)
    t.add_column("field", style="bold")
    t.add_column("value")
    r = st.result
    state: str = st.state
    if r is not None and r.status == "failed":
        state = f"[red]failed[/red]: {r.error}"
    elif st.state == "completed":
        state = "[green]completed[/green]"
    t.add_row("state", state)
    t.add_row("where", f"{st.site}/{st.partition} ({st.shape.describe()})")
    t.add_row("Slurm job", st.slurm_job_id or (r.slurm_job_id if r else None) or "-")
    if r is not None:
        t.add_row("queue wait", "-" if r.queue_wait_s is None else f"{r.queue_wait_s:.1f} s")
        t.add_row("runtime", "-" if r.runtime_s is None else f"{r.runtime_s:.1f} s")
        if r.returncode is not None:
            t.add_row("return code", str(r.returncode))
        if r.stdout is None:
            value = json.dumps(r.value) if r.value_is_json else (r.value_repr or "")
            t.add_row("value", value[:2000])
    t.add_row("task id", st.task_id)
    t.add_row("Globus Compute task", st.compute_task_id or "-")
    console.print(t)
    if r is not None:
        for name, text in (("stdout", r.stdout), ("stderr", r.stderr)):
            if text:
                console.rule(name, style="dim")
                console.print(tail(text), highlight=False, markup=False)
        if r.status == "failed" and r.remote_traceback and r.remote_traceback != r.stderr:
            console.rule("remote traceback", style="red")
            console.print(tail(r.remote_traceback), highlight=False, markup=False)


def print_group(console: Console, g: GroupView) -> None:
    t = Table(title=f"group {g.group_id[:8]} {g.objective}".rstrip())
    for col in ("child", "state", "placed on", "predicted wait", "task id", "earlier attempts"):
        t.add_column(col)
    for c in g.children:
        t.add_row(
            c.name,
            c.state,
            c.granted,
            f"{c.predicted_wait_s:.0f} s",
            c.task_id,
            ", ".join(x[:8] for x in c.earlier_task_ids) or "-",
        )
    console.print(t)
    for r in g.replacements:
        console.print(
            f"re-placed {r.get('child')}: {r.get('from')} -> {r.get('to')}", highlight=False
        )
    console.print(f"group id {g.group_id}" + (" (done)" if g.done else ""), highlight=False)


def print_transfer(console: Console, v: TransferView) -> None:
    d = v.detail
    src, dst = d.get("source") or {}, d.get("destination") or {}

    def where(x: Any) -> str:
        return f"{x.get('site')}:{x.get('path')}" if isinstance(x, dict) else str(x)

    style = {"succeeded": "green", "failed": "red", "cancelled": "red"}.get(v.state, "")
    console.print(
        f"transfer {v.transfer_id}: [{style or 'default'}]{v.state}[/]  "
        f"{where(src)} -> {where(dst)}  {d.get('files', 0)} files "
        f"({d.get('files_skipped', 0)} skipped), {human_bytes(d.get('bytes_transferred'))}",
        highlight=False,
    )
    if d.get("error"):
        console.print(f"[red]error:[/red] {d['error']}", highlight=False)


def human_bytes(n: Any) -> str:
    size = float(n or 0)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"
