"""Start, stop and report the per-site endpoint daemons of the local federation."""

from __future__ import annotations

import hashlib
import logging
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from federation.core.errors import SiteUnavailableError
from federation.endpoint.connection import ask
from federation.endpoint.worker_env import worker_init, worker_venv

logger = logging.getLogger(__name__)

LOCAL_LIFETIMES = {
    "FEDERATION_EP_HEARTBEAT_S": "5",
    "FEDERATION_IDLE_HEARTBEATS_SOFT": "24",
    "FEDERATION_IDLE_HEARTBEATS_HARD": "25",
}
"""Site-admin settings of the local endpoints (unless the environment sets them)."""

LOCAL_NAMESPACE = uuid.UUID("6f1c0c3e-3b9a-4b7e-9a55-0f6c2d2f9e10")


def local_endpoint_id(site: str) -> uuid.UUID:
    """Stable endpoint id of a local site (a real site's id comes from its registration)."""
    return uuid.uuid5(LOCAL_NAMESPACE, f"local-endpoint:{site}")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # PID 1 here does not reap: a zombie is stopped


def code_fingerprint() -> str:
    """A digest of the code an endpoint runs (``federation`` and ``functions`` sources).

    The endpoint process (:mod:`federation.endpoint.daemon`) runs this code (its workers
    do not: they run in the strict worker environment); an endpoint started before it
    changed would run the old code, so ``start`` restarts it.
    """
    import functions

    digest = hashlib.sha256()
    for pkg in (Path(__file__).resolve().parents[1], Path(functions.__file__).resolve().parent):
        for f in sorted(pkg.rglob("*.py")):  # a checkout's or site-packages' copy alike
            digest.update(str(f.relative_to(pkg.parent)).encode())
            digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


class EndpointDaemons:
    """The endpoint processes of the local sites, under ``home/endpoints/<site>/``."""

    def __init__(self, home: Path) -> None:
        self.root = home / "endpoints"

    def run_dir(self, site: str) -> Path:
        return self.root / site

    def pid(self, site: str) -> int | None:
        ready = self.run_dir(site) / "endpoint.ready"
        try:
            pid = int(ready.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def report(self, site: str, timeout_s: float = 5.0) -> dict[str, Any] | None:
        """The site's endpoint's status report (``ping``: its user endpoint processes with
        their memory, ...); None if it is not running or does not answer."""
        if self.pid(site) is None:
            return None
        try:
            return ask(self.run_dir(site), {"op": "ping"}, timeout_s)
        except SiteUnavailableError as e:
            logger.warning("site %s: no status report: %s", site, e)
            return None

    def start(
        self,
        site: str,
        site_env: Mapping[str, str],
        timeout_s: float = 30.0,
        *,
        site_dir: Path | None = None,
    ) -> int:
        """Start the site's endpoint unless it runs; returns its pid (idempotent).
        ``site_dir``: the site's folder (default: the package's example of that name).

        An endpoint running older code than this checkout is restarted (its tasks in
        flight are settled as lost, as after any endpoint restart).
        """
        code = code_fingerprint()
        run_dir = self.run_dir(site)
        if (pid := self.pid(site)) is not None:
            try:
                running_code = (run_dir / "endpoint.code").read_text().strip()
            except OSError:
                running_code = ""
            if running_code == code:
                return pid
            logger.warning("site %s: endpoint runs older code; restarting it", site)
            self.stop(site)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "endpoint.code").write_text(code + "\n")
        (run_dir / "endpoint.ready").unlink(missing_ok=True)
        bindir = Path(sys.executable).parent
        user_dir = run_dir / "globus_compute"
        init = worker_init(worker_venv(), run_dir / "worker", user_dir)
        env = {
            **os.environ,
            **site_env,
            "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "GLOBUS_COMPUTE_USER_DIR": str(user_dir),
            # workers run in the strict worker environment: nothing of this repository
            "FEDERATION_WORKER_INIT": init,
            "FEDERATION_ENGINE_ADDRESS": "127.0.0.1",
            # a lost worker pool (crashed node) is noticed in 45 s, not parsl's 120 s
            "FEDERATION_HEARTBEAT_PERIOD_S": "10",
            "FEDERATION_HEARTBEAT_THRESHOLD_S": "45",
        }
        # the emulated nodes share this machine: a fan-out of tiny calls opens at most 4
        # blocks per shape (32 worker pools starting at once took a 2-core machine ~50 s)
        env.setdefault("FEDERATION_MAX_BLOCKS", "4")
        # and their engines look every 50 ms when idle, not parsl's 10 (messages still wake
        # them at once): the interchanges took a fifth of 2 cores during the Slurm tests
        # (measured on test_federation_slurm.py: 47 CPU-s, 37 at 50 ms, same wall time)
        env.setdefault("FEDERATION_POLL_PERIOD_MS", "50")
        # the endpoint's heartbeat (5 s, not 30) and so its user endpoint processes' idle
        # lives: 24 beats (2 min) after their last task (a site's default: 5 min), and 25
        # with tasks outstanding but none moving (a site's default is 48 h), after which a
        # process ends and its blocks are cancelled (a withdrawn copy's held block among them)
        for key, value in LOCAL_LIFETIMES.items():
            env.setdefault(key, value)
        # the hard limit is time (a queued or starting block), not beats: a faster beat
        # (a test's) counts more of them, so a starting engine is not taken for a stuck one
        if "FEDERATION_IDLE_HEARTBEATS_HARD" not in {**os.environ, **site_env}:
            beat_s = max(float(env["FEDERATION_EP_HEARTBEAT_S"]), 0.05)
            least = int(LOCAL_LIFETIMES["FEDERATION_IDLE_HEARTBEATS_HARD"])
            env["FEDERATION_IDLE_HEARTBEATS_HARD"] = str(max(least, math.ceil(125 / beat_s)))
        log = (run_dir / "endpoint.stdout").open("ab")
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "federation.endpoint.daemon",
                "--site",
                site,
                "--run-dir",
                str(run_dir),
                "--endpoint-id",
                str(local_endpoint_id(site)),
                *(["--site-dir", str(site_dir)] if site_dir is not None else []),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=run_dir,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (self.run_dir(site) / "endpoint.ready").exists() and self.pid(site) == proc.pid:
                return proc.pid
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        tail = (run_dir / "endpoint.stdout").read_text(errors="replace")[-2000:]
        raise SiteUnavailableError(
            f"site {site}: endpoint did not start (see {run_dir}/endpoint.log):\n{tail}"
        )

    def stop(self, site: str, timeout_s: float = 30.0) -> bool:
        """Stop the site's endpoint if we started it; True if one was running."""
        pid = self.pid(site)
        if pid is None:
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        if _alive(pid):
            logger.warning("endpoint %s (pid %s) ignored SIGTERM; killing", site, pid)
            os.kill(pid, signal.SIGKILL)
        (self.run_dir(site) / "endpoint.ready").unlink(missing_ok=True)
        return True
