"""A private munged with its own key and socket (the socket's folder must be mode 755)."""

from __future__ import annotations

import os
from pathlib import Path

from federation.localslurm.binaries import program
from federation.localslurm.layout import Layout
from federation.localslurm.process import Daemon


def prepare(layout: Layout) -> None:
    """Create munge's folders and key (once; the key is kept across restarts)."""
    layout.munge_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(layout.munge_dir, 0o700)
    run = layout.run_dir
    run.mkdir(parents=True, exist_ok=True)
    os.chmod(run, 0o755)
    key = key_file(layout)
    if not key.exists():
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(1024))


def key_file(layout: Layout) -> Path:
    return layout.munge_dir / "munge.key"


def daemon(layout: Layout) -> Daemon:
    d = layout.munge_dir
    return Daemon(
        name="munged",
        argv=(
            program("munged"),
            f"--socket={layout.munge_socket}",
            f"--key-file={key_file(layout)}",
            f"--pid-file={d / 'munged.pid'}",
            f"--log-file={d / 'munged.log'}",
            f"--seed-file={d / 'munged.seed'}",
            "--num-threads=4",
        ),
        pid_file=d / "munged.pid",
        log_file=d / "munged.log",
        owner=str(layout.root),
        env={},
    )
