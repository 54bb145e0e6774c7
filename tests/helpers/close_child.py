"""A coordinator process that closes itself mid-fan-out, with hedged copies in flight.

    close_child.py HOME N SITE[,SITE...]

Connects a durable coordinator (``twin-hedge``, so idle sites get copies) on the path of
``$FEDERATION_PATH``, submits N shell tasks (task i sleeps 3 s and prints ``out-i``), prints
``SUBMITTED <hedged count> <task id>...``, closes the coordinator and prints ``CLOSED``.
Then it stays alive, its sites' services still up, until a line arrives on stdin: anything
the closed coordinator logs meanwhile goes to stderr (WARNING and above), which the test
reads.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import ShellTask
from federation.deploy.local import LocalSites


def main() -> None:
    home, n, sites = Path(sys.argv[1]), int(sys.argv[2]), tuple(sys.argv[3].split(","))
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="LOG %(name)s: %(message)s"
    )
    local = LocalSites(home=home)
    coord = local.connect(durable=True, telemetry=False, policy="twin-hedge")
    env = ResourceEnvelope(cpus_min=1, walltime_s=600, sites=sites)
    handles = [
        coord.submit_task(ShellTask(command=f"sleep 3; echo out-{i}", name=f"t{i}"), env)
        for i in range(n)
    ]
    hedged = sum(len(h.copies) > 1 for h in handles)
    print("SUBMITTED", hedged, *(h.id for h in handles), flush=True)
    coord.close()
    print("CLOSED", flush=True)
    print("CLOSED", file=sys.stderr, flush=True)
    sys.stdin.readline()
    if local.service is not None:
        local.service.close()


if __name__ == "__main__":
    main()
