"""Which live nodes and jobs a node class stands for.

A class (:class:`~federation.core.spec.NodeClass`) is matched to a site's live snapshot by
partition and node features, never by its name: its nodes are those in its partition (any
partition when it names none) whose features satisfy its constraint; the jobs competing for
them are the running jobs on those nodes and the pending jobs in those nodes' partitions.
:func:`class_view` gives placement that view as a partition snapshot and a site snapshot
restricted to it, in which the class's name stands for the partition, so the wait
predictors read it as they read a partition.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.snapshot import JobRecord, NodeRecord, PartitionSnapshot, SiteSnapshot, derived
from federation.core.spec import CONSTRAINT_RE, NodeClass
from federation.parsing.scontrol import PartitionInfo
from federation.parsing.snapshot_builder import partition_snapshot


def satisfies(constraint: str | None, features: Collection[str]) -> bool:
    """Whether a node with ``features`` satisfies a Slurm feature expression of names joined
    by ``&`` (and) and ``|`` (or), with ``&`` binding tighter (``a&b|c``: both a and b, or
    c). No constraint: every node does."""
    if not constraint:
        return True
    if not re.match(CONSTRAINT_RE, constraint):
        raise ValueError(f"constraint {constraint!r}: expected feature names joined by & or |")
    have = set(features)
    return any(all(f in have for f in term.split("&")) for term in constraint.split("|"))


def _matches(cls: NodeClass, node: NodeRecord) -> bool:
    return (cls.partition is None or node.partition == cls.partition) and satisfies(
        cls.constraint, node.features
    )


def no_match_reason(cls: NodeClass) -> str:
    """The rejection of a class no live node matches."""
    return (
        f"no live node matches class {cls.name} (partition {cls.partition or 'any'}, "
        f"constraint {cls.constraint or 'none'})"
    )


def class_view(site: SiteSnapshot, cls: NodeClass) -> tuple[PartitionSnapshot, SiteSnapshot] | None:
    """The class's live partition view and the site restricted to it (None: no live node
    matches it). A class that is its partition (named after it, no constraint) is the
    partition's own snapshot, as before classes."""
    if cls.partition == cls.name and not cls.constraint:
        psnap = site.partition(cls.name)
        return None if psnap is None else (psnap, site)
    cache = derived(site)
    key = ("class_view", cls.name, cls.partition, cls.constraint)
    if key in cache:
        hit: tuple[PartitionSnapshot, SiteSnapshot] | None = cache[key]
        return hit
    view = _build_view(site, cls)
    cache[key] = view
    return view


def _build_view(
    site: SiteSnapshot, cls: NodeClass
) -> tuple[PartitionSnapshot, SiteSnapshot] | None:
    nodes: dict[str, NodeRecord] = {}
    for n in site.nodes:  # a node in two partitions appears twice: once is enough
        if n.name not in nodes and _matches(cls, n):
            nodes[n.name] = n
    if not nodes:
        return None
    parts = {n.partition for n in nodes.values()}
    jobs = [j for j in site.jobs if _competes(j, nodes, parts)]
    view_nodes = tuple(n.model_copy(update={"partition": cls.name}) for n in nodes.values())
    view_jobs = tuple(j.model_copy(update={"partition": cls.name}) for j in jobs)
    live = [p for p in site.partitions if p.partition in parts]
    state = "up" if not live or any(p.state == "up" for p in live) else live[0].state
    info = PartitionInfo(name=cls.name, state=state, max_time_s=cls.max_walltime_s)
    psnap = partition_snapshot(site.site, cls.name, list(view_nodes), list(view_jobs), info)
    restricted = site.model_copy(
        update={"partitions": (psnap,), "nodes": view_nodes, "jobs": view_jobs}
    )
    return psnap, restricted


def _competes(job: JobRecord, nodes: Collection[str], parts: Collection[str]) -> bool:
    """A job holding one of the class's nodes, or (where squeue gave no nodes: pending,
    held, or running without them) one that may go to one of their partitions."""
    if job.node_names:
        return any(n in nodes for n in job.node_names)
    return any(p in parts for p in job.partition.split(","))


def held_idle(cls: NodeClass, shape: Shape) -> float:
    """The share of each node a job of ``shape`` holds but leaves unused: 0 in a class whose
    jobs share nodes; in a whole-node class, what its CPUs, memory and GPUs leave of the node
    (a tie-break: a shared class for a partial node, where the wait is no longer)."""
    if not cls.whole_nodes:
        return 0.0
    used = [shape.cpus / cls.cpus_per_node, shape.mem_gb / cls.mem_gb_per_node]
    if cls.gpus_per_node:
        used.append(shape.gpus / cls.gpus_per_node)
    return max(0.0, 1.0 - min(1.0, max(used)))


def spare_gpu_mem_gb(cls: NodeClass, envelope: ResourceEnvelope) -> float:
    """GPU memory per GPU the class has beyond what ``envelope`` needs (a tie-break: the
    80 GB nodes kept for the tasks that need them, where the wait is no longer)."""
    if not envelope.gpus_min or cls.gpu_mem_gb is None:
        return 0.0
    return max(0.0, cls.gpu_mem_gb - (envelope.gpu_mem_gb_min or 0.0))
