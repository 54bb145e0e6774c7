"""Snapshots kept over time (SQLite), for prediction and plots."""

from __future__ import annotations

import sqlite3
import threading
from datetime import datetime
from pathlib import Path

import pandas as pd

from federation.core.snapshot import FederationSnapshot, SiteSnapshot


class Telemetry:
    """Append-only store of site snapshots; ``frame()`` gives partition rows over time."""

    def __init__(self, path: Path | str = ":memory:") -> None:
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS site_snapshots (site TEXT NOT NULL, taken_at TEXT NOT NULL,"
            " reachable INTEGER NOT NULL, body TEXT NOT NULL)"
        )
        self._db.execute(
            "CREATE INDEX IF NOT EXISTS snap_site_time ON site_snapshots(site, taken_at)"
        )
        self._lock = threading.Lock()

    def record(self, snapshot: FederationSnapshot) -> None:
        rows = [
            (s.site, s.taken_at.isoformat(), int(s.health.reachable), s.model_dump_json())
            for s in snapshot.sites
        ]
        with self._lock, self._db:
            self._db.executemany("INSERT INTO site_snapshots VALUES (?, ?, ?, ?)", rows)

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
        snaps = self.sites(site, since)
        if not snaps:
            return pd.DataFrame()
        frames = [
            FederationSnapshot(taken_at=s.taken_at, sites=(s,)).partitions_frame() for s in snaps
        ]
        return pd.concat(frames, ignore_index=True)

    def close(self) -> None:
        self._db.close()
