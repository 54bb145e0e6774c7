"""A private MariaDB for slurmdbd: own datadir and unix socket, TCP on loopback only."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import subprocess
import time
from pathlib import Path

from federation.localslurm.binaries import program, which
from federation.localslurm.errors import DaemonStartError
from federation.localslurm.layout import Layout, Ports
from federation.localslurm.process import Daemon, tail

logger = logging.getLogger(__name__)

DB_USER = "slurm"


def data_dir(layout: Layout) -> Path:
    return layout.db_dir / "data"


def password(layout: Layout) -> str:
    """The slurm database user's password, generated once and kept (mode 600)."""
    path = layout.db_dir / "slurm.password"
    if not path.exists():
        layout.db_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(16))
    return path.read_text().strip()


def prepare(layout: Layout, user: str) -> None:
    """Initialise the datadir (first time only) and write the start-up SQL."""
    layout.db_dir.mkdir(parents=True, exist_ok=True)
    pw = password(layout)
    init = layout.db_dir / "init.sql"
    sql = (
        f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{pw}';\n"
        f"ALTER USER '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{pw}';\n"
        f"GRANT ALL PRIVILEGES ON slurm_acct_db.* TO '{DB_USER}'@'127.0.0.1';\n"
    )
    if not init.exists() or init.read_text() != sql:
        fd = os.open(init, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(sql)
    datadir = data_dir(layout)
    if (datadir / "mysql").is_dir():
        return
    log = layout.db_dir / "install.log"
    logger.info("initialising the accounting database in %s", datadir)
    with open(log, "wb") as out:
        rc = subprocess.run(
            [
                which("mariadb-install-db"),
                "--no-defaults",
                f"--datadir={datadir}",
                f"--user={user}",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
                "--skip-name-resolve",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=120,
        ).returncode
    if rc != 0:
        why = f"could not initialise its datadir {datadir} (mariadb-install-db exit {rc})"
        raise DaemonStartError("mariadbd", why, log, tail(log))


def daemon(layout: Layout, ports: Ports, user: str) -> Daemon:
    d = layout.db_dir
    return Daemon(
        name="mariadbd",
        argv=(
            program("mariadbd"),
            "--no-defaults",
            f"--datadir={data_dir(layout)}",
            f"--socket={layout.db_socket}",
            f"--port={ports.mariadb}",
            "--bind-address=127.0.0.1",
            f"--pid-file={d / 'mariadbd.pid'}",
            f"--log-error={d / 'mariadbd.log'}",
            f"--user={user}",
            "--skip-name-resolve",
            f"--init-file={d / 'init.sql'}",
            "--innodb-buffer-pool-size=64M",
            "--innodb-flush-log-at-trx-commit=0",
            "--innodb-lock-wait-timeout=900",
            "--max-connections=200",
            "--skip-log-bin",
        ),
        pid_file=d / "mariadbd.pid",
        log_file=d / "mariadbd.log",
        owner=str(layout.root),
        env={},
        forks=False,
    )


def wait_ready(d: Daemon, ports: Ports, timeout_s: float = 30.0) -> None:
    """Wait until the server sends its handshake on the loopback port."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", ports.mariadb), timeout=1) as s:
                if s.recv(4):
                    return
        except OSError:
            pass
        if not d.running():
            raise d.failed("exited during start-up")
        time.sleep(0.05)
    raise d.failed(
        f"did not accept connections on 127.0.0.1:{ports.mariadb} within {timeout_s:.0f} s"
    )
