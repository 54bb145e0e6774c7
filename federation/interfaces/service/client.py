"""A Python client of the HTTP service, with the same operations as :class:`LocalOps`.

Errors come back as the :class:`OpsError` the service raised (status, code, message, hint),
so the MCP server can sit on top of either one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import httpx
from httpx_sse import ServerSentEvent, SSEError, connect_sse
from pydantic import TypeAdapter

from federation.core.snapshot import FederationSnapshot
from federation.interfaces.service.errors import OpsError
from federation.interfaces.service.models import (
    CancelResponse,
    DraftRequest,
    ErrorBody,
    EventsPage,
    GroupRequest,
    GroupResponse,
    GroupView,
    LogoutResponse,
    SubmitResponse,
    TaskRequest,
    TaskStatus,
    TransferRequest,
    TransferResponse,
    TransferView,
)
from federation.placement.drafting import EnvelopeDraft
from federation.runtime.catalog import FunctionInfo
from federation.runtime.events import Event, EventCallback

logger = logging.getLogger(__name__)

SERVER_MAX_POLL_S = 30.0
STREAM_READ_TIMEOUT_S = 60.0
"""The server sends a keep-alive every 15 s; a stream silent this long is reconnected."""
SERVICE_URL_ENV = "FEDERATION_SERVICE"
TOKEN_ENV = "FEDERATION_TOKEN"
_FUNCTIONS = TypeAdapter(list[FunctionInfo])
_TASKS = TypeAdapter(list[dict[str, Any]])


class ServiceClient:
    """Talks to ``federation serve`` at ``base_url`` with a bearer ``token``."""

    def __init__(self, base_url: str, token: str, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._timeout = timeout_s
        self._client = httpx.Client(
            base_url=self.base_url, headers=self._headers, timeout=timeout_s
        )

    def _raise_for(self, r: httpx.Response) -> None:
        if r.status_code < 400:
            return
        try:
            body = ErrorBody.model_validate(r.json())
        except Exception:
            body = ErrorBody(error=f"http_{r.status_code}", message=r.text[:2000])
        raise OpsError(r.status_code, body.error, body.message, body.hint, body.details)

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            r = self._client.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise OpsError(
                503,
                "service_unreachable",
                f"cannot reach the service at {self.base_url}: {e}",
                "start it with `federation serve` and check the URL",
            ) from e
        self._raise_for(r)
        return r.json()

    def inspect(self, refresh: bool = False) -> FederationSnapshot:
        data = self._call("GET", "/v1/federation", params={"refresh": str(refresh).lower()})
        return FederationSnapshot.model_validate(data)

    def functions(self) -> list[FunctionInfo]:
        return _FUNCTIONS.validate_python(self._call("GET", "/v1/functions"))

    def draft(self, req: DraftRequest) -> EnvelopeDraft:
        data = self._call("POST", "/v1/envelopes/draft", json=req.model_dump(mode="json"))
        return EnvelopeDraft.model_validate(data)

    def submit(self, req: TaskRequest, caller: str = "", dry_run: bool = False) -> SubmitResponse:
        params = {"dry_run": "true"} if dry_run else None
        data = self._call("POST", "/v1/tasks", json=_task_body(req), params=params)
        return SubmitResponse.model_validate(data)

    def submit_group(self, req: GroupRequest, caller: str = "") -> GroupResponse:
        body = req.model_dump(mode="json", exclude_defaults=True)
        body["children"] = [_task_body(c) for c in req.children]
        return GroupResponse.model_validate(self._call("POST", "/v1/groups", json=body))

    def group(self, group_id: str, caller: str = "") -> GroupView:
        return GroupView.model_validate(self._call("GET", f"/v1/groups/{group_id}"))

    def move_data(self, req: TransferRequest, caller: str = "") -> TransferResponse:
        body = req.model_dump(mode="json", exclude_defaults=True)
        return TransferResponse.model_validate(self._call("POST", "/v1/transfers", json=body))

    def transfer(self, transfer_id: str, caller: str = "") -> TransferView:
        return TransferView.model_validate(self._call("GET", f"/v1/transfers/{transfer_id}"))

    def tasks(self, caller: str = "") -> list[dict[str, Any]]:
        return _TASKS.validate_python(self._call("GET", "/v1/tasks"))

    def status(self, task_id: str, caller: str = "") -> TaskStatus:
        return TaskStatus.model_validate(self._call("GET", f"/v1/tasks/{task_id}"))

    def cancel(self, task_id: str, caller: str = "") -> CancelResponse:
        return CancelResponse.model_validate(self._call("POST", f"/v1/tasks/{task_id}/cancel"))

    async def events(
        self,
        after: int,
        task_ids: Sequence[str] | None,
        kinds: Sequence[str] | None,
        timeout_s: float,
        abandoned: Callable[[], Awaitable[bool]] | None = None,
        caller: str = "",
    ) -> EventsPage:
        """Long-polls in rounds of at most the server's cap until ``timeout_s`` is spent.

        ``caller`` (and every other method's) is ignored: the token names the caller, and
        the service shows it only its own work. A cursor past the end of the service's log
        raises :class:`OpsError` ``cursor_ahead`` (409; its hint says where to resume)."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        async with httpx.AsyncClient(
            base_url=self.base_url, headers=self._headers, timeout=SERVER_MAX_POLL_S + 15
        ) as client:
            while True:
                wait = max(0.0, min(SERVER_MAX_POLL_S, deadline - time.monotonic()))
                params: dict[str, Any] = {"after": after, "timeout_s": wait}
                if task_ids:
                    params["task_id"] = list(task_ids)
                if kinds:
                    params["kinds"] = list(kinds)
                try:
                    r = await client.get("/v1/events", params=params)
                except httpx.HTTPError as e:
                    raise OpsError(
                        503,
                        "service_unreachable",
                        f"cannot reach the service at {self.base_url}: {e}",
                        "start it with `federation serve` and check the URL",
                    ) from e
                self._raise_for(r)
                page = EventsPage.model_validate(r.json())
                if page.events or time.monotonic() >= deadline:
                    return page

    def events_now(
        self,
        after: int = 0,
        task_ids: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
        timeout_s: float = 0.0,
    ) -> EventsPage:
        """One long poll (at most the server's cap), synchronously."""
        params: dict[str, Any] = {"after": after, "timeout_s": min(timeout_s, SERVER_MAX_POLL_S)}
        if task_ids:
            params["task_id"] = list(task_ids)
        if kinds:
            params["kinds"] = list(kinds)
        data = self._call(
            "GET", "/v1/events", params=params, timeout=SERVER_MAX_POLL_S + self._timeout
        )
        return EventsPage.model_validate(data)

    def stream_events(
        self,
        after: int = 0,
        task_ids: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
        *,
        reconnects: int = 5,
        on_response: Callable[[httpx.Response], None] | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Every matching event after ``after``, as the service emits them (SSE).

        A dropped connection is re-opened from the last event seen (``Last-Event-ID``), up
        to ``reconnects`` times in a row; then :class:`OpsError` ``service_unreachable``.
        Refusals (unknown ids, bad kinds, bad token, a cursor past the end of the log: 409
        ``cursor_ahead`` after a service restarted without its store) raise at once, on a
        reconnection too. Close the generator to stop, or set ``stop`` (checked at every
        message, keep-alives included: at least every 15 s); ``on_response`` gets each open
        response. The stream is read with ``httpx-sse``; :func:`decode_event` turns its
        messages into events.
        """
        cursor = after
        failures = 0
        params: dict[str, Any] = {}
        if task_ids:
            params["task_id"] = list(task_ids)
        if kinds:
            params["kinds"] = list(kinds)
        timeout = httpx.Timeout(self._timeout, read=STREAM_READ_TIMEOUT_S)
        while stop is None or not stop.is_set():
            try:
                with connect_sse(
                    self._client,
                    "GET",
                    "/v1/events/stream",
                    params=params | {"after": cursor},
                    headers={"Last-Event-ID": str(cursor)},
                    timeout=timeout,
                ) as source:
                    r = source.response
                    if r.status_code >= 400:
                        r.read()
                        self._raise_for(r)
                    if on_response is not None:
                        on_response(r)
                    for sse in source.iter_sse():
                        if stop is not None and stop.is_set():
                            return
                        ev = decode_event(sse)
                        if ev is None:  # the opening message, or a keep-alive
                            continue
                        failures = 0
                        cursor = max(cursor, ev.seq)
                        yield ev
            except (httpx.HTTPError, SSEError) as e:
                failures += 1
                if failures > reconnects:
                    raise OpsError(
                        503,
                        "service_unreachable",
                        f"the event stream from {self.base_url} broke {failures} times: {e}",
                        "check that `federation serve` is running; resume from the last seq",
                    ) from e
                logger.info("event stream dropped (%s); resuming after seq %d", e, cursor)
                time.sleep(min(5.0, 0.2 * 2**failures))

    def logout(self, force: bool = False) -> LogoutResponse:
        """``POST /v1/logout``: the Globus tokens the service holds for you revoked."""
        return LogoutResponse.model_validate(
            self._call("POST", "/v1/logout", params={"force": str(force).lower()})
        )

    def close(self) -> None:
        self._client.close()


def _task_body(req: TaskRequest) -> dict[str, Any]:
    body = req.model_dump(mode="json", exclude_defaults=True)
    body["envelope"] = req.envelope.model_dump(mode="json", exclude_defaults=True)
    return body


def decode_event(sse: ServerSentEvent) -> Event | None:
    """The event an SSE message carries; ``None`` for one without data (the stream's opening
    message, and each keep-alive once an id has been seen).

    An ``error`` message (the service refused to go on) raises :class:`OpsError` (409 for
    ``cursor_ahead``, as the service answers it before a stream starts; else 503)."""
    if not sse.data:
        return None
    if sse.event == "error":
        body = ErrorBody.model_validate_json(sse.data)
        status = 409 if body.error == "cursor_ahead" else 503
        raise OpsError(status, body.error, body.message, body.hint, body.details)
    return Event.model_validate_json(sse.data)


class EventStream:
    """Follows the service's event stream on a background thread and calls subscribers.

    Subscribers are called on that thread, in event order; an event for a task nobody has
    subscribed to yet is kept (the last :data:`UNCLAIMED` of them) and replayed when someone
    does, so subscribing right after ``submit`` returns misses nothing.
    """

    UNCLAIMED = 10_000

    def __init__(self, client: ServiceClient, after: int = 0) -> None:
        self.client = client
        self.cursor = after
        self.error: BaseException | None = None
        self._subs: dict[str, list[EventCallback]] = {}
        self._unclaimed: deque[Event] = deque(maxlen=self.UNCLAIMED)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._response: httpx.Response | None = None
        self._thread = threading.Thread(target=self._run, name="federation-events", daemon=True)
        self._thread.start()

    def subscribe(self, task_id: str, callback: EventCallback) -> None:
        with self._lock:
            self._subs.setdefault(task_id, []).append(callback)
            mine = [e for e in self._unclaimed if e.task_id == task_id]
        for ev in mine:
            callback(ev)

    def _run(self) -> None:
        try:
            for ev in self.client.stream_events(
                self.cursor, on_response=self._opened, stop=self._stop
            ):
                if self._stop.is_set():
                    return
                self.cursor = ev.seq
                with self._lock:
                    subs = list(self._subs.get(ev.task_id, ()))
                    if not subs:
                        self._unclaimed.append(ev)
                for cb in subs:
                    try:
                        cb(ev)
                    except Exception:
                        logger.exception("event callback %r failed on %s", cb, ev.kind)
        except BaseException as e:
            if not self._stop.is_set():
                logger.warning("event stream ended: %s", e)
                self.error = e

    def _opened(self, r: httpx.Response) -> None:
        self._response = r
        if self._stop.is_set():
            r.close()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def close(self, timeout_s: float = 1.0) -> None:
        """Stop following; the thread ends at the next line of the stream (<= 15 s)."""
        self._stop.set()
        r = self._response
        if r is not None:
            try:
                r.close()
            except Exception:  # closing under a reader thread: it ends on its own
                logger.debug("closing the event stream", exc_info=True)
        self._thread.join(timeout_s)
