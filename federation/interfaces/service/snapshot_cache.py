"""A recent federation snapshot for the service's operations, refreshed in the background.

Probing every site takes seconds; :class:`SnapshotCache` keeps the latest snapshot so that
``inspect`` and placement answer in milliseconds.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime

from federation.core.snapshot import FederationSnapshot
from federation.interfaces.service.errors import OpsError
from federation.runtime.coordinator import Coordinator

__all__ = ["SnapshotCache"]

logger = logging.getLogger(__name__)


class SnapshotCache:
    """The latest federation snapshot, refreshed every ``refresh_s`` by a background thread.

    ``get()`` answers at once with the cached snapshot once the first probe is in (it waits
    for that one). ``refresh()`` probes now. Placement reads the snapshot it is given, so a
    decision is made on data at most ``refresh_s`` plus one probe round old; its trace
    records ``snapshot_taken_at``.
    """

    def __init__(self, coord: Coordinator, refresh_s: float = 15.0, start: bool = True) -> None:
        self.coord = coord
        self.refresh_s = refresh_s
        self._snap: FederationSnapshot | None = None
        self._have = threading.Event()
        self._probe_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(
                target=self._loop, name="federation-snapshot", daemon=True
            )
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception:
                if self.coord.closing:
                    return  # its coordinator closed under a round: nothing to report
                logger.exception("background probe failed")
            if self._stop.wait(self.refresh_s):
                return

    def refresh(self) -> FederationSnapshot:
        with self._probe_lock:
            snap = self.coord.inspect_federation()
            self.put(snap)
            return snap

    def put(self, snap: FederationSnapshot) -> None:
        self._snap = snap
        self._have.set()

    def get(self, timeout_s: float | None = None) -> FederationSnapshot:
        snap = self._snap
        if snap is not None:
            return snap
        if self._thread is None:
            return self.refresh()
        wait = self.coord.probe_timeout_s + 10 if timeout_s is None else timeout_s
        if not self._have.wait(wait) or self._snap is None:
            raise OpsError(
                503,
                "no_snapshot",
                f"the first probe of the sites has not come back within {wait:.0f} s",
                "check the sites (`federation sites status`) and retry",
            )
        return self._snap

    def age_s(self) -> float | None:
        snap = self._snap
        if snap is None:
            return None
        return (datetime.now(UTC) - snap.taken_at).total_seconds()

    def close(self) -> None:
        self._stop.set()
