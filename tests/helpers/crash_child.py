"""A coordinator process that submits tasks, reports their ids, and waits to be killed.

    crash_child.py HOME WORK_S[,WORK_S...] [group]
    crash_child.py HOME WORK_S[,WORK_S...] shell SITE[,SITE...] OUT_DIR
    crash_child.py HOME WORK_S[,WORK_S...] paced|burst SITE[,SITE...] OUT_DIR
    crash_child.py HOME - recover

Prints ``SUBMITTED <task id>...`` (one task per work duration, on the ``local`` site) and,
with ``group``, submits them as the children ``c1, c2, ...`` of one group and prints
``GROUP <group id>`` on the next line. With ``shell``, task i is a shell task on the i-th
of the SITEs (round robin) that appends its ``$SLURM_JOB_ID`` to ``OUT_DIR/<i>`` and then
sleeps its work duration: a file with two lines is a task that ran twice. ``paced`` is
``shell`` submitting one task every 0.3 s (as an agent's loop does), printing ``START``
first and ``SUBMITTED <i> <task id>`` after each, so a kill can land between two submissions
or inside one; ``burst`` is the same without the pause (a fan-out: several records in flight
in one batch of the SDK when a kill lands). ``recover`` connects to the store (re-attaching
what it holds), printing ``CONNECTING`` before and ``CONNECTED`` after, then waits to be
killed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import PythonTask, ShellTask
from federation.deploy.local import LocalSites
from functions.workloads import report_allocation


def main() -> None:
    home = Path(sys.argv[1])
    if sys.argv[3:4] == ["recover"]:
        print("CONNECTING", flush=True)
        LocalSites(home=home).connect(durable=True, telemetry=False, probe_timeout_s=120)
        print("CONNECTED", flush=True)
        time.sleep(3600)
        return
    work = [float(x) for x in sys.argv[2].split(",")]
    as_group = len(sys.argv) > 3 and sys.argv[3] == "group"
    local = LocalSites(home=home)
    coord = local.connect(durable=True, telemetry=False, probe_timeout_s=120)  # cold probes
    if len(sys.argv) > 3 and sys.argv[3] in ("shell", "paced", "burst"):
        sites, out = sys.argv[4].split(","), Path(sys.argv[5])
        paced = sys.argv[3] in ("paced", "burst")
        pause_s = 0.3 if sys.argv[3] == "paced" else 0.0
        ids = []
        if paced:
            print("START", flush=True)
        for i, w in enumerate(work):
            site = sites[i % len(sites)]
            env = ResourceEnvelope(sites=(site,), cpus_min=1, mem_gb_min=1, walltime_s=600)
            cmd = f'echo "$SLURM_JOB_ID" >> {out / str(i)}; sleep {w}; echo ran-{i}'
            ids.append(coord.submit_task(ShellTask(command=cmd, name=f"t{i}"), env).id)
            if paced:
                print(f"SUBMITTED {i} {ids[-1]}", flush=True)
                time.sleep(pause_s)
        print("SUBMITTED " + " ".join(ids), flush=True)
        time.sleep(3600)
        return
    env = ResourceEnvelope(sites=("local",), cpus_min=1, mem_gb_min=1, walltime_s=600)
    if as_group:
        g = coord.submit_group(
            [(f"c{i}", PythonTask(report_allocation, (w,)), env) for i, w in enumerate(work, 1)],
            objective="crash test",
            distinct_sites=False,
        )
        print("SUBMITTED " + " ".join(c.handle.id for c in g.children), flush=True)
        print(f"GROUP {g.id}", flush=True)
    else:
        ids = [coord.submit_task(PythonTask(report_allocation, (w,)), env).id for w in work]
        print("SUBMITTED " + " ".join(ids), flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main()
