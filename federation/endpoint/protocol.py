"""Wire format between the offline web service and a site's endpoint daemon.

JSON objects over :mod:`multiprocessing.connection` (HMAC-authenticated unix socket), bytes
as base64. Nothing is unpickled: task payloads stay messagepack/ComputeSerializer strings
that only the engine's worker deserializes, exactly as on a real endpoint.

Besides replies, the daemon pushes events to subscribed connections: ``task.started``,
``task.result`` and, every :func:`heartbeat_period_s` seconds and once on subscribing,
``heartbeat`` (its status report, as a real endpoint heartbeats to the web service).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import uuid
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

Message = dict[str, Any]

HEARTBEAT_ENV = "FEDERATION_EP_HEARTBEAT_S"
DEFAULT_HEARTBEAT_S = 30.0
"""The real endpoint's ``heartbeat_period`` default (``globus_compute_endpoint`` Config)."""


def heartbeat_period_s() -> float:
    """Seconds between an endpoint's heartbeats (``FEDERATION_EP_HEARTBEAT_S``, default 30)."""
    raw = os.environ.get(HEARTBEAT_ENV, "")
    try:
        value = float(raw) if raw else DEFAULT_HEARTBEAT_S
    except ValueError:
        value = DEFAULT_HEARTBEAT_S
    return value if value > 0 else DEFAULT_HEARTBEAT_S


def send(conn: Connection, msg: Message) -> None:
    conn.send_bytes(json.dumps(msg, separators=(",", ":")).encode())


def recv(conn: Connection) -> Message:
    msg = json.loads(conn.recv_bytes().decode())
    if not isinstance(msg, dict) or "op" not in msg:
        raise ValueError(f"malformed endpoint message: {str(msg)[:200]}")
    return msg


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode())


def error_result(task_id: str, code: str, message: str) -> bytes:
    """A packed ``Result`` failing ``task_id`` with ``message`` (what the SDK raises)."""
    from globus_compute_common import messagepack
    from globus_compute_common.messagepack.message_types import Result

    res = Result(
        task_id=uuid.UUID(task_id),
        data=message,
        error_details={"code": code, "user_message": message},
    )
    packed: bytes = messagepack.pack(res)
    return packed


def read_or_create_key(path: Path) -> bytes:
    """The shared secret for one site's socket (created 0600 on first use)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_hex(32))
    return path.read_text().strip().encode()
