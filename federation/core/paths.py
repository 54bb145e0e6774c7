"""Where the federation keeps its state on this machine."""

from __future__ import annotations

import os
from pathlib import Path


def federation_home() -> Path:
    """``$FEDERATION_HOME``, else ``~/.federation`` (state, tokens, audit, local sites)."""
    return Path(os.environ.get("FEDERATION_HOME", Path.home() / ".federation"))
