"""What could not be reached, one line per site, and what to check: ``doctor`` and
``inspect`` print these instead of a traceback.

Three places fail: connecting (the Globus Compute client is built and checks the service's
version: no route to the service, or a token it refuses), and later each site's probe (its
endpoint offline or unknown, its workers down). :func:`connect_failures` turns the first
into a line per site the configuration names, :func:`probe_failures` the second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from federation.core.errors import (
    AuthError,
    ConfigError,
    FederationError,
    GlobusUnreachableError,
)
from federation.core.model import Frozen
from federation.core.snapshot import FederationSnapshot

Kind = Literal["no route", "token refused", "unreachable", "not checked"]


class Unreached(Frozen):
    """One site that could not be reached: what failed and what to check."""

    site: str
    kind: Kind
    detail: str

    def line(self) -> str:
        return f"{self.site}: {self.kind}: {self.detail}"


def kind_of(err: BaseException) -> Kind:
    """``no route`` (the machine cannot reach Globus), ``token refused`` (Globus Auth or a
    service refused the stored tokens), else ``unreachable``."""
    if isinstance(err, GlobusUnreachableError):
        return "no route"
    if isinstance(err, AuthError):
        return "token refused"
    return "unreachable"


def connect_failures(config: Path | None, err: FederationError) -> list[Unreached]:
    """A line per site for a connection that failed with ``err``: the Globus sites of
    ``config`` share its client, so each fails with ``err``; its local sites were not
    reached because connecting stopped there. Empty when ``config`` itself is the problem
    (or there is none: then ``err`` is about the embedded federation as a whole)."""
    from federation.deploy.config import load_config

    if config is None or isinstance(err, ConfigError):
        return []
    try:
        cfg = load_config(config)
    except ConfigError:
        return []
    kind = kind_of(err)
    globus = kind != "unreachable"  # a Globus client's failure: its sites, not the local ones
    out = []
    for name, site in cfg.sites.items():
        if site.backend == "globus" or not globus:
            out.append(Unreached(site=name, kind=kind, detail=str(err)))
        else:
            out.append(
                Unreached(
                    site=name,
                    kind="not checked",
                    detail="connecting stopped at the Globus sites' failure",
                )
            )
    return out


def probe_failures(snap: FederationSnapshot) -> list[Unreached]:
    """A line per site whose probe did not answer (its endpoint offline, unknown, ...)."""
    return [
        Unreached(site=s.site, kind="unreachable", detail=s.health.error or "no probe answer")
        for s in snap.sites
        if not s.health.reachable
    ]
