"""A coordinator process that SIGKILLs itself in the middle of a group re-placement.

    crash_in_replace.py HOME RUNS_FILE after_cancel|after_submit

Submits three shell children ``c1, c2, c3`` as one group on distinct sites among local,
vista and delta (the caller fills Delta's CPU partition first, so the child placed there
queues); each child appends ``<name> <cluster> <job id>`` to RUNS_FILE when it runs. Prints
``SUBMITTED <task id>...``, ``GROUP <group id>`` and ``PLACED <name>=<site>...``, then
waits for the group to move its queued child, and dies inside the move:

``after_cancel``: the queued placement was cancelled, its replacement not yet submitted.
``after_submit``: the replacement was submitted (and acknowledged by the site), but
``submit_task`` has not yet returned to the group, which records the move after it.

Prints ``MOVING <task id>`` as the move cancels the child's placement, and ``KILLING
<point>`` just before the kill, so the parent knows the kill came from that move.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import ShellTask
from federation.deploy.local import LocalSites
from federation.runtime.groups import REPLACED

POINTS = ("after_cancel", "after_submit")


def child_task(name: str, runs: Path) -> ShellTask:
    line = f"{name} $SLURM_CLUSTER_NAME $SLURM_JOB_ID"
    return ShellTask(command=f'echo "{line}" >> {shlex.quote(str(runs))}; sleep 1', name=name)


def die(point: str) -> None:
    print(f"KILLING {point}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    home, runs, point = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    if point not in POINTS:
        raise SystemExit(f"unknown kill point {point!r}; one of {POINTS}")
    coord = LocalSites(home=home).connect(durable=True, telemetry=False, probe_timeout_s=120)
    env = ResourceEnvelope(
        sites=("local", "vista", "delta"), cpus_min=4, mem_gb_min=4, walltime_s=600
    )
    g = coord.submit_group(
        [(f"c{i}", child_task(f"c{i}", runs), env) for i in (1, 2, 3)],
        objective="re-placement crash test",
        distinct_sites=True,
    )
    print("SUBMITTED " + " ".join(c.handle.id for c in g.children), flush=True)
    print(f"GROUP {g.id}", flush=True)
    print("PLACED " + " ".join(f"{c.name}={c.handle.site}" for c in g.children), flush=True)

    # the fault, injected in this process only: from now on the only cancel and submit
    # calls are the group's move of its queued child
    cancel, submit = coord.cancel, coord.submit_task

    def cancel_then_die(*args: Any, **kwargs: Any) -> bool:
        if kwargs.get("reason") == REPLACED:
            print(f"MOVING {coord._handle(args[0]).id}", flush=True)
        ok = cancel(*args, **kwargs)
        if ok and kwargs.get("reason") == REPLACED and point == "after_cancel":
            die(point)
        return ok

    def submit_then_die(*args: Any, **kwargs: Any) -> Any:
        h = submit(*args, **kwargs)
        if point == "after_submit":
            die(point)
        return h

    setattr(coord, "cancel", cancel_then_die)  # noqa: B010
    setattr(coord, "submit_task", submit_then_die)  # noqa: B010
    g.wait(600)
    print("NOT KILLED " + repr(g.state()), flush=True)


if __name__ == "__main__":
    main()
