"""Locate the system programs the local federation runs (Debian puts daemons in /usr/sbin)."""

from __future__ import annotations

import shutil
from functools import cache
from pathlib import Path

from federation.localslurm.errors import MissingBinaryError

_SBIN = ("/usr/sbin", "/sbin", "/usr/local/sbin")

PACKAGES: dict[str, str] = {
    "munged": "munge",
    "slurmctld": "slurm-wlm",
    "slurmd": "slurm-wlm",
    "slurmdbd": "slurmdbd",
    "mariadbd": "mariadb-server",
    "mariadb-install-db": "mariadb-server",
    "scontrol": "slurm-client",
    "sinfo": "slurm-client",
    "squeue": "slurm-client",
    "sbatch": "slurm-client",
    "scancel": "slurm-client",
    "sacct": "slurm-client",
    "sacctmgr": "slurm-client",
}
_ALIASES = {"mariadbd": ("mysqld",), "mariadb-install-db": ("mysql_install_db",)}


@cache
def which(program: str) -> str:
    """Absolute path of ``program``; :class:`MissingBinaryError` says how to install it."""
    for name in (program, *_ALIASES.get(program, ())):
        found = shutil.which(name) or next(
            (str(Path(d, name)) for d in _SBIN if Path(d, name).is_file()), None
        )
        if found:
            return found
    raise MissingBinaryError(program, PACKAGES.get(program, "slurm-client"))


def program(name: str) -> str:
    """Like :func:`which`, but falls back to the bare name (for status and stop, which only
    read pid files; ``up`` checks for missing programs first)."""
    try:
        return which(name)
    except MissingBinaryError:
        return name


def missing() -> list[str]:
    """Programs of :data:`PACKAGES` that are not installed."""
    out = []
    for program in PACKAGES:
        try:
            which(program)
        except MissingBinaryError:
            out.append(program)
    return out
