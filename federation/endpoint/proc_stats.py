"""Resident memory of a process and its descendants, read from ``/proc`` (Linux)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class TreeMemory:
    """A process's own resident memory and that of it and all its descendants."""

    own_kb: int
    tree_kb: int
    processes: int
    """The process and its live descendants (an engine's interchange and helpers; a
    LocalProvider's worker pools detach from it, so they are not counted)."""


def rss_kb(pid: int) -> int:
    """``VmRSS`` of ``pid`` in kB (0 when it is gone or a zombie)."""
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _parents() -> dict[int, int]:
    """Parent pid of every process on the machine."""
    out: dict[int, int] = {}
    try:
        names = os.listdir(PROC)
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            stat = (PROC / name / "stat").read_text()
            out[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return out


def tree_memory(pids: list[int]) -> dict[int, TreeMemory]:
    """:class:`TreeMemory` of each of ``pids`` (one pass over ``/proc`` for all of them)."""
    if not pids:
        return {}
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    out: dict[int, TreeMemory] = {}
    for root in pids:
        own = rss_kb(root)
        total, count, todo = 0, 0, [root]
        while todo:
            pid = todo.pop()
            kb = own if pid == root else rss_kb(pid)
            total += kb
            count += 1 if kb else 0  # a zombie has no VmRSS
            todo.extend(children.get(pid, ()))
        out[root] = TreeMemory(own_kb=own, tree_kb=total, processes=count)
    return out
