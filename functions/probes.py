"""Probe functions shipped to site endpoints: they run Slurm's own commands and return raw text.

Everything a probe needs is imported inside its body and it refers to no module global:
Globus Compute may ship it by source, and the endpoint has no copy of this package. Parsing
happens centrally (:mod:`federation.parsing`), where it is tested against real outputs.

Output format (``format`` 1). Every formatted command prints one record per job or node:
fields separated by 0x1F (unit separator) and each record closed by 0x1E (record separator)
and a newline, so reasons and job names with ``|``, ``;``, spaces or even newlines stay in
their field, and a record cut short is detectable. Each ``-O`` field is written
``Name:<suffix>``: an explicit empty width, without which Slurm pads *and truncates* every
column to 20 characters. ``squeue --start`` ignores ``-O``, so it uses ``-o`` %-codes.
"""


def probe_slurm(
    timeout_s: float = 20.0,
    account: "str | None" = None,
    storage_root: "str | None" = None,
    accounts: "list[str] | None" = None,
    budgets: "dict[str, float] | None" = None,
) -> dict[str, object]:
    """Run Slurm's read-only commands on this host and return their raw, timed output.

    ``accounts``: every Slurm account the site charges work to, its default first (Delta:
    ``-cpu`` and ``-gpu``); ``account`` alone is one. ``sshare`` (optional: its failure is
    a warning, never a failed probe) is limited to them (``--accounts a,b``). ``accounts``
    and the coordinator's configured ``budgets`` (per account, in the site's units) are
    echoed in the result, so the snapshot builder reads the allocations' request and answer
    from one dict. ``storage_root``: the site's storage (its Globus collection's path),
    whose free space is reported (``storage``). ``sacctmgr_qos``: every QOS with its
    priority and limits (``sacctmgr show qos``; optional like sshare, and given half the
    budget at most, since it asks slurmdbd: a site without one records the failure).

    The commands run in parallel, sharing one ``timeout_s`` budget. A missing command, a
    non-zero exit or a timeout never raises: it is recorded in that command's entry
    (``rc``, ``stdout``, ``stderr``, ``duration_s``, ``timed_out``, ``error``), next to
    ``started_at`` (UTC, ISO 8601), ``hostname`` and ``utc_offset_s`` (the host's offset,
    since Slurm prints local times without a zone).
    """
    import base64
    import os
    import platform
    import shutil
    import signal
    import socket
    import subprocess
    import threading
    import time
    import zlib
    from datetime import datetime, timezone

    us, rs = "\x1f", "\x1e"
    utc = timezone.utc  # noqa: UP017 - endpoints may run Python < 3.11
    started = time.time()
    t0 = time.monotonic()
    deadline = t0 + max(0.1, float(timeout_s))
    big = 4_000_000  # characters; larger outputs travel zlib-compressed

    def o_format(fields: list[str]) -> str:
        return ",".join(f"{f}:{us}" for f in fields[:-1]) + f",{fields[-1]}:{rs}"

    sinfo_fields = [
        "NodeList",
        "Partition",
        "StateLong",
        "StateComplete",
        "CPUsState",
        "Memory",
        "AllocMem",
        "Gres",
        "GresUsed",
        "Features",
        "Reason",
    ]
    sinfo_old = [f for f in sinfo_fields if f != "StateComplete"]  # before StateComplete
    squeue_fields = [
        "JobArrayID",
        "Partition",
        "State",
        "Reason",
        "UserName",
        "Name",
        "NumNodes",
        "NumCPUs",
        "NumTasks",
        "MinMemory",
        "tres-per-node",
        "tres-per-job",
        "tres-per-task",
        "tres-alloc",
        "TimeLimit",
        "SubmitTime",
        "StartTime",
        "EndTime",
        "PriorityLong",
        "NodeList",  # the nodes a running job holds (empty while pending)
    ]
    start_codes = [("%i", "JobArrayID"), ("%P", "Partition"), ("%S", "StartTime")]
    start_codes += [("%Y", "SchedNodes"), ("%r", "Reason")]
    start_fmt = us.join(c for c, _ in start_codes) + rs

    sinfo_argv = ["sinfo", "--noheader", "--Node", "--Format"]
    sshare_fields = ["Account", "User", "RawShares", "NormShares", "RawUsage", "NormUsage"]
    sshare_fields += ["EffectvUsage", "FairShare", "LevelFS", "GrpTRESMins"]
    sshare_old = sshare_fields[:8]  # LevelFS and GrpTRESMins are newer than Slurm 15.08
    charged = [str(a) for a in (accounts or ([account] if account else [])) if a]
    sshare_argv = ["sshare", "--noheader", "--parsable2"]
    if charged:
        sshare_argv += ["--accounts", ",".join(charged)]
    # QOS limits live in slurmdbd (sacctmgr asks it, not slurmctld): optional, like sshare,
    # and held to half the budget so a slurmdbd that does not answer costs at most that
    qos_fields = ["Name", "Priority", "MaxWall", "MaxTRESPU", "MaxJobsPU", "MaxSubmitPU", "Flags"]
    qos_argv = ["sacctmgr", "--noheader", "--parsable2", "show", "qos"]
    commands: dict[str, dict[str, object]] = {
        "version": {"argv": ["sinfo", "--version"]},
        "sinfo": {
            "argv": [*sinfo_argv, o_format(sinfo_fields)],
            "fields": sinfo_fields,
            "fallback": {"argv": [*sinfo_argv, o_format(sinfo_old)], "fields": sinfo_old},
        },
        "squeue": {
            "argv": ["squeue", "--noheader", "--noconvert", "--Format", o_format(squeue_fields)],
            "fields": squeue_fields,
        },
        "squeue_start": {
            "argv": ["squeue", "--noheader", "--start", "--format", start_fmt],
            "fields": [n for _, n in start_codes],
        },
        "scontrol_partition": {"argv": ["scontrol", "--oneliner", "show", "partition"]},
        "sshare": {
            "argv": [*sshare_argv, "--format", ",".join(sshare_fields)],
            "fields": sshare_fields,
            "fallback": {
                "argv": [*sshare_argv, "--format", ",".join(sshare_old)],
                "fields": sshare_old,
            },
        },
        "sacctmgr_qos": {
            "argv": [*qos_argv, "format=" + ",".join(qos_fields)],
            "fields": qos_fields,
            "budget_s": max(0.1, float(timeout_s)) / 2,
        },
    }

    # Slurm reads these from the environment: formats, filters (users, partitions, states),
    # sorting and other clusters would all change what is printed. Times in ISO form.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SQUEUE_", "SINFO_", "SCONTROL_")) and k != "SLURM_CLUSTERS"
    }
    env["SLURM_TIME_FORMAT"] = "standard"
    path = env.get("PATH") or os.defpath

    def decode(raw: "bytes | str | None") -> str:  # quoted: Python < 3.10
        if raw is None:
            return ""
        if isinstance(raw, str):
            return raw
        return raw.decode("utf-8", errors="replace")

    def run(argv: list[str], budget_s: "float | None" = None) -> dict[str, object]:
        entry: dict[str, object] = {
            "argv": argv,
            "rc": None,
            "stdout": "",
            "stderr": "",
            "duration_s": 0.0,
            "timed_out": False,
            "error": None,
        }
        exe = shutil.which(argv[0], path=path)
        if exe is None:
            entry["error"] = f"command not found: {argv[0]} (PATH={path})"
            return entry
        begin = time.monotonic()
        remaining = deadline - begin
        if budget_s is not None:
            remaining = min(remaining, t0 + budget_s - begin)
        if remaining <= 0:
            entry["timed_out"] = True
            entry["error"] = f"not started: the probe's {timeout_s:g} s budget was spent"
            return entry
        try:
            proc = subprocess.Popen(
                [exe, *argv[1:]],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,  # a timeout kills the command and its children
            )
        except OSError as e:
            entry["error"] = f"could not run {argv[0]}: {type(e).__name__}: {e}"
            return entry
        try:
            out, err = proc.communicate(timeout=remaining)
            entry["rc"] = proc.returncode
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()
            try:
                out, err = proc.communicate(timeout=2.0)
            except subprocess.TimeoutExpired:
                out, err = b"", b""
            entry["timed_out"] = True
            entry["error"] = f"timed out after {remaining:.1f} s"
        entry["stdout"] = decode(out)
        entry["stderr"] = decode(err)
        entry["duration_s"] = round(time.monotonic() - begin, 4)
        return entry

    results: dict[str, dict[str, object]] = {}

    def worker(name: str, spec: dict[str, object]) -> None:
        argv, budget = spec["argv"], spec.get("budget_s")
        assert isinstance(argv, list)
        entry = run(argv, budget if isinstance(budget, float) else None)
        fallback = spec.get("fallback")
        if (
            isinstance(fallback, dict)
            and entry["rc"] not in (0, None)
            and any(w in str(entry["stderr"]).lower() for w in ("format", "invalid field"))
        ):
            retry = run(fallback["argv"])
            retry["first_attempt"] = entry
            entry, spec = retry, fallback
        if "fields" in spec:
            entry["fields"] = spec["fields"]
        out = entry["stdout"]
        if isinstance(out, str) and len(out) > big:
            packed = base64.b64encode(zlib.compress(out.encode("utf-8"), 6)).decode("ascii")
            entry["stdout"] = ""
            entry["stdout_zlib_b64"] = packed
        results[name] = entry

    threads = [
        threading.Thread(target=worker, args=(n, s), name=f"probe-{n}", daemon=True)
        for n, s in commands.items()
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 5.0)

    out: dict[str, object] = {
        "probe": "slurm",
        "format": 1,
        "started_at": datetime.fromtimestamp(started, tz=utc).isoformat(),
        "hostname": socket.gethostname(),
        "python_version": platform.python_version(),  # the workers' own, not the endpoint's
        "utc_offset_s": time.localtime(started).tm_gmtoff,
        "timeout_s": float(timeout_s),
        "accounts": charged,
        "budgets": dict(budgets) if budgets else None,
    }
    if storage_root is not None:
        try:
            usage = shutil.disk_usage(storage_root)
            out["storage"] = {
                "root": storage_root,
                "free_bytes": usage.free,
                "total_bytes": usage.total,
            }
        except OSError as e:
            out["storage"] = {"root": storage_root, "error": f"{type(e).__name__}: {e}"}
    for name, spec in commands.items():
        entry = results.get(name)
        if entry is None:  # the thread itself is stuck: record it like a timeout
            entry = {
                "argv": spec["argv"],
                "rc": None,
                "stdout": "",
                "stderr": "",
                "duration_s": round(time.monotonic() - t0, 4),
                "timed_out": True,
                "error": "did not finish within the probe's budget",
            }
        out[name] = entry
    out["duration_s"] = round(time.monotonic() - t0, 4)
    return out
