"""``POST /v1/logout``: a Globus caller's tokens at the service revoked and deleted.

Mounted by :func:`federation.interfaces.service.app.create_app`. With ``service.auth:
globus`` the service holds, per caller, the dependent Globus tokens it acts with
(:mod:`federation.security.globus_callers`); logging out revokes each at Globus Auth
(``oauth2_revoke_token``) and deletes it. A caller with tasks or transfers still open is
asked first (409): once their tokens are gone the service can no longer follow, cancel or
retry that work for them; ``force=true`` logs out anyway. With the service's own tokens
(``federation token issue``) there is nothing to log out of: an operator revokes tokens.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from federation.interfaces.service.errors import OpsError
from federation.interfaces.service.models import LogoutResponse
from federation.runtime.coordinator import Coordinator
from federation.security.globus_callers import GlobusCallers
from federation.security.tokens import TokenStore


def login_router(coord: Coordinator, tokens: TokenStore | GlobusCallers) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["login"])

    def open_work(caller: str) -> list[str]:
        tasks = [h.id for h in coord.live_handles() if h.caller == caller and not h.done]
        moves = [h.id for h in coord.transfers.handles() if h.owner == caller and not h.done]
        return tasks + moves

    @router.post("/logout")
    def logout(
        request: Request,
        force: Annotated[
            bool, Query(description="log out even with tasks or transfers still open")
        ] = False,
    ) -> LogoutResponse:
        """Globus callers: revoke the Globus tokens the service holds for you, and delete
        them. Your next request (with a fresh token for the service's scope) gets new ones.
        Your own token for the service is your client's to revoke (`federation token
        logout` does both)."""
        caller = str(getattr(request.state, "caller", ""))
        if not isinstance(tokens, GlobusCallers):
            raise OpsError(
                409,
                "not_globus",
                "this service authenticates with its own tokens: it holds no Globus tokens "
                "of yours to log out of",
                "an operator revokes a service token with `federation token revoke ID`",
            )
        still = open_work(caller)
        if still and not force:
            raise OpsError(
                409,
                "open_work",
                f"you have {len(still)} task(s) or transfer(s) still open; once your tokens "
                "are gone the service cannot follow, cancel or retry them for you",
                "wait for them (or cancel them), or POST /v1/logout?force=true",
                {"open": still[:50]},
            )
        report = tokens.logout(caller)
        return LogoutResponse(
            caller=caller,
            revoked=report.revoked,
            deleted=report.deleted,
            failed=tuple(report.failed),
            open_work=tuple(still),
        )

    return router
