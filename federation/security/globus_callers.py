"""Callers who are Globus identities: the service acts for each with their own tokens.

In the service's ``globus`` auth mode (``service: {auth: globus}`` in ``federation.yaml``)
a caller sends a Globus Auth access token for the service's scope. :class:`GlobusCallers`

* **introspects** it with the service's confidential client
  (``oauth2_token_introspect``, ``include=identity_set``) and refuses an inactive
  (revoked), expired or wrong-scope token with :class:`CallerRefused`, whose message and
  hint say what to do (the service answers 401 with them); an accepted token is
  remembered for ``introspect_cache_s`` (by its SHA-256, in memory only);
* names the caller by the identity's **username** (``alice@uni.edu``; its ``sub`` when the
  username is not a valid caller name), the name policies, ownership and the audit log use;
* gets the caller's **dependent tokens** (``oauth2_get_dependent_tokens`` with refresh
  tokens, i.e. offline access) for Globus Compute and Transfer the first time, and keeps
  them per identity, **sealed** (:mod:`federation.security.sealed`);
* hands out :class:`CallerAuthorizer` objects that put the caller's access token on each
  request to Compute or Transfer and **refresh** it through the service's client when it
  expires (the refreshed token is sealed and stored again); a refresh token Globus
  refuses (revoked, expired) drops the caller's stored tokens, and the caller's next
  request gets new ones;
* **logs a caller out**: revokes every stored token (``oauth2_revoke_token``) and deletes
  them.

What stays the service's own identity is named in docs/deploy.md (probes, for one).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import globus_sdk
from globus_sdk.authorizers import RenewingAuthorizer
from globus_sdk.scopes import ComputeScopes, TransferScopes
from globus_sdk.token_storage import TokenStorageData
from pydantic import Field, model_validator

from federation.core.errors import AuthError, LoginRequiredError
from federation.core.model import Frozen
from federation.security.sealed import SealedTokenStorage, load_key
from federation.security.tokens import RESERVED_CALLERS, TOKEN_RE

logger = logging.getLogger(__name__)

DEFAULT_SECRET_ENV = "FEDERATION_SERVICE_CLIENT_SECRET"
COMPUTE_RS = ComputeScopes.resource_server
TRANSFER_RS = TransferScopes.resource_server
DEPENDENT_SCOPES = (str(ComputeScopes.all), str(TransferScopes.all))
"""What the service asks dependent tokens for: the scopes its own scope depends on."""
_NAME = re.compile(r"[A-Za-z0-9._@-]{1,64}")


class ServiceAuth(Frozen):
    """The ``service:`` block of ``federation.yaml``: who callers of the HTTP service (and
    of the MCP server's HTTP transport) are."""

    auth: Literal["tokens", "globus"] = "tokens"
    """``tokens``: the service's own bearer tokens (``federation token issue``), and the
    service acts on every site under its one Globus login. ``globus``: each caller sends a
    Globus Auth token for the service's scope, and the service acts with their tokens."""
    client_id: uuid.UUID | None = None
    """The service's confidential client (app.globus.org > Settings > Developers)."""
    client_secret_env: str = Field(default=DEFAULT_SECRET_ENV, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """The environment variable holding that client's secret (never this file)."""
    scope: str | None = None
    """The scope callers get tokens for; default ``https://auth.globus.org/scopes/
    <client_id>/federation``. It must depend on Globus Compute's and Transfer's."""
    token_db: Path | None = None
    """Where callers' sealed tokens are kept (default ``<home>/service/callers.db``)."""
    token_key_file: Path | None = None
    """The sealing key (mode 0600; default ``<home>/service/callers.key``, made on first
    use) unless ``$FEDERATION_TOKEN_KEY`` holds it."""
    introspect_cache_s: float = Field(default=30.0, ge=0, le=600)
    """An accepted token is trusted this long without asking Globus Auth again (at most
    until it expires). A token revoked meanwhile is refused once this has passed."""

    @model_validator(mode="after")
    def _client_for_globus(self) -> ServiceAuth:
        if self.auth == "globus" and self.client_id is None:
            raise ValueError(
                "auth globus needs client_id: the service's confidential client "
                "(app.globus.org > Settings > Developers > Register a service API)"
            )
        return self

    @property
    def effective_scope(self) -> str:
        return self.scope or f"https://auth.globus.org/scopes/{self.client_id}/federation"


class CallerRefused(AuthError):
    """A caller's token is not accepted; ``hint`` says what to do (answered as 401)."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


class AuthUnavailable(AuthError):
    """Globus Auth could not be asked about a token just now (answered as 503)."""


class CallerLoginRequired(LoginRequiredError):
    """The service holds no usable tokens for this caller any more: they send a request
    with a fresh token for the service's scope, and the service asks for new ones."""


@dataclass(frozen=True)
class GlobusIdentity:
    """Who a token belongs to, as Globus Auth's introspection says."""

    caller: str
    sub: str
    username: str
    identity_set: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    expires_at: float | None = None


def caller_name(username: str, sub: str) -> str:
    """The caller name of an identity: its username when that is a valid caller name (and
    not one of the built-in callers), else its ``sub``."""
    if _NAME.fullmatch(username) and username not in RESERVED_CALLERS:
        return username
    return sub


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _oauth_error(e: globus_sdk.GlobusAPIError) -> str | None:
    raw = e.raw_json if isinstance(e.raw_json, dict) else {}
    err = raw.get("error")
    return str(err) if isinstance(err, str) else None


@dataclass
class _Known:
    identity: GlobusIdentity
    until: float


@dataclass
class LogoutReport:
    """What a logout did: tokens revoked at Globus Auth, and any that could not be."""

    caller: str
    revoked: int = 0
    failed: list[str] = field(default_factory=list)
    deleted: int = 0


class GlobusCallers:
    """Authenticate callers by their Globus tokens, and act for them (module docstring).

    ``auth_client``: the service's ``ConfidentialAppAuthClient`` (default: made from the
    settings, the secret read from ``client_secret_env``); ``home``: where the sealed
    token file and key live unless the settings name them.
    """

    def __init__(
        self,
        settings: ServiceAuth,
        home: Path,
        *,
        auth_client: globus_sdk.ConfidentialAppAuthClient | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if settings.client_id is None:
            raise AuthError("GlobusCallers needs service.client_id (the service's client)")
        self.settings = settings
        self.scope = settings.effective_scope
        self.auth_client = auth_client or globus_sdk.ConfidentialAppAuthClient(
            str(settings.client_id), _secret(settings)
        )
        key = load_key(settings.token_key_file or home / "service" / "callers.key", create=True)
        self.storage = SealedTokenStorage(settings.token_db or home / "service" / "callers.db", key)
        self.resource_servers = (COMPUTE_RS, TRANSFER_RS)
        self._clock = clock
        self._lock = threading.Lock()
        self._known: dict[str, _Known] = {}
        self._grant_locks: dict[str, threading.Lock] = {}
        self._generation: dict[str, int] = {}
        self.on_logout: list[Callable[[str], None]] = []
        """Called with the caller's name after a logout (their site sets are dropped)."""

    # --- who is calling ---------------------------------------------------------------------
    def authenticate(self, token: str) -> str:
        """The caller name for ``token``; :class:`CallerRefused` (with what to do) when it
        is not an active token for the service's scope, :class:`AuthUnavailable` when
        Globus Auth cannot be asked. The caller's dependent tokens are fetched the first
        time (and again after a logout or a refused refresh)."""
        ident = self.identify(token)
        self._ensure_tokens(ident, token)
        return ident.caller

    def identify(self, token: str) -> GlobusIdentity:
        """Introspect ``token`` (or recall an accepted one) and check it."""
        key = _hash(token)
        now = self._clock()
        with self._lock:
            known = self._known.get(key)
            if known is not None and now < known.until:
                return known.identity
            self._known.pop(key, None)
        if TOKEN_RE.fullmatch(token):  # never sent to Globus: it is not Globus's
            raise CallerRefused(
                "this service takes Globus Auth tokens, not `federation token issue` tokens",
                self.login_hint(),
            )
        try:
            info = self.auth_client.oauth2_token_introspect(token, include="identity_set")
        except globus_sdk.GlobusAPIError as e:
            if e.http_status in (400, 401, 403):
                logger.error("Globus Auth refused the service's client: %s", e.http_status)
                raise AuthUnavailable(
                    f"Globus Auth refused this service's own client ({e.http_status} "
                    f"{_oauth_error(e) or e.code}): its operator must check "
                    f"service.client_id and ${self.settings.client_secret_env}"
                ) from None
            raise AuthUnavailable(
                f"Globus Auth could not check the token just now ({e.http_status}); retry"
            ) from None
        except globus_sdk.GlobusConnectionError as e:
            raise AuthUnavailable(f"Globus Auth cannot be reached just now ({e}); retry") from None
        ident = self._check(info.data if isinstance(info.data, dict) else {}, now)
        until = now + self.settings.introspect_cache_s
        if ident.expires_at is not None:
            until = min(until, ident.expires_at)
        with self._lock:
            if len(self._known) > 4096:  # forget the expired ones now and then
                for k in [k for k, v in self._known.items() if v.until <= now]:
                    del self._known[k]
            self._known[key] = _Known(ident, until)
        return ident

    def _check(self, info: dict[str, Any], now: float) -> GlobusIdentity:
        if not info.get("active"):
            raise CallerRefused(
                "the Globus token is not active (it expired, was revoked, or is not a "
                "Globus Auth access token)",
                self.login_hint(),
            )
        exp = info.get("exp")
        if isinstance(exp, int | float) and exp <= now:
            raise CallerRefused("the Globus token has expired", self.login_hint())
        scopes = tuple(str(info.get("scope") or "").split())
        if self.scope not in scopes:
            raise CallerRefused(
                f"the Globus token is not for this service: it carries "
                f"{', '.join(scopes) or 'no scope'}, and this service needs {self.scope}",
                self.login_hint(),
            )
        aud = info.get("aud")
        if isinstance(aud, list) and aud and str(self.settings.client_id) not in aud:
            raise CallerRefused(
                "the Globus token was not issued for this service (its audience does not "
                "name the service's client)",
                self.login_hint(),
            )
        sub = str(info.get("sub") or "")
        if not sub:
            raise CallerRefused("the Globus token names no identity", self.login_hint())
        username = str(info.get("username") or sub)
        return GlobusIdentity(
            caller=caller_name(username, sub),
            sub=sub,
            username=username,
            identity_set=tuple(str(i) for i in info.get("identity_set") or ()),
            scopes=scopes,
            expires_at=float(exp) if isinstance(exp, int | float) else None,
        )

    def login_hint(self) -> str:
        return (
            f"send `Authorization: Bearer <a Globus access token for scope {self.scope}>`; "
            f"get one with `federation token globus --scope {self.scope}`"
        )

    # --- their tokens for Compute and Transfer ------------------------------------------------
    def _ensure_tokens(self, ident: GlobusIdentity, token: str) -> None:
        with self._lock:
            lock = self._grant_locks.setdefault(ident.sub, threading.Lock())
        with lock:
            storage = self.storage.for_namespace(ident.sub)
            have = storage.get_token_data_by_resource_server()
            known = self.storage.identity(ident.caller)
            if all(rs in have for rs in self.resource_servers) and known and not known[2]:
                return
            try:
                resp = self.auth_client.oauth2_get_dependent_tokens(
                    token, refresh_tokens=True, scope=list(DEPENDENT_SCOPES)
                )
            except globus_sdk.GlobusAPIError as e:
                self._forget_token(token)
                raise CallerRefused(
                    "Globus Auth gave the service no Globus Compute and Transfer tokens for "
                    f"you ({e.http_status} {_oauth_error(e) or e.code})",
                    "log in again, consenting to the service's scope (`federation token "
                    "globus --force`); its operator must make the scope depend on Globus "
                    "Compute and Transfer (docs/deploy.md)",
                ) from None
            except globus_sdk.GlobusConnectionError as e:
                self._forget_token(token)
                raise AuthUnavailable(f"Globus Auth cannot be reached just now ({e})") from None
            got = resp.by_resource_server
            missing = [rs for rs in self.resource_servers if rs not in got]
            if missing:
                self._forget_token(token)
                raise CallerRefused(
                    f"Globus Auth gave the service no token for {', '.join(missing)} for you",
                    "log in again consenting to every scope the service asks for "
                    "(`federation token globus --force`)",
                )
            storage.store_token_data_by_resource_server(
                {rs: _data(rs, d, ident.sub) for rs, d in got.items()}
            )
            self.storage.remember(ident.caller, ident.sub, ident.username)
            self._bump(ident.sub)
            logger.info("dependent tokens for %s stored (%s)", ident.caller, ", ".join(got))

    def identity_of(self, caller: str) -> tuple[str, str, bool] | None:
        """(sub, username, logged out) of a caller known as a Globus identity, else None."""
        return self.storage.identity(caller)

    def callers(self) -> list[tuple[str, str]]:
        """(caller, sub) of every Globus caller that has not logged out."""
        return self.storage.identities()

    def authorizer(self, caller: str, resource_server: str) -> CallerAuthorizer:
        """What puts ``caller``'s token for ``resource_server`` on a request."""
        ident = self.storage.identity(caller)
        if ident is None:
            raise CallerLoginRequired(f"{caller} has never called this service with a Globus token")
        return CallerAuthorizer(self, caller, ident[0], resource_server)

    def generation(self, sub: str) -> int:
        with self._lock:
            return self._generation.get(sub, 0)

    def _bump(self, sub: str) -> None:
        with self._lock:
            self._generation[sub] = self._generation.get(sub, 0) + 1

    def stored(self, caller: str, sub: str, resource_server: str) -> TokenStorageData:
        """The caller's stored token, or :class:`CallerLoginRequired` saying what to do."""
        ident = self.storage.identity(caller)
        data = self.storage.for_namespace(sub).get_token_data(resource_server)
        if data is None or not data.refresh_token or (ident is not None and ident[2]):
            gone = "logged out" if ident is not None and ident[2] else "no longer valid"
            raise CallerLoginRequired(
                f"the service holds no Globus tokens of {caller} for {resource_server} "
                f"({gone}): send any request to the service with a fresh Globus token for "
                f"scope {self.scope} (`federation token globus`); the service then gets new "
                "ones"
            )
        return data

    def refreshed(self, sub: str, resource_server: str, data: dict[str, Any], old_rt: str) -> None:
        """Seal and keep a refreshed token (the refresh token kept when none came back)."""
        self.storage.for_namespace(sub).store_token_data_by_resource_server(
            {resource_server: _data(resource_server, {"refresh_token": old_rt, **data}, sub)}
        )

    def refresh_refused(self, caller: str, sub: str) -> None:
        """Globus refused the caller's refresh token: drop their tokens; their next request
        (with a fresh token) gets new ones."""
        self.storage.for_namespace(sub).forget()
        self._bump(sub)
        self._forget_caller(caller)
        logger.warning("Globus refused the refresh token of %s: their tokens were dropped", caller)

    def _forget_token(self, token: str) -> None:
        with self._lock:
            self._known.pop(_hash(token), None)

    def _forget_caller(self, caller: str) -> None:
        with self._lock:
            for k in [k for k, v in self._known.items() if v.identity.caller == caller]:
                del self._known[k]

    # --- logout --------------------------------------------------------------------------------
    def logout(self, caller: str) -> LogoutReport:
        """Revoke every token the service holds for ``caller`` and delete them."""
        report = LogoutReport(caller)
        ident = self.storage.identity(caller)
        if ident is None:
            return report
        storage = self.storage.for_namespace(ident[0])
        for rs, data in storage.get_token_data_by_resource_server().items():
            for what, tok in (("refresh", data.refresh_token), ("access", data.access_token)):
                if not tok:
                    continue
                try:
                    self.auth_client.oauth2_revoke_token(tok)
                    report.revoked += 1
                except (globus_sdk.GlobusAPIError, globus_sdk.GlobusConnectionError) as e:
                    report.failed.append(f"{rs} {what} token: {type(e).__name__}")
        report.deleted = storage.forget()
        self.storage.logged_out(caller)
        self._bump(ident[0])
        self._forget_caller(caller)
        for hook in list(self.on_logout):
            hook(caller)
        return report


def _data(rs: str, d: dict[str, Any], sub: str) -> TokenStorageData:
    return TokenStorageData(
        resource_server=rs,
        identity_id=sub,
        scope=str(d.get("scope", "")),
        access_token=str(d["access_token"]),
        refresh_token=d.get("refresh_token"),
        expires_at_seconds=int(d["expires_at_seconds"]),
        token_type=d.get("token_type"),
    )


def _secret(settings: ServiceAuth) -> str:
    secret = os.environ.get(settings.client_secret_env, "")
    if not secret:
        raise AuthError(
            f"service auth globus: ${settings.client_secret_env} is not set. Export the "
            f"secret of client {settings.client_id} in the service's environment (e.g. an "
            "EnvironmentFile= of its systemd unit), never in federation.yaml."
        )
    return secret


class CallerAuthorizer(RenewingAuthorizer[globus_sdk.OAuthRefreshTokenResponse]):
    """``Authorization: Bearer <caller's token>`` for one resource server.

    The token is read from the sealed storage (again whenever the caller's tokens change:
    a new grant, a logout), refreshed through the service's client when it expires or a
    service answers 401, and the refreshed one is sealed and stored. A refresh token
    Globus refuses drops the caller's tokens and raises :class:`CallerLoginRequired`.
    """

    def __init__(self, callers: GlobusCallers, caller: str, sub: str, resource_server: str) -> None:
        self._callers = callers
        self.caller, self.sub, self.resource_server = caller, sub, resource_server
        self.refresh_token: str | None = None
        self._seen = -1
        # a placeholder token that is already expired: nothing is fetched until first use
        super().__init__(access_token="", expires_at=0)

    def ensure_valid_token(self) -> None:
        gen = self._callers.generation(self.sub)
        if gen != self._seen:
            data = self._callers.stored(self.caller, self.sub, self.resource_server)
            self.access_token, self.expires_at = data.access_token, data.expires_at_seconds
            self.refresh_token, self._seen = data.refresh_token, gen
        super().ensure_valid_token()

    def _get_token_response(self) -> globus_sdk.OAuthRefreshTokenResponse:
        if not self.refresh_token:
            self._callers.stored(self.caller, self.sub, self.resource_server)  # raises
        assert self.refresh_token is not None
        try:
            return self._callers.auth_client.oauth2_refresh_token(self.refresh_token)
        except globus_sdk.GlobusAPIError as e:
            if _oauth_error(e) != "invalid_grant":
                raise
            self._callers.refresh_refused(self.caller, self.sub)
            self._seen = self._callers.generation(self.sub)
            self.refresh_token = None
            raise CallerLoginRequired(
                f"Globus refused the refresh token the service held for {self.caller} "
                "(revoked, or unused for too long): send any request with a fresh Globus "
                f"token for scope {self._callers.scope} (`federation token globus`) and "
                "retry"
            ) from None

    def _extract_token_data(self, res: globus_sdk.OAuthRefreshTokenResponse) -> dict[str, Any]:
        found: Iterable[dict[str, Any]] = res.by_resource_server.values()
        tokens = list(found)
        if len(tokens) != 1:
            raise AuthError("a token refresh answered with other than one token")
        old = self.refresh_token or ""
        data = tokens[0]
        if data.get("refresh_token"):
            self.refresh_token = str(data["refresh_token"])
        self._callers.refreshed(self.sub, self.resource_server, data, old)
        return data
