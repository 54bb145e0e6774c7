"""Named points of a task's life where the crash suite kills the coordinator.

``FEDERATION_CRASH_AT=<point>`` in a coordinator's environment makes it SIGKILL itself the
first time it reaches that point (after printing ``CRASH <point>`` on stdout, so the test
knows where it died). Unset, :func:`crash_point` is one dictionary lookup. The points are
listed in :data:`POINTS`; ``tests/test_crash_points.py`` kills at each and checks that
after a restart every task completes exactly once.
"""

from __future__ import annotations

import os
import signal
import sys

ENV = "FEDERATION_CRASH_AT"

POINTS: dict[str, str] = {
    "placed": "a task was placed, before anything was recorded",
    "recorded": "the durable record was written, before shipping",
    "shipping": "the intent to ship was recorded, before the site was asked",
    "accepted": "the site acknowledged the task, before its id was recorded",
    "started": "the Slurm job started, while the task runs",
    "result": "the result arrived, before it was recorded",
    "group.replace": "a group child was being re-placed, before the new child shipped",
    "hedge.cancel": "a losing hedge copy was being cancelled",
    "retry": "a failed attempt was recorded, before its retry shipped",
    "transfer": "a transfer was copying files",
}


def crash_point(name: str) -> None:
    """Die here (SIGKILL) when this process was told to: see :data:`ENV`."""
    if os.environ.get(ENV) != name:
        return
    sys.stdout.write(f"CRASH {name}\n")
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)
