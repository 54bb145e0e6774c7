"""A telemetry store closed while a background probe still records into it.

Closing the SQLite connection while another thread wrote through it crashed a whole pytest
worker (a segmentation fault in ``Telemetry.record``, from the service's snapshot thread as
its coordinator closed). Closing now takes the store's lock, and what comes back after
close is dropped.
"""

from __future__ import annotations

import threading
from pathlib import Path

from inprocess import idle_snapshot

from federation.core.spec import load_sites
from federation.runtime.telemetry import Telemetry


def test_records_racing_a_close_are_dropped_not_crashing(tmp_path: Path) -> None:
    snap = idle_snapshot(load_sites())
    tel = Telemetry(tmp_path / "telemetry.db")
    tel.record(snap)
    assert len(tel.sites()) == len(snap.sites)
    stop = threading.Event()
    errors: list[BaseException] = []

    def probe() -> None:  # the service's snapshot thread, recording as fast as it can
        while not stop.is_set():
            try:
                tel.record(snap)
            except BaseException as e:  # any error is the finding
                errors.append(e)
                return

    threads = [threading.Thread(target=probe) for _ in range(3)]
    for t in threads:
        t.start()
    tel.close()
    stop.set()
    for t in threads:
        t.join(10)
    assert errors == []
    tel.record(snap)  # after close: nothing, and no error
    tel.record_cold_start("local", 3.0, snap.taken_at)
    again = Telemetry(tmp_path / "telemetry.db")
    try:
        assert len(again.sites()) % len(snap.sites) == 0  # whole snapshots only
    finally:
        again.close()
