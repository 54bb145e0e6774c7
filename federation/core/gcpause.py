"""One helper for loaders that build many small acyclic objects at once (parsers, traces)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while building many acyclic records (it would rescan them all
    several times over; reference counting frees them as usual)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
