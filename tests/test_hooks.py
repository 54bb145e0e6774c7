"""Webhook and command hooks: real HTTP server, real commands, failures on record."""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from federation.runtime.events import EventBus
from federation.runtime.hooks import CommandHook, HookRunner, WebhookHook


class _Receiver:
    """A local HTTP server that records POSTed bodies; answers from a script of codes."""

    def __init__(self, codes: list[int] | None = None) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.codes = list(codes or [])
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                rec.entered.set()
                rec.hold.wait(30)
                n = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(n))
                code = rec.codes.pop(0) if rec.codes else 200
                if code == 200:
                    rec.bodies.append(body)
                self.send_response(code)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.hold.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    r = _Receiver()
    yield r
    r.close()


def test_webhook_posts_event_json_and_retries_a_server_error(receiver: _Receiver) -> None:
    receiver.codes = [503]  # first try fails, the retry succeeds
    bus = EventBus()
    hooks = HookRunner(bus)
    reg = hooks.add(WebhookHook(url=receiver.url, kinds=frozenset({"task.completed"}), backoff_s=0))
    bus.emit("task.started", "a", "local")
    done = bus.emit("task.completed", "a", "local", runtime_s=1.25)
    assert hooks.drain(30)
    assert receiver.bodies == [done.model_dump(mode="json")]
    assert (reg.delivered, reg.failed) == (1, 0)
    assert not [e for e in bus.history() if e.kind == "hook.failed"]
    hooks.close()


def test_delivery_never_blocks_the_emitting_thread(receiver: _Receiver) -> None:
    receiver.hold.clear()  # the server sits on the request until released
    bus = EventBus()
    hooks = HookRunner(bus)
    hooks.add(WebhookHook(url=receiver.url, timeout_s=30))
    bus.emit("task.completed", "a", "local")  # returns while the POST is still unanswered
    assert receiver.entered.wait(30)
    assert receiver.bodies == []
    receiver.hold.set()
    assert hooks.drain(30)
    assert [b["kind"] for b in receiver.bodies] == ["task.completed"]
    hooks.close()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def test_unreachable_webhook_is_recorded_as_hook_failed() -> None:
    bus = EventBus()
    hooks = HookRunner(bus)
    url = f"http://127.0.0.1:{_closed_port()}/nobody"
    reg = hooks.add(WebhookHook(url=url, retries=2, backoff_s=0, timeout_s=2))
    ev = bus.emit("task.failed", "a", "delta", error="boom")
    assert hooks.drain(30)
    failed = bus.await_event(ev.seq, kinds={"hook.failed"}, timeout_s=10)
    assert len(failed) == 1 and reg.failed == 1
    d = failed[0].detail
    assert d["hook"] == f"webhook {url}" and d["event_seq"] == ev.seq
    assert d["event_kind"] == "task.failed" and d["tries"] == 3
    assert "Connect" in d["error"]
    assert failed[0].task_id == "a"
    hooks.close()


def test_webhook_client_error_is_not_retried(receiver: _Receiver) -> None:
    receiver.codes = [404, 200]
    bus = EventBus()
    hooks = HookRunner(bus)
    hooks.add(WebhookHook(url=receiver.url, backoff_s=0))
    bus.emit("task.queued", "a")
    assert hooks.drain(30)
    failed = [e for e in bus.history() if e.kind == "hook.failed"]
    assert [e.detail["tries"] for e in failed] == [1]
    assert failed[0].detail["error"].startswith("HTTP 404")
    assert receiver.bodies == []  # the 200 was never asked for
    hooks.close()


def test_command_hook_gets_event_json_on_stdin_filtered_by_kind_and_task(
    tmp_path: Path,
) -> None:
    out = tmp_path / "seen.jsonl"
    script = (
        "import json, sys; e = json.load(sys.stdin); "
        f"open({str(out)!r}, 'a').write(json.dumps([e['seq'], e['kind'], e['task_id']]) + '\\n')"
    )
    bus = EventBus()
    hooks = HookRunner(bus)
    hooks.add(
        CommandHook(argv=(sys.executable, "-c", script), kinds=frozenset({"task.completed"})),
        task_ids={"mine"},
    )
    bus.emit("task.started", "mine")
    bus.emit("task.completed", "other")
    done = bus.emit("task.completed", "mine")
    assert hooks.drain(60)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines == [[done.seq, "task.completed", "mine"]]
    hooks.close()


def test_failing_command_hook_is_recorded_with_its_exit_code(tmp_path: Path) -> None:
    bus = EventBus()
    hooks = HookRunner(bus)
    hooks.add(
        CommandHook(
            argv=(sys.executable, "-c", "import sys; sys.stderr.write('no disk\\n'); sys.exit(3)")
        )
    )
    hooks.add(CommandHook(argv=(str(tmp_path / "missing-command"),)))
    bus.emit("task.completed", "a")
    assert hooks.drain(60)
    errors = {e.detail["hook"]: e.detail["error"] for e in bus.history() if e.kind == "hook.failed"}
    assert errors[f"command {sys.executable}"] == "exited with 3: no disk"
    missing = str(tmp_path / "missing-command")
    assert errors[f"command {missing}"] == f"{missing}: command not found"
    hooks.close()
