"""Where the local federation keeps its files, and which loopback ports it uses.

Everything lives under ``<home>/slurm``. Unix sockets go to ``<home>/slurm/run`` unless that
path is too long for ``sun_path`` (108 bytes), in which case a short folder under ``/tmp``
derived from the home path is used instead.
"""

from __future__ import annotations

import hashlib
import os
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path

PORT_BASE_ENV = "FEDERATION_SLURM_PORT_BASE"
DEFAULT_PORT_BASE = 17800
SITE_PORT_BLOCK = 40
"""Ports per site: the slurmctld port, then one port per emulated node."""

_MAX_SOCKET_PATH = 96


def _searchable(path: Path) -> bool:
    """True if every existing ancestor of ``path`` has the execute bit for others."""
    for parent in path.parents:
        try:
            if not parent.stat().st_mode & stat.S_IXOTH:
                return False
        except FileNotFoundError:
            continue
    return True


def default_home() -> Path:
    """``$FEDERATION_HOME`` or ``~/.federation``."""
    return Path(os.environ.get("FEDERATION_HOME", Path.home() / ".federation"))


@dataclass(frozen=True)
class Ports:
    """Loopback ports: mariadb and slurmdbd first, then one block per site."""

    base: int = DEFAULT_PORT_BASE

    @classmethod
    def from_env(cls) -> Ports:
        return cls(int(os.environ.get(PORT_BASE_ENV, DEFAULT_PORT_BASE)))

    @property
    def mariadb(self) -> int:
        return self.base

    @property
    def slurmdbd(self) -> int:
        return self.base + 1

    def slurmctld(self, site_index: int) -> int:
        return self.base + SITE_PORT_BLOCK * (site_index + 1)

    def slurmd(self, site_index: int, node_index: int) -> int:
        if not 0 <= node_index < SITE_PORT_BLOCK - 1:
            raise ValueError(f"at most {SITE_PORT_BLOCK - 1} emulated nodes per site")
        return self.slurmctld(site_index) + 1 + node_index


EXAMPLE_SITES = ("anvil", "delta", "deltaai", "local", "vista", "perlmutter")
"""The package's example sites, in the order they were added: their port blocks never move."""
OTHER_SITE_SLOTS = 48
"""Port blocks for any other site, after the examples' (chosen by a hash of its name)."""


def site_index(site: str) -> int:
    """A site's stable port block: the examples' fixed, any other by a hash of its name, so
    ports move neither with subsets nor when a site is added (two other sites whose names
    share a block are refused by :func:`check_port_blocks`)."""
    if site in EXAMPLE_SITES:
        return EXAMPLE_SITES.index(site)
    return len(EXAMPLE_SITES) + zlib.crc32(site.encode()) % OTHER_SITE_SLOTS


def check_port_blocks(sites: list[str]) -> None:
    """``ValueError`` naming two of ``sites`` that would share a port block."""
    seen: dict[int, str] = {}
    for s in sites:
        other = seen.setdefault(site_index(s), s)
        if other != s:
            raise ValueError(
                f"sites {other} and {s} would share local Slurm ports (block "
                f"{site_index(s)}); rename one of them for the local federation"
            )


@dataclass(frozen=True)
class Layout:
    """Paths of every runtime file, all below ``root`` (``<home>/slurm``)."""

    root: Path

    @classmethod
    def for_home(cls, home: Path) -> Layout:
        return cls(home.expanduser().resolve() / "slurm")

    @property
    def lock_file(self) -> Path:
        return self.root / "lock"

    @property
    def run_dir(self) -> Path:
        """Folder of the unix sockets (mode 755, as munged requires).

        ``<root>/run`` if its path is short and every existing ancestor is searchable by all
        (munged insists); else ``/tmp/fedslurm-<hash of root>``.
        """
        candidate = self.root / "run"
        if len(str(candidate / "mariadb.sock")) <= _MAX_SOCKET_PATH and _searchable(candidate):
            return candidate
        digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:12]
        return Path("/tmp") / f"fedslurm-{digest}"

    # munge
    @property
    def munge_dir(self) -> Path:
        return self.root / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.run_dir / "munge.sock"

    # mariadb
    @property
    def db_dir(self) -> Path:
        return self.root / "mariadb"

    @property
    def db_socket(self) -> Path:
        return self.run_dir / "mariadb.sock"

    # slurmdbd
    @property
    def dbd_dir(self) -> Path:
        return self.root / "slurmdbd"

    @property
    def dbd_conf(self) -> Path:
        return self.dbd_dir / "slurmdbd.conf"

    # one cluster per site
    def site_dir(self, site: str) -> Path:
        return self.root / "sites" / site

    def etc_dir(self, site: str) -> Path:
        return self.site_dir(site) / "etc"

    def slurm_conf(self, site: str) -> Path:
        return self.etc_dir(site) / "slurm.conf"

    def state_dir(self, site: str) -> Path:
        return self.site_dir(site) / "state"

    def spool_dir(self, site: str) -> Path:
        return self.site_dir(site) / "spool"

    def log_dir(self, site: str) -> Path:
        return self.site_dir(site) / "log"

    def pid_dir(self, site: str) -> Path:
        return self.site_dir(site) / "run"

    def dev_dir(self, site: str) -> Path:
        """Fake GPU device files (symlinks to /dev/null) referenced by gres.conf."""
        return self.site_dir(site) / "dev"

    def ctld_pid(self, site: str) -> Path:
        return self.pid_dir(site) / "slurmctld.pid"

    def ctld_log(self, site: str) -> Path:
        return self.log_dir(site) / "slurmctld.log"

    def slurmd_pid(self, site: str, node: str) -> Path:
        return self.pid_dir(site) / f"slurmd-{node}.pid"

    def slurmd_log(self, site: str, node: str) -> Path:
        return self.log_dir(site) / f"slurmd-{node}.log"
