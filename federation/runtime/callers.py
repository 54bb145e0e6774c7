"""Per-caller backends: the sites and data movers as one caller reaches them.

A coordinator serving many people may have to act on the sites under each caller's own
identity (the HTTP service in its ``globus`` auth mode: on a multi-user Globus Compute
endpoint, each caller's work must run as their own local account). It is then given a
:class:`CallerSites`, and everything that acts for a task's owner (shipping, copies,
retries, cancels, re-attaching after a restart, accounting queries) asks
:meth:`Coordinator.site_for <federation.runtime.coordinator.Coordinator.site_for>` for the
owner's backend, as moving data asks for the owner's transfer backends. Probing the sites
for placement stays with the coordinator's shared backends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from federation.sites.backend import SiteBackend
    from federation.transfer.backend import TransferBackend


class CallerSites(Protocol):
    """Each caller's own backends (made on first use, kept until they log out)."""

    def sites_for(self, caller: str) -> Mapping[str, SiteBackend] | None:
        """``caller``'s own site backends by site name (sites not in it are reached through
        the shared ones), or None for a caller with no identity of their own (the shared
        backends act for them). Using a backend of a caller whose tokens are gone raises
        :class:`~federation.core.errors.LoginRequiredError` saying what to do."""
        ...

    def transfers_for(self, caller: str) -> Mapping[str, TransferBackend] | None:
        """``caller``'s own transfer backends by site (None: the shared ones)."""
        ...

    def every_caller(self) -> list[Mapping[str, SiteBackend]]:
        """The site backends of every caller known now (a restart asks their task groups)."""
        ...

    def close(self) -> None: ...
