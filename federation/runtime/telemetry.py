"""Snapshots kept over time (SQLite), for prediction and plots."""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from federation.core.optional import require
from federation.core.snapshot import FederationSnapshot, SiteSnapshot
from federation.core.sqlite import Migration, connect, migrate

if TYPE_CHECKING:
    import pandas as pd


MIGRATIONS: tuple[Migration, ...] = (
    "CREATE TABLE IF NOT EXISTS site_snapshots (site TEXT NOT NULL, taken_at TEXT NOT NULL,"
    " reachable INTEGER NOT NULL, body TEXT NOT NULL);\n"
    "CREATE INDEX IF NOT EXISTS snap_site_time ON site_snapshots(site, taken_at);",
    # a block's start-up measured at a site (federation.runtime.warmth)
    "CREATE TABLE IF NOT EXISTS cold_starts (site TEXT NOT NULL, at TEXT NOT NULL,"
    " seconds REAL NOT NULL);\n"
    "CREATE INDEX IF NOT EXISTS cold_site_time ON cold_starts(site, at);",
)
"""The telemetry store's schema, version by version (``PRAGMA user_version``)."""


class Telemetry:
    """Append-only store of site snapshots; ``frame()`` gives partition rows over time."""

    def __init__(self, path: Path | str = ":memory:") -> None:
        self._db = connect(path)
        migrate(self._db, MIGRATIONS, name=f"the telemetry store {path}")
        self._lock = threading.Lock()
        self._closed = False

    def record(self, snapshot: FederationSnapshot) -> None:
        """Keep ``snapshot``; after :meth:`close`, nothing (a probe that was still out when
        its coordinator closed comes back to a store that is gone)."""
        rows = [
            (s.site, s.taken_at.isoformat(), int(s.health.reachable), s.model_dump_json())
            for s in snapshot.sites
        ]
        with self._lock:
            if self._closed:
                return
            self._db.execute("BEGIN")
            try:
                self._db.executemany("INSERT INTO site_snapshots VALUES (?, ?, ?, ?)", rows)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def record_cold_start(self, site: str, seconds: float, at: datetime) -> None:
        """A block's start-up measured at ``site`` (:mod:`federation.runtime.warmth`);
        nothing after :meth:`close`."""
        with self._lock:
            if self._closed:
                return
            self._db.execute(
                "INSERT INTO cold_starts VALUES (?, ?, ?)", (site, at.isoformat(), seconds)
            )

    def cold_starts(self, keep: int, since: datetime) -> dict[str, list[float]]:
        """Each site's latest ``keep`` cold starts measured since ``since``, oldest first."""
        q = (
            "SELECT site, seconds FROM (SELECT site, at, seconds, ROW_NUMBER() OVER"
            " (PARTITION BY site ORDER BY at DESC) AS n FROM cold_starts WHERE at >= ?)"
            " WHERE n <= ? ORDER BY site, at"
        )
        out: dict[str, list[float]] = {}
        with self._lock:
            for site, seconds in self._db.execute(q, (since.isoformat(), keep)):
                out.setdefault(site, []).append(float(seconds))
        return out

    def sites(self, site: str | None = None, since: datetime | None = None) -> list[SiteSnapshot]:
        q = "SELECT body FROM site_snapshots WHERE 1=1"
        args: list[str] = []
        if site:
            q, args = q + " AND site=?", [*args, site]
        if since:
            q, args = q + " AND taken_at>=?", [*args, since.isoformat()]
        with self._lock:
            bodies = [r[0] for r in self._db.execute(q + " ORDER BY taken_at", args)]
        return [SiteSnapshot.model_validate_json(b) for b in bodies]

    def frame(self, site: str | None = None, since: datetime | None = None) -> pd.DataFrame:
        """Partition rows of every recorded snapshot (columns as ``partitions_frame``)."""
        require("pandas", "jupyter")  # says which extra to install
        import pandas as pd

        snaps = self.sites(site, since)
        if not snaps:
            return pd.DataFrame()
        frames = [
            FederationSnapshot(taken_at=s.taken_at, sites=(s,)).partitions_frame() for s in snaps
        ]
        return pd.concat(frames, ignore_index=True)

    def close(self) -> None:
        """Close the store, under its lock: SQLite closed while another thread writes
        through the same connection crashed the process (a segmentation fault, seen when a
        background probe came back as its coordinator closed)."""
        with self._lock:
            self._closed = True
            self._db.close()
