"""NERSC Perlmutter on the local federation (issue 34): a site whose classes name no
partition, chosen by constraint and QOS, as a real Slurm cluster.

Its nodes carry the features ``gpu``, ``cpu``, ``hbm80g``; its QOS (``regular``, ``debug``
with ``MaxWall=30:00``, ``shared``, ``preempt``) live in slurmdbd; GPU jobs are charged to
the ``_g`` account. What a job carried is read back from Slurm's own accounting (``sacct``,
with the batch script slurmdbd stored), not from the rendered template.
"""

from __future__ import annotations

import time

import pytest

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import PythonTask
from federation.deploy.local import LocalSites
from federation.runtime.coordinator import Coordinator
from functions.workloads import report_allocation

pytestmark = pytest.mark.slurm

SITE = "perlmutter"


def _sacct(local: LocalSites, job_id: str, fields: str) -> list[str]:
    """The job's sacct row (allocation only), once slurmdbd has all of it (the controller
    sends a job's record in parts: a first row may lack its partition and QOS)."""
    deadline = time.monotonic() + 60
    while True:
        out = local.slurm.run(SITE, ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", fields])
        row = out.stdout.strip().split("|")
        whole = row[0] == job_id and all(row) and "Unknown" not in row
        if whole or time.monotonic() > deadline:
            return row
        time.sleep(0.5)


def test_the_cluster_has_the_features_and_qos_of_its_classes(local: LocalSites) -> None:
    nodes = local.slurm.run(SITE, ["sinfo", "-h", "-N", "-o", "%N|%P|%f"]).stdout.split()
    features = {n.split("|")[0]: set(n.split("|")[2].split(",")) for n in nodes}
    assert {n.split("|")[1] for n in nodes} == {"batch*"}  # one default partition
    assert sum("gpu" in f for f in features.values()) == 3
    assert [n for n, f in features.items() if "hbm80g" in f] == ["perlmutter-gpu-hbm80g-01"]
    assert sum("cpu" in f for f in features.values()) == 2
    qos = local.slurm.run(SITE, ["sacctmgr", "-nP", "show", "qos", "format=name,maxwall"])
    walls = dict(line.split("|") for line in qos.stdout.split())
    assert walls["debug"] == "00:30:00" and walls["regular"] == "2-00:00:00"
    assert {"shared", "preempt"} <= set(walls)


def test_a_gpu_task_runs_with_the_constraint_a_qos_and_the_g_account(
    coord: Coordinator, local: LocalSites
) -> None:
    env = ResourceEnvelope(gpus_min=1, cpus_min=4, mem_gb_min=8, walltime_s=600, sites=(SITE,))
    h = coord.submit_task(PythonTask(report_allocation, (0.2,)), env)
    r = coord.get_result(h, timeout_s=240)
    assert r.status == "completed", (r.error, r.remote_traceback)
    klass = h.decision.chosen.partition
    spec = next(s for s in local.specs if s.name == SITE).partition(klass)
    assert r.value["gpus"] == 1 and r.value["cluster"] == SITE
    job = r.value["slurm_job_id"]
    row = _sacct(local, job, "JobID,Partition,QOS,Account,Constraints")
    assert row == [job, "batch", spec.qos, "m1234_g", spec.constraint], row
    # no partition was named: the job went to the cluster's default, and its script (as
    # slurmdbd stored it) has no partition line
    script = local.slurm.run(SITE, ["sacct", "-j", job, "--batch-script"]).stdout
    assert "#SBATCH --constraint=gpu" in script or "#SBATCH -C gpu" in script, script
    assert "--partition" not in script and "#SBATCH -p " not in script, script
    assert "--qos" in script or "#SBATCH -q " in script, script


def test_a_cpu_debug_task_is_refused_over_its_qos_walltime_by_slurm_too(
    local: LocalSites,
) -> None:
    """The QOS limit is Slurm's, not only placement's: sbatch under ``debug`` for 40 min."""
    out = local.slurm.run(
        SITE,
        [
            "sbatch",
            "-C",
            "cpu",
            "-q",
            "debug",
            "-A",
            "m1234",
            "-t",
            "40",
            "--wrap",
            "true",
        ],
    )
    assert out.returncode != 0, out.stdout
    assert "QOS" in out.stderr or "time limit" in out.stderr.lower(), out.stderr
