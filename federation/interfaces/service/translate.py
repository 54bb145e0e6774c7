"""Federation exceptions as :class:`OpsError` (HTTP status, code, what to do)."""

from __future__ import annotations

import logging

from federation.core.errors import (
    BadEnvelopeError,
    CursorAheadError,
    DataNotFoundError,
    FederationError,
    NoFeasibleSiteError,
    SerializationError,
    SiteUnavailableError,
    TransferAuthError,
    TransferPathError,
    TransferUnavailableError,
    UnknownSiteError,
    WorkspaceAccessError,
)
from federation.interfaces.service.errors import OpsError
from federation.runtime.catalog import CatalogError
from federation.security.globus_callers import CallerLoginRequired
from federation.security.policy import PolicyViolationError

__all__ = ["translate"]

logger = logging.getLogger("federation.interfaces.service.ops")
"""The operations' logger (an unexpected error is logged where it always was)."""


def translate(e: BaseException) -> OpsError:
    """A federation exception as an :class:`OpsError` with the right HTTP status."""
    if isinstance(e, OpsError):
        return e
    login = e if isinstance(e, CallerLoginRequired) else e.__cause__
    if isinstance(login, CallerLoginRequired):  # the caller's Globus tokens are gone
        return OpsError(
            401,
            "globus_login_required",
            str(e),
            "send a fresh Globus token for the service's scope (`federation token globus`), "
            "then retry",
        )
    if isinstance(e, PolicyViolationError):
        return OpsError(
            403,
            "policy_violation",
            str(e),
            "fit the request to your policy, or ask an operator to change it",
            {"rules": {f.rule: {"limit": f.limit, "asked": f.value} for f in e.findings}},
        )
    if isinstance(e, CatalogError):
        return OpsError(
            422,
            "bad_function",
            str(e),
            "call one of the catalog functions with arguments matching its schema",
            {"errors": e.errors},
        )
    if isinstance(e, CursorAheadError):
        return OpsError(
            409,
            "cursor_ahead",
            str(e),
            f"resume with after={e.last} (events from now on) or after=0 (re-read the log)",
            {"cursor": e.cursor, "last": e.last},
        )
    if isinstance(e, UnknownSiteError):
        return OpsError(
            422, "unknown_site", str(e), "use one of the known sites", {"known": e.known}
        )
    if isinstance(e, BadEnvelopeError):
        return OpsError(422, "bad_envelope", str(e), "fix the named bound and resubmit")
    if isinstance(e, SerializationError):
        return OpsError(422, "not_serializable", str(e), "pass plain JSON arguments")
    if isinstance(e, WorkspaceAccessError):
        return OpsError(
            403, "not_your_workspace", str(e), "name paths in your own workspace, or shared data"
        )
    if isinstance(e, TransferPathError):
        return OpsError(
            422, "bad_path", str(e), "give a path inside the site's storage, without `..`"
        )
    if isinstance(e, DataNotFoundError):
        return OpsError(404, "data_not_found", str(e), "check the source site and path")
    if isinstance(e, TransferAuthError):
        return OpsError(
            502, "transfer_refused", str(e), "the coordinator's Globus login needs renewing"
        )
    if isinstance(e, TransferUnavailableError):
        return OpsError(503, "transfer_unavailable", str(e), "retry later")
    if isinstance(e, NoFeasibleSiteError):
        return OpsError(
            409,
            "no_feasible_site",
            str(e).splitlines()[0],
            "relax the envelope; draft_envelope shows the nearest feasible one",
            {"reasons": e.reasons},
        )
    if isinstance(e, SiteUnavailableError) or (
        isinstance(e, FederationError) and isinstance(e.__cause__, Exception)
    ):
        return OpsError(
            503,
            "site_unavailable",
            str(e),
            "check the site (`federation sites status`) and retry",
        )
    if isinstance(e, FederationError):
        return OpsError(500, "federation_error", str(e))
    logger.exception("unexpected error", exc_info=e)
    return OpsError(500, "internal_error", f"{type(e).__name__}: {e}", "see the server log")
