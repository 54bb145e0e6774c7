"""A durable coordinator that runs one scenario and dies at a named crash point.

    crash_at.py HOME RUNS_DIR SCENARIO

``FEDERATION_CRASH_AT`` (set by the parent) names the point
(:data:`federation.runtime.crashpoints.POINTS`): the coordinator SIGKILLs itself there,
after printing ``CRASH <point>``. Scenarios:

``once``: one shell task on ``local`` that appends ``<Slurm job id>`` to RUNS_DIR/<token>
and sleeps 4 s (time for its start to be seen before it ends).
``retry``: one Python task allowed on ``local`` and ``vista`` whose first attempt fails as
a lost node would (``NODE_FAIL``, retryable) before it writes anything; the retry appends
its job id as ``once`` does.

``hedge``: Delta's CPU partition is filled and the local site's nodes held, one shell task
(as ``once``) is hedged on Delta and local, and once both copies' batch jobs queue the
hold is released: the local copy starts and the Delta copy is cancelled (the crash point
``hedge.cancel``).

Prints ``TOKEN <token>`` first (the runs file's name), ``SUBMITTED <task id>`` if
``submit_task`` returned, and ``NO CRASH`` if the task ended with no crash.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import PythonTask, ShellTask
from federation.deploy.local import LocalSites


def command(runs: Path, token: str) -> str:
    return f'echo "$SLURM_JOB_ID" >> {runs / token}; sleep 4; echo done'


def flaky(runs: str, token: str) -> str:
    """Fails its first attempt as a lost node would (a retryable failure), then runs."""
    import os
    from pathlib import Path

    flag = Path(runs) / f"{token}.first"
    if not flag.exists():
        flag.touch()
        raise RuntimeError("NODE_FAIL: the first attempt's node went away (simulated)")
    with open(Path(runs) / token, "a") as f:
        f.write(os.environ.get("SLURM_JOB_ID", "?") + "\n")
    return "done"


FILL, HOLD = "fed-crash-fill", "fed-crash-hold"


def hedged(local: LocalSites, runs: Path, token: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from slurm_scene import fill_delta_cpu, queued_jobs, until

    from federation.placement.policies import Policy

    slurm = local.slurm
    policy = Policy(
        name="delta-first-hedge",
        key=lambda c: (0.0 if c.site == "delta" else 1.0, c.predicted_wait_s),
        hedge_within=0.0,
    )
    coord = local.connect(durable=True, telemetry=False, probe_timeout_s=120, policy=policy)
    fill_delta_cpu(slurm, FILL)
    for _ in range(2):
        args = ["sbatch", f"--job-name={HOLD}", "--partition=debug", "--cpus-per-task=8"]
        args += ["--mem=1G", "--time=00:30:00", "--output=/dev/null", "--wrap=sleep 600"]
        slurm.run("local", args)
    until(
        "local is held", lambda: sum("RUNNING" in j for j in queued_jobs(slurm, "local")) == 2, 60
    )
    env = ResourceEnvelope(sites=("delta", "local"), cpus_min=4, mem_gb_min=4, walltime_s=600)
    h = coord.submit_task(ShellTask(command=command(runs, token)), env)
    print(f"SUBMITTED {h.id}", flush=True)

    def ours(site: str) -> list[str]:
        return [j for j in queued_jobs(slurm, site) if FILL not in j and HOLD not in j]

    until("both copies queue", lambda: ours("delta") and ours("local"), 120)
    slurm.run("local", ["scancel", f"--name={HOLD}"])
    h.wait(600)
    print(f"NO CRASH {h.state}", flush=True)


def main() -> None:
    home, runs, scenario = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    token = uuid.uuid4().hex[:12]
    print(f"TOKEN {token}", flush=True)
    if scenario == "hedge":
        hedged(LocalSites(home=home), runs, token)
        return
    sites = ("local",) if scenario == "once" else ("local", "vista")
    local = LocalSites(home=home, sites=list(sites))
    coord = local.connect(durable=True, telemetry=False, probe_timeout_s=120)
    env = ResourceEnvelope(sites=sites, cpus_min=1, mem_gb_min=1, walltime_s=600)
    if scenario == "once":
        h = coord.submit_task(ShellTask(command=command(runs, token)), env)
    else:
        h = coord.submit_task(PythonTask(flaky, (str(runs), token)), env)
    print(f"SUBMITTED {h.id}", flush=True)
    h.wait(600)
    print(f"NO CRASH {h.state}", flush=True)


if __name__ == "__main__":
    main()
