"""Daemons we start, tracked through their pid files.

PID 1 on these machines does not reap orphans, so a stopped daemon may linger as a zombie:
a zombie counts as stopped. Every daemon we start carries :data:`OWNER_ENV` in its
environment, so a pid file whose pid was reused by someone else's process is not trusted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from federation.localslurm.errors import DaemonStartError

logger = logging.getLogger(__name__)

OWNER_ENV = "FEDERATION_LOCALSLURM"


def read_pid(pid_file: Path) -> int | None:
    try:
        text = pid_file.read_text().strip()
    except (FileNotFoundError, PermissionError):
        return None
    return int(text) if text.isdigit() else None


def pid_running(pid: int) -> bool:
    """True if ``pid`` exists and is neither a zombie nor dead."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X", "x")


def _owned_by(pid: int, owner: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False
    except PermissionError:  # not ours to read: not started by us
        return False
    return f"{OWNER_ENV}={owner}".encode() in environ.split(b"\0")


def _cmdline(pid: int) -> tuple[str, ...]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ()
    return tuple(a.decode(errors="replace") for a in raw.split(b"\0") if a)


def _start_ticks(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[19])
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return 0


def owned_processes(owner: str) -> dict[tuple[str, ...], list[int]]:
    """Live processes started by us for ``owner``, by command line (oldest first)."""
    found: dict[tuple[str, ...], list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == os.getpid() or not pid_running(pid) or not _owned_by(pid, owner):
            continue
        argv = _cmdline(pid)
        if argv:
            found.setdefault(argv, []).append(pid)
    for pids in found.values():
        pids.sort(key=_start_ticks)
    return found


def tail(path: Path, lines: int = 15) -> str:
    """Last ``lines`` lines of a log file (empty if there is none)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class Daemon:
    """One daemon: how to start it, where it writes its pid and its log."""

    name: str
    argv: tuple[str, ...]
    pid_file: Path
    log_file: Path
    owner: str
    env: Mapping[str, str]
    forks: bool = True
    """True if the program daemonizes itself; else it is started with ``setsid -f``."""

    def pid(self) -> int | None:
        """Pid of the running daemon we started, or None."""
        pid = read_pid(self.pid_file)
        if pid is None or not pid_running(pid) or not _owned_by(pid, self.owner):
            return None
        return pid

    def running(self) -> bool:
        return self.pid() is not None

    def stale(self) -> bool:
        """True if the daemon runs with other arguments than :attr:`argv` (a changed setup)."""
        pid = self.pid()
        return pid is not None and _cmdline(pid) != self.argv

    def adopt(self, procs: dict[tuple[str, ...], list[int]]) -> int | None:
        """Find our instance among ``procs`` (see :func:`owned_processes`) when its pid file
        is lost or wrong; rewrite the pid file and stop duplicates. Returns its pid."""
        pids = [p for p in procs.get(self.argv, []) if pid_running(p)]
        if not pids:
            return None
        keep, *extra = pids
        for pid in extra:
            logger.warning("%s: stopping duplicate instance (pid %s)", self.name, pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        logger.info("%s: adopting running instance (pid %s)", self.name, keep)
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.write_text(f"{keep}\n")
        return keep

    def launch(self) -> subprocess.Popen[bytes]:
        """Start the program; returns the (short-lived) launcher process to :meth:`settle`."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.unlink(missing_ok=True)
        env = {**os.environ, **self.env, OWNER_ENV: self.owner}
        argv: Sequence[str] = self.argv if self.forks else ("setsid", "-f", *self.argv)
        logger.debug("starting %s: %s", self.name, " ".join(argv))
        with open(self.log_file, "ab") as log:
            return subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

    def settle(self, launcher: subprocess.Popen[bytes], timeout_s: float = 15.0) -> int:
        """Wait for the launcher to return and the pid file to name a live daemon."""
        deadline = time.monotonic() + timeout_s
        try:
            rc = launcher.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            launcher.kill()
            launcher.wait()
            raise self.failed(f"did not daemonize within {timeout_s:.0f} s") from None
        if rc != 0:
            raise self.failed(f"exited with status {rc}")
        while time.monotonic() < deadline:
            pid = self.pid()
            if pid is not None:
                return pid
            time.sleep(0.05)
        raise self.failed(f"wrote no live pid to {self.pid_file} within {timeout_s:.0f} s")

    def start(self, timeout_s: float = 15.0) -> int:
        return self.settle(self.launch(), timeout_s)

    def failed(self, why: str) -> DaemonStartError:
        return DaemonStartError(self.name, why, self.log_file, tail(self.log_file))

    def signal_stop(self) -> int | None:
        """Send SIGTERM; returns the pid signalled (None if it was not running)."""
        pid = self.pid()
        if pid is None:
            return None
        logger.debug("stopping %s (pid %s)", self.name, pid)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return None
        return pid


def wait_stopped(pids: Mapping[str, int], timeout_s: float = 10.0) -> None:
    """Wait until every pid exited (or is a zombie); SIGKILL the ones that do not."""
    deadline = time.monotonic() + timeout_s
    pending = dict(pids)
    while pending and time.monotonic() < deadline:
        pending = {n: p for n, p in pending.items() if pid_running(p)}
        if pending:
            time.sleep(0.05)
    for name, pid in pending.items():
        logger.warning("%s (pid %s) ignored SIGTERM for %.0f s: killing it", name, pid, timeout_s)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
