"""Accounting functions shipped to a site's endpoint: ``sacct`` for the jobs a task ran in.

Like the probes, each function imports everything inside its body and refers to no module
global (it may be shipped by source); it returns raw text, parsed centrally by
:mod:`federation.runtime.provenance`.
"""

from __future__ import annotations


def sacct_jobs(
    job_ids: list[str], fields: list[str] | None = None, timeout_s: float = 20.0
) -> dict[str, object]:
    """Run ``sacct -P -X`` for ``job_ids`` on this host; return its raw, timed output.

    Never raises for a missing command, a non-zero exit or a timeout: they are recorded in
    ``rc``, ``stderr`` and ``error``, next to ``utc_offset_s`` (Slurm prints local times).
    """
    import os
    import shutil
    import socket
    import subprocess
    import time

    cols = list(
        fields
        or [
            "JobID",
            "JobName",
            "State",
            "Partition",
            "Submit",
            "Start",
            "End",
            "Elapsed",
            "NodeList",
            "AllocTRES",
            "ExitCode",
        ]
    )
    ids = [str(j) for j in job_ids if str(j).replace("_", "").isdigit()]
    started = time.time()
    out: dict[str, object] = {
        "hostname": socket.gethostname(),
        "utc_offset_s": time.localtime(started).tm_gmtoff,
        "fields": cols,
        "rc": None,
        "stdout": "",
        "stderr": "",
        "error": None,
    }
    if not ids:
        out["error"] = "no Slurm job ids to look up"
        return out
    if shutil.which("sacct") is None:
        out["error"] = "sacct is not on PATH on this host"
        return out
    env = {k: v for k, v in os.environ.items() if not k.startswith("SACCT_")}
    env["SLURM_TIME_FORMAT"] = "standard"
    argv = ["sacct", "--parsable2", "--allocations", "--format=" + ",".join(cols)]
    argv.append("--jobs=" + ",".join(ids))
    out["argv"] = argv
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=max(1.0, timeout_s), env=env
        )
    except subprocess.TimeoutExpired:
        out["error"] = f"sacct timed out after {timeout_s:.0f} s"
        return out
    out["rc"] = proc.returncode
    out["stdout"] = proc.stdout
    out["stderr"] = proc.stderr[-4000:]
    out["duration_s"] = round(time.time() - started, 3)
    return out
