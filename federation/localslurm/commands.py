"""Run Slurm client commands (``sinfo``, ``sacctmgr`` ...) against one cluster's config."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Mapping, Sequence

from federation.localslurm.binaries import which
from federation.localslurm.errors import SlurmCommandError

logger = logging.getLogger(__name__)


def run_slurm(
    argv: Sequence[str], env: Mapping[str, str], timeout_s: float = 30.0
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` with ``env`` merged over ``os.environ``; never raises on exit status.

    ``argv[0]`` may be a bare program name (``sinfo``); it is looked up like the daemons.
    """
    if not argv:
        raise ValueError("empty command")
    program = argv[0] if "/" in argv[0] else which(argv[0])
    full = [program, *argv[1:]]
    try:
        return subprocess.run(
            full,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise SlurmCommandError(
            f"`{' '.join(argv)}` did not answer within {timeout_s:.0f} s "
            f"(SLURM_CONF={env.get('SLURM_CONF')}). Is the cluster up? "
            "Try `federation sites status`."
        ) from e


def check_slurm(
    argv: Sequence[str], env: Mapping[str, str], timeout_s: float = 30.0
) -> subprocess.CompletedProcess[str]:
    """Like :func:`run_slurm`, but a non-zero exit raises :class:`SlurmCommandError`."""
    proc = run_slurm(argv, env, timeout_s)
    if proc.returncode != 0:
        raise SlurmCommandError(
            f"`{' '.join(argv)}` failed with status {proc.returncode}: "
            f"{(proc.stderr or proc.stdout).strip()}"
        )
    return proc
