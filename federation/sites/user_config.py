"""Shape -> ``user_endpoint_config``: the variables one shaped task's config carries.

Tasks of one shape share one config (nothing per task goes into it): on a multi-user
endpoint each distinct config is a user endpoint process of its own.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import Field

from federation.core.envelope import format_walltime
from federation.core.model import Frozen
from federation.core.spec import SiteSpec


class UserEndpointShape(Frozen):
    """One ``task``-profile user_endpoint_config; site bounds are the schema's job."""

    partition: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    nodes: int = Field(ge=1)
    cpus: int = Field(ge=1, description="CPUs per node (--cpus-per-task, one task per node)")
    mem_gb: int = Field(ge=1, description="memory per node, GB")
    gpus: int = Field(ge=0, description="GPUs per node")
    walltime_s: int = Field(gt=0)
    account: str | None = None
    worker_init: str | None = None
    job_tag: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,40}$")

    def to_user_config(self) -> dict[str, Any]:
        uec: dict[str, Any] = {
            "profile": "task",
            "partition": self.partition,
            "nodes": self.nodes,
            "cpus": self.cpus,
            "mem_gb": self.mem_gb,
            "gpus": self.gpus,
            "walltime": walltime_hms(self.walltime_s),
        }
        if self.account is not None:
            uec["account"] = self.account
        if self.worker_init:
            uec["worker_init"] = self.worker_init
        if self.job_tag is not None:
            uec["job_tag"] = self.job_tag
        return uec


def walltime_hms(seconds: float) -> str:
    """Seconds -> Slurm ``"HH:MM:SS"`` (rounded up to whole seconds; hours may pass 24)."""
    return format_walltime(math.ceil(seconds))


def shape_to_user_config(
    partition: str,
    nodes: int,
    cpus: int,
    mem_gb: int,
    gpus: int,
    walltime_s: float,
    account: str | None = None,
    worker_init: str | None = None,
    *,
    site: SiteSpec | None = None,
    job_tag: str | None = None,
) -> dict[str, Any]:
    """The ``user_endpoint_config`` for one shaped task (``profile: task``).

    With no ``account`` and a ``site``, the partition's own account is named
    (:meth:`SiteSpec.account_for`: Delta's GPU partitions charge ``<proj>-delta-gpu``);
    with neither, the site's template picks the same account.
    """
    if account is None and site is not None:
        account = site.account_for(partition)
    return UserEndpointShape(
        partition=partition,
        nodes=nodes,
        cpus=cpus,
        mem_gb=mem_gb,
        gpus=gpus,
        walltime_s=math.ceil(walltime_s),
        account=account,
        worker_init=worker_init,
        job_tag=job_tag,
    ).to_user_config()
