"""The project's sites as real Slurm clusters on this machine (``federation sites up``)."""

from federation.localslurm.errors import (
    DaemonStartError,
    LocalSlurmError,
    MissingBinaryError,
    SlurmCommandError,
)
from federation.localslurm.federation import LocalFederation
from federation.localslurm.status import DaemonStatus, SiteStatus

__all__ = [
    "DaemonStartError",
    "DaemonStatus",
    "LocalFederation",
    "LocalSlurmError",
    "MissingBinaryError",
    "SiteStatus",
    "SlurmCommandError",
]
