"""Bearer tokens for the service: issued and revoked from the CLI, stored hashed in SQLite.

A token reads ``fedtok_<id>_<secret>``. The id is public (it names the token in ``token
list`` and ``token revoke``); only the SHA-256 of the whole token is stored, so the database
never holds a usable credential. The token is shown once, when issued.

Tokens are scoped per caller: each token names its caller, and a caller may have a
:class:`~federation.security.policy.CallerPolicy` kept here (``callers`` table), which the
policy gate applies to every request made with any of that caller's tokens.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from pydantic import Field

from federation.core.model import Frozen
from federation.core.paths import federation_home
from federation.core.sqlite import Migration, connect, migrate
from federation.security.caller import CallerPolicy

PREFIX = "fedtok_"
TOKEN_RE = re.compile(r"fedtok_[0-9a-f]{12}_[A-Za-z0-9_-]{20,}")
_PARSE = re.compile(r"^fedtok_([0-9a-f]{12})_[A-Za-z0-9_-]{20,}$")
_TOUCH_EVERY_S = 60.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    created_at TEXT NOT NULL,
    revoked_at TEXT,
    last_used_at TEXT
);
CREATE TABLE IF NOT EXISTS callers (
    name TEXT PRIMARY KEY,
    policy TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
"""


class TokenInfo(Frozen):
    """A token as listed: never the secret."""

    id: str
    name: str
    created_at: datetime
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class IssuedToken(Frozen):
    """A newly issued token: ``token`` is shown this once and stored only as a hash."""

    id: str
    name: str
    token: str = Field(repr=False)
    created_at: datetime


MIGRATIONS: tuple[Migration, ...] = (_SCHEMA,)
"""The token store's schema, version by version (``PRAGMA user_version``)."""


def default_token_db(home: Path | None = None) -> Path:

    return (home or federation_home()) / "service" / "tokens.db"


RESERVED_CALLERS = frozenset({"local", "mcp"})
"""Callers that are not token holders: ``local`` (in-process, an operator of its own
coordinator) and ``mcp`` (the MCP server's stdio user). A token in either name would act
as them, so none is issued."""


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9._@-]{1,64}", name):
        raise ValueError(
            f"token name {name!r}: use 1-64 letters, digits or . _ - @ (who it is for)"
        )


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat()


_RECHECK_S = 0.25
"""How often :class:`TokenStore` asks the file whether it changed (a revocation or a new
policy from another shell takes effect within this)."""


class TokenStore:
    """Issue, list, revoke and verify bearer tokens (thread-safe; one SQLite file)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_token_db()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._touched: dict[str, float] = {}
        self._lock = threading.Lock()
        self._reader: sqlite3.Connection | None = None
        self._version = -1
        self._checked = -_RECHECK_S
        self._rows: dict[tuple[str, str], tuple[object, ...] | None] = {}
        """Rows read since the store last changed (:meth:`_read`): every request asks for
        its token and its caller's policy, several times per submission."""
        db = connect(self.path)
        try:
            migrate(db, MIGRATIONS, name=f"the token store {self.path}")
        finally:
            db.close()
        self.path.chmod(0o600)

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=10)
        try:
            with db:
                yield db
        finally:
            db.close()
            with self._lock:  # this store's own change is seen by its next read at once
                self._rows, self._checked = {}, -_RECHECK_S

    def _read(self, kind: str, key: str, sql: str) -> tuple[object, ...] | None:
        """One row of ``sql`` for ``key``, from memory while the file is unchanged.

        A connection kept open reads ``PRAGMA data_version``, which moves whenever any
        other connection (this store's own writes, ``federation token`` in another shell)
        committed a change: then everything read is forgotten. It is read at most every
        :data:`_RECHECK_S`: a revoked token or a new policy takes effect within that."""
        with self._lock:
            if self._reader is None:
                self._reader = sqlite3.connect(self.path, timeout=10, check_same_thread=False)
            now = time.monotonic()
            if now - self._checked >= _RECHECK_S:
                version = self._reader.execute("PRAGMA data_version").fetchone()[0]
                self._checked = now
                if version != self._version:
                    self._version, self._rows = version, {}
            if (kind, key) not in self._rows:
                self._rows[(kind, key)] = self._reader.execute(sql, (key,)).fetchone()
            return self._rows[(kind, key)]

    def close(self) -> None:
        """Close the connection :meth:`_read` keeps (it reopens when read again)."""
        with self._lock:
            if self._reader is not None:
                self._reader.close()
                self._reader, self._version, self._rows = None, -1, {}
                self._checked = -_RECHECK_S

    def issue(self, name: str, policy: CallerPolicy | None = None) -> IssuedToken:
        """A new token for caller ``name`` (1-64 chars: letters, digits, ``._-@``).

        ``policy``: set (replace) the caller's policy too; it covers all its tokens.
        """
        _check_name(name)
        if name in RESERVED_CALLERS:
            raise ValueError(
                f"token name {name!r} is reserved ({', '.join(sorted(RESERVED_CALLERS))} act "
                "in-process and over MCP's stdio): name the token for the person or agent"
            )
        if policy is not None:
            self.set_policy(name, policy)
        tid = secrets.token_hex(6)
        token = f"{PREFIX}{tid}_{secrets.token_urlsafe(32)}"
        created = _now()
        with self._db() as db:
            db.execute(
                "INSERT INTO tokens (id, name, sha256, created_at) VALUES (?, ?, ?, ?)",
                (tid, name, _hash(token), created),
            )
        return IssuedToken(
            id=tid, name=name, token=token, created_at=datetime.fromisoformat(created)
        )

    def set_policy(self, name: str, policy: CallerPolicy | None) -> None:
        """Set (``None``: remove) the policy of caller ``name``."""
        _check_name(name)
        with self._db() as db:
            if policy is None:
                db.execute("DELETE FROM callers WHERE name = ?", (name,))
            else:
                db.execute(
                    "INSERT INTO callers (name, policy, updated_at) VALUES (?, ?, ?) "
                    "ON CONFLICT(name) DO UPDATE SET policy = excluded.policy, "
                    "updated_at = excluded.updated_at",
                    (name, policy.model_dump_json(), _now()),
                )

    def policy_for(self, caller: str) -> CallerPolicy | None:
        """The policy kept for ``caller``, if any (the gate's token-side policy source)."""
        row = self._read("policy", caller, "SELECT policy FROM callers WHERE name = ?")
        return CallerPolicy.model_validate_json(str(row[0])) if row else None

    def caller_policies(self) -> dict[str, CallerPolicy]:
        with self._db() as db:
            rows = db.execute("SELECT name, policy FROM callers ORDER BY name").fetchall()
        return {r[0]: CallerPolicy.model_validate_json(r[1]) for r in rows}

    def revoke(self, token_id: str) -> bool:
        """Revoke by id; False if no active token has that id."""
        with self._db() as db:
            cur = db.execute(
                "UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (_now(), token_id),
            )
            return cur.rowcount > 0

    def list_tokens(self) -> list[TokenInfo]:
        with self._db() as db:
            rows = db.execute(
                "SELECT id, name, created_at, revoked_at, last_used_at FROM tokens "
                "ORDER BY created_at"
            ).fetchall()
        return [
            TokenInfo(
                id=r[0],
                name=r[1],
                created_at=datetime.fromisoformat(r[2]),
                revoked_at=datetime.fromisoformat(r[3]) if r[3] else None,
                last_used_at=datetime.fromisoformat(r[4]) if r[4] else None,
            )
            for r in rows
        ]

    def verify(self, token: str) -> TokenInfo | None:
        """The active token's info, or None (unknown, malformed or revoked)."""
        m = _PARSE.match(token)
        if m is None:
            return None
        tid = m.group(1)
        row = self._read(
            "token",
            tid,
            "SELECT id, name, sha256, created_at, revoked_at FROM tokens WHERE id = ?",
        )
        if row is None or row[4] is not None:
            return None
        if not hmac.compare_digest(str(row[2]), _hash(token)):
            return None
        self._touch(tid)
        return TokenInfo(
            id=str(row[0]), name=str(row[1]), created_at=datetime.fromisoformat(str(row[3]))
        )

    def _touch(self, tid: str) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._touched.get(tid, -_TOUCH_EVERY_S) < _TOUCH_EVERY_S:
                return
            self._touched[tid] = now
        try:
            with self._db() as db:
                db.execute("UPDATE tokens SET last_used_at = ? WHERE id = ?", (_now(), tid))
        except sqlite3.Error:  # bookkeeping only: never fail a request over it
            pass


SECRET_ENV_VARS = (
    "GLOBUS_COMPUTE_CLIENT_SECRET",
    "FUNCX_SDK_CLIENT_SECRET",
    "FEDERATION_TOKEN",
    "FEDERATION_SERVICE_CLIENT_SECRET",
    "FEDERATION_TOKEN_KEY",
)
"""Environment variables whose values are credentials: redacted wherever they appear."""
_CLIENT_SECRET_RE = re.compile(r"(?i)(client_secret[\"']?\s*[:=]\s*[\"']?)[^\s\"'&,;]+")


class RedactTokens(logging.Filter):
    """Replace anything that looks like a credential in a log record with ``<redacted>``.

    Covers service tokens (``fedtok_...``), ``Bearer`` values, ``client_secret=...`` and
    the values of :data:`SECRET_ENV_VARS` (Globus client secrets) as set when the filter
    was made.
    """

    def __init__(self, name: str = "") -> None:
        super().__init__(name)
        self._secrets = [v for k in SECRET_ENV_VARS if len(v := os.environ.get(k, "")) >= 8]

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:
            return True
        changed = False
        if PREFIX in msg or "Bearer " in msg or "authorization" in msg.lower():
            msg = TOKEN_RE.sub(f"{PREFIX}<redacted>", msg)
            msg = re.sub(r"(?i)(bearer\s+)\S+", r"\1<redacted>", msg)
            changed = True
        if "secret" in msg.lower():
            msg = _CLIENT_SECRET_RE.sub(r"\1<redacted>", msg)
            changed = True
        for secret in self._secrets:
            if secret in msg:
                msg = msg.replace(secret, "<redacted>")
                changed = True
        if changed:
            record.msg, record.args = msg, None
        return True


def install_redaction(*loggers: logging.Logger) -> RedactTokens:
    """Attach :class:`RedactTokens` to the handlers of the given loggers (default: root)."""
    flt = RedactTokens()
    for lg in loggers or (logging.getLogger(),):
        for h in lg.handlers:
            if not any(isinstance(f, RedactTokens) for f in h.filters):
                h.addFilter(flt)
    return flt
