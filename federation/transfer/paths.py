"""Keep transfer paths inside a site's storage root: refuse ``..`` and foreign absolutes."""

from __future__ import annotations

import posixpath

from federation.core.errors import TransferPathError


def under_root(root: str, path: str, site: str) -> str:
    """``path`` (relative to ``root``, or absolute inside it) as a normalized absolute path.

    Raises :class:`TransferPathError` when the path has a ``..`` component, would leave
    ``root``, or names the root itself; nothing has been read or written when it does.
    """
    root = "/" if root == "/" else posixpath.normpath(root)
    if "\x00" in path:
        raise TransferPathError(f"path {path!r} on {site} contains a NUL byte")
    if ".." in path.split("/"):
        raise TransferPathError(
            f"path {path!r} on {site} has a '..' component; give a path inside the site's "
            f"storage root {root} without '..'"
        )
    norm = posixpath.normpath(path if posixpath.isabs(path) else posixpath.join(root, path))
    if norm != root and not norm.startswith(root.rstrip("/") + "/"):
        raise TransferPathError(
            f"path {path!r} on {site} is outside the site's storage root {root}; "
            "give a path relative to that root"
        )
    if norm == root:
        raise TransferPathError(
            f"path {path!r} on {site} is the storage root itself; name a file or folder in it"
        )
    return norm
