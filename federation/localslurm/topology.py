"""The emulated nodes of one site's cluster: names, ports and sizes, from its SiteSpec.

The same description as the site's endpoint config: each node carries the features its
partition's ``--constraint`` names (Delta's ``scratch``), so the constrained jobs schedule;
GPUs stay in gres.conf (backed by /dev/null), which ``--gpus-per-node`` needs. Vista's GPUs
are implied by the partition, so its jobs ask for none and get none locally.

A partition with per-user job limits (``PartitionSpec.max_running_jobs_per_user`` and
``max_submitted_jobs_per_user``) gets a partition QOS named ``<site>-<partition slug>``
(``vista-gh``) that carries them, as Vista's ``qlimits`` shows its queues' MaxJobsPU and
MaxSubmit: slurm.conf names it (``PartitionName=gh ... QOS=vista-gh``) and
``accounts.register`` creates it in slurmdbd. QOS live in slurmdbd, shared by every
cluster, hence the site prefix. A partition without limits has no QOS.

A site that chooses nodes by constraint and QOS (Perlmutter) describes classes that name no
partition: their nodes share one partition, :data:`DEFAULT_PARTITION`, the cluster's
default, so that jobs sent without ``--partition`` land there. Classes of the same hardware
whose features are among an earlier class's share its nodes (Perlmutter's ``gpu``,
``gpu_debug`` and ``gpu_shared`` are the same nodes under other QOS); each QOS a class names
(``regular``, ``debug``) is created in slurmdbd with the longest walltime its classes allow
(``MaxWall``) and added to the user's associations on that cluster.
"""

from __future__ import annotations

import re

from pydantic import Field

from federation.core.model import Frozen
from federation.core.spec import PartitionSpec, SiteSpec
from federation.localslurm.layout import Ports, site_index


class NodeSpec(Frozen):
    """One emulated node (one ``slurmd -N name``)."""

    name: str
    port: int = Field(gt=0, lt=65536)
    partition: str
    cpus: int = Field(gt=0)
    real_memory_mb: int = Field(gt=0)
    gpus: int = Field(ge=0)
    gpu_type: str | None
    features: tuple[str, ...]

    @property
    def gres(self) -> str | None:
        return f"gpu:{self.gpu_type}:{self.gpus}" if self.gpus and self.gpu_type else None


class PartitionQos(Frozen):
    """A partition QOS: the per-user job limits Slurm applies to every job in the partition."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    max_jobs_per_user: int | None = Field(default=None, gt=0)
    """Running jobs per user (``MaxJobsPerUser``); more pend as ``QOSMaxJobsPerUserLimit``."""
    max_submit_jobs_per_user: int | None = Field(default=None, gt=0)
    """Running plus pending jobs per user (``MaxSubmitJobsPerUser``); sbatch refuses one more
    with ``QOSMaxSubmitJobPerUserLimit``."""
    max_wall_s: int | None = Field(default=None, gt=0)
    """Longest walltime a job may ask under it (``MaxWall``: Perlmutter's ``debug``, 30 min)."""

    @property
    def limits(self) -> tuple[int | None, int | None, int | None, bool]:
        """As :func:`~federation.localslurm.accounts` reads them back: the three limits and
        whether a job over them is refused (``DenyOnLimit``, set with a walltime limit)."""
        wall = self.max_wall_s
        return (self.max_jobs_per_user, self.max_submit_jobs_per_user, wall, wall is not None)

    def sacctmgr_limits(self, unset: str | None = None) -> list[str]:
        """``Key=value`` words for ``sacctmgr add/modify qos``; a limit not set is left out,
        or given as ``unset`` (``"-1"`` clears it on modify)."""
        wall = slurm_duration(self.max_wall_s) if self.max_wall_s is not None else None
        limits: dict[str, int | str | None] = {
            "MaxJobsPerUser": self.max_jobs_per_user,
            "MaxSubmitJobsPerUser": self.max_submit_jobs_per_user,
            "MaxWall": wall,
        }
        words = [
            f"{key}={value if value is not None else unset}"
            for key, value in limits.items()
            if value is not None or unset is not None
        ]
        if wall is not None:  # sbatch refuses a job over it (as NERSC's debug does), no pend
            words.append("Flags=DenyOnLimit")
        return words


class PartitionLayout(Frozen):
    """A partition as slurm.conf states it."""

    name: str
    nodes: tuple[str, ...]
    max_time: str
    def_mem_per_cpu_mb: int = Field(gt=0)
    default: bool
    allow_accounts: tuple[str, ...] = ()
    """Accounts admitted (lowercase, as slurmdbd stores them); empty: any associated one."""
    qos: PartitionQos | None = None
    """The partition QOS carrying the site's per-user job limits; None: no limits."""


class ClusterSpec(Frozen):
    """Everything slurm.conf needs to know about a site's cluster."""

    site: SiteSpec
    ctld_port: int
    nodes: tuple[NodeSpec, ...]
    partitions: tuple[PartitionLayout, ...]

    @property
    def name(self) -> str:
        return self.site.name

    @property
    def gpu_tres(self) -> list[str]:
        """``gres/gpu`` plus one ``gres/gpu:<type>`` per GPU type, for accounting."""
        return ["gres/gpu", *(f"gres/gpu:{t}" for t in sorted(self.site.gpu_types))]

    def node(self, name: str) -> NodeSpec:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"cluster {self.name} has no node {name!r}")

    @property
    def partition_qos(self) -> tuple[PartitionQos, ...]:
        """The partition QOS slurm.conf names, which slurmdbd must hold before slurmctld
        starts."""
        return tuple(p.qos for p in self.partitions if p.qos is not None)


def node_slug(partition: str) -> str:
    """Lowercase hostname-safe form of a partition name (``gpuA100x4`` -> ``gpua100x4``)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", partition.lower()).strip("-")
    return slug or "p"


def node_name(site: str, partition: str, index: int) -> str:
    """``<site>-<partition slug>-<NN>``, counting from 01 (``delta-gpua100x4-01``)."""
    return f"{site}-{node_slug(partition)}-{index:02d}"


def slurm_duration(seconds: int) -> str:
    """Seconds as Slurm's ``D-HH:MM:SS`` (172800 -> ``2-00:00:00``)."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"


ENFORCE_PARTITION_ACCOUNTS = True
"""Whether each partition admits only the account its site charges there (``AllowAccounts``),
so a Delta GPU job charged to ``<proj>-delta-cpu`` is refused as on the site (placement
charges ``SiteSpec.account_for(partition)``); every account is registered either way."""


def partition_qos_name(site: str, partition: str) -> str:
    """``<site>-<partition slug>`` (``vista-gh-dev``): QOS names are global in slurmdbd."""
    return f"{site}-{node_slug(partition)}"


def partition_qos(site: SiteSpec, p: PartitionSpec) -> PartitionQos | None:
    """The QOS carrying ``p``'s per-user job limits, or None if the site publishes none."""
    if p.max_running_jobs_per_user is None and p.max_submitted_jobs_per_user is None:
        return None
    return PartitionQos(
        name=partition_qos_name(site.name, p.name),
        max_jobs_per_user=p.max_running_jobs_per_user,
        max_submit_jobs_per_user=p.max_submitted_jobs_per_user,
    )


def site_partition_qos(site: SiteSpec) -> tuple[PartitionQos, ...]:
    """Every partition QOS of ``site``, in partition order."""
    return tuple(
        q for p in site.partitions if p.partition and (q := partition_qos(site, p)) is not None
    )


def site_class_qos(site: SiteSpec) -> tuple[PartitionQos, ...]:
    """Each QOS ``site``'s classes name, with the longest walltime its classes allow."""
    walls: dict[str, int] = {}
    for p in site.partitions:
        if p.qos:
            walls[p.qos] = max(walls.get(p.qos, 0), p.max_walltime_s)
    return tuple(PartitionQos(name=n.lower(), max_wall_s=w) for n, w in walls.items())


DEFAULT_PARTITION = "batch"
"""The partition of the nodes of classes that name none: the cluster's default."""


class NodeGroup(Frozen):
    """One kind of node of a cluster: ``count`` alike nodes in ``partition``."""

    cls: PartitionSpec
    """The first class that asked for these nodes (their hardware and name)."""
    partition: str
    features: tuple[str, ...]


def _hardware(p: PartitionSpec) -> tuple[object, ...]:
    return (p.cpus_per_node, p.mem_gb_per_node, p.gpus_per_node, p.gpu_type, p.gpu_mem_gb)


def node_groups(site: SiteSpec) -> list[NodeGroup]:
    """The kinds of node of ``site``'s cluster: one per class, but a class that names no
    partition shares the nodes of an earlier such class of its hardware whose features
    include its own."""
    groups: list[NodeGroup] = []
    for p in site.partitions:
        feats = _node_features(site, p)
        if p.partition is None and any(
            g.partition == DEFAULT_PARTITION
            and _hardware(g.cls) == _hardware(p)
            and set(feats) <= set(g.features)
            for g in groups
        ):
            continue
        groups.append(NodeGroup(cls=p, partition=p.partition or DEFAULT_PARTITION, features=feats))
    return groups


def _def_mem_per_cpu(p: PartitionSpec) -> int:
    return max(1, p.mem_gb_per_node * 1024 // p.cpus_per_node)


def _node_features(site: SiteSpec, p: PartitionSpec) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*p.features, *site.constraint_features(p.name))))


def cluster_spec(
    site: SiteSpec, ports: Ports, enforce_partition_accounts: bool = ENFORCE_PARTITION_ACCOUNTS
) -> ClusterSpec:
    """Lay out ``site`` as a cluster: ``nodes_local`` nodes per kind of node
    (:func:`node_groups`), one port each; one partition per partition a class names, and
    :data:`DEFAULT_PARTITION` (the default) for those that name none.

    With ``enforce_partition_accounts`` and a site that charges to several accounts, each
    partition admits only the accounts of its classes.
    """
    per_partition = enforce_partition_accounts and len(site.accounts) > 1
    idx = site_index(site.name)
    groups = node_groups(site)
    slugs = [node_slug(g.cls.name) for g in groups]
    if len(set(slugs)) != len(slugs):
        raise ValueError(f"site {site.name}: class names collide as node names: {slugs}")
    nodes: list[NodeSpec] = []
    members: dict[str, list[str]] = {}
    for g in groups:
        p = g.cls
        for k in range(p.nodes_local):
            name = node_name(site.name, p.name, k + 1)
            members.setdefault(g.partition, []).append(name)
            nodes.append(
                NodeSpec(
                    name=name,
                    port=ports.slurmd(idx, len(nodes)),
                    partition=g.partition,
                    cpus=p.cpus_per_node,
                    real_memory_mb=p.mem_gb_per_node * 1024,
                    gpus=p.gpus_per_node,
                    gpu_type=p.gpu_type,
                    features=g.features,
                )
            )
    default = DEFAULT_PARTITION if DEFAULT_PARTITION in members else next(iter(members))
    partitions: list[PartitionLayout] = []
    for part, names in members.items():
        classes = [p for p in site.partitions if (p.partition or DEFAULT_PARTITION) == part]
        accounts = sorted({site.account_for(p.name).lower() for p in classes})
        own = next((p for p in classes if p.partition == part), None)
        partitions.append(
            PartitionLayout(
                name=part,
                nodes=tuple(names),
                max_time=slurm_duration(max(p.max_walltime_s for p in classes)),
                def_mem_per_cpu_mb=min(_def_mem_per_cpu(p) for p in classes),
                default=part == default,
                allow_accounts=tuple(accounts) if per_partition else (),
                qos=partition_qos(site, own) if own is not None else None,
            )
        )
    return ClusterSpec(
        site=site, ctld_port=ports.slurmctld(idx), nodes=tuple(nodes), partitions=tuple(partitions)
    )
