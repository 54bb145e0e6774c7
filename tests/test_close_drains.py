"""Closing a durable coordinator mid-fan-out, with hedged copies in flight.

It stops its listeners and watchers before its store: nothing it owned writes or logs
afterwards (before, its start listeners logged ``sqlite3.ProgrammingError: Cannot operate on
a closed database``), a result that arrives while it closes is recorded rather than
dropped (the service releases a result once delivered), and the next coordinator on the
same store finishes every task with its own output. The closing coordinator runs in a
process of its own (``tests/helpers/close_child.py``), as a restarted service would; it
stays alive, with its sites' services up, until the next one has every result.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from federation.deploy.local import LocalSites

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[1]


def _fresh_db(home: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(str(home / "coordinator.db") + suffix).unlink(missing_ok=True)


@pytest.mark.paths("cloud")
@pytest.mark.parametrize("path", ["embedded", "cloud"])
def test_close_mid_fan_out_with_hedged_copies(local_federation: Any, path: str) -> None:
    """On the cloud path (what a real deployment has, and where a result the service
    delivered is released, so one dropped while closing is lost for good). What closing
    drains (listeners, acknowledgements, start reports, results recorded) is the
    coordinator's, the same on either path; how each path delivers a result and a start is
    checked on both by ``test_federation_slurm.py`` and ``test_backends.py``."""
    home = local_federation.home
    LocalSites(home=home).up()
    _fresh_db(home)
    script = ROOT / "tests" / "helpers" / "close_child.py"
    child = subprocess.Popen(
        [sys.executable, str(script), str(home), "8", "local,delta"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "FEDERATION_PATH": path},
    )
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    try:
        line = child.stdout.readline()
        assert line.startswith("SUBMITTED "), line + child.stderr.read()
        hedged, *ids = line.split()[1:]
        assert int(hedged) > 0, "no copies on two idle sites: nothing in flight to close under"
        assert child.stdout.readline().strip() == "CLOSED"
        local = LocalSites(home=home, path=path)
        again = local.connect(durable=True, telemetry=False)
        try:
            # every task ends here, so every start and end the sites reported for the
            # closed coordinator's copies has been delivered by now
            results = [again.get_result(tid, timeout_s=600) for tid in ids]
        finally:
            again.close()
            if local.service is not None:
                local.service.close()
        for i, r in enumerate(results):
            assert r.status == "completed", (path, r.task_id, r.error)
            assert (r.stdout or "").strip() == f"out-{i}", (path, r.stdout)
        child.stdin.write("done\n")
        child.stdin.flush()
        child.wait(60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    err = child.stderr.read()
    after_close = err.split("CLOSED\n", 1)[1] if "CLOSED\n" in err else err
    logged = [ln for ln in after_close.splitlines() if ln.startswith("LOG ")]
    assert logged == [], after_close  # not even a site connection closed by close()
    assert "closed database" not in err, err
