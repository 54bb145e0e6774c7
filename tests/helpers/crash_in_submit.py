"""A coordinator process that SIGKILLs itself inside ``submit_task``.

    crash_in_submit.py HOME before_ship

``before_ship``: the task is recorded in the durable store, then the process dies just as
the site backend is asked to ship it (nothing reaches the site). Prints ``SITE_TASKS n``
(tasks the site's endpoint has received, the probe included) once the sites are probed,
and ``SHIPPING`` right before dying, so the parent knows the kill came from inside
``submit_task``.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import PythonTask
from federation.deploy.local import LocalSites
from functions.workloads import square


def main() -> None:
    home, point = Path(sys.argv[1]), sys.argv[2]
    if point != "before_ship":
        raise SystemExit(f"unknown kill point {point!r}")
    local = LocalSites(home=home, sites=["local"])
    coord = local.connect(durable=True, telemetry=False, probe_timeout_s=120)
    backend = coord.backends["local"]
    snap = coord.inspect_federation()
    with sqlite3.connect(home / "endpoints" / "local" / "tasks.db") as db:
        print(f"SITE_TASKS {db.execute('SELECT COUNT(*) FROM tasks').fetchone()[0]}", flush=True)

    def die(*_: Any) -> Any:
        print("SHIPPING", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    setattr(backend, "submit", die)  # noqa: B010  (the fault: die as the site is called)
    coord.submit_task(
        PythonTask(square, (5,)), ResourceEnvelope(sites=("local",), walltime_s=300), snapshot=snap
    )
    print("NOT KILLED", flush=True)


if __name__ == "__main__":
    main()
