"""A coordinator process that submits tasks, reports their ids, and waits to be killed."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from federation.envelope import ResourceEnvelope
from federation.local import LocalSites
from federation.tasks import PythonTask
from functions.workloads import report_allocation


def main() -> None:
    home = Path(sys.argv[1])
    work = [float(x) for x in sys.argv[2].split(",")]
    local = LocalSites(home=home)
    coord = local.connect(durable=True, telemetry=False)
    env = ResourceEnvelope(sites=("local",), cpus_min=1, mem_gb_min=1, walltime_s=600)
    ids = [coord.submit_task(PythonTask(report_allocation, (w,)), env).id for w in work]
    print("SUBMITTED " + " ".join(ids), flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main()
