"""What ``federation doctor`` asks a site's worker: its Python and what it can import.

Like every function here it imports what it needs inside its body and refers to no module
global: it is shipped by source, to workers that have nothing of this repository.
"""

from __future__ import annotations


def worker_facts() -> dict[str, object]:
    """The worker's Python, Globus Compute SDK, host and folder, and whether this
    repository's packages can be imported there (they should not need to be)."""
    import importlib.util
    import os
    import platform
    import socket
    import sys

    try:
        from globus_compute_sdk import __version__ as sdk_version
    except Exception:
        sdk_version = None
    return {
        "python": platform.python_version(),
        "executable": sys.executable,
        "sdk": sdk_version,
        "hostname": socket.gethostname(),
        "cwd": os.getcwd(),
        "importable": {
            name: importlib.util.find_spec(name) is not None for name in ("functions", "federation")
        },
    }
