"""The local sites' workers run where a real site's do: a Python without this repository.

A site's worker environment has what docs/deploy.md tells its admin to install (the Globus
Compute endpoint, which brings the SDK, parsl and dill) and nothing of this repository.
The local endpoints' workers run in such an environment too, the *strict worker
environment* ``.venv-worker`` (``$FEDERATION_WORKER_VENV``), which ``scripts/bootstrap.sh``
makes with the same versions as the coordinator's; each worker starts in a scratch folder
of its own with ``PYTHONPATH`` unset. So a function that would need this repository on the
worker (one shipped by reference) fails locally exactly as it would on a site.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from federation.core.errors import FederationError

ENV_VAR = "FEDERATION_WORKER_VENV"


class WorkerEnvMissing(FederationError):
    """The strict worker environment has not been made."""


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def worker_venv() -> Path:
    """The strict worker environment (``$FEDERATION_WORKER_VENV``, else ``.venv-worker``
    beside this repository); :class:`WorkerEnvMissing` says how to make it."""
    raw = os.environ.get(ENV_VAR)
    path = Path(raw) if raw else repo_root() / ".venv-worker"
    if not (path / "bin" / "globus-compute-endpoint").is_file():
        raise WorkerEnvMissing(
            f"no strict worker environment at {path} (a Python with globus-compute-endpoint "
            "and nothing of this repository, where the local sites' workers run): run "
            "scripts/bootstrap.sh, or point $FEDERATION_WORKER_VENV at one"
        )
    return path


def worker_init(venv: Path, scratch: Path, user_dir: Path) -> str:
    """The shell each local worker block runs first: the strict environment's commands on
    PATH, no PYTHONPATH, a scratch folder as the working directory."""
    q = shlex.quote
    return "\n".join(
        [
            "unset PYTHONPATH PYTHONHOME PYTHONSTARTUP VIRTUAL_ENV",
            f'export PATH={q(str(venv / "bin"))}:"$PATH"',
            f"export GLOBUS_COMPUTE_USER_DIR={q(str(user_dir))}",
            f"mkdir -p {q(str(scratch))} && cd {q(str(scratch))}",
        ]
    )
