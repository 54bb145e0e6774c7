"""The public API: every exported name imports, and nothing private leaks into __all__."""

from __future__ import annotations

import federation


def test_every_exported_name_imports() -> None:
    missing = [n for n in federation.__all__ if not hasattr(federation, n)]
    assert missing == []
    assert sorted(federation.__all__) == federation.__all__
    assert all(not n.startswith("_") for n in federation.__all__)


def test_errors_share_one_root() -> None:
    for name in federation.__all__:
        obj = getattr(federation, name)
        if isinstance(obj, type) and name.endswith("Error"):
            assert issubclass(obj, federation.FederationError), name
