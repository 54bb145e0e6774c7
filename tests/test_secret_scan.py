"""The secret scan finds what it must, and only that (federation/security/scan.py).

Tokens are planted where a leak would put them: a log file, the coordinator's event log
(SQLite, still in its write-ahead log), a task manifest, a long database value split over
pages, a chunk boundary. Each must be found, with its file and offset, and the report must
never print the secret. Redacted text, base64 blobs and credential stores must not be.
Finally a pytest session in a subprocess, with this repository's conftest, writes a token
to a log: the session fails and names the file.

Every planted file is deleted before the test ends: the scan of this very session reads
pytest's basetemp, and a planted token left there would fail it.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from federation.runtime.events import EventBus
from federation.runtime.store import Store
from federation.security import scan as scan_module
from federation.security.scan import Finding, redact, scan
from federation.security.tokens import TOKEN_RE, RedactTokens

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def planted() -> Iterator[Path]:
    """A folder outside pytest's basetemp, removed with everything in it afterwards."""
    path = Path(tempfile.mkdtemp(prefix="planted-secrets-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _token() -> str:
    return f"fedtok_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"


def _only(findings: list[Finding], path: Path) -> list[Finding]:
    return [f for f in findings if f.path == path]


def _check_offsets(findings: list[Finding], secret: str) -> None:
    """Each finding of ``secret`` points at it: the file holds it at that offset."""
    known = [f for f in findings if f.shown == redact(secret) and f.offset is not None]
    assert known
    for f in known:
        assert f.path.read_bytes()[f.offset : f.offset + len(secret)] == secret.encode()


def test_planted_tokens_are_found_in_a_log_an_event_db_and_a_manifest(planted: Path) -> None:
    token, client_secret = _token(), "gcs-" + secrets.token_urlsafe(24)
    # a log: a handler without the redaction filter, as a careless deployment has
    log = planted / "service.log"
    handler = logging.FileHandler(log)
    logger = logging.getLogger("planted")
    logger.propagate = False  # not into pytest's captured logs (a report might print them)
    logger.addHandler(handler)
    try:
        logger.error("request headers: {'authorization': 'Bearer %s'}", token)
        logger.error("auth failed: client_secret=%s&grant_type=client_credentials", client_secret)
    finally:
        logger.removeHandler(handler)
        handler.close()
    # the event log: a task's event whose detail carries the token (left in the WAL)
    store = Store(planted / "coordinator.db")
    try:
        bus = EventBus(store)
        bus.emit("task.failed", "t1", "local", error=f"curl -H 'Authorization: Bearer {token}'")
        # a task manifest, as `federation result --json` writes one
        manifest = planted / "manifest.json"
        manifest.write_text(
            json.dumps(
                {
                    "status": "completed",
                    "stdout": f"FEDERATION_TOKEN={token}\n",
                    "completed_at": datetime.now(UTC).isoformat(),
                }
            )
        )
        report = scan([planted], [token, client_secret])
        db_files = [p for p in planted.iterdir() if p.name.startswith("coordinator.db")]
        in_db = [f for p in db_files for f in _only(report.findings, p)]
        assert {f.kind for f in in_db} >= {"known secret", "service token"}, report.summary()
        _check_offsets(in_db, token)  # in the write-ahead log: the store is still open
    finally:
        store.close()
    in_log, in_manifest = _only(report.findings, log), _only(report.findings, manifest)
    assert {f.kind for f in in_log} >= {"known secret", "service token", "Bearer credential"}
    assert {f.kind for f in in_log} >= {"client secret"}
    assert {f.kind for f in in_manifest} >= {"known secret", "service token"}
    _check_offsets(in_log, token)
    _check_offsets(in_log, client_secret)
    _check_offsets(in_manifest, token)
    text = report.summary() + "".join(str(f) for f in report.findings)
    assert token not in text and token.split("_", 2)[2] not in text and client_secret not in text
    assert token[:19] in text  # the token's public id names it


def test_a_value_split_over_database_pages_is_found_row_by_row(planted: Path) -> None:
    token = _token()
    # a long value goes to overflow pages, each starting with the next page's number: for
    # some of these offsets the token straddles a boundary and is not in the file in one piece
    for pad in range(4400, 4700, 20):
        db = sqlite3.connect(planted / f"{pad}.db")
        db.execute("CREATE TABLE t (v TEXT)")
        db.execute("INSERT INTO t VALUES (?)", ("x" * pad + token + "y" * 4000,))
        db.commit()
        db.close()
    split = [p for p in planted.iterdir() if token.encode() not in p.read_bytes()]
    assert split, "no layout split the token: the test no longer tests that"
    report = scan([planted], [token])
    assert {f.path for f in report.findings if f.kind == "known secret"} == set(planted.iterdir())
    for p in split:
        (f,) = [f for f in report.findings if f.path == p and f.kind == "known secret"]
        assert f.offset is None and f.where == "table t, row 1, column v"


def test_a_token_across_a_chunk_boundary_is_found_once(
    planted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan_module, "CHUNK", 1000)
    token = _token()
    path = planted / "events.jsonl"
    path.write_text("a" * 990 + token + "\n" + "b" * 3000)
    found = [f for f in scan([path], [token]).findings if f.kind == "service token"]
    assert [f.offset for f in found] == [990]


def test_globus_token_shapes_are_found(planted: Path) -> None:
    access = "Ag" + secrets.token_hex(40)[:60].replace("a", "Q")
    (planted / "sdk.log").write_text(
        f'{{"access_token": "{access}", "refresh_token": "R{access[1:]}", "expires_in": 1}}\n'
        f"token {access} for transfer\n"
    )
    kinds = [f.kind for f in scan([planted]).findings]
    assert kinds.count("OAuth token field") == 2 and kinds.count("Globus token") >= 1


def test_redacted_text_blobs_and_credential_stores_are_not_findings(planted: Path) -> None:
    token = _token()
    flt = RedactTokens()
    rec = logging.LogRecord(
        "x", logging.ERROR, __file__, 1, "got %s / Bearer %s", (token,) * 2, None
    )
    flt.filter(rec)
    (planted / "redacted.log").write_text(rec.getMessage() + "\nclient_secret=<redacted>\n")
    # base64 wrapped at 76 columns, some lines starting with "Ag": a serialized task
    blob = b"".join(b"Ag" + bytes(secrets.token_hex(37), "ascii") + b"\n" for _ in range(50))
    (planted / "task.result").write_bytes(b"00\n" + blob)
    # an SQLite overflow page: a 4-byte page number, then a page of one base64 text (a
    # function's source, indented: "    " is "ICAg") that happens to start with "Ag"
    page = b"\x00\x00\x00\x86" + (b"AgICAgICBcImZpZWxkc1wiOiBz" * 160)[:4092]
    (planted / "compute-service.db-wal").write_bytes(b"\x00" * 100 + page + b"\x00" * 8)
    # globus-sdk's token storage: tokens are what it is for
    (planted / "tokens.json").write_text(
        json.dumps(
            {"globus-sdk.version": "4", "data": {"DEFAULT": {"x": {"access_token": "AT-x"}}}}
        )
    )
    (planted / "docs.md").write_text("send `Authorization: Bearer <token>`; client_secret_env: X\n")
    report = scan([planted], [])
    assert report.clean, report.summary()
    assert report.credential_stores == [planted / "tokens.json"]


def test_only_files_modified_since_are_scanned(planted: Path) -> None:
    old = planted / "old.log"
    old.write_text(_token())
    os.utime(old, (1_000_000, 1_000_000))
    assert scan([planted], since=2_000_000).files == 0
    assert not scan([planted]).clean


CHILD_TEST = """
import logging
from federation.security.tokens import TokenStore

def test_logs_a_token(tmp_path):
    token = TokenStore(tmp_path / "tokens.db").issue("leaky").token
    (tmp_path / "leak.log").write_text(f"debug: using {token}\\n")

def test_clean(tmp_path):
    TokenStore(tmp_path / "t.db").issue("careful")
"""


def _child_session(where: Path, select: str, *extra: str) -> subprocess.CompletedProcess[str]:
    shutil.copy(ROOT / "tests" / "conftest.py", where / "conftest.py")
    (where / "test_child.py").write_text(CHILD_TEST)
    (where / "home").mkdir(exist_ok=True)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            select,
            "--basetemp",
            str(where / "basetemp"),
            *extra,
            str(where / "test_child.py"),
        ],
        cwd=where,
        env={**os.environ, "FEDERATION_HOME": str(where / "home")},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_session_that_leaves_a_token_on_disk_fails(planted: Path) -> None:
    leaky = _child_session(planted, "logs_a_token")
    out = leaky.stdout + leaky.stderr
    assert leaky.returncode == 1, out
    assert "secrets left on disk" in out and "leak.log" in out and "service token" in out
    assert "fedtok_" in out and "known secret" in out
    assert TOKEN_RE.search(out) is None, "the report printed a whole token"
    shutil.rmtree(planted / "basetemp")
    clean = _child_session(planted, "clean")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "finding(s): clean" in clean.stdout


def test_a_parallel_session_scans_what_every_worker_wrote(planted: Path) -> None:
    """Under pytest-xdist (``scripts/test`` runs ``-n 3``) each worker hands the secrets it
    saw to the controller, whose one scan covers every worker's temporary folder: a token
    issued and leaked in a worker is found and named as a known secret, and the session
    fails."""
    pytest.importorskip("xdist", reason="pytest-xdist (the dev extra) is not installed")
    leaky = _child_session(planted, "logs_a_token or clean", "-n", "2")
    out = leaky.stdout + leaky.stderr
    assert leaky.returncode == 1, out
    assert "2 passed" in out, out  # both tests ran, on the workers
    assert "secrets left on disk" in out and "leak.log" in out and "popen-gw" in out, out
    assert "fedtok_" in out and "known secret" in out, out
    assert TOKEN_RE.search(out) is None, "the report printed a whole token"
