"""How fresh a snapshot ``submit_task`` places on, without a probe round on the caller's path.

A probe round ships one function to every site and waits for all of them: seconds at best,
and ten more when the SDK's client-side limit (4 requests per 16 s per executor) holds the
round back. :class:`Freshness` answers with the latest snapshot while it is at most
``max_stale_s`` old and, once it is older than the coordinator's ``probe_interval_s`` (and
:data:`REFRESH_BEHIND_S`), starts one round in the background (never two at once), whose
snapshot the next submission uses.
The coordinator's own placements since the snapshot are laid over it either way
(:mod:`federation.placement.overlay`), so a burst sees itself. Only a snapshot older than
``max_stale_s``, or none (the first submission), is probed on the caller's path.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from federation.core.snapshot import FederationSnapshot

if TYPE_CHECKING:
    from federation.runtime.coordinator import Coordinator

logger = logging.getLogger(__name__)

DEFAULT_MAX_STALE_S = 30.0
"""How old a snapshot ``submit_task`` still places on while a fresh one is probed (the
service's own snapshot cache refreshes every 15 s)."""

REFRESH_BEHIND_S = 5.0
"""A snapshot younger than this starts no round behind a submission: a burst would keep one
running all the time, and each round is one request per site, counted against the same
client request limit as the burst's own submissions."""


class Freshness:
    """The snapshot to place on now, refreshed behind the callers."""

    def __init__(self, coord: Coordinator, max_stale_s: float = DEFAULT_MAX_STALE_S) -> None:
        self.coord = coord
        self.max_stale_s = max_stale_s
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.background_rounds = 0
        """Probe rounds started behind a submission (for tests and benchmarks)."""

    def current(self, sites: Iterable[str] = ()) -> FederationSnapshot:
        """The latest snapshot of ``sites`` (default: all) if at most ``max_stale_s`` old
        (a fresh round starts behind it once it is older than the probe interval), else one
        probed now."""
        coord = self.coord
        want = [n for n in sites if n in coord.backends] or list(coord.backends)
        last = coord._last_snapshot
        if last is None:  # the round started at connect, if any, is nearer than a new one
            self.close(coord.probe_timeout_s)
            last = coord._last_snapshot
        if last is not None:
            taken = [x.taken_at for x in last.sites if x.site in want]
            if len(taken) == len(want):
                age_s = (datetime.now(UTC) - min(taken)).total_seconds()
                if age_s <= self.max_stale_s:
                    if age_s > max(coord.probe_interval_s, REFRESH_BEHIND_S):
                        self._refresh_behind(want)
                    return last
        return coord.snapshot(sites=want)

    def start(self) -> None:
        """Probe every site in the background now (at connect: the first submission then
        waits for this round, if at all, rather than start one)."""
        self._refresh_behind(list(self.coord.backends))

    def _refresh_behind(self, want: list[str]) -> None:
        with self._lock:
            if self.coord.closing or (self._thread is not None and self._thread.is_alive()):
                return
            self.background_rounds += 1
            self._thread = threading.Thread(
                target=self._round, args=(want,), name="probe-behind", daemon=True
            )
            self._thread.start()

    def _round(self, want: list[str]) -> None:
        try:
            self.coord.snapshot(sites=want)
        except Exception as e:  # the next submission probes itself if this one is stale
            if not self.coord.closing:
                logger.warning("a background probe round failed: %s", e)

    def close(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for a round in flight (closing: it writes telemetry
        and the learned predictors, which close after this)."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
