"""Task values as JSON: the one rule shared by the durable store and the wire models.

A value is sent (or stored) as itself when it is plain JSON (no NaN or infinity), and as a
bounded ``repr`` otherwise: nothing is pickled on its way out of the coordinator.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import JsonValue

MAX_VALUE_REPR = 10_000
"""A non-JSON value's ``repr`` is cut to this many characters."""


def json_value(value: Any) -> tuple[JsonValue, bool, str | None]:
    """``(value, True, None)`` if ``value`` is plain JSON, else ``(None, False, repr)``."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, OverflowError, RecursionError):
        text = repr(value)
        if len(text) > MAX_VALUE_REPR:
            text = text[:MAX_VALUE_REPR] + "...(truncated)"
        return None, False, text
    return value, True, None
