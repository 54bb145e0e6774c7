"""Where each site's storage lives: the directory a site's Transfer collection maps to.

On a real deployment a site's storage is a Globus collection (configured per site). On the
local federation every site gets a directory, ``<home>/storage/<site>``, that plays that
part: ``move_data`` copies between them, and results too large to return inline are
written there.
"""

from __future__ import annotations

import os
from pathlib import Path


def storage_home() -> Path:
    """``$FEDERATION_HOME/storage`` (default ``~/.federation/storage``)."""
    home = Path(os.environ.get("FEDERATION_HOME", Path.home() / ".federation"))
    return home / "storage"


def site_storage(site: str, home: Path | None = None) -> Path:
    """The local stand-in for ``site``'s collection root (created on first use).

    ``home`` is a federation home (the folder holding ``slurm/`` and ``coordinator.db``).
    """
    if not site or "/" in site or site.startswith("."):
        raise ValueError(f"not a site name: {site!r}")
    root = (home / "storage" if home is not None else storage_home()) / site
    root.mkdir(parents=True, exist_ok=True)
    return root
