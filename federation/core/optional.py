"""Optional dependencies, loaded when first needed, with an error that says what to install.

The coordinator installs without the extras; pandas and matplotlib (``[jupyter]``, tables
and figures), the endpoint (``[endpoint]``) and the HTTP service (``[service]``) come with
their extras (``pip install 'federation[jupyter]'``).
"""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtraError(ImportError):
    """An optional dependency is not installed; names the extra that brings it."""


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``, or raise :class:`MissingExtraError` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtraError(
            f"{module} is not installed; it comes with the [{extra}] extra: "
            f"pip install 'federation[{extra}]'"
        ) from e
