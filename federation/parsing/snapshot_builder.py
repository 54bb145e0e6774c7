"""A probe result (:func:`functions.probes.probe_slurm`) -> :class:`SiteSnapshot`.

Per-partition totals are summed here from the per-node rows (``sinfo -O GresUsed`` and
friends do not sum per partition), queue counts and pending reasons come from ``squeue``,
and Slurm's start estimates (``squeue --start``) are joined into the pending jobs. A probe
whose required commands failed, timed out, or printed something that is not the probe's
format raises :class:`ProbeError` / :class:`ParseError` with the command and line; the
coordinator turns that into an unhealthy site with :func:`unreachable_snapshot`.
"""

from __future__ import annotations

import base64
import math
import re
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from federation.core.charge import charged_partitions, common_unit
from federation.core.errors import ParseError, ProbeError
from federation.core.gcpause import gc_paused
from federation.core.snapshot import (
    AllocationScope,
    JobRecord,
    NodeRecord,
    PartitionSnapshot,
    QosLimits,
    SiteHealth,
    SiteSnapshot,
    SiteStorage,
)
from federation.core.spec import SiteSpec
from federation.parsing.common import snippet
from federation.parsing.hostlist import expand_hostlist
from federation.parsing.sacctmgr_qos import QOS_FIELDS, parse_sacctmgr_qos
from federation.parsing.scontrol import PartitionInfo, parse_scontrol_partitions
from federation.parsing.sinfo import SINFO_FIELDS, parse_sinfo
from federation.parsing.squeue import (
    SQUEUE_FIELDS,
    parse_squeue,
    reason_code,
)
from federation.parsing.squeue_start import START_FIELDS, StartEstimate, parse_squeue_start
from federation.parsing.sshare import (
    SSHARE_FIELDS,
    ShareRecord,
    allocation_from_shares,
    parse_sshare_text,
)

PROBE_FORMAT = 1
REQUIRED_COMMANDS = ("sinfo", "squeue", "scontrol_partition")
OPTIONAL_COMMANDS = ("squeue_start", "version", "sshare", "sacctmgr_qos")
RUNNING_STATES = frozenset({"running", "configuring"})
PENDING_STATES = frozenset({"pending", "requeued"})
MAX_UTC_OFFSET_S = 86_400
"""A site's clock is at most a day off UTC (time zones are within 14 hours)."""
_VERSION = re.compile(r"(\d+\.\d+(?:\.\d+)?(?:-\w+)?)")


def _first_line(text: object) -> str:
    for line in str(text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def _command_name(entry: Mapping[str, Any], name: str) -> str:
    argv = entry.get("argv")
    if isinstance(argv, list) and argv:
        return " ".join(str(a) for a in argv[:3] if "\x1f" not in str(a))
    return name


def command_output(probe: Mapping[str, Any], name: str) -> str:
    """The stdout of one probe command, or :class:`ProbeError` saying why there is none."""
    entry = probe.get(name)
    if entry is None:
        keys = ", ".join(sorted(str(k) for k in probe)) or "(none)"
        raise ProbeError(f"probe result has no {name!r} command (keys: {keys}); not a probe_slurm")
    if not isinstance(entry, Mapping):
        raise ProbeError(f"probe {name}: expected a mapping, got {type(entry).__name__}")
    cmd = _command_name(entry, name)
    if entry.get("timed_out"):
        raise ProbeError(
            f"`{cmd}` timed out after {entry.get('duration_s', '?')} s"
            f"{' (' + str(entry['error']) + ')' if entry.get('error') else ''}; "
            "slurmctld may be overloaded or unreachable"
        )
    rc = entry.get("rc")
    if rc is None and entry.get("error"):
        raise ProbeError(f"`{cmd}` did not run: {entry['error']}")
    if rc != 0:
        err = _first_line(entry.get("stderr")) or _first_line(entry.get("stdout")) or "no output"
        raise ProbeError(f"`{cmd}` exited with rc={rc}: {err}")
    packed = entry.get("stdout_zlib_b64")
    if packed:
        try:
            return zlib.decompress(base64.b64decode(str(packed))).decode("utf-8")
        except (ValueError, zlib.error) as e:  # binascii.Error, UnicodeError, non-ASCII text
            raise ParseError(f"{name}: compressed stdout is corrupt: {e}") from None
    out = entry.get("stdout")
    if not isinstance(out, str):
        raise ProbeError(f"probe {name}: stdout is {type(out).__name__}, expected text")
    return out


def _fields(probe: Mapping[str, Any], name: str, default: Sequence[str]) -> tuple[str, ...]:
    entry = probe.get(name)
    fields = entry.get("fields") if isinstance(entry, Mapping) else None
    if fields is None:
        return tuple(default)
    if not isinstance(fields, list | tuple) or not all(isinstance(f, str) for f in fields):
        raise ProbeError(f"probe {name}: 'fields' must be a list of field names")
    return tuple(fields)


def _started_at(probe: Mapping[str, Any]) -> datetime:
    raw = probe.get("started_at")
    if raw is None:
        raise ProbeError("probe result has no 'started_at' timestamp; not a probe_slurm result")
    if isinstance(raw, datetime):
        dt = raw
    else:
        try:
            dt = datetime.fromisoformat(str(raw))
        except ValueError:
            raise ProbeError(f"probe 'started_at' {snippet(str(raw))} is not ISO 8601") from None
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def parse_version(text: str) -> str | None:
    """``slurm 22.05.8`` / ``slurm-wlm 22.05.8`` -> ``22.05.8``."""
    m = _VERSION.search(text or "")
    return m.group(1) if m else None


def _sum_types(target: dict[str, int], add: Mapping[str, int]) -> None:
    for t, n in add.items():
        target[t] = target.get(t, 0) + n


def partition_snapshot(
    site: str,
    name: str,
    nodes: list[NodeRecord],
    jobs: list[JobRecord],
    info: PartitionInfo | None,
    start_elsewhere: frozenset[str] = frozenset(),
) -> PartitionSnapshot:
    """One partition's capacity and queue from its ``nodes`` and ``jobs`` (also a node
    class's, from the nodes and jobs matched to it: ``federation.placement.classes``)."""
    gpus_total: dict[str, int] = {}
    gpus_alloc: dict[str, int] = {}
    cpus_total = cpus_alloc = cpus_idle = cpus_unavail = 0
    mem_total = mem_alloc = 0
    for n in nodes:
        cpus_total += n.cpus_total
        cpus_alloc += n.cpus_alloc
        rest = max(0, n.cpus_total - n.cpus_alloc)
        if n.usable:
            cpus_idle += rest
        else:
            cpus_unavail += rest
        mem_total += n.mem_mb_total
        mem_alloc += n.mem_mb_alloc
        _sum_types(gpus_total, n.gpus_total_by_type)
        _sum_types(gpus_alloc, n.gpus_alloc_by_type)
    running = pending = held = 0
    reasons: dict[str, int] = {}
    starts: list[datetime] = []
    for j in jobs:
        state = j.state
        if state in RUNNING_STATES:
            running += 1
            continue
        if state == "held":
            held += 1
        elif state in PENDING_STATES:
            pending += 1
            if j.start_time is not None and j.job_id not in start_elsewhere:
                starts.append(j.start_time)
        else:
            continue
        code = reason_code(j.reason) or "None"
        reasons[code] = reasons.get(code, 0) + 1
    return PartitionSnapshot(
        site=site,
        partition=name,
        state=info.state if info else "unknown",
        max_time_s=info.max_time_s if info else None,
        nodes_total=len(nodes),
        nodes_by_state=dict(Counter(n.state for n in nodes)),
        cpus_total=cpus_total,
        cpus_alloc=cpus_alloc,
        cpus_idle=cpus_idle,
        cpus_unavailable=cpus_unavail,
        mem_gb_total=round(mem_total / 1024, 3),
        mem_gb_alloc=round(mem_alloc / 1024, 3),
        gpus_total_by_type=gpus_total,
        gpus_alloc_by_type={t: n for t, n in gpus_alloc.items() if n},
        jobs_running=running,
        jobs_pending=pending,
        jobs_held=held,
        pending_reasons=reasons,
        earliest_pending_start=min(starts) if starts else None,
        latest_pending_start=max(starts) if starts else None,
        default=info.default if info else False,
    )


def build_site_snapshot(
    site: str, probe: Mapping[str, Any], now: datetime | None = None, spec: SiteSpec | None = None
) -> SiteSnapshot:
    """Turn one probe result into a :class:`SiteSnapshot` (reachable, with warnings).

    ``now`` (default: the current time) only sets ``health.probe_age_s``; ``taken_at`` is
    the probe's own start time. ``spec``: the site's facts, which give each account's
    allocation its partitions and unit (without them the units are not known). Raises
    :class:`ProbeError` (a required command failed or is missing) or :class:`ParseError`
    (its output is not the probe's format; names the line).
    """
    with gc_paused():
        return _build(site, probe, now, spec)


def _build(
    site: str, probe: Mapping[str, Any], now: datetime | None, spec: SiteSpec | None
) -> SiteSnapshot:
    if not isinstance(probe, Mapping):
        raise ProbeError(f"probe result is {type(probe).__name__}, expected a dict")
    fmt = probe.get("format")
    if fmt is not None and fmt != PROBE_FORMAT:
        raise ProbeError(
            f"probe format {fmt!r} is not supported (expected {PROBE_FORMAT}); "
            "the endpoint runs a different version of functions.probes"
        )
    warnings: list[str] = []
    offset = probe.get("utc_offset_s") or 0
    if (
        isinstance(offset, bool)
        or not isinstance(offset, int | float)
        or not abs(offset) <= MAX_UTC_OFFSET_S  # NaN and infinities too
    ):
        raise ProbeError(
            f"probe 'utc_offset_s' is {snippet(str(offset))}, expected seconds east of UTC "
            f"(at most {MAX_UTC_OFFSET_S} either way)"
        )

    sinfo_out = command_output(probe, "sinfo")
    nodes = parse_sinfo(sinfo_out, _fields(probe, "sinfo", SINFO_FIELDS))
    if not nodes:
        raise ProbeError(
            "`sinfo` listed no nodes: check SLURM_CONF on the endpoint, or whether every "
            "partition is hidden from the endpoint's user"
        )
    partitions = parse_scontrol_partitions(command_output(probe, "scontrol_partition"), warnings)

    starts: dict[str, StartEstimate] = {}
    try:
        starts = parse_squeue_start(
            command_output(probe, "squeue_start"),
            _fields(probe, "squeue_start", START_FIELDS),
            offset,
        )
    except ParseError:
        raise
    except ProbeError as e:
        warnings.append(f"no start estimates: {e}")
    jobs = parse_squeue(
        command_output(probe, "squeue"),
        _fields(probe, "squeue", SQUEUE_FIELDS),
        offset,
        {k: v.start_time for k, v in starts.items() if v.start_time is not None},
    )
    version: str | None = None
    try:
        version = parse_version(command_output(probe, "version"))
    except ProbeError as e:
        warnings.append(f"no Slurm version: {e}")
    sinfo_entry = probe.get("sinfo")
    if isinstance(sinfo_entry, Mapping) and sinfo_entry.get("first_attempt"):
        warnings.append("sinfo: StateComplete unsupported here; used StateLong only")

    info = {p.name: p for p in partitions}
    order = list(info)
    nodes_by_part: dict[str, list[NodeRecord]] = {}
    for n in nodes:
        nodes_by_part.setdefault(n.partition, []).append(n)
        if n.partition not in info and n.partition not in order:
            order.append(n.partition)
            warnings.append(f"partition {n.partition} is in sinfo but not in scontrol")
    jobs_by_part: dict[str, list[JobRecord]] = {}
    multi: list[JobRecord] = []
    for j in jobs:
        group = jobs_by_part.get(j.partition)
        if group is None:
            if "," in j.partition:
                multi.append(j)
                for part in j.partition.split(","):
                    jobs_by_part.setdefault(part, []).append(j)
                continue
            group = jobs_by_part[j.partition] = []
        group.append(j)
    # A job pending in several partitions: its estimate belongs to the partition(s) holding
    # the nodes Slurm scheduled it on, when squeue --start names them.
    elsewhere: dict[str, set[str]] = {}
    node_parts: dict[str, set[str]] = {}
    if multi:
        for n in nodes:
            node_parts.setdefault(n.name, set()).add(n.partition)
    for j in multi:
        est = starts.get(j.job_id)
        if est is None or not est.sched_nodes:
            continue
        try:
            hosts = expand_hostlist(est.sched_nodes)
        except ParseError:
            continue
        where = set().union(*(node_parts.get(h, set()) for h in hosts)) if hosts else set()
        if where:
            for part in j.partition.split(","):
                if part not in where:
                    elsewhere.setdefault(part, set()).add(j.job_id)
    snaps = []
    for name in order:
        pnodes = nodes_by_part.get(name, [])
        p = info.get(name)
        if p is not None and p.total_nodes is not None and p.total_nodes != len(pnodes):
            warnings.append(
                f"partition {name}: scontrol counts {p.total_nodes} nodes, sinfo lists "
                f"{len(pnodes)}"
            )
        snaps.append(
            partition_snapshot(
                site,
                name,
                pnodes,
                jobs_by_part.get(name, []),
                p,
                frozenset(elsewhere.get(name, ())),
            )
        )

    allocations = build_allocations(probe, warnings, spec)
    storage = build_storage(probe, warnings)
    qos_limits = build_qos_limits(probe, warnings)
    taken_at = _started_at(probe)
    current = now or datetime.now(UTC)
    if current.tzinfo is None:
        current = current.replace(tzinfo=UTC)
    duration = probe.get("duration_s")
    health = SiteHealth(
        reachable=True,
        probe_age_s=max(0.0, (current - taken_at).total_seconds()),
        probe_duration_s=float(duration)
        if isinstance(duration, int | float) and duration >= 0
        else None,
        warnings=tuple(warnings),
    )
    return SiteSnapshot(
        site=site,
        taken_at=taken_at,
        health=health,
        slurm_version=version,
        partitions=tuple(snaps),
        nodes=tuple(nodes),
        jobs=tuple(jobs),
        allocations=allocations,
        storage=storage,
        qos_limits=qos_limits,
    )


def build_storage(probe: Mapping[str, Any], warnings: list[str]) -> SiteStorage | None:
    """The probe's ``storage`` entry (the site's storage and its free space), if any; a
    damaged one is a warning, never a failed probe."""
    raw = probe.get("storage")
    if raw is None:
        return None
    try:
        if not isinstance(raw, dict) or not isinstance(raw.get("root"), str):
            raise ValueError(f"expected {{root, free_bytes, total_bytes}}, got {raw!r:.80}")
        counts = {}
        for key in ("free_bytes", "total_bytes"):
            v = raw.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise ValueError(f"{key} is {v!r:.40}")
            counts[key] = v
        error = raw.get("error")
        return SiteStorage(root=raw["root"], error=str(error) if error else None, **counts)
    except ValueError as e:
        warnings.append(f"storage: {e}")
        return None


def build_qos_limits(probe: Mapping[str, Any], warnings: list[str]) -> tuple[QosLimits, ...] | None:
    """Every QOS with its live limits (the probe's ``sacctmgr show qos``); None when the
    probe did not ask (older probes) or the answer is missing, failed or damaged: then
    "qos limits unknown" is a warning, never a failed probe."""
    if "sacctmgr_qos" not in probe:
        return None
    try:
        text = command_output(probe, "sacctmgr_qos")
        fields = _fields(probe, "sacctmgr_qos", QOS_FIELDS)
        return tuple(parse_sacctmgr_qos(text, fields, warnings))
    except ProbeError as e:  # ParseError included
        warnings.append(f"qos limits unknown: {e}")
        return None


def _number(value: object, what: str) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value < math.inf  # NaN too
        or value > 1e300  # past a float
    ):
        raise ProbeError(f"probe {what!r} is {value!r:.40}, expected a number >= 0 or null")
    return float(value)


def _requested(probe: Mapping[str, Any]) -> tuple[list[str], dict[str, float]]:
    """The accounts the probe was asked about (the default first) and their configured
    budgets, from the probe's echo; a probe of one ``account`` and its
    ``budget_core_hours`` (before accounts were per partition) reads as one of each."""
    raw_accounts = probe.get("accounts")
    if raw_accounts is None:
        one = probe.get("account")
        raw_accounts = [one] if one else []
    if not isinstance(raw_accounts, list) or not all(isinstance(a, str) for a in raw_accounts):
        raise ProbeError(f"probe 'accounts' is {raw_accounts!r:.80}, expected a list of names")
    accounts = list(dict.fromkeys(a for a in raw_accounts if a))
    budgets: dict[str, float] = {}
    raw_budgets = probe.get("budgets")
    if raw_budgets is not None:
        if not isinstance(raw_budgets, Mapping):
            raise ProbeError(f"probe 'budgets' is {raw_budgets!r:.80}, expected a mapping")
        for name, value in raw_budgets.items():
            amount = _number(value, f"budgets.{name}")
            key = accounts[0] if name == "default" and accounts else str(name)
            if amount is not None:
                budgets[key.lower()] = amount
    old = _number(probe.get("budget_core_hours"), "budget_core_hours")
    if old is not None and accounts:
        budgets.setdefault(accounts[0].lower(), old)
    return accounts, budgets


def build_allocations(
    probe: Mapping[str, Any], warnings: list[str], spec: SiteSpec | None = None
) -> tuple[AllocationScope, ...]:
    """The credit scope of every account the probe asked ``sshare`` about, plus the
    configured budgets, the default account's first.

    With the site's facts (``spec``) each scope names the partitions charged to its account
    and counts their unit (:mod:`federation.core.charge`); the first account asked is the
    default, charged for the partitions without an account of their own. A failed or
    unreadable ``sshare`` adds a warning. An account's configured budget (echoed by the
    probe, in its units) becomes its ``limit_units`` when the site reports no limit; with
    no sshare answer for it, a configured budget still gives a scope (usage unknown).
    """
    try:
        accounts, budgets = _requested(probe)
    except ProbeError as e:  # the coordinator's own echo, damaged: no credit, still a site
        warnings.append(f"no allocation: {e}")
        return ()
    charged = charged_partitions(spec, accounts[0] if accounts else None) if spec else {}
    by_key = {a.lower(): ps for a, ps in charged.items()}
    records: list[ShareRecord] | None = None
    if "sshare" in probe:
        try:
            records = parse_sshare_text(
                command_output(probe, "sshare"), _fields(probe, "sshare", SSHARE_FIELDS)
            )
        except ProbeError as e:  # ParseError included: optional, so a warning
            warnings.append(f"no allocation usage: {e}")
    out: list[AllocationScope] = []
    asked: list[str | None] = [*accounts] or [None]  # None: the user's first account
    for account in asked:
        parts = by_key.get(account.lower(), ()) if account else ()
        unit = common_unit(parts) if spec is not None else None
        names = tuple(p.name for p in parts)
        scope = None
        if records is not None:
            scope = allocation_from_shares(records, account, unit=unit, partitions=names)
            if scope is None:
                who = f"account {account}" if account else "any account of this user"
                warnings.append(f"sshare: no association for {who}; no usage known")
        budget = budgets.get(account.lower()) if account else None
        if scope is None:
            if account is not None and budget is not None:
                out.append(
                    AllocationScope(
                        account=account,
                        unit=unit,
                        partitions=names,
                        limit_units=budget,
                        source="configured budget",
                    )
                )
            continue
        if scope.limit_units is None and budget is not None:
            source = f"{scope.source}; limit: configured budget"
            scope = scope.model_copy(update={"limit_units": budget, "source": source})
        out.append(scope)
    return tuple(out)


def unreachable_snapshot(site: str, error: str, now: datetime | None = None) -> SiteSnapshot:
    """The snapshot of a site whose probe failed: unreachable, no partitions, the error."""
    current = now or datetime.now(UTC)
    if current.tzinfo is None:
        current = current.replace(tzinfo=UTC)
    return SiteSnapshot(
        site=site,
        taken_at=current,
        health=SiteHealth(reachable=False, probe_age_s=0.0, error=error),
    )
