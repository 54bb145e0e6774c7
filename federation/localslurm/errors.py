"""Errors of the local Slurm federation; each says what to do about it."""

from __future__ import annotations

from pathlib import Path

from federation.core.errors import SiteUnavailableError


class LocalSlurmError(SiteUnavailableError):
    """The local Slurm federation cannot be brought up or reached."""


class MissingBinaryError(LocalSlurmError):
    """A program the local federation needs is not installed."""

    def __init__(self, program: str, package: str) -> None:
        self.program = program
        self.package = package
        super().__init__(
            f"{program} is not installed (Debian package {package}). Run scripts/bootstrap.sh "
            f"as root (it installs slurm-wlm, slurmdbd, munge and mariadb-server), or: "
            f"apt-get install --no-install-recommends {package}"
        )


class DaemonStartError(LocalSlurmError):
    """A daemon failed to start or to become ready; carries the tail of its log."""

    def __init__(self, daemon: str, why: str, log_file: Path, log_tail: str) -> None:
        self.daemon = daemon
        self.log_file = log_file
        self.log_tail = log_tail
        shown = log_tail or "(log is empty)"
        super().__init__(
            f"{daemon} {why}. Its log is {log_file}; last lines:\n{shown}\n"
            "Fix the cause, then run `federation sites down` and `federation sites up`."
        )


class SlurmCommandError(LocalSlurmError):
    """A Slurm client command failed or timed out."""
