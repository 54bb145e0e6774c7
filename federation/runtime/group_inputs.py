"""Group children that read their siblings' outputs (``needs``).

A child of ``submit_group`` may name siblings whose outputs it reads: ``ChildNeed(child,
path)`` (``path`` in the group's workspace; none: every file that sibling listed). Such a
child is not placed with the others: it waits, and once every sibling it needs has
completed it is placed with those files as its envelope's ``stage_in`` (on the sites where
the siblings ran, with the sizes their manifests list), so placement counts moving them and
the coordinator moves them before the child ships (:mod:`federation.runtime.staging`). All
from the siblings' own events: nothing polls. A sibling that failed, or did not write a
needed file, leaves the child unsubmitted, said in a ``group.exception``.
"""

from __future__ import annotations

import graphlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pydantic import Field

from federation.core.envelope import StageIn
from federation.core.model import Frozen
from federation.core.workspace import WorkspacePath

if TYPE_CHECKING:
    from federation.runtime.handles import TaskHandle


class ChildNeed(Frozen):
    """A sibling's output a group child reads."""

    child: str = Field(min_length=1, max_length=200, description="the sibling's name")
    path: WorkspacePath | None = Field(
        default=None,
        max_length=4096,
        description="the file, in the workspace as the sibling's result `outputs` name it; "
        "omitted: every file the sibling listed",
    )


def check_needs(names: Sequence[str], needs: Mapping[str, Sequence[ChildNeed]]) -> None:
    """Refuse needs that name no sibling, the child itself, or go round in a cycle."""
    known = set(names)
    graph: dict[str, set[str]] = {n: set() for n in names}
    for name, wanted in needs.items():
        if name not in known:
            raise ValueError(f"needs given for {name!r}, which is not a child of the group")
        for need in wanted:
            if need.child == name:
                raise ValueError(f"child {name!r} needs its own outputs; name a sibling")
            if need.child not in known:
                raise ValueError(
                    f"child {name!r} needs {need.child!r}, which is not a child of the group "
                    f"(children: {sorted(known)})"
                )
            graph[name].add(need.child)
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        cycle = " -> ".join(e.args[1])
        raise ValueError(f"the children's needs go round in a cycle ({cycle})") from e


def stage_in_from(
    wanted: Sequence[ChildNeed], siblings: Mapping[str, TaskHandle | None]
) -> tuple[tuple[StageIn, ...], str | None]:
    """The inputs a child reads, from its completed siblings' manifests; or why it cannot
    run (a sibling failed, was not submitted, or did not write a needed file)."""
    out: list[StageIn] = []
    for need in wanted:
        h = siblings.get(need.child)
        if h is None:
            return (), f"its input child {need.child!r} was not submitted"
        if h.state != "completed":
            return (), f"its input child {need.child!r} failed: {h.error}"
        listed = {o.path: o for o in h.outputs}
        if need.path is None:
            if not listed:
                return (), f"its input child {need.child!r} wrote no files in the workspace"
            out += [StageIn(site=h.site, path=o.path, size_bytes=o.size_bytes) for o in h.outputs]
            continue
        found = listed.get(need.path)
        if found is None and not h.outputs_more:  # the listing is complete: it is not there
            return (), (
                f"its input child {need.child!r} did not write {need.path!r} "
                f"(it wrote: {sorted(listed)[:10]})"
            )
        size = found.size_bytes if found is not None else 0
        out.append(StageIn(site=h.site, path=need.path, size_bytes=size))
    return tuple(out), None
