"""Callers' Globus tokens at rest: sealed with a key that never enters the database.

The service keeps, per caller, the dependent tokens Globus Auth gave it (access and refresh
tokens for Globus Compute and Transfer). :class:`SealedTokenStorage` is a globus-sdk
``TokenStorage`` (one namespace per Globus identity) over one SQLite file whose rows hold
each token record encrypted with Fernet (AES-128-CBC and HMAC-SHA256, from the
``cryptography`` package): a copy of the database alone gives nothing usable.

The key comes from ``$FEDERATION_TOKEN_KEY`` or from a key file readable by its owner only
(mode 0600: a looser file is refused, naming the ``chmod``); :func:`load_key` makes the
file on first use when asked to. Either may hold several keys, comma- or line-separated:
the first seals, every one unseals (rotate by putting a new key first). The table is not
named ``token_storage``, so the secret scan (:mod:`federation.security.scan`) reads it like
any other file and would report a token stored in the clear.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from globus_sdk.token_storage import TokenStorage, TokenStorageData

from federation.core.errors import ConfigError
from federation.core.sqlite import Migration, connect, migrate

KEY_ENV = "FEDERATION_TOKEN_KEY"
"""A Fernet key (or several, comma-separated) sealing callers' tokens; else the key file."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sealed_tokens (
    namespace TEXT NOT NULL,
    resource_server TEXT NOT NULL,
    sealed BLOB NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (namespace, resource_server)
);
CREATE TABLE IF NOT EXISTS identities (
    caller TEXT PRIMARY KEY,
    sub TEXT NOT NULL UNIQUE,
    username TEXT NOT NULL,
    first_seen TEXT NOT NULL,
    last_seen TEXT NOT NULL,
    logged_out_at TEXT
);
"""
MIGRATIONS: tuple[Migration, ...] = (_SCHEMA,)


def _keys(text: str, where: str) -> MultiFernet:
    raw = [k.strip() for k in text.replace("\n", ",").split(",") if k.strip()]
    if not raw:
        raise ConfigError(f"{where} holds no key: put `Fernet.generate_key()` output there")
    try:
        return MultiFernet([Fernet(k.encode()) for k in raw])
    except ValueError as e:
        raise ConfigError(
            f"{where}: not a Fernet key ({e}); make one with `python -c 'from "
            "cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'`"
        ) from None


def load_key(path: Path | None, *, create: bool = False) -> MultiFernet:
    """The sealing keys: ``$FEDERATION_TOKEN_KEY``, else the file at ``path`` (owner-only;
    made, mode 0600, when ``create`` and it does not exist)."""
    env = os.environ.get(KEY_ENV, "")
    if env.strip():
        return _keys(env, f"${KEY_ENV}")
    if path is None:
        raise ConfigError(f"no key for callers' tokens: set ${KEY_ENV} or name a key file")
    path = path.expanduser()
    if not path.exists() and create:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(Fernet.generate_key().decode() + "\n")
    try:
        st = path.stat()
    except OSError as e:
        raise ConfigError(
            f"key file {path} for callers' tokens: {e.strerror}; create it (mode 0600) or "
            f"set ${KEY_ENV}"
        ) from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"key file {path} is readable by others (mode {stat.S_IMODE(st.st_mode):o}): "
            f"`chmod 600 {path}`, and replace the key if anyone else may have read it"
        )
    return _keys(path.read_text(), f"key file {path}")


class SealedTokenStorage(TokenStorage):
    """A globus-sdk ``TokenStorage``: records sealed with ``key`` in an SQLite file; one
    ``namespace`` per caller (:meth:`for_namespace` gives another caller's view)."""

    def __init__(self, path: Path, key: MultiFernet, *, namespace: str = "DEFAULT") -> None:
        super().__init__(namespace=namespace)
        self.path = path
        self._key = key
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        db = connect(path)
        try:
            migrate(db, MIGRATIONS, name=f"the callers' token store {path}")
        finally:
            db.close()
        path.chmod(0o600)

    def for_namespace(self, namespace: str) -> SealedTokenStorage:
        """The same file and key, another caller's records."""
        return SealedTokenStorage(self.path, self._key, namespace=namespace)

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=10)
        try:
            with db:
                yield db
        finally:
            db.close()

    def seal(self, data: TokenStorageData) -> bytes:
        return self._key.encrypt(json.dumps(data.to_dict(), sort_keys=True).encode())

    def unseal(self, sealed: bytes) -> TokenStorageData:
        try:
            doc = json.loads(self._key.decrypt(bytes(sealed)))
        except InvalidToken:
            raise ConfigError(
                f"the callers' token store {self.path} was sealed with another key: restore "
                f"the key (${KEY_ENV} or the key file), or delete the file so callers are "
                "asked for their tokens again"
            ) from None
        return TokenStorageData.from_dict(doc)

    def store_token_data_by_resource_server(
        self, token_data_by_resource_server: Mapping[str, TokenStorageData]
    ) -> None:
        now = datetime.now(UTC).isoformat()
        rows = [
            (self.namespace, rs, self.seal(data), now)
            for rs, data in token_data_by_resource_server.items()
        ]
        with self._db() as db:
            db.executemany(
                "INSERT INTO sealed_tokens (namespace, resource_server, sealed, updated_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT(namespace, resource_server) DO UPDATE SET "
                "sealed = excluded.sealed, updated_at = excluded.updated_at",
                rows,
            )

    def get_token_data_by_resource_server(self) -> dict[str, TokenStorageData]:
        with self._db() as db:
            rows = db.execute(
                "SELECT resource_server, sealed FROM sealed_tokens WHERE namespace = ?",
                (self.namespace,),
            ).fetchall()
        return {rs: self.unseal(sealed) for rs, sealed in rows}

    def remove_token_data(self, resource_server: str) -> bool:
        with self._db() as db:
            cur = db.execute(
                "DELETE FROM sealed_tokens WHERE namespace = ? AND resource_server = ?",
                (self.namespace, resource_server),
            )
            return cur.rowcount > 0

    def forget(self) -> int:
        """Delete every record of this namespace; returns how many there were."""
        with self._db() as db:
            cur = db.execute("DELETE FROM sealed_tokens WHERE namespace = ?", (self.namespace,))
            return cur.rowcount

    def namespaces(self) -> list[str]:
        with self._db() as db:
            rows = db.execute("SELECT DISTINCT namespace FROM sealed_tokens").fetchall()
        return sorted(r[0] for r in rows)

    # --- who the namespaces are (not secret: kept in the clear) ------------------------------
    def remember(self, caller: str, sub: str, username: str) -> None:
        """Record that Globus identity ``sub`` (``username``) calls as ``caller``."""
        now = datetime.now(UTC).isoformat()
        with self._db() as db:  # a username that changed: the identity's new name
            db.execute("DELETE FROM identities WHERE sub = ? AND caller != ?", (sub, caller))
            db.execute(
                "INSERT INTO identities (caller, sub, username, first_seen, last_seen) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(caller) DO UPDATE SET "
                "sub = excluded.sub, username = excluded.username, "
                "last_seen = excluded.last_seen, logged_out_at = NULL",
                (caller, sub, username, now, now),
            )

    def identity(self, caller: str) -> tuple[str, str, bool] | None:
        """(sub, username, logged out) of a caller once seen with a Globus identity."""
        with self._db() as db:
            row = db.execute(
                "SELECT sub, username, logged_out_at FROM identities WHERE caller = ?",
                (caller,),
            ).fetchone()
        return None if row is None else (row[0], row[1], row[2] is not None)

    def identities(self) -> list[tuple[str, str]]:
        """(caller, sub) of every identity that has not logged out."""
        with self._db() as db:
            rows = db.execute(
                "SELECT caller, sub FROM identities WHERE logged_out_at IS NULL ORDER BY caller"
            ).fetchall()
        return [(r[0], r[1]) for r in rows]

    def logged_out(self, caller: str) -> None:
        with self._db() as db:
            db.execute(
                "UPDATE identities SET logged_out_at = ? WHERE caller = ?",
                (datetime.now(UTC).isoformat(), caller),
            )
