"""The HTTP service: the coordinator's operations as a small JSON API behind bearer tokens.

Nothing from the network is ever unpickled: a task is a shell ``command`` or the name of a
catalog function with JSON arguments. Every route answers at once except ``GET
/v1/events``, a long poll bounded by ``timeout_s`` (at most :data:`MAX_LONG_POLL_S`) that
waits in worker threads so the server stays responsive.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

import anyio.to_thread
from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from federation.core.snapshot import FederationSnapshot
from federation.interfaces.service.errors import OpsError
from federation.interfaces.service.login_routes import login_router
from federation.interfaces.service.models import (
    CancelResponse,
    DraftRequest,
    ErrorBody,
    EventsPage,
    FederationSummary,
    GroupRequest,
    GroupResponse,
    GroupView,
    SubmitResponse,
    TaskRequest,
    TaskStatus,
    TransferRequest,
    TransferResponse,
    TransferView,
    summarize,
)
from federation.interfaces.service.ops import LocalOps, parse_kinds
from federation.interfaces.service.security_routes import policy_router
from federation.placement.drafting import EnvelopeDraft
from federation.runtime.catalog import Catalog, FunctionInfo
from federation.runtime.coordinator import Coordinator
from federation.security.globus_callers import AuthUnavailable, CallerRefused, GlobusCallers
from federation.security.policy import LOCAL_CALLER
from federation.security.tokens import TokenStore

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 1_000_000
MAX_LONG_POLL_S = 30.0
DEFAULT_LONG_POLL_S = 20.0
STREAM_HEARTBEAT_S = 15.0
"""An event stream sends an SSE comment (``: keep-alive``) this often, whatever else it
sends (keeps proxies and clients from timing it out, and finds clients that went away)."""
PUBLIC_PATHS = frozenset({"/v1/health", "/docs", "/openapi.json", "/docs/oauth2-redirect"})

_bearer = HTTPBearer(
    auto_error=False,
    description="a token from `federation token issue`, or (service.auth: globus) a Globus "
    "Auth access token for the service's scope",
)


def _doc_bearer(
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Declares the bearer scheme in the OpenAPI document; the guard enforces it."""


def _error_bytes(
    status: int, body: ErrorBody, challenge: str = 'Bearer realm="federation"'
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    data = body.model_dump_json().encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", challenge.encode()))
    if status == 503:
        headers.append((b"retry-after", b"10"))
    return headers, data


class _Refused(Exception):
    def __init__(self, status: int, body: ErrorBody) -> None:
        self.status, self.body = status, body


async def _send_error(
    send: Send, status: int, body: ErrorBody, challenge: str = 'Bearer realm="federation"'
) -> None:
    headers, data = _error_bytes(status, body, challenge)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class Guard:
    """ASGI middleware: bearer-token check, then a cap on request bodies (413).

    Pure ASGI (no buffering of responses), so long polls and client disconnects pass
    through untouched. The token never leaves this class: it is hashed and looked up (the
    service's own tokens), or introspected at Globus Auth (``tokens`` a
    :class:`~federation.security.globus_callers.GlobusCallers`), and only the caller's name
    is put on the request (``request.state.caller``).
    """

    def __init__(
        self, app: ASGIApp, tokens: TokenStore | GlobusCallers, max_body_bytes: int
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.max_body = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] not in PUBLIC_PATHS:
            try:
                caller = await self._caller(scope)
            except _Refused as e:
                await _send_error(send, e.status, e.body, self._challenge())
                return
            scope.setdefault("state", {})["caller"] = caller
        length = _content_length(scope)
        if length is not None and length > self.max_body:
            await self._too_large(send)
            return
        if scope["method"] in ("POST", "PUT", "PATCH"):
            chunks: list[bytes] = []
            size = 0
            more = True
            while more:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    return
                chunk = msg.get("body", b"")
                size += len(chunk)
                if size > self.max_body:
                    await self._too_large(send)
                    return
                chunks.append(chunk)
                more = bool(msg.get("more_body"))
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
                return await receive()

            await self.app(scope, replay, send)
            return
        await self.app(scope, receive, send)

    async def _caller(self, scope: Scope) -> str:
        """The caller's name; :class:`_Refused` (401, or 503 when Globus Auth cannot be
        asked) saying what to do."""
        auth = _header(scope, b"authorization")
        token = auth[7:].strip() if auth and auth.lower().startswith("bearer ") else ""
        store = self.tokens
        if isinstance(store, TokenStore):
            info = await anyio.to_thread.run_sync(store.verify, token) if token else None
            if info is None:
                raise _Refused(
                    401,
                    ErrorBody(
                        error="unauthorized",
                        message="missing, unknown or revoked bearer token",
                        hint="send `Authorization: Bearer <token>`; get one with "
                        "`federation token issue NAME`",
                    ),
                )
            return info.name
        if not token:
            raise _Refused(
                401,
                ErrorBody(
                    error="unauthorized", message="missing bearer token", hint=store.login_hint()
                ),
            )
        try:
            return await anyio.to_thread.run_sync(store.authenticate, token)
        except CallerRefused as e:
            raise _Refused(401, ErrorBody(error="unauthorized", message=str(e), hint=e.hint)) from e
        except AuthUnavailable as e:
            raise _Refused(
                503,
                ErrorBody(error="auth_unavailable", message=str(e), hint="retry in a minute"),
            ) from e

    def _challenge(self) -> str:
        if isinstance(self.tokens, GlobusCallers):
            return f'Bearer realm="federation", scope="{self.tokens.scope}"'
        return 'Bearer realm="federation"'

    async def _too_large(self, send: Send) -> None:
        await _send_error(
            send,
            413,
            ErrorBody(
                error="payload_too_large",
                message=f"request body is larger than {self.max_body} bytes",
                hint="send large inputs as a path or URL the site can read, not inline",
                details={"max_body_bytes": self.max_body},
            ),
        )


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers", ()):
        if k.lower() == name:
            return bytes(v).decode("latin-1")
    return None


def _content_length(scope: Scope) -> int | None:
    raw = _header(scope, b"content-length")
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _validation_body(exc: RequestValidationError) -> ErrorBody:
    errors = []
    envelope = False
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ())]
        envelope = envelope or "envelope" in loc[1:]  # a task's (or a group child's)
        errors.append(
            {"loc": ".".join(loc), "msg": str(err.get("msg", "")), "type": err.get("type")}
        )
    where = {e["loc"].split(".", 1)[0] for e in errors}
    first = "; ".join(f"{e['loc']}: {e['msg']}" for e in errors[:3])
    code = "bad_envelope" if envelope else "bad_request"
    return ErrorBody(
        error=code,
        message=f"invalid request ({', '.join(sorted(where))}): {first}",
        hint="fix the named fields; the schema is at /openapi.json",
        details={"errors": errors},
    )


async def _sse(
    ops: LocalOps,
    after: int,
    task_ids: Sequence[str] | None,
    kinds: Sequence[str] | None,
    caller: str,
) -> AsyncIterator[ServerSentEvent]:
    """The SSE messages: events as they are emitted.

    The first message is a comment with ``id:`` set to the starting cursor, so a client that
    drops before any event arrives still resumes from the right place. Keep-alives are
    :class:`~sse_starlette.EventSourceResponse` pings (comments); when the client goes away
    the response cancels this generator, and the wait in progress ends within one slice
    (:data:`~federation.interfaces.service.ops.WAIT_SLICE_S`)."""
    cursor = after
    yield ServerSentEvent(comment=f"federation events after {cursor}", id=str(cursor))
    while True:
        try:
            page = await ops.events(cursor, task_ids, kinds, STREAM_HEARTBEAT_S, caller=caller)
        except OpsError as e:
            yield ServerSentEvent(event="error", data=e.body.model_dump_json())
            return
        for ev in page.events:
            yield ServerSentEvent(id=str(ev.seq), event=ev.kind, data=ev.model_dump_json())
        cursor = page.cursor


def _resume_from(last_id: str, after: int) -> int:
    """Where a stream starts: after ``Last-Event-ID`` when the client sent one (a cursor
    this stream gave it), else after ``after``. ASCII digits only: ``"²".isdigit()`` is
    true, and ``int("²")`` raises."""
    if not last_id:
        return after
    if not (last_id.isascii() and last_id.isdigit()):
        raise OpsError(
            422,
            "bad_cursor",
            f"Last-Event-ID {last_id[:40]!r} is not an event cursor (a whole number >= 0)",
            "resume with the id of the last event received, or leave the header out and "
            "pass `after`",
        )
    return int(last_id)


def _keep_alive() -> ServerSentEvent:
    return ServerSentEvent(comment="keep-alive")


def create_app(
    coordinator: Coordinator,
    tokens: TokenStore | GlobusCallers,
    *,
    catalog: Catalog | None = None,
    ops: LocalOps | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    refresh_s: float = 15.0,
) -> FastAPI:
    """The service over ``coordinator``; callers authenticate with tokens from ``tokens``
    (the service's own), or with Globus tokens (``tokens`` a :class:`GlobusCallers`).

    The coordinator stays the caller's: closing the app stops its snapshot refresher only.
    """
    local = ops or LocalOps(coordinator, catalog, refresh_s=refresh_s)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            local.close()

    app = FastAPI(
        title="federation",
        summary="Run tasks across federated Slurm sites through Globus Compute endpoints.",
        version="1",
        lifespan=lifespan,
    )
    app.state.ops = local
    app.add_middleware(Guard, tokens=tokens, max_body_bytes=max_body_bytes)
    auth = [Depends(_doc_bearer)]
    app.include_router(policy_router(local.coord), dependencies=auth)  # operators only
    app.include_router(login_router(local.coord, tokens), dependencies=auth)

    @app.exception_handler(OpsError)
    async def _ops_error(_: Request, exc: OpsError) -> JSONResponse:
        headers = {"Retry-After": "10"} if exc.status == 503 else None
        return JSONResponse(exc.body.model_dump(mode="json"), exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(_validation_body(exc).model_dump(mode="json"), 422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        body = ErrorBody(
            error="not_found" if exc.status_code == 404 else f"http_{exc.status_code}",
            message=str(exc.detail),
            hint="see /docs for the routes" if exc.status_code in (404, 405) else "",
        )
        return JSONResponse(body.model_dump(mode="json"), exc.status_code)

    def caller(request: Request) -> str:
        return str(getattr(request.state, "caller", ""))

    @app.get("/v1/health")
    def health() -> dict[str, Any]:
        """Liveness (no token needed): the sites and the age of the last probe."""
        age = local.cache.age_s()
        return {
            "ok": True,
            "sites": sorted(local.coord.backends),
            "snapshot_age_s": None if age is None else round(age, 3),
        }

    @app.get(
        "/v1/federation",
        dependencies=auth,
        response_model=None,
        responses={200: {"model": FederationSnapshot}},
    )
    def federation(
        request: Request, view: Literal["full", "summary"] = "full", refresh: bool = False
    ) -> FederationSnapshot | FederationSummary:
        """The last snapshot of every site (refreshed every few seconds; ``refresh`` probes
        now, which takes seconds). ``view=summary`` drops nodes and jobs and shows the
        caller's workspace on each site."""
        snap = local.inspect(refresh)
        return summarize(snap, caller(request) or LOCAL_CALLER) if view == "summary" else snap

    @app.get("/v1/functions", dependencies=auth)
    def functions() -> list[FunctionInfo]:
        """The catalog: functions that can be run by name, with their argument schemas."""
        return local.functions()

    @app.post("/v1/envelopes/draft", dependencies=auth)
    def draft(req: DraftRequest) -> EnvelopeDraft:
        """Propose a resource envelope for a described task, validated against the sites."""
        return local.draft(req)

    @app.post("/v1/tasks", dependencies=auth, status_code=202)
    def submit(
        req: TaskRequest, request: Request, response: Response, dry_run: bool = False
    ) -> SubmitResponse:
        """Place and ship a task; returns at once with its id, placement and decision trace.

        Nothing is submitted when the request is refused (422, 409, 503), nor with
        ``?dry_run=true`` (200): then the answer has no task id and its ``job`` is the Slurm
        job the task would be (node class, exact sbatch options)."""
        if dry_run:
            response.status_code = 200
        return local.submit(req, caller(request), dry_run=dry_run)

    @app.get("/v1/tasks", dependencies=auth)
    def tasks(request: Request) -> list[dict[str, Any]]:
        """Your tasks (an operator: everyone's): id, label, state, site, owner."""
        return local.tasks(caller(request))

    @app.get("/v1/tasks/{task_id}", dependencies=auth)
    def status(task_id: str, request: Request) -> TaskStatus:
        """State and placement of one of your tasks; its result manifest once it is done.
        Another caller's task answers 404, as an unknown id does."""
        return local.status(task_id, caller(request))

    @app.post("/v1/tasks/{task_id}/cancel", dependencies=auth)
    def cancel(task_id: str, request: Request) -> CancelResponse:
        """Cancel one of your tasks that has not started running (404 for others')."""
        return local.cancel(task_id, caller(request))

    @app.post("/v1/groups", dependencies=auth, status_code=202)
    def submit_group(req: GroupRequest, request: Request) -> GroupResponse:
        """Place and ship related tasks, spread over distinct sites while feasible; returns
        at once with the group id, each child's task id and placement, and an event cursor.

        Every child is checked first: if one is malformed or fits nowhere, nothing is
        submitted (422, 409)."""
        return local.submit_group(req, caller(request))

    @app.get("/v1/groups/{group_id}", dependencies=auth)
    def group(group_id: str, request: Request) -> GroupView:
        """One of your groups: its children (current attempt of each), re-placements, and
        whether done."""
        return local.group(group_id, caller(request))

    @app.post("/v1/transfers", dependencies=auth, status_code=202)
    def move_data(req: TransferRequest, request: Request) -> TransferResponse:
        """Start copying data from one site's storage to another's; returns at once with
        the transfer id and an event cursor (then ``transfer.*`` events)."""
        return local.move_data(req, caller(request))

    @app.get("/v1/transfers/{transfer_id}", dependencies=auth)
    def transfer(transfer_id: str, request: Request) -> TransferView:
        """One of your transfers: its state and what it reports (bytes, files, errors)."""
        return local.transfer(transfer_id, caller(request))

    @app.get(
        "/v1/events/stream",
        dependencies=auth,
        response_class=EventSourceResponse,
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    async def event_stream(
        request: Request,
        after: Annotated[int, Query(ge=0, description="start after this cursor")] = 0,
        task_id: Annotated[
            list[str] | None, Query(description="only these tasks, groups or transfers")
        ] = None,
        kinds: Annotated[
            list[str] | None, Query(description="only these kinds (repeat or comma-separate)")
        ] = None,
    ) -> EventSourceResponse:
        """Server-sent events: every matching event of yours after ``after`` as it happens.

        Each message has ``id:`` (the event's seq: its place in your own event log), ``event:``
        (its kind) and ``data:`` (the event as JSON). A client that reconnects with
        ``Last-Event-ID`` (or ``after``) resumes where it stopped; nothing is missed. A
        cursor past the end of your log is refused (409 ``cursor_ahead``: the service
        restarted without its store; resume after the ``last`` it names, or after 0)."""
        start = _resume_from(request.headers.get("last-event-id", "").strip(), after)
        kind_list = parse_kinds(kinds)
        who = caller(request)
        local.check_cursor(start, who)  # 409 cursor_ahead: this log is not the cursor's
        local.check_event_filter(task_id, kind_list, who)  # 404/422 before the stream starts
        return EventSourceResponse(
            _sse(local, start, task_id, kind_list, who),
            headers={"Cache-Control": "no-cache"},
            ping=STREAM_HEARTBEAT_S,
            ping_message_factory=_keep_alive,
            sep="\n",
        )

    @app.get("/v1/events", dependencies=auth)
    async def events(
        request: Request,
        after: Annotated[int, Query(ge=0, description="the cursor from the last answer")] = 0,
        task_id: Annotated[list[str] | None, Query(description="only these tasks")] = None,
        kinds: Annotated[
            list[str] | None, Query(description="only these kinds (repeat or comma-separate)")
        ] = None,
        timeout_s: Annotated[
            float, Query(ge=0, description=f"wait at most this long (capped at {MAX_LONG_POLL_S})")
        ] = DEFAULT_LONG_POLL_S,
    ) -> EventsPage:
        """Long poll: your events after ``after``, waiting up to ``timeout_s`` for the first.

        Your cursor counts your own events only (an operator's: every event). Pass the
        returned ``cursor`` as ``after`` next time and no event is missed. A cursor past the
        end of your log is refused at once (409 ``cursor_ahead``), never waited on."""
        return await local.events(
            after,
            task_id,
            parse_kinds(kinds),
            min(timeout_s, MAX_LONG_POLL_S),
            abandoned=request.is_disconnected,
            caller=caller(request),
        )

    return app
