"""``federation doctor --offline``: what can be checked of each site without reaching it.

For each site a ``federation.yaml`` names (the package's example sites without one):

* **folder**: its ``site.yaml`` loads (where from);
* **files**: the endpoint files beside it are what ``site.yaml`` generates now;
* **template**: one task per partition renders through the endpoint's own loader and
  schema (skipped when ``globus-compute-endpoint`` is not installed here);
* **tokens** (Globus sites): stored tokens for Globus Compute, read from their file.

Nothing is contacted: no Globus service, no endpoint, no Slurm. Each check is a
:class:`~federation.interfaces.doctor.Check` with what to do when it is not ``ok``.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from pathlib import Path

from federation.core.spec import PACKAGE_SITES, SiteSpec, load_sites
from federation.interfaces.doctor import Check, SiteReport, Status

OFFLINE_CHECKS = ("folder", "files", "template", "tokens")


def _check(site: str, check: str, status: Status, detail: str) -> Check:
    return Check(site=site, check=check, status=status, detail=detail, seconds=0.0)


def _files(spec: SiteSpec) -> Check:
    from federation.sites.endpoint_config import stale_files

    stale = stale_files(spec)
    if not stale:
        return _check(spec.name, "files", "ok", "endpoint files match site.yaml")
    names = ", ".join(p.name for p in stale)
    return _check(
        spec.name,
        "files",
        "fail",
        f"{names} differ from what site.yaml generates: run `federation sites "
        f"generate-configs --root {spec.config_dir.parent} {spec.name}`",
    )


def _template(spec: SiteSpec) -> Check:
    if importlib.util.find_spec("globus_compute_endpoint") is None:
        return _check(
            spec.name,
            "template",
            "skipped",
            "globus-compute-endpoint is not installed here (pip install 'federation[endpoint]')",
        )
    from federation.core.errors import FederationError
    from federation.sites.endpoint_config import render_user_config
    from federation.sites.user_config import shape_to_user_config

    for p in spec.partitions:
        opts = shape_to_user_config(
            p.name, 1, 1, 1, min(p.gpus_per_node, 1), min(600, p.max_walltime_s), site=spec
        )
        try:
            render_user_config(spec, opts)
        except FederationError as e:
            return _check(spec.name, "template", "fail", f"partition {p.name}: {e}")
    parts = ", ".join(p.name for p in spec.partitions)
    return _check(spec.name, "template", "ok", f"a task renders on {parts}")


def _tokens(site: str, auth: object | None) -> Check:
    from federation.core.errors import AuthError
    from federation.sites.globus_auth import AuthSettings, token_status

    if not isinstance(auth, AuthSettings):
        return _check(site, "tokens", "skipped", "a local site: no Globus tokens needed")
    try:
        stored = token_status(auth)
    except AuthError as e:
        return _check(site, "tokens", "fail", str(e))
    from globus_sdk.scopes import ComputeScopes

    compute = [rs for rs in stored if rs == ComputeScopes.resource_server]
    if not compute:
        return _check(
            site,
            "tokens",
            "fail",
            f"no Globus Compute tokens in {auth.storage_description}: "
            f"{auth.login_hint(force=False)}",
        )
    info = stored[compute[0]]
    fresh = info["refreshable"] or (info["expires_at_s"] or 0) > time.time()
    if not fresh:
        return _check(site, "tokens", "fail", f"the stored tokens expired: {auth.login_hint()}")
    return _check(
        site, "tokens", "ok", f"stored in {auth.storage_description} (not tried: offline)"
    )


def offline_reports(
    config: Path | None, on_check: Callable[[Check], None] | None = None
) -> list[SiteReport]:
    """The offline checks of every site of ``config`` (None: the package's example sites).

    Raises :class:`~federation.core.errors.ConfigError` when ``config`` is invalid (which
    includes a site folder that is missing or whose ``site.yaml`` is wrong)."""
    from federation.deploy.config import load_config

    if config is not None:
        cfg = load_config(config)
        specs = list(cfg.specs.values())
        auth = {n: cfg.auth if s.backend == "globus" else None for n, s in cfg.sites.items()}
    else:
        specs = load_sites()
        auth = {s.name: None for s in specs}
    reports = []
    for spec in specs:
        where = "the package's examples" if spec.config_dir.parent == PACKAGE_SITES else ""
        checks = [
            _check(
                spec.name,
                "folder",
                "ok",
                f"{spec.config_dir}{f' ({where})' if where else ''}: "
                f"{len(spec.partitions)} partition(s)",
            ),
            _files(spec),
            _template(spec),
            _tokens(spec.name, auth[spec.name]),
        ]
        for c in checks:
            if on_check is not None:
                on_check(c)
        reports.append(SiteReport(site=spec.name, checks=tuple(checks)))
    return reports
