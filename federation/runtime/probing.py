"""Probing the sites: every site's probe in parallel, each turned into a site snapshot (a
site whose probe fails, times out or is unreadable is marked unreachable, never fatal)."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any

from federation.core.errors import ProbeError
from federation.core.snapshot import SiteSnapshot
from federation.parsing.snapshot_builder import build_site_snapshot, unreachable_snapshot
from federation.runtime.errortext import first_line

if TYPE_CHECKING:
    from collections.abc import Mapping

    from federation.core.spec import SiteSpec
    from federation.sites.backend import SiteBackend

logger = logging.getLogger(__name__)


def probe_sites(backends: Mapping[str, SiteBackend], timeout_s: float) -> list[SiteSnapshot]:
    """Probe every site in parallel, within ``timeout_s`` in all."""
    started = time.monotonic()
    futures: dict[str, Future[dict[str, Any]] | Exception] = {}
    for name, backend in backends.items():
        try:
            futures[name] = backend.probe()
        except Exception as e:  # submitting the probe itself failed
            futures[name] = e
    return [
        site_snapshot(name, fut, started, timeout_s, getattr(backends[name], "spec", None))
        for name, fut in futures.items()
    ]


def site_snapshot(
    name: str,
    fut: Future[dict[str, Any]] | Exception,
    started: float,
    timeout_s: float,
    spec: SiteSpec | None = None,
) -> SiteSnapshot:
    """``fut``'s probe result as ``name``'s snapshot (``spec``: the site's facts, for its
    allocations' units), or an unreachable one saying why there is none."""
    if isinstance(fut, Exception):
        return unreachable_snapshot(name, f"probe could not be sent: {fut}")
    remaining = max(0.1, timeout_s - (time.monotonic() - started))
    try:
        raw = fut.result(timeout=remaining)
    except FutureTimeout:
        fut.cancel()
        return unreachable_snapshot(
            name,
            f"probe timed out after {timeout_s:.0f} s; "
            "check the site's endpoint (`federation sites status`)",
        )
    except Exception as e:
        return unreachable_snapshot(name, f"probe failed: {first_line(e)}")
    try:
        return build_site_snapshot(name, raw, spec=spec)
    except ProbeError as e:
        return unreachable_snapshot(name, f"probe output unreadable: {e}")
    except Exception as e:
        logger.exception("snapshot of %s failed", name)
        return unreachable_snapshot(name, f"probe output unreadable: {type(e).__name__}: {e}")
