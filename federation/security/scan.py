"""Find credentials left on disk: known secrets and token-shaped text in any file.

:func:`scan` walks files and folders (logs, event logs, manifests, SQLite databases with
their ``-wal`` and ``-journal`` files, anything) and reports every place that holds

- one of the secret strings it was given (issued service tokens, their secret parts,
  client secrets), and
- text shaped like a credential: a service token (``fedtok_<id>_<secret>``, as
  :data:`~federation.security.tokens.TOKEN_RE`), a Globus access or refresh token (``Ag``
  and 40 or more letters and digits, standing alone; an ``access_token`` or
  ``refresh_token`` JSON field), an ``Authorization: Bearer`` value, or a
  ``client_secret`` value. Redacted values (``<redacted>``) are not findings.

Files are read as bytes (a database's deleted rows and its write-ahead log included), in
chunks that overlap, so the scan needs little memory. A SQLite database is also read row
by row, which finds a value that its pages split in two. A :class:`Finding` names the file,
the byte offset (or the table, row and column) and what was found, but never the secret:
only its first characters.

Credential stores are skipped and listed as such: a globus-sdk token storage (a JSON file
with ``globus-sdk.version``, or a SQLite file with a ``token_storage`` table) holds tokens
by design, the way ``~/.globus`` does.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["PATTERNS", "Finding", "ScanReport", "redact", "scan"]

CHUNK = 8 << 20
OVERLAP = 4096
"""Chunks overlap by this much: longer than any secret or pattern match looked for."""
MIN_SECRET = 8
"""Known secrets shorter than this are not looked for (they would match by chance)."""
SQLITE_MAGIC = b"SQLite format 3\x00"

_TOKEN_CHARS = rb"A-Za-z0-9._~+/=-"
_B64_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-")


@dataclass(frozen=True)
class Pattern:
    """Credential-shaped text of one kind. ``rx`` matches it (group ``v`` is the secret);
    it is tried only on data holding ``hint`` (lowercase: the data is lowered to look);
    ``alone``: not part of base64 text (:func:`_in_blob`): a Globus token's shape is also
    that of 40 letters and digits in a blob."""

    rx: re.Pattern[bytes]
    hint: bytes
    alone: bool = False


PATTERNS: dict[str, Pattern] = {
    "service token": Pattern(
        re.compile(rb"fedtok_[0-9a-f]{12}_(?P<v>[A-Za-z0-9_-]{20,})"), b"fedtok_"
    ),
    "Globus token": Pattern(
        re.compile(rb"(?P<v>Ag[A-Za-z0-9]{40,400})(?![A-Za-z0-9+/=_-])"), b"ag", alone=True
    ),
    "OAuth token field": Pattern(
        re.compile(
            rb"[\"'](?:access|refresh)_token[\"']\s*:\s*[\"'](?!<redacted>)"
            rb"(?P<v>[^\"'\s]{8,})[\"']"
        ),
        b"_token",
    ),
    "Bearer credential": Pattern(
        re.compile(
            rb"(?i)\bbearer\s+(?!<redacted>)(?P<v>[" + _TOKEN_CHARS + rb"]{16,})"
            rb"(?![" + _TOKEN_CHARS + rb"])"
        ),
        b"bearer",
    ),
    "client secret": Pattern(
        re.compile(
            rb"(?i)client_secret[\"']?\s*[:=]\s*[\"']?(?!<redacted>)"
            rb"(?P<v>[" + _TOKEN_CHARS + rb"]{8,})(?![(" + _TOKEN_CHARS + rb"])"
        ),
        b"client_secret",
    ),
}
"""What a credential looks like, by kind (matched on bytes). A Globus token is tens of
characters (access ~70, refresh ~90): a run of thousands is a page of base64 (an SQLite
overflow page of a serialized function starts with one), not a token."""


def redact(secret: str | bytes, keep: int = 4) -> str:
    """The first ``keep`` characters and a length: enough to tell which secret, never it."""
    text = secret.decode("utf-8", "replace") if isinstance(secret, bytes) else secret
    return f"{text[:keep]}...({len(text)} chars)"


def _shown(m: re.Match[bytes]) -> str:
    """A pattern match as a finding shows it: what precedes the secret (a field name, a
    token's public id), then the secret redacted."""
    lead = m.group()[: m.start("v") - m.start()].decode("utf-8", "replace")
    return lead + redact(m.group("v"))


@dataclass(frozen=True)
class Finding:
    """One credential found: where, and what (never the credential itself)."""

    path: Path
    kind: str
    """``known secret`` or one of :data:`PATTERNS`."""
    shown: str
    """The match's first characters (:func:`redact`)."""
    offset: int | None = None
    """Byte offset in the file (None: found in a database row, see ``where``)."""
    where: str = ""
    key: str = field(default="", repr=False, compare=False)
    """Which secret (a hash of its start), to tell the same one found twice apart."""

    def __str__(self) -> str:
        at = f"byte {self.offset}" if self.offset is not None else self.where
        return f"{self.path}: {at}: {self.kind} {self.shown}"


@dataclass
class ScanReport:
    """What a scan found, and what it looked at."""

    findings: list[Finding] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    credential_stores: list[Path] = field(default_factory=list)
    """Files skipped because holding credentials is what they are for."""
    unreadable: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.findings

    def summary(self, limit: int = 50) -> str:
        head = (
            f"secret scan: {self.files} files, {self.bytes / 1e6:.1f} MB: "
            f"{len(self.findings)} finding(s)"
        )
        if self.credential_stores:
            head += f"; {len(self.credential_stores)} credential store(s) skipped"
        lines = [head, *(f"  {f}" for f in self.findings[:limit])]
        if len(self.findings) > limit:
            lines.append(f"  ... and {len(self.findings) - limit} more")
        return "\n".join(lines)


def scan(
    paths: Iterable[Path | str],
    secrets: Iterable[str] = (),
    *,
    since: float | None = None,
    patterns: bool = True,
) -> ScanReport:
    """Scan the files and folders (recursively) in ``paths``.

    ``secrets``: strings that must appear nowhere (shorter than :data:`MIN_SECRET` are
    ignored). ``since``: only files modified at or after this time (``time.time()``).
    ``patterns``: also look for text shaped like a credential (:data:`PATTERNS`).
    """
    needles = _needles(secrets)
    report = ScanReport()
    for path in _files(paths, since):
        try:
            head = _head(path)
            if _credential_store(path, head):
                report.credential_stores.append(path)
                continue
            found = list(_scan_bytes(path, needles, patterns, report))
            if head.startswith(SQLITE_MAGIC):
                seen = {(f.kind, f.key) for f in found}  # what only the rows show (pages
                found += [  # split a long value)
                    f for f in _scan_rows(path, needles, patterns) if (f.kind, f.key) not in seen
                ]
        except OSError as e:
            report.unreadable.append(f"{path}: {e}")
            continue
        report.files += 1
        report.findings.extend(found)
    return report


def _needles(secrets: Iterable[str]) -> list[bytes]:
    """The secrets as bytes, longest first, without those containing a shorter one (finding
    the shorter finds them)."""
    raw = sorted({s.encode() for s in secrets if len(s) >= MIN_SECRET}, key=len)
    kept: list[bytes] = []
    for s in raw:
        if not any(k in s for k in kept):
            kept.append(s)
    return kept


def _files(paths: Iterable[Path | str], since: float | None) -> Iterator[Path]:
    seen: set[Path] = set()
    for root in paths:
        root = Path(root)
        if root.is_file():
            candidates: Iterable[Path] = [root]
        elif root.is_dir():
            candidates = (
                Path(d) / f for d, _, files in os.walk(root, followlinks=False) for f in files
            )
        else:
            continue
        for p in candidates:
            try:
                st = p.lstat()
            except OSError:
                continue
            if not p.is_file() or p.is_symlink() or p in seen:
                continue
            if since is not None and st.st_mtime < since:
                continue
            seen.add(p)
            yield p


def _head(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read(64)


def _credential_store(path: Path, head: bytes) -> bool:
    """A globus-sdk token storage: a JSON file with ``globus-sdk.version``, or SQLite with
    a ``token_storage`` table."""
    if head.startswith(SQLITE_MAGIC):
        try:
            db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
            try:
                names = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
            finally:
                db.close()
        except sqlite3.Error:
            return False
        return "token_storage" in names
    if head.lstrip().startswith(b"{") and path.stat().st_size < 1 << 20:
        try:
            doc = json.loads(path.read_bytes())
        except ValueError:
            return False
        return isinstance(doc, dict) and "globus-sdk.version" in doc
    return False


def _key(secret: bytes) -> str:
    return hashlib.sha256(secret[:16]).hexdigest()[:16]


def _matches(
    data: bytes, needles: list[bytes], patterns: bool
) -> Iterator[tuple[int, str, str, str]]:
    """(offset, kind, what to show, key) of each known secret and credential-shaped text."""
    for needle in needles:
        at = data.find(needle)
        while at != -1:
            yield at, "known secret", redact(needle), _key(needle)
            at = data.find(needle, at + 1)
    if patterns:
        low = data.lower()
        for kind, pat in PATTERNS.items():
            if pat.hint not in low:
                continue
            for m in pat.rx.finditer(data):
                if pat.alone and _in_blob(data, m.start(), m.end()):
                    continue
                yield m.start(), kind, _shown(m), _key(m.group("v"))


def _in_blob(data: bytes, start: int, end: int) -> bool:
    """Whether ``data[start:end]`` is part of base64 text: joined to it, or a line of a
    blob wrapped at a fixed width (a line of base64 before or after it)."""
    if start > 0 and data[start - 1] in _B64_CHARS:
        return True
    before = data[max(0, start - 17) : start]
    if len(before) == 17 and before[-1:] == b"\n" and all(c in _B64_CHARS for c in before[:-1]):
        return True
    after = data[end : end + 17]
    return len(after) == 17 and after[:1] == b"\n" and all(c in _B64_CHARS for c in after[1:])


def _scan_bytes(
    path: Path, needles: list[bytes], patterns: bool, report: ScanReport
) -> Iterator[Finding]:
    seen: set[tuple[int, str]] = set()
    with path.open("rb") as f:
        start = 0
        tail = b""
        while True:
            chunk = f.read(CHUNK)
            report.bytes += len(chunk)
            if not chunk:
                break
            data = tail + chunk
            base = start - len(tail)
            for at, kind, shown, key in _matches(data, needles, patterns):
                if (base + at, kind) not in seen:
                    seen.add((base + at, kind))
                    yield Finding(path, kind, shown, offset=base + at, key=key)
            tail = data[-OVERLAP:]
            start += len(chunk)


def _scan_rows(path: Path, needles: list[bytes], patterns: bool) -> Iterator[Finding]:
    """Every text and blob value of every table (the write-ahead log applied)."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.Error:
        try:
            db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        except sqlite3.Error:
            return
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            name = table.replace('"', '""')
            try:
                cur = db.execute(f'SELECT rowid, * FROM "{name}"')
            except sqlite3.Error:  # a WITHOUT ROWID table
                try:
                    cur = db.execute(f'SELECT NULL, * FROM "{name}"')
                except sqlite3.Error:
                    continue
            cols = [d[0] for d in cur.description][1:]
            for row in cur:
                for col, value in zip(cols, row[1:], strict=True):
                    if isinstance(value, str):
                        value = value.encode("utf-8", "surrogatepass")
                    if not isinstance(value, bytes):
                        continue
                    for _, kind, shown, key in _matches(value, needles, patterns):
                        where = f"table {table}, row {row[0]}, column {col}"
                        yield Finding(path, kind, shown, where=where, key=key)
    except sqlite3.Error:
        return
    finally:
        db.close()
