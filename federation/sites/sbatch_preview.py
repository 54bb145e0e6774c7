"""The ``sbatch`` options a shaped task's batch job would carry, read off the real path.

Nothing here re-types an option. :func:`sbatch_options` renders the site's user endpoint
config for a ``user_endpoint_config`` with the endpoint's own template loader
(:func:`~federation.sites.endpoint_config.render_user_config`), builds its provider with the
endpoint's own dispatcher (the ``SlurmProvider`` the endpoint would build), and lets the
provider write its batch script as it does for a block, with ``sbatch`` replaced by a
function that only records the call. The options are that script's ``#SBATCH`` lines.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from federation.core.errors import FederationError
from federation.core.spec import SiteSpec
from federation.sites.endpoint_config import render_user_config

SCRIPT_PATH_OPTIONS = ("--output", "--error")
"""Options naming files of this dry run's own script folder (the endpoint picks its own)."""
_SBATCH = re.compile(r"^#SBATCH\s+(\S.*?)\s*$")


class PreviewUnavailable(FederationError):
    """The options cannot be read here (the endpoint package is missing, or the site's
    template renders no Slurm provider)."""


def sbatch_options(
    site: SiteSpec, user_config: Mapping[str, Any], *, config_dir: Path | None = None
) -> tuple[str, ...]:
    """The options sbatch would read from the batch script of ``user_config``'s block on
    ``site``, in script order, each once: where an option is given twice the later one
    (which sbatch takes) stands in the earlier one's place, so ``--job-name`` is the shape's
    ``fed.<tag>``, not parsl's. ``--output`` and ``--error`` are left out
    (:data:`SCRIPT_PATH_OPTIONS`).

    Raises :class:`TemplateVariableError` when the site's schema refuses ``user_config``
    and :class:`PreviewUnavailable` when the endpoint package is not installed here.
    """
    try:
        from globus_compute_endpoint.endpoint.config import ProviderDispatcher
    except ImportError as e:
        raise PreviewUnavailable(
            "the Slurm options are read from the site's endpoint template, which needs "
            "globus-compute-endpoint here: pip install 'federation[endpoint]'"
        ) from e
    rendered = yaml.safe_load(render_user_config(site, user_config, config_dir=config_dir))
    spec = ((rendered or {}).get("engine") or {}).get("provider") or {}
    if spec.get("type") != "SlurmProvider":
        raise PreviewUnavailable(
            f"site {site.name}: its template renders a {spec.get('type') or 'missing'} "
            "provider for this config, not a SlurmProvider: no batch job to show"
        )
    provider = ProviderDispatcher.build_instance(spec)
    calls: list[str] = []

    def record(cmd: str, timeout: float | None = None) -> tuple[int, str, str]:
        calls.append(cmd)
        return 0, "Submitted batch job 0\n", ""

    with tempfile.TemporaryDirectory(prefix="fed-dry-run-") as d:
        provider.script_dir = d
        provider.execute_wait = record  # sbatch is never run
        provider.submit("true", 1, "parsl.dry-run")
        (script,) = Path(d).iterdir()
        text = script.read_text()
    if len(calls) != 1 or not calls[0].startswith("sbatch "):
        raise PreviewUnavailable(f"site {site.name}: the provider ran {calls}, not one sbatch")
    return effective_options(text)


def effective_options(script: str) -> tuple[str, ...]:
    """A batch script's ``#SBATCH`` options as sbatch reads them (see :func:`sbatch_options`)."""
    found: dict[str, str] = {}
    for line in script.splitlines():
        m = _SBATCH.match(line.strip())
        if not m:
            continue
        opt = m.group(1)
        name = opt.split("=", 1)[0].split(" ", 1)[0]
        if name not in SCRIPT_PATH_OPTIONS:
            found[name] = opt  # a repeated option keeps the first one's place
    return tuple(found.values())


def option_value(options: tuple[str, ...], name: str) -> str | None:
    """The value of ``--name=value`` in ``options`` (None: not given)."""
    for opt in options:
        key, _, value = opt.partition("=")
        if key == name:
            return value
    return None
