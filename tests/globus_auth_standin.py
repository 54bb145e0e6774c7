"""Globus Auth as the service's confidential client sees it, answered at the transport seam.

:class:`GlobusAuth` registers ``globus_sdk.testing`` responses (``RegisteredResponse`` in
a ``ResponseSet``, made active with ``register_response_set`` / ``load_response_set``; the
SDK's own samples where they fit, e.g. ``oauth2_revoke_token``) for the people a test
invents: introspection of each person's token for the service's scope, the dependent-token
grant (matched on the exact form the SDK must send: ``access_type=offline`` and the
Compute and Transfer scopes), refresh grants, and revocations. The real
``globus_sdk.ConfidentialAppAuthClient`` of :class:`GlobusCallers` makes every call.

Where this differs from the real Globus Auth (docs/deploy.md lists it for operators):
introspection answers what the test registered (the real service answers ``active:
false`` for expired and revoked tokens alike); a revoked refresh token is refused only
where the test says so (the real service refuses it from the revocation on); consent is
not modelled (the real grant fails when the caller never consented to the service's
scope, or the scope does not depend on Compute and Transfer); and every token here is a
random string of the real tokens' shape (``Ag`` and letters and digits), so the session's
secret scan finds any left on disk.
"""

from __future__ import annotations

import itertools
import secrets
import string
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import globus_sdk
import responses
from globus_sdk.testing import (
    RegisteredResponse,
    ResponseSet,
    load_response,
    load_response_set,
    register_response_set,
)
from responses import matchers

from federation.security.globus_callers import (
    COMPUTE_RS,
    DEPENDENT_SCOPES,
    TRANSFER_RS,
    ServiceAuth,
)

SERVICE_CLIENT = uuid.UUID("7d3f5a10-0000-4000-8000-00000000fed1")
SCOPE = f"https://auth.globus.org/scopes/{SERVICE_CLIENT}/federation"
SECRET_ENV = "FEDERATION_TEST_SERVICE_SECRET"
TOKEN_URL = "https://auth.globus.org/v2/oauth2/token"
INTROSPECT_URL = f"{TOKEN_URL}/introspect"
REVOKE_URL = f"{TOKEN_URL}/revoke"
DEPENDENT_GRANT = "urn:globus:auth:grant_type:dependent_token"
_SETS = itertools.count()


def globus_token() -> str:
    """A random token of the shape Globus Auth's have."""
    alnum = string.ascii_letters + string.digits
    return "Ag" + "".join(secrets.choice(alnum) for _ in range(60))


def settings(**kw: Any) -> ServiceAuth:
    return ServiceAuth(auth="globus", client_id=SERVICE_CLIENT, client_secret_env=SECRET_ENV, **kw)


def form(request: Any) -> dict[str, str]:
    body = request.body if isinstance(request.body, str) else (request.body or b"").decode()
    return {k: v[0] for k, v in parse_qs(body).items()}


@dataclass
class Person:
    """A Globus identity, its token for the service, and the tokens Auth grants for it."""

    username: str
    sub: str
    token: str
    compute: str
    compute_refresh: str
    transfer: str
    transfer_refresh: str

    def secrets(self) -> list[str]:
        return [
            self.token,
            self.compute,
            self.compute_refresh,
            self.transfer,
            self.transfer_refresh,
        ]


class GlobusAuth:
    """The Globus Auth answers for the people of one test (see the module docstring)."""

    def __init__(self, mock: responses.RequestsMock) -> None:
        self.mock = mock
        self.people: dict[str, Person] = {}
        load_response(globus_sdk.ConfidentialAppAuthClient.oauth2_revoke_token, requests_mock=mock)

    def _load(self, **cases: RegisteredResponse) -> None:
        name = f"federation-test-auth-{next(_SETS)}"
        register_response_set(name, ResponseSet(**cases))
        load_response_set(name, requests_mock=self.mock)

    def person(self, username: str, *, expires_in: int = 3600) -> Person:
        """Register ``username``: an active token for the service's scope, and the
        dependent grant for it."""
        p = Person(
            username=username,
            sub=str(uuid.uuid4()),
            token=globus_token(),
            compute=globus_token(),
            compute_refresh=globus_token(),
            transfer=globus_token(),
            transfer_refresh=globus_token(),
        )
        self.people[username] = p
        self.introspection(p.token, p, scope=SCOPE)
        self._load(
            dependent=RegisteredResponse(
                service="auth",
                path="/v2/oauth2/token",
                method="POST",
                json=[
                    token_doc(COMPUTE_RS, DEPENDENT_SCOPES[0], p.compute, p.compute_refresh),
                    token_doc(TRANSFER_RS, DEPENDENT_SCOPES[1], p.transfer, p.transfer_refresh),
                ],
                match=[
                    matchers.urlencoded_params_matcher(
                        {
                            "grant_type": DEPENDENT_GRANT,
                            "token": p.token,
                            "access_type": "offline",
                            "scope": " ".join(DEPENDENT_SCOPES),
                        }
                    )
                ],
            )
        )
        return p

    def introspection(
        self,
        token: str,
        who: Person | None = None,
        *,
        active: bool = True,
        scope: str = SCOPE,
        exp: float | None = None,
        replace: bool = False,
    ) -> None:
        """What introspecting ``token`` answers (``who``: whose it is; ``replace``: instead
        of the introspection registered first, for a token whose answer changes)."""
        now = int(time.time())
        doc: dict[str, Any] = {"active": active}
        if active:
            assert who is not None
            doc.update(
                scope=scope,
                client_id=str(uuid.uuid4()),
                sub=who.sub,
                username=who.username,
                name=who.username.split("@")[0].title(),
                email=who.username,
                iat=now - 60,
                nbf=now - 60,
                exp=int(exp if exp is not None else now + 3600),
                aud=[str(SERVICE_CLIENT), "auth.globus.org"],
                iss="https://auth.globus.org",
                token_type="Bearer",
                identity_set=[who.sub, str(uuid.uuid4())],
            )
        answer = RegisteredResponse(
            service="auth",
            path="/v2/oauth2/token/introspect",
            method="POST",
            json=doc,
            match=[matchers.urlencoded_params_matcher({"token": token, "include": "identity_set"})],
        )
        if replace:
            answer.replace(requests_mock=self.mock)
        else:
            self._load(introspect=answer)

    def refresh(self, refresh_token: str, resource_server: str, new_access: str) -> None:
        """The refresh grant for ``refresh_token`` answers a new access token."""
        scope = DEPENDENT_SCOPES[0] if resource_server == COMPUTE_RS else DEPENDENT_SCOPES[1]
        doc = {**token_doc(resource_server, scope, new_access, refresh_token), "other_tokens": []}
        self._load(refresh=self._refresh_response(refresh_token, json=doc))

    def refuse_refresh(self, refresh_token: str) -> None:
        """The refresh grant for ``refresh_token`` is refused (revoked): ``invalid_grant``."""
        self._load(
            refresh=self._refresh_response(
                refresh_token, json={"error": "invalid_grant"}, status=400
            )
        )

    @staticmethod
    def _refresh_response(refresh_token: str, **kw: Any) -> RegisteredResponse:
        return RegisteredResponse(
            service="auth",
            path="/v2/oauth2/token",
            method="POST",
            match=[
                matchers.urlencoded_params_matcher(
                    {"grant_type": "refresh_token", "refresh_token": refresh_token}
                )
            ],
            **kw,
        )

    # --- what the service asked --------------------------------------------------------------
    def calls(self, url: str) -> list[dict[str, str]]:
        return [form(c.request) for c in self.mock.calls if c.request.url == url]

    def grants(self, p: Person) -> int:
        return sum(
            1
            for f in self.calls(TOKEN_URL)
            if f.get("grant_type") == DEPENDENT_GRANT and f.get("token") == p.token
        )

    def revoked(self) -> list[str]:
        return [f["token"] for f in self.calls(REVOKE_URL)]


def token_doc(rs: str, scope: str, access: str, refresh: str | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "access_token": access,
        "scope": scope,
        "expires_in": 3600,
        "token_type": "Bearer",
        "resource_server": rs,
    }
    if refresh is not None:
        doc["refresh_token"] = refresh
    return doc
