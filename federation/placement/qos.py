"""A class's limits as its QOS holds them now, over what the site's facts describe.

A class (:class:`~federation.core.spec.NodeClass`) names a QOS (its own, else the site's);
the probe reads every QOS's limits from slurmdbd (``sacctmgr show qos``:
:attr:`~federation.core.snapshot.SiteSnapshot.qos_limits`). Where the live QOS has a limit,
it holds, whatever ``site.yaml`` says, and the decision trace says where they differ:

- ``MaxWall`` is the class's walltime limit, at most the live ``MaxTime`` of the partition
  its jobs run in (the class's, or the site's default partition when it names none), unless
  the QOS has ``PartitionTimeLimit`` (then its own limit overrides the partition's). A QOS
  without ``MaxWall`` leaves the class's described walltime: that may be the partition's.
- ``MaxJobsPU`` and ``MaxSubmitPU`` are the class's per-user job limits (which size the
  blocks of a shape, :mod:`~federation.placement.coldstart`); 0 refuses the class.

Where the QOS is not known (no ``sacctmgr`` answer, or no QOS of that name: NERSC maps
``-q regular`` to ``regular_1`` or ``gpu_regular`` at submission), the class is as described.
"""

from __future__ import annotations

from typing import NamedTuple

from federation.core.snapshot import QosLimits, SiteSnapshot
from federation.core.spec import NodeClass, SiteSpec

LIVE = "live sacctmgr"


class LiveClass(NamedTuple):
    """A class with the live limits of its QOS applied."""

    cls: NodeClass
    qos: QosLimits | None = None
    note: str = ""
    """Where the live limits differ from ``site.yaml`` (empty where they agree)."""
    wall_why: str = ""
    """What sets the walltime limit: ``QOS debug allows 1800 s (live sacctmgr)``."""
    described_wall_s: int | None = None
    """The walltime limit ``site.yaml`` gives, where the live one differs."""
    refusal: str | None = None
    """Why the class takes no job at all now (a per-user job limit of 0)."""

    def wall_reason(self, asked_s: int) -> str | None:
        """Why a job of ``asked_s`` seconds is over the live walltime limit (None: the
        limit is the described one, and so is the reason)."""
        if not self.wall_why or asked_s <= self.cls.max_walltime_s:
            return None
        said = self.described_wall_s
        return f"{self.wall_why}; asked {asked_s} s" + (
            f" (site.yaml says {said} s)" if said is not None else ""
        )


def _partition_limit(cls: NodeClass, site: SiteSnapshot) -> tuple[str, int] | None:
    """The live time limit of the partition the class's jobs run in: its own, or the site's
    default partition when it names none (None: not known, or unlimited)."""
    if cls.partition is not None:
        part = site.partition(cls.partition)
    else:
        part = next((p for p in site.partitions if p.default), None)
    if part is None or part.max_time_s is None:
        return None
    return part.partition, part.max_time_s


def live_class(spec: SiteSpec, cls: NodeClass, site: SiteSnapshot | None) -> LiveClass:
    """``cls`` with the live limits of its QOS (as described where they are not known)."""
    name = cls.qos or spec.qos
    live = site.qos(name) if site is not None and name else None
    if live is None or site is None:
        return LiveClass(cls)
    update: dict[str, int] = {}
    notes: list[str] = []
    wall_why = ""
    described_wall: int | None = None
    if live.max_wall_s is not None:
        wall = live.max_wall_s
        wall_why = f"QOS {live.name} allows {wall} s ({LIVE})"
        cap = None if "PartitionTimeLimit" in live.flags else _partition_limit(cls, site)
        if cap is not None and cap[1] < wall:
            wall = cap[1]
            wall_why = (
                f"partition {cap[0]} allows {wall} s (live scontrol; QOS {live.name} "
                f"{live.max_wall_s} s)"
            )
        if wall != cls.max_walltime_s:
            update["max_walltime_s"] = wall
            described_wall = cls.max_walltime_s
            notes.append(f"walltime {wall} s where site.yaml says {cls.max_walltime_s} s")
    refusal = None
    for key, value, what in (
        ("max_running_jobs_per_user", live.max_jobs_per_user, "running"),
        ("max_submitted_jobs_per_user", live.max_submit_per_user, "submitted"),
    ):
        if value == 0:
            never = "sbatch refuses them" if what == "submitted" else "they never start"
            refusal = f"QOS {live.name} allows no {what} jobs per user ({LIVE}): {never}"
        elif value is not None and value != getattr(cls, key):
            update[key] = value
            said = getattr(cls, key)
            notes.append(f"{value} {what} jobs per user where site.yaml says {said or 'none'}")
    note = f"QOS {live.name} ({LIVE}): {'; '.join(notes)}: the live limits hold" if notes else ""
    return LiveClass(
        cls=cls.model_copy(update=update) if update else cls,
        qos=live,
        note=note,
        wall_why=wall_why,
        described_wall_s=described_wall,
        refusal=refusal,
    )
