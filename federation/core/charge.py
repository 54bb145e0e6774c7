"""Credit in each site's own units: what a shape costs, and which unit an account counts in.

A site bills each partition in its own unit (:attr:`PartitionSpec.charge_unit`: core-hours,
GPU-hours or node-hours, at ``charge_su_per_unit`` service units each) and charges it to
one account (:meth:`SiteSpec.account_for`). An account's allocation therefore counts in
the unit of the partitions charged to it: Delta's ``-cpu`` account in core-hours, its
``-gpu`` account in GPU-hours, Vista's one project in node-hours. When the partitions of
one account bill in different units (the ``local`` development site), the account counts
plain service units (:data:`MIXED_UNIT`).

Slurm's ``sshare`` reports an association's usage (``RawUsage``) in billing-TRES-seconds
and its ``GrpTRESMins`` limits in minutes. Read in a site's unit, this assumes the site's
``TRESBillingWeights`` make one billing unit one service unit of its charge unit, as the
ACCESS sites set them (Delta: 1 per core or per GPU; Vista: per node at the queue's rate).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from federation.core.envelope import Shape
from federation.core.spec import PartitionSpec, SiteSpec

AllocationUnit = Literal["core-hours", "gpu-hours", "node-hours", "SUs"]
"""What an allocation counts: one charge unit, or service units when its partitions mix."""
MIXED_UNIT: AllocationUnit = "SUs"


def common_unit(partitions: Iterable[PartitionSpec]) -> AllocationUnit | None:
    """The charge unit every one of ``partitions`` bills in; :data:`MIXED_UNIT` when they
    differ; None when there are none."""
    units = {p.charge_unit for p in partitions}
    if not units:
        return None
    return units.pop() if len(units) == 1 else MIXED_UNIT


def charged_partitions(
    site: SiteSpec, default_account: str | None = None
) -> dict[str, tuple[PartitionSpec, ...]]:
    """The site's partitions by the account they are charged to (a partition without an
    account of its own: ``default_account``, default the site's), the default first."""
    default = default_account or site.default_account
    out: dict[str, list[PartitionSpec]] = {default: []}
    for p in site.partitions:
        out.setdefault(p.account or default, []).append(p)
    return {a: tuple(ps) for a, ps in out.items()}


def shape_charge(part: PartitionSpec, shape: Shape) -> float:
    """Service units ``shape`` costs on ``part`` for its whole walltime, in the partition's
    own unit (:meth:`PartitionSpec.charge`: its minimum charge and SU rate included)."""
    return part.charge(
        nodes=shape.nodes,
        cpus=shape.cpus,
        gpus=shape.gpus,
        hours=shape.walltime_s / 3600.0,
        mem_gb=float(shape.mem_gb),
    )


def units_agree(charge_unit: str, allocation_unit: str | None) -> bool:
    """Whether a charge in ``charge_unit`` can be taken from an allocation counting
    ``allocation_unit`` (None: not known, taken as the site's billing units)."""
    return allocation_unit in (None, MIXED_UNIT, charge_unit)


def unit_label(unit: str | None) -> str:
    """``gpu-hours`` -> ``GPU-hours`` (for messages); None -> ``units``."""
    if unit is None:
        return "units"
    return unit.replace("gpu-", "GPU-")
