"""The one slurmdbd shared by every local cluster (so ``sacct -M all`` sees all sites).

slurmdbd finds ``slurmdbd.conf`` in the folder of ``$SLURM_CONF``; the file must be mode 600.
"""

from __future__ import annotations

import os
import socket
import time

from federation.localslurm import mariadb
from federation.localslurm.binaries import program
from federation.localslurm.layout import Layout, Ports
from federation.localslurm.process import Daemon
from federation.localslurm.render import render_slurmdbd


def write_conf(layout: Layout, ports: Ports, user: str) -> bool:
    """Write ``slurmdbd.conf`` if its content changed; True if it did."""
    text = render_slurmdbd(layout, ports, user, mariadb.DB_USER, mariadb.password(layout))
    path = layout.dbd_conf
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_text() == text:
        return False
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    return True


def daemon(layout: Layout) -> Daemon:
    d = layout.dbd_dir
    return Daemon(
        name="slurmdbd",
        argv=(program("slurmdbd"),),
        pid_file=d / "slurmdbd.pid",
        log_file=d / "slurmdbd.log",
        owner=str(layout.root),
        env={"SLURM_CONF": str(d / "slurm.conf")},
    )


def wait_ready(d: Daemon, ports: Ports, timeout_s: float = 30.0) -> None:
    """Wait until slurmdbd accepts connections on its port."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", ports.slurmdbd), timeout=1):
                return
        except OSError:
            pass
        if not d.running():
            raise d.failed("exited during start-up")
        time.sleep(0.05)
    raise d.failed(f"did not listen on 127.0.0.1:{ports.slurmdbd} within {timeout_s:.0f} s")
