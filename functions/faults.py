"""Functions that misbehave on purpose, for fault-injection tests and demonstrations.

They live here (not in the tests) because functions are shipped by reference when they
come from an importable module, exactly as Globus Compute does: the endpoint's workers must
be able to import them.
"""

from __future__ import annotations

from typing import Any


def garbage_probe() -> dict[str, Any]:
    """A 'probe' whose output no parser can read."""
    return {"sinfo": {"rc": 0, "stdout": "\x00\x01 not sinfo at all", "stderr": ""}}


def slow_probe(delay_s: float = 12.0) -> dict[str, Any]:
    """A 'probe' that hangs longer than any sensible probe timeout."""
    import time

    time.sleep(delay_s)
    return {}
