"""Every route of the HTTP service, fuzzed: a bad request is a clear 4xx and leaves no trace.

For each route, ``ROUTE_FUZZ`` says how to generate its inputs: the fields of its JSON body,
its query, path and header parameters (good values, wrong types, unknown fields, NaN and
huge numbers, unicode, path tricks), plus the body as arbitrary JSON or raw bytes and a
missing, forged or malformed token. The service runs for real (uvicorn in a thread) over a
durable in-process coordinator (tests/fuzzing.py). Each answer must be a success or a 4xx
whose JSON body says what is wrong (``message``) and what to do (``hint``), never a 5xx;
and a refused request must leave the store, the token and held tables, the event log and
the coordinator's memory exactly as they were (the audit log may gain a ``denied`` row: a
policy refusal is recorded on purpose). A request that was valid by chance is let through.

``test_every_route_has_a_fuzz_strategy`` reads the app's routes and its OpenAPI document: a
route, a query parameter or a body field without a strategy here fails it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fuzzing import (
    OMIT,
    Field,
    FuzzWorld,
    any_bad,
    build_world,
    close_world,
    draft_request_fields,
    event_kinds,
    group_fields,
    id_field,
    json_values,
    model_dicts,
    nasty_text,
    omit,
    pick,
    task_fields,
    transfer_fields,
    unchanged,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from federation.interfaces.service.app import create_app
from federation.interfaces.service.server import running

MAX_BODY = 50_000
EXAMPLES = int(os.environ.get("FEDERATION_FUZZ_EXAMPLES", "50"))
"""Examples per route or tool (more: ``FEDERATION_FUZZ_EXAMPLES=500``)."""


FUZZER = st.just("fuzzer")


@dataclass(frozen=True)
class Fuzz:
    """How to fuzz one route: good and bad values of each body field, query, path and
    header parameter (:class:`~fuzzing.Field`)."""

    body: dict[str, Field] | None = None
    query: dict[str, Field] = field(default_factory=dict)
    path: dict[str, Field] = field(default_factory=dict)
    headers: dict[str, Field] = field(default_factory=dict)
    creates: bool = False
    """A valid request creates records (the test waits for them, then goes on from there)."""
    who: st.SearchStrategy[str] = FUZZER
    stream: bool = False


def _ids(*kinds: str) -> Field:
    """Real ids (of the named kinds, filled in from the world), random ones and junk."""
    f = id_field(*kinds)
    junk = st.sampled_from(["0", "1", "..", ".", "%2e%2e", "a b", "null"])
    return Field(f.good, f.bad | junk)


def _text(good: list[str], bad: st.SearchStrategy[str]) -> Field:
    return Field(st.sampled_from(good) | omit, bad)


numbers_as_text = (
    st.integers(min_value=-(10**30), max_value=10**30).map(str)
    | st.sampled_from(["-1", "nan", "inf", "-inf", "1e400", "0x10", "", " 5", "٣"])
    | nasty_text
)
event_ids = _ids("task", "group", "transfer", "held")
event_filter = {
    "after": _text(["0", "1", "3"], numbers_as_text),
    "task_id": Field(st.lists(event_ids.good, max_size=2), st.lists(event_ids.bad, min_size=1)),
    "kinds": Field(st.lists(event_kinds, max_size=2), st.lists(nasty_text, min_size=1)),
}
# Last-Event-ID: printable latin-1, including digits that are not ASCII ("²")
last_event_ids = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0xFF).filter(
        lambda c: not 0x7F <= ord(c) < 0xA0
    ),
    max_size=12,
) | st.sampled_from(["\xb2", "12\xb3", "-1", "99999999999999999999999"])
# the operator routes: the held task's id is left out for the operator (deciding it
# would be a valid request); for a plain caller any id is refused
policy_ids = Field(st.sampled_from(["<held>", "<task>"]), _ids("task").bad)
deciders = st.sampled_from(["fuzzer", "ops"])

ROUTE_FUZZ: dict[tuple[str, str], Fuzz] = {
    ("GET", "/v1/health"): Fuzz(),
    ("GET", "/openapi.json"): Fuzz(),
    ("GET", "/docs"): Fuzz(),
    ("GET", "/docs/oauth2-redirect"): Fuzz(),
    ("GET", "/redoc"): Fuzz(),
    ("GET", "/v1/federation"): Fuzz(
        query={
            "view": _text(["full", "summary"], nasty_text),
            "refresh": _text(["false", "true", "0"], st.sampled_from(["maybe", "2"]) | nasty_text),
        }
    ),
    ("GET", "/v1/functions"): Fuzz(),
    ("POST", "/v1/envelopes/draft"): Fuzz(body=draft_request_fields()),
    ("POST", "/v1/tasks"): Fuzz(
        body=task_fields()
        | {
            "needs": Field(
                omit, st.lists(st.fixed_dictionaries({"child": st.text()})) | json_values
            )
        },
        query={"dry_run": _text(["false", "true"], st.sampled_from(["maybe", "2"]) | nasty_text)},
        creates=True,
    ),
    ("GET", "/v1/tasks"): Fuzz(),
    ("GET", "/v1/tasks/{task_id}"): Fuzz(path={"task_id": _ids("task", "group", "held")}),
    ("POST", "/v1/tasks/{task_id}/cancel"): Fuzz(path={"task_id": _ids("task", "held")}),
    ("POST", "/v1/groups"): Fuzz(body=group_fields(), creates=True),
    ("GET", "/v1/groups/{group_id}"): Fuzz(path={"group_id": _ids("group", "task")}),
    ("POST", "/v1/transfers"): Fuzz(body=transfer_fields(), creates=True),
    ("GET", "/v1/transfers/{transfer_id}"): Fuzz(path={"transfer_id": _ids("transfer", "task")}),
    ("GET", "/v1/events"): Fuzz(query={**event_filter, "timeout_s": _text(["0"], numbers_as_text)}),
    ("GET", "/v1/events/stream"): Fuzz(
        query=event_filter,
        headers={"last-event-id": Field(st.sampled_from(["0", "2"]) | omit, last_event_ids)},
        stream=True,
    ),
    ("GET", "/v1/policy/pending"): Fuzz(who=deciders),
    ("POST", "/v1/policy/{task_id}/approve"): Fuzz(path={"task_id": policy_ids}, who=deciders),
    ("POST", "/v1/policy/{task_id}/reject"): Fuzz(
        body={"reason": Field(omit | st.text(min_size=1, max_size=20), any_bad)},
        path={"task_id": policy_ids},
        who=deciders,
    ),
    # service tokens here: nothing to log out of (409); Globus callers: test_globus_identity
    ("POST", "/v1/logout"): Fuzz(query={"force": _text(["false", "true"], nasty_text)}),
}


@dataclass
class Service:
    world: FuzzWorld
    http: httpx.Client
    baseline: dict[str, Any]

    def __repr__(self) -> str:
        return f"Service({self.world.home})"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    world = build_world(tmp_path_factory.mktemp("fuzz-service"))
    app = create_app(world.coord, world.tokens, ops=world.ops, max_body_bytes=MAX_BODY)
    with running(app) as base, httpx.Client(base_url=base, timeout=30) as http:
        yield Service(world, http, world.settle())
    close_world(world)


# --- coverage ------------------------------------------------------------------------------


def _body_fields(doc: dict[str, Any], op: dict[str, Any]) -> set[str] | None:
    body = op.get("requestBody")
    if body is None:
        return None
    schema = body["content"]["application/json"]["schema"]
    name = schema["$ref"].rsplit("/", 1)[1]
    return set(doc["components"]["schemas"][name]["properties"])


def test_every_route_has_a_fuzz_strategy(service: Service) -> None:
    app = create_app(service.world.coord, service.world.tokens, ops=service.world.ops)
    doc = app.openapi()
    # the API's routes (included routers too) as the OpenAPI document lists them, with
    # their parameters and body fields; and the app's own non-API routes (its docs)
    api = {(m.upper(), p): op for p, item in doc["paths"].items() for m, op in item.items()}
    routes = set(api)
    for r in app.routes:
        for method in getattr(r, "methods", None) or ():
            if method not in ("HEAD", "OPTIONS") and getattr(r, "path", None):
                routes.add((method, r.path))
    missing = sorted(routes - set(ROUTE_FUZZ))
    assert not missing, f"routes without a fuzz strategy: {missing}; add each to ROUTE_FUZZ"
    assert not set(ROUTE_FUZZ) - routes, sorted(set(ROUTE_FUZZ) - routes)
    for (method, path), op in api.items():
        spec = ROUTE_FUZZ[(method, path)]
        params = {(p["in"], p["name"]) for p in op.get("parameters", [])}
        fuzzed = {("query", q) for q in spec.query} | {("path", p) for p in spec.path}
        assert params == fuzzed, f"{method} {path}: parameters {params}, fuzzed {fuzzed}"
        fields = _body_fields(doc, op)
        assert fields == (set(spec.body) if spec.body is not None else None), (
            f"{method} {path}: body fields {fields}, fuzzed {spec.body and set(spec.body)}"
        )


# --- the fuzz ------------------------------------------------------------------------------


def _fill(value: str, world: FuzzWorld) -> str:
    for kind, real in world.ids.items():
        value = value.replace(f"<{kind}>", real)
    return value


def _as_query(value: Any) -> str | list[str]:
    if isinstance(value, list):
        return [v if isinstance(v, str) else json.dumps(v) for v in value]
    return value if isinstance(value, str) else json.dumps(value)


@st.composite
def http_requests(draw: st.DrawFn, route: tuple[str, str], world: FuzzWorld) -> dict[str, Any]:
    method, template = route
    spec = ROUTE_FUZZ[route]
    who = draw(spec.who)
    url = template
    for name, f in spec.path.items():
        raw = draw(pick(f.good, f.bad))
        value = _fill(raw if isinstance(raw, str) else json.dumps(raw), world)
        if value == OMIT or (who == "ops" and value == world.ids["held"]):
            value = str(draw(st.uuids()))  # the operator deciding it would be a valid request
        url = url.replace("{" + name + "}", quote(value, safe=""))
    params = {k: _as_query(v) for k, v in draw(model_dicts(spec.query)).items()}
    params = {
        k: _fill(v, world) if isinstance(v, str) else [_fill(x, world) for x in v]
        for k, v in params.items()
    }
    if "timeout_s" in spec.query:  # a valid timeout must not make the test wait
        try:
            if float(str(params.get("timeout_s", "0"))) >= 0:
                params["timeout_s"] = "0"
        except ValueError:
            pass
    auth = st.sampled_from(["good"] * 12 + ["none", "forged", "basic", "bearer-only"])
    headers = {"authorization": draw(auth)}
    for name, f in spec.headers.items():
        value = draw(pick(f.good, f.bad))
        if value != OMIT:
            headers[name] = value
    content: bytes | None = None
    if spec.body is not None:
        how = draw(st.sampled_from(["model"] * 6 + ["json", "bytes", "none"]))
        if how == "model":
            content = json.dumps(draw(model_dicts(spec.body))).encode()
        elif how == "json":
            content = json.dumps(draw(json_values)).encode()
        elif how == "bytes":
            content = draw(st.binary(max_size=200))
        if content is not None:
            content = _fill(content.decode("utf-8", "replace"), world).encode()
    ctype = draw(st.sampled_from(["application/json"] * 8 + ["text/plain", "none"]))
    return {
        "method": method,
        "url": url,
        "params": params,
        "headers": headers,
        "content": content,
        "ctype": ctype,
        "who": who,
    }


def _send(svc: Service, req: dict[str, Any], stream: bool) -> tuple[int, bytes]:
    tokens = svc.world.issued
    headers = {k: v for k, v in req["headers"].items() if k != "authorization"}
    auth = {
        "good": f"Bearer {tokens[req['who']]}",
        "forged": f"Bearer {tokens[req['who']][:-4]}AAAA",
        "basic": "Basic Zm9vOmJhcg==",
        "bearer-only": "Bearer",
        "none": None,
    }[req["headers"]["authorization"]]
    if auth is not None:
        headers["authorization"] = auth
    if req["ctype"] != "none" and req["content"] is not None:
        headers["content-type"] = req["ctype"]
    encoded = {k: v.encode("latin-1") if isinstance(v, str) else v for k, v in headers.items()}
    with svc.http.stream(
        req["method"], req["url"], params=req["params"], headers=encoded, content=req["content"]
    ) as r:
        if stream and r.status_code == 200:
            return 200, b""  # a valid event stream: it would go on forever
        return r.status_code, r.read()


def _check(svc: Service, route: tuple[str, str], req: dict[str, Any]) -> None:
    spec = ROUTE_FUZZ[route]
    status, body = _send(svc, req, spec.stream)
    assert status < 500, f"{req}: {status} {body[:500]!r}"
    error = ""
    if status >= 400:
        assert status in (400, 401, 403, 404, 405, 409, 413, 422), (req, status, body[:300])
        doc = json.loads(body)
        error = doc["error"]
        assert doc["error"] and doc["message"], (req, doc)
        assert doc["hint"], f"{status} {doc['error']} says what is wrong but not what to do: {doc}"
    if spec.creates and 200 <= status < 300:
        svc.baseline = svc.world.settle()  # valid by chance: it ran; go on from there
        return
    after = svc.world.fingerprint()
    changed = unchanged(svc.baseline, after, policy_refusal=error == "policy_violation")
    assert not changed, f"{req} -> {status} {body[:300]!r} recorded something: {changed}"
    svc.baseline = after


@pytest.mark.parametrize("route", sorted(ROUTE_FUZZ), ids="{0[0]} {0[1]}".format)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_bad_requests_get_a_clear_4xx_and_leave_no_trace(
    service: Service, route: tuple[str, str], data: st.DataObject
) -> None:
    _check(service, route, data.draw(http_requests(route, service.world)))


# --- the guard -----------------------------------------------------------------------------


@pytest.mark.parametrize("route", [k for k in sorted(ROUTE_FUZZ) if k[0] == "POST"])
def test_oversized_bodies_are_413_and_leave_no_trace(
    service: Service, route: tuple[str, str]
) -> None:
    url = route[1].replace("{task_id}", service.world.ids["held"])
    big = json.dumps({"command": "true", "envelope": {}, "name": "x" * MAX_BODY}).encode()
    before = service.world.fingerprint()
    auth = {"authorization": f"Bearer {service.world.issued['ops']}"}
    r = service.http.post(url, content=big, headers=auth | {"content-type": "application/json"})
    assert r.status_code == 413, r.text
    assert r.json()["hint"] and str(MAX_BODY) in r.json()["message"]
    assert service.world.fingerprint() == before


KNOWN_BAD: list[tuple[str, str, dict[str, Any], int, str]] = [
    # (method, url, request, status, error): found by the fuzz, or worth keeping in sight
    ("GET", "/v1/events/stream", {"headers": {"last-event-id": "\xb2"}}, 422, "bad_cursor"),
    ("GET", "/v1/events/stream", {"params": {"kinds": "task.*"}}, 422, "bad_event_kind"),
    ("GET", "/v1/events", {"params": {"after": "-1"}}, 422, "bad_request"),
    ("GET", "/v1/events", {"params": {"timeout_s": "nan"}}, 422, "bad_request"),
    ("POST", "/v1/tasks", {"json": {"command": " ", "envelope": {}}}, 422, "bad_request"),
    (
        "POST",
        "/v1/tasks",
        {"json": {"command": "rm -rf /", "envelope": {}}},
        403,
        "policy_violation",
    ),
    (
        "POST",
        "/v1/tasks",
        {"json": {"command": "true", "envelope": {}, "walltime_s": 60}},
        422,
        "bad_request",
    ),
    (
        "POST",
        "/v1/tasks",
        {"content": b'{"command": "true", "envelope": {"nodes": NaN}}'},
        422,
        "bad_envelope",
    ),
    (
        "POST",
        "/v1/groups",
        {
            "json": {
                "children": [
                    {"command": "true", "envelope": {"sites": ["local"]}},
                    {"command": "true; id", "envelope": {"sites": ["local"]}},
                ]
            }
        },
        403,
        "policy_violation",
    ),
    (
        "POST",
        "/v1/transfers",
        {
            "json": {
                "source_site": "local",
                "source_path": "../x",
                "dest_site": "delta",
                "dest_path": "y",
            }
        },
        422,
        "bad_path",
    ),
    (
        "POST",
        "/v1/transfers",
        {
            "json": {
                "source_site": "local",
                "source_path": "missing.txt",
                "dest_site": "delta",
                "dest_path": "y",
            }
        },
        404,
        "data_not_found",
    ),
    ("GET", "/v1/tasks/<held>", {}, 404, "unknown_task"),
    ("POST", "/v1/policy/<held>/approve", {}, 403, "not_an_operator"),
]


@pytest.mark.parametrize(("method", "url", "request_", "status", "error"), KNOWN_BAD)
def test_known_bad_requests(
    service: Service, method: str, url: str, request_: dict[str, Any], status: int, error: str
) -> None:
    req = {
        "method": method,
        "url": _fill(url, service.world),
        "params": request_.get("params", {}),
        "headers": {"authorization": "good", **request_.get("headers", {})},
        "content": request_.get("content")
        or (json.dumps(request_["json"]).encode() if "json" in request_ else None),
        "ctype": "application/json",
        "who": "fuzzer",
    }
    got, body = _send(service, req, stream=True)
    assert got == status and json.loads(body)["error"] == error, body
    _check(service, (method, url.replace("<held>", "{task_id}")), req)
