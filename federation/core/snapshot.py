"""The normalized, timestamped view of the federation that probes produce.

Parsers in :mod:`federation.parsing` turn raw scheduler output into these models; placement
reads them; telemetry stores them over time. Units are in field names.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from federation.core.charge import AllocationUnit
from federation.core.model import Frozen
from federation.core.optional import require

# Node states after normalization (suffixes like '*', '~', '#', '@', '-' and '+FLAG' removed;
# flags kept separately). 'unavailable' covers down, drained, fail, inval, future, power-down.
NodeStateName = Literal[
    "idle",
    "mixed",
    "allocated",
    "completing",
    "draining",
    "drained",
    "down",
    "reserved",
    "maint",
    "planned",
    "unknown",
]
UNUSABLE_STATES: frozenset[str] = frozenset({"down", "drained", "maint", "unknown"})

JobStateName = Literal[
    "pending",
    "running",
    "suspended",
    "completing",
    "completed",
    "cancelled",
    "failed",
    "timeout",
    "node_fail",
    "preempted",
    "out_of_memory",
    "boot_fail",
    "deadline",
    "requeued",
    "configuring",
    "resizing",
    "held",
    "unknown",
]


if TYPE_CHECKING:
    import pandas as pd


_DERIVED: dict[int, tuple[weakref.ref[Any], dict[Hashable, Any]]] = {}


def derived(obj: Frozen) -> dict[Hashable, Any]:
    """A scratch dict for values derived from the immutable ``obj`` (indexes, summaries),
    kept for as long as ``obj`` lives and dropped with it.

    Held beside the object, keyed by its identity, never on it: ``model_copy(update=...)``
    would otherwise carry a stale entry into the copy, and equality and dumps never see it.
    """
    key = id(obj)
    hit = _DERIVED.get(key)
    if hit is not None and hit[0]() is obj:
        return hit[1]
    cache: dict[Hashable, Any] = {}

    # the table is bound now: at interpreter exit the module's globals may already be None
    def forget(ref: weakref.ref[Any], table: dict[int, Any] = _DERIVED) -> None:
        if (cur := table.get(key)) is not None and cur[0] is ref:  # the object is gone
            table.pop(key, None)

    _DERIVED[key] = (weakref.ref(obj, forget), cache)
    return cache


class NodeRecord(Frozen):
    """One node as seen in one partition (a node in two partitions appears twice)."""

    name: str
    partition: str
    state: NodeStateName
    state_flags: tuple[str, ...] = ()
    reason: str | None = None
    cpus_total: int = Field(ge=0)
    cpus_alloc: int = Field(ge=0)
    mem_mb_total: int = Field(ge=0)
    mem_mb_alloc: int = Field(ge=0)
    gpus_total_by_type: dict[str, int] = Field(default_factory=dict)
    gpus_alloc_by_type: dict[str, int] = Field(default_factory=dict)
    features: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        """Can take new work: not down/drained/draining/maint/unknown, and responding
        (Slurm allocates nothing to a node flagged ``not_responding``, e.g. ``idle*``)."""
        return (
            self.state not in UNUSABLE_STATES
            and self.state != "draining"
            and "not_responding" not in self.state_flags
        )

    @property
    def cpus_free(self) -> int:
        return max(0, self.cpus_total - self.cpus_alloc) if self.usable else 0

    @property
    def mem_mb_free(self) -> int:
        return max(0, self.mem_mb_total - self.mem_mb_alloc) if self.usable else 0

    def gpus_free(self, gpu_type: str | None = None) -> int:
        if not self.usable:
            return 0
        types = [gpu_type] if gpu_type else list(self.gpus_total_by_type)
        return sum(
            max(0, self.gpus_total_by_type.get(t, 0) - self.gpus_alloc_by_type.get(t, 0))
            for t in types
        )


class JobRecord(Frozen):
    """One job in the queue (pending or running) as squeue reports it."""

    job_id: str
    """As squeue prints it: ``123``, ``123_4`` (array task), ``123_[1-10%2]`` (pending array)."""
    partition: str
    """A pending job submitted to several partitions lists them all (``a,b``); '' if unknown."""
    state: JobStateName
    reason: str | None = None
    user: str | None = None
    name: str | None = None
    nodes: int = Field(default=1, ge=0)
    cpus: int = Field(default=1, ge=0)
    mem_mb: int | None = Field(default=None, ge=0)
    """Memory per node in MB (the job's TRES ``mem`` / nodes when known, else MinMemory)."""
    gpus: int = Field(default=0, ge=0)
    """GPUs of the whole job (all nodes)."""
    gpu_type: str | None = None
    time_limit_s: int | None = Field(default=None, ge=0)
    submit_time: datetime | None = None
    start_time: datetime | None = None
    """Actual start if running; Slurm's estimate (``squeue --start``) if pending."""
    end_time: datetime | None = None
    priority: int | None = None
    node_names: tuple[str, ...] = ()
    """Nodes a running job holds (squeue ``%N``, expanded); empty when pending or unknown."""


class PartitionSnapshot(Frozen):
    """Capacity and queue of one partition at one moment."""

    site: str
    partition: str
    state: Literal["up", "down", "drain", "inactive", "unknown"] = "up"
    max_time_s: int | None = None
    nodes_total: int = Field(ge=0)
    nodes_by_state: dict[str, int] = Field(default_factory=dict)
    cpus_total: int = Field(ge=0)
    cpus_alloc: int = Field(ge=0)
    cpus_idle: int = Field(ge=0)
    cpus_unavailable: int = Field(default=0, ge=0)
    mem_gb_total: float = Field(ge=0)
    mem_gb_alloc: float = Field(ge=0)
    gpus_total_by_type: dict[str, int] = Field(default_factory=dict)
    gpus_alloc_by_type: dict[str, int] = Field(default_factory=dict)
    jobs_running: int = Field(default=0, ge=0)
    jobs_pending: int = Field(default=0, ge=0)
    jobs_held: int = Field(default=0, ge=0)
    """Pending jobs held by their user or an admin: not competing for resources."""
    pending_reasons: dict[str, int] = Field(default_factory=dict)
    """Pending (and held) jobs per reason code (``Priority``, ``Resources``, ...)."""
    default: bool = False
    """The site's default partition."""
    earliest_pending_start: datetime | None = None
    """Earliest Slurm start estimate among pending jobs (None when nothing pending)."""
    latest_pending_start: datetime | None = None
    """Latest Slurm start estimate among pending jobs: a new job queues behind it."""

    @property
    def gpus_idle_by_type(self) -> dict[str, int]:
        return {
            t: max(0, n - self.gpus_alloc_by_type.get(t, 0))
            for t, n in self.gpus_total_by_type.items()
        }


class SiteHealth(Frozen):
    """Whether the site answered, and how fresh its data is."""

    reachable: bool
    probe_age_s: float = Field(ge=0)
    probe_duration_s: float | None = Field(default=None, ge=0)
    error: str | None = None
    """What went wrong and what to do, when the probe failed."""
    warnings: tuple[str, ...] = ()
    """Non-fatal problems in a usable probe (an optional command failed, lines skipped)."""


class AllocationScope(Frozen):
    """The allocation (credit) of one account a site charges work to, as the site reports it.

    Counted in the site's own unit (:mod:`federation.core.charge`): ``unit`` is the charge
    unit of the partitions charged to this account (core-hours, GPU-hours, node-hours), or
    ``SUs`` when they bill in different units; None when the site's facts were not at hand
    (then it is Slurm's billing units). Filled from ``sshare`` (``RawUsage`` is
    billing-TRES-seconds, so used = RawUsage / 3600, assuming the site's TRESBillingWeights
    match its charge unit, as ACCESS sites set them) or the configured budget. ``None``
    amounts are what the site did not say.
    """

    account: str
    unit: AllocationUnit | None = None
    partitions: tuple[str, ...] = ()
    """The site's partitions charged to this account (empty: not known)."""
    used_units: float | None = Field(default=None, ge=0)
    limit_units: float | None = Field(default=None, ge=0)
    """The allocation's size, when the site reports one (or the configured budget)."""
    fairshare: float | None = Field(default=None, ge=0)
    source: str = "sshare"

    @model_validator(mode="before")
    @classmethod
    def _core_hours_of_old(cls, data: Any) -> Any:
        """A scope recorded before units were per site (telemetry) counted core-hours."""
        if isinstance(data, dict) and ("used_core_hours" in data or "limit_core_hours" in data):
            data = dict(data)
            data.setdefault("used_units", data.pop("used_core_hours", None))
            data.setdefault("limit_units", data.pop("limit_core_hours", None))
            data.setdefault("unit", "core-hours")
        return data

    @property
    def remaining_units(self) -> float | None:
        if self.limit_units is None or self.used_units is None:
            return None
        return max(0.0, self.limit_units - self.used_units)


class SiteStorage(Frozen):
    """The site's storage (its Globus collection's path): where workspaces and spilled
    results live, and how much room is left there, as the probe read it."""

    root: str
    free_bytes: int | None = None
    total_bytes: int | None = None
    error: str | None = None


class QosLimits(Frozen):
    """One QOS as slurmdbd holds it (``sacctmgr show qos``): its priority and the limits a
    job under it meets. None: no limit set."""

    name: str
    priority: int | None = Field(default=None, ge=0)
    max_wall_s: int | None = Field(default=None, ge=0)
    """Longest walltime one job may ask (``MaxWall``)."""
    max_jobs_per_user: int | None = Field(default=None, ge=0)
    """Jobs one user may have running at once (``MaxJobsPU``); more pend."""
    max_submit_per_user: int | None = Field(default=None, ge=0)
    """Jobs one user may have running and pending (``MaxSubmitPU``); sbatch refuses more."""
    max_tres_per_user: dict[str, str] = Field(default_factory=dict)
    """TRES one user may hold at once (``MaxTRESPU``: ``cpu=128,gres/gpu=4``), as printed."""
    flags: tuple[str, ...] = ()
    """``DenyOnLimit``: a job over a limit is refused at submission, not left pending."""

    @property
    def deny_on_limit(self) -> bool:
        return "DenyOnLimit" in self.flags


class SiteSnapshot(Frozen):
    """One site at one moment: partitions, nodes, queue and health."""

    site: str
    taken_at: datetime
    health: SiteHealth
    slurm_version: str | None = None
    partitions: tuple[PartitionSnapshot, ...] = ()
    nodes: tuple[NodeRecord, ...] = ()
    jobs: tuple[JobRecord, ...] = ()
    allocations: tuple[AllocationScope, ...] = ()
    """The allocation of every account the site charges (credit scope), the default
    account's first, when probed."""
    storage: SiteStorage | None = None
    """The site's storage and its free space, when the probe was told where it is."""
    qos_limits: tuple[QosLimits, ...] | None = None
    """Every QOS slurmdbd lists with its live limits (``sacctmgr show qos``); None: not
    known (no ``sacctmgr`` there, it failed, or the probe predates it)."""

    @model_validator(mode="before")
    @classmethod
    def _one_allocation_of_old(cls, data: Any) -> Any:
        """A snapshot recorded before accounts were per partition had one ``allocation``."""
        if isinstance(data, dict) and "allocation" in data:
            data = dict(data)
            old = data.pop("allocation")
            if old is not None and not data.get("allocations"):
                data["allocations"] = (old,)
        return data

    @property
    def allocation(self) -> AllocationScope | None:
        """The default account's allocation (the first), when probed."""
        return self.allocations[0] if self.allocations else None

    def allocation_of(self, account: str) -> AllocationScope | None:
        """The allocation of ``account`` (Slurm account names are case-insensitive)."""
        key = account.lower()
        return next((a for a in self.allocations if a.account.lower() == key), None)

    def allocation_for(self, partition: str) -> AllocationScope | None:
        """The allocation work on ``partition`` is charged to (its account's). When no
        allocation knows its partitions (a probe read without the site's facts), the
        default account's."""
        for a in self.allocations:
            if partition in a.partitions:
                return a
        if any(a.partitions for a in self.allocations):
            return None
        return self.allocation

    def qos(self, name: str) -> QosLimits | None:
        """The live limits of QOS ``name`` (Slurm's QOS names are case-insensitive); None
        when the site's QOS are not known or it has none by that name."""
        key = name.lower()
        return next((q for q in self.qos_limits or () if q.name.lower() == key), None)

    def partition(self, name: str) -> PartitionSnapshot | None:
        """The first partition named ``name`` (an index built once per snapshot)."""
        cache = derived(self)
        index: dict[str, PartitionSnapshot] | None = cache.get("partitions")
        if index is None:
            index = {}
            for p in self.partitions:
                index.setdefault(p.partition, p)
            cache["partitions"] = index
        return index.get(name)


class FederationSnapshot(Frozen):
    """Every site at (about) one moment, with pandas views for people and plots."""

    taken_at: datetime
    sites: tuple[SiteSnapshot, ...]

    def site(self, name: str) -> SiteSnapshot | None:
        """The first site named ``name`` (an index built once per snapshot)."""
        cache = derived(self)
        index: dict[str, SiteSnapshot] | None = cache.get("sites")
        if index is None:
            index = {}
            for s in self.sites:
                index.setdefault(s.site, s)
            cache["sites"] = index
        return index.get(name)

    def partitions_frame(self) -> pd.DataFrame:
        """One row per (site, partition) with capacity, queue and health columns."""
        require("pandas", "jupyter")  # says which extra to install
        import pandas as pd

        rows = []
        for s in self.sites:
            for p in s.partitions:
                row = p.model_dump(
                    exclude={
                        "gpus_total_by_type",
                        "gpus_alloc_by_type",
                        "nodes_by_state",
                        "pending_reasons",
                    }
                )
                row["gpus_total"] = sum(p.gpus_total_by_type.values())
                row["gpus_alloc"] = sum(p.gpus_alloc_by_type.values())
                row["gpu_types"] = ",".join(sorted(p.gpus_total_by_type)) or "-"
                row["reachable"] = s.health.reachable
                row["probe_age_s"] = s.health.probe_age_s
                row["taken_at"] = s.taken_at
                rows.append(row)
            if not s.partitions:
                rows.append(
                    {
                        "site": s.site,
                        "partition": None,
                        "reachable": s.health.reachable,
                        "probe_age_s": s.health.probe_age_s,
                        "taken_at": s.taken_at,
                    }
                )
        return pd.DataFrame(rows)

    def nodes_frame(self) -> pd.DataFrame:
        """One row per (site, partition, node)."""
        require("pandas", "jupyter")  # says which extra to install
        import pandas as pd

        rows = []
        for s in self.sites:
            for n in s.nodes:
                row = n.model_dump(exclude={"gpus_total_by_type", "gpus_alloc_by_type"})
                row["site"] = s.site
                row["gpus_total"] = sum(n.gpus_total_by_type.values())
                row["gpus_alloc"] = sum(n.gpus_alloc_by_type.values())
                rows.append(row)
        return pd.DataFrame(rows)

    def jobs_frame(self) -> pd.DataFrame:
        """One row per queued or running job, across sites."""
        require("pandas", "jupyter")  # says which extra to install
        import pandas as pd

        rows = []
        for s in self.sites:
            for j in s.jobs:
                row = j.model_dump()
                row["site"] = s.site
                rows.append(row)
        return pd.DataFrame(rows)
