"""What ``LocalFederation.status()`` reports."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from federation.core.model import Frozen


class DaemonStatus(Frozen):
    """One shared daemon (munged, mariadbd, slurmdbd) or one cluster's slurmctld."""

    name: str
    running: bool
    pid: int | None = None
    log_file: Path


class SiteStatus(Frozen):
    """One site's cluster as its controller sees it."""

    site: str
    controller_up: bool
    nodes_total: int = Field(ge=0)
    nodes_by_state: dict[str, int] = Field(default_factory=dict)
    slurm_conf: Path
    error: str | None = None

    @property
    def ready(self) -> bool:
        """Controller up and every node idle, mixed or allocated."""
        busy = {"idle", "mixed", "allocated", "completing"}
        return (
            self.controller_up
            and self.error is None
            and sum(v for k, v in self.nodes_by_state.items() if k in busy) == self.nodes_total
        )
