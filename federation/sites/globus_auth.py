"""Globus Auth for the coordinator: a ``UserApp`` for people, a ``ClientApp`` for the service.

* ``mode: user`` — the native-app login flow (``federation login`` prints a URL, you paste
  the code back); refresh tokens are kept, so later runs need no browser.
* ``mode: client_credentials`` — the unattended coordinator service authenticates as a
  registered Globus client (id in ``federation.yaml``, secret in an environment variable,
  never in the file) and fetches its own tokens.

Tokens are stored where globus-sdk stores them (``~/.globus/app/<client_id>/<app_name>/
tokens.json``) unless ``token_storage`` names a file. Nothing here ever prompts on its own:
a missing, expired or revoked token raises :class:`~federation.core.errors.LoginRequiredError`
(or :class:`~federation.core.errors.ConsentRequiredError`) saying exactly what to run.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import globus_sdk
from globus_sdk.gare import GlobusAuthorizationParameters, to_gare
from globus_sdk.globus_app.config import resolve_by_login_flow
from globus_sdk.scopes import ComputeScopes, TransferScopes
from globus_sdk.token_storage import (
    JSONTokenStorage,
    SQLiteTokenStorage,
    TokenStorage,
    TokenValidationError,
)
from globus_sdk.token_storage.validating_token_storage.errors import MissingTokenError
from pydantic import Field, model_validator

from federation.core.errors import (
    AuthError,
    ConsentRequiredError,
    FederationError,
    GlobusUnreachableError,
    LoginRequiredError,
    PermissionDeniedError,
    SiteUnavailableError,
)
from federation.core.model import Frozen

GLOBUS_COMPUTE_NATIVE_CLIENT_ID = uuid.UUID("4cf29807-cf21-49ec-9443-ff9a3fb9f81c")
"""The public native-app client the Globus Compute SDK itself logs in with."""

DEFAULT_SECRET_ENV = "FEDERATION_GLOBUS_CLIENT_SECRET"

SCOPES: dict[str, list[str]] = {
    ComputeScopes.resource_server: [str(ComputeScopes.all)],
    TransferScopes.resource_server: [str(TransferScopes.all)],
}
"""What the coordinator asks consent for: Globus Compute (tasks) and Transfer (move_data)."""


class AuthSettings(Frozen):
    """The ``auth:`` block of ``federation.yaml``."""

    mode: Literal["user", "client_credentials"] = "user"
    client_id: uuid.UUID | None = None
    """The Globus client (app.globus.org): a native app for ``user`` (default: the Globus
    Compute SDK's own), a confidential client for ``client_credentials`` (required)."""
    client_secret_env: str = Field(default=DEFAULT_SECRET_ENV, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """The environment variable holding the client secret (``client_credentials`` only)."""
    token_storage: Path | None = None
    """Token file (``.json``, or ``.db`` for SQLite); default: where globus-sdk keeps them."""
    app_name: str = Field(default="federation", pattern=r"^[A-Za-z0-9_.-]+$")

    @model_validator(mode="after")
    def _client_for_mode(self) -> AuthSettings:
        if self.mode == "client_credentials" and self.client_id is None:
            raise ValueError(
                "mode client_credentials needs client_id (register a service client at "
                "app.globus.org > Settings > Developers)"
            )
        return self

    @property
    def effective_client_id(self) -> uuid.UUID:
        return self.client_id or GLOBUS_COMPUTE_NATIVE_CLIENT_ID

    @property
    def token_path(self) -> Path:
        """The token file: ``token_storage``, or globus-sdk's own default for this app."""
        if self.token_storage is not None:
            return self.token_storage.expanduser()
        default = JSONTokenStorage.for_globus_app(
            self.effective_client_id, self.app_name, globus_sdk.GlobusAppConfig(), "DEFAULT"
        )
        assert isinstance(default, JSONTokenStorage)
        return Path(default.filepath)

    @property
    def storage_description(self) -> str:
        return str(self.token_path)

    def login_hint(self, force: bool = True) -> str:
        """The command (or setting) that gets fresh tokens in this mode."""
        if self.mode == "client_credentials":
            return (
                f"check that {self.client_secret_env} holds a valid secret of client "
                f"{self.client_id} (app.globus.org > Settings > Developers), then run "
                "`federation login`"
            )
        return "run `federation login --force`" if force else "run `federation login`"


def _token_storage(settings: AuthSettings) -> TokenStorage | Literal["json"]:
    path = settings.token_storage
    if path is None:
        return "json"  # globus-sdk's default location, per client id and app name
    path = path.expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix in (".db", ".sqlite"):
        return SQLiteTokenStorage(path)
    return JSONTokenStorage(path)


def client_secret(settings: AuthSettings) -> str:
    secret = os.environ.get(settings.client_secret_env, "")
    if not secret:
        raise LoginRequiredError(
            f"auth mode client_credentials: ${settings.client_secret_env} is not set. "
            f"Export the secret of client {settings.client_id} in the service's environment "
            "(e.g. an EnvironmentFile= of its systemd unit), never in federation.yaml."
        )
    return secret


def build_app(
    settings: AuthSettings,
    *,
    interactive: bool = False,
    extra_scopes: list[str] | None = None,
) -> globus_sdk.GlobusApp:
    """The ``GlobusApp`` for ``settings``.

    ``interactive``: let globus-sdk run the login flow when tokens are missing (only for
    ``federation login``); otherwise a missing token raises, so a service never hangs on
    a prompt. ``extra_scopes``: Transfer/collection scopes a GARE asked for.
    """
    config = globus_sdk.GlobusAppConfig(
        token_storage=_token_storage(settings),
        request_refresh_tokens=True,
        token_validation_error_handler=resolve_by_login_flow if interactive else None,
    )
    scopes: dict[str, list[str]] = {k: list(v) for k, v in SCOPES.items()}
    if extra_scopes:
        scopes.setdefault(TransferScopes.resource_server, []).extend(extra_scopes)
    if settings.mode == "client_credentials":
        return globus_sdk.ClientApp(
            settings.app_name,
            client_id=settings.effective_client_id,
            client_secret=client_secret(settings),
            scope_requirements=scopes,
            config=config,
        )
    return globus_sdk.UserApp(
        settings.app_name,
        client_id=settings.effective_client_id,
        scope_requirements=scopes,
        config=config,
    )


def login(
    settings: AuthSettings, *, force: bool = False, extra_scopes: list[str] | None = None
) -> list[str]:
    """Log in (user: the native-app flow on this terminal; client: fetch tokens).

    Returns the resource servers that now have tokens.
    """
    app = build_app(settings, interactive=True, extra_scopes=extra_scopes)
    with auth_errors(settings):
        app.login(force=force)
        for rs in app.scope_requirements:
            app.get_authorizer(rs)  # proves a usable token is stored for each
    return sorted(app.scope_requirements)


def _oauth_error(exc: globus_sdk.GlobusAPIError) -> str | None:
    raw = exc.raw_json if isinstance(exc.raw_json, dict) else {}
    err = raw.get("error")
    return str(err) if isinstance(err, str) else None


def _consent_message(params: GlobusAuthorizationParameters, settings: AuthSettings) -> str:
    needs = []
    if params.required_scopes:
        needs.append("consent to " + ", ".join(params.required_scopes))
    if params.session_required_identities:
        needs.append("a session with identity " + ", ".join(params.session_required_identities))
    if params.session_required_single_domain:
        needs.append("a login from " + ", ".join(params.session_required_single_domain))
    if params.session_required_policies:
        needs.append("a session meeting policy " + ", ".join(params.session_required_policies))
    if params.session_required_mfa:
        needs.append("multi-factor authentication")
    what = "; ".join(needs) or "a fresh authorization"
    if settings.mode == "client_credentials":
        return (
            f"Globus requires {what} that client {settings.client_id} lacks; grant it "
            "(for a collection: add the client's identity to the collection's permissions "
            "or data-access consent), then run `federation login`."
        )
    scope_args = "".join(f" --scope '{s}'" for s in params.required_scopes or ())
    return f"Globus requires {what}: run `federation login --force{scope_args}`."


def translate(
    exc: BaseException, settings: AuthSettings, *, what: str = "Globus"
) -> FederationError | None:
    """A clear :class:`FederationError` for a globus-sdk auth or API error, else None."""
    if isinstance(exc, FederationError):
        return exc
    if isinstance(exc, MissingTokenError):
        return LoginRequiredError(
            f"no Globus tokens for {exc.resource_server} in {settings.storage_description}: "
            f"{settings.login_hint(force=False)}."
        )
    if isinstance(exc, TokenValidationError):
        return LoginRequiredError(
            f"stored Globus tokens are not usable ({exc}): {settings.login_hint()}."
        )
    if isinstance(exc, globus_sdk.NetworkError):
        return GlobusUnreachableError(unreachable_message(exc, what))
    if not isinstance(exc, globus_sdk.GlobusAPIError):
        return None
    oauth = _oauth_error(exc)
    if oauth == "invalid_grant":
        return LoginRequiredError(
            "Globus refused the stored refresh token (invalid_grant: it expired after six "
            "months unused, or was revoked, e.g. by a logout or password change): "
            f"{settings.login_hint()}."
        )
    if oauth in ("invalid_client", "unauthorized_client"):
        return LoginRequiredError(
            f"Globus Auth rejected client {settings.effective_client_id} ({oauth}): "
            f"{settings.login_hint()}."
        )
    gare = to_gare(exc)
    if gare is not None:
        return ConsentRequiredError(_consent_message(gare.authorization_parameters, settings))
    if exc.http_status == 401:
        return LoginRequiredError(
            f"{what} rejected the access token (401 {exc.code}): {settings.login_hint()}."
        )
    if exc.http_status == 403:
        return PermissionDeniedError(
            f"{what} refused this identity (403 {exc.code}: {exc.message}). Ask the "
            "endpoint's or collection's administrator to allow your Globus identity (or "
            "the service client's), or check the id in federation.yaml."
        )
    if exc.http_status == 429:
        after = exc.headers.get("Retry-After") if exc.headers else None
        wait = f" (Retry-After: {after} s)" if after else ""
        return SiteUnavailableError(
            f"{what} is rate-limiting this client (429){wait}; the SDK already retried. "
            "Wait a minute, and lower the probe frequency (probe_interval_s) if it recurs."
        )
    return None


def unreachable_message(exc: globus_sdk.NetworkError, what: str) -> str:
    """One line for a Globus service this machine cannot reach, and what to check."""
    from urllib.parse import urlsplit

    cause = getattr(exc, "exc", None)
    url = str(getattr(getattr(cause, "request", None), "url", None) or "")
    host = urlsplit(url).netloc
    at = f" at {host}" if host else ""
    kind = "timed out" if isinstance(exc, globus_sdk.GlobusTimeoutError) else "no connection"
    try_it = f", e.g. `curl -sI https://{host}`" if host else ""
    return (
        f"no route to {what}{at} ({kind}, after the SDK's retries): check this machine's "
        f"network route to Globus (DNS, firewall, HTTPS_PROXY){try_it}"
    )


@contextmanager
def auth_errors(settings: AuthSettings, *, what: str = "Globus") -> Iterator[None]:
    """Re-raise globus-sdk auth/API errors as :func:`translate` describes (others pass)."""
    try:
        yield
    except Exception as e:
        clear = translate(e, settings, what=what)
        if clear is None or clear is e:
            raise
        raise clear from e


def token_status(settings: AuthSettings) -> dict[str, Any]:
    """What is stored, without network access: resource server -> expiry and refresh."""
    path = settings.token_path
    if not path.exists():
        return {}
    storage: TokenStorage = (
        SQLiteTokenStorage(path) if path.suffix in (".db", ".sqlite") else JSONTokenStorage(path)
    )
    try:
        data = storage.get_token_data_by_resource_server()
    except Exception as e:  # a corrupt file is worth a clear line, not a traceback
        raise AuthError(f"cannot read tokens from {settings.storage_description}: {e}") from e
    return {
        rs: {"expires_at_s": d.expires_at_seconds, "refreshable": bool(d.refresh_token)}
        for rs, d in data.items()
    }


# --- a caller of a `service.auth: globus` service: a token for the service's scope ------------
SERVICE_APP_NAME = "federation-service"
_SCOPE_RS = re.compile(r"^https://auth\.globus\.org/scopes/([0-9a-fA-F-]{36})/")


def scope_resource_server(scope: str) -> str:
    """The resource server of a service scope (the client that owns it)."""
    m = _SCOPE_RS.match(scope)
    if m is None:
        raise AuthError(
            f"{scope!r} is not a service scope (https://auth.globus.org/scopes/<client id>/"
            "<name>): ask the service's operator for it"
        )
    return m.group(1)


def service_app(
    scope: str,
    *,
    client_id: uuid.UUID | None = None,
    token_storage: Path | None = None,
    interactive: bool = True,
) -> globus_sdk.UserApp:
    """The native-app login of a person calling a ``service.auth: globus`` service: tokens
    for the service's ``scope`` (consented once, refreshed after), kept where globus-sdk
    keeps them (or ``token_storage``)."""
    settings = AuthSettings(
        mode="user", client_id=client_id, token_storage=token_storage, app_name=SERVICE_APP_NAME
    )
    config = globus_sdk.GlobusAppConfig(
        token_storage=_token_storage(settings),
        request_refresh_tokens=True,
        token_validation_error_handler=resolve_by_login_flow if interactive else None,
    )
    return globus_sdk.UserApp(
        SERVICE_APP_NAME,
        client_id=settings.effective_client_id,
        scope_requirements={scope_resource_server(scope): [scope]},
        config=config,
    )


def service_token(app: globus_sdk.UserApp, scope: str, *, force: bool = False) -> str:
    """A current access token for ``scope`` (logging in on this terminal when needed)."""
    settings = AuthSettings(mode="user")
    with auth_errors(settings, what="Globus Auth"):
        if force:
            app.login(force=True)
        header = app.get_authorizer(scope_resource_server(scope)).get_authorization_header()
    if not header or not header.startswith("Bearer "):
        raise LoginRequiredError(f"no token for {scope}: run `federation token globus --force`")
    return header[len("Bearer ") :]
