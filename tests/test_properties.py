"""Bad input, generated: every boundary answers with a clear error, never another exception.

Property-based (hypothesis) over envelopes, the service/MCP request models, HTTP payloads
(the real FastAPI app; nothing is shipped when a request is refused), user endpoint config
template variables (shell and YAML metacharacters, huge strings, unicode), probe outputs
(truncated, reordered, unknown states) and SWF trace files (garbage lines).
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from inprocess import ThreadSite, inprocess_coordinator
from pydantic import ValidationError

from federation.core.envelope import ResourceEnvelope
from federation.core.errors import BadEnvelopeError, ProbeError, TemplateVariableError
from federation.core.spec import load_sites
from federation.interfaces.service.app import create_app
from federation.interfaces.service.models import DraftRequest, TaskRequest
from federation.parsing import parse_sinfo, parse_squeue
from federation.parsing.snapshot_builder import build_site_snapshot
from federation.placement.drafting import TaskHints
from federation.security.tokens import TokenStore
from federation.sim.traces import TraceFormatError, load_swf

FIXTURES = Path(__file__).parent / "fixtures" / "probe_output"
MODEST = settings(max_examples=60, deadline=None, database=None)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
ENVELOPE_FIELDS = list(ResourceEnvelope.model_fields)
envelope_dicts = st.dictionaries(
    st.sampled_from(ENVELOPE_FIELDS) | st.text(max_size=10), json_values, max_size=6
)


# --- envelopes -----------------------------------------------------------------------------------


@MODEST
@given(envelope_dicts)
@example({"cpus_min": 4, "cpus_max": 2})
@example({"gpu_types": ["A100"], "gpus_min": 1})
@example({"walltime_s": float("inf")})
def test_envelope_is_valid_or_a_clear_value_error(data: dict[str, Any]) -> None:
    try:
        env = ResourceEnvelope(**data)
    except BadEnvelopeError as e:
        assert str(e).startswith("invalid resource envelope")
        return
    for lo, hi in (
        ("cpus_min", "cpus_max"),
        ("gpus_min", "gpus_max"),
        ("mem_gb_min", "mem_gb_max"),
    ):
        assert getattr(env, hi) is None or getattr(env, lo) <= getattr(env, hi)
    assert env.walltime_s >= 60 and env.nodes >= 1
    # what validates once validates again from its own JSON (the wire round trip)
    assert ResourceEnvelope.model_validate_json(env.model_dump_json()) == env


@MODEST
@given(envelope_dicts)
def test_envelope_from_json_is_valid_or_a_validation_error(data: dict[str, Any]) -> None:
    try:
        text = json.dumps(data)
    except ValueError:
        return
    try:
        ResourceEnvelope.model_validate_json(text)
    except ValueError as e:  # ValidationError is a ValueError
        assert str(e)


# --- service / MCP request models ----------------------------------------------------------------

request_dicts = st.fixed_dictionaries(
    {},
    optional={
        "command": json_values,
        "function": json_values,
        "args": json_values,
        "kwargs": json_values,
        "name": json_values,
        "envelope": envelope_dicts | json_values,
    },
)


@MODEST
@given(request_dicts)
@example({"command": "true", "function": "square", "envelope": {}})
@example({"command": "true", "args": [1], "envelope": {}})
def test_task_request_is_valid_or_a_validation_error(data: dict[str, Any]) -> None:
    try:
        req = TaskRequest.model_validate(data)
    except ValidationError as e:
        assert e.errors()
        return
    assert (req.command is None) != (req.function is None)
    assert isinstance(req.envelope, ResourceEnvelope)


@MODEST
@given(st.dictionaries(st.sampled_from(["description", "hints"]), json_values, max_size=2))
def test_draft_request_and_hints_are_valid_or_a_validation_error(data: dict[str, Any]) -> None:
    with contextlib.suppress(ValidationError):
        DraftRequest.model_validate(data)
    hints = data.get("hints")
    if isinstance(hints, dict):
        with contextlib.suppress(ValidationError):
            TaskHints.model_validate(hints)


# --- HTTP payloads -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Any]]:
    tokens = TokenStore(tmp_path_factory.mktemp("props") / "tokens.db")
    token = tokens.issue("fuzzer").token
    coord = inprocess_coordinator(("local",))
    with TestClient(
        create_app(coord, tokens, refresh_s=3600), headers={"Authorization": f"Bearer {token}"}
    ) as client:
        yield client, coord
    coord.close()


def _shipped(coord: Any) -> int:
    return sum(len(b._futures) for b in coord.backends.values() if isinstance(b, ThreadSite))


def _check_refusal(r: Any) -> None:
    assert r.status_code != 500, r.text
    assert 400 <= r.status_code < 500, r.text
    body = r.json()
    assert body["error"] and body["message"], body


@settings(
    max_examples=80,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(payload=request_dicts | json_values)
@example(payload={"function": "square", "args": ["seven"], "envelope": {}})
@example(payload={"function": "os.system", "args": ["id"], "envelope": {}})
@example(payload={"command": "true", "envelope": {"sites": ["nowhere"]}})
@example(payload={"command": "true", "envelope": {"gpus_min": 1024}})
@example(payload={"command": "true", "envelope": {"gpu_types": ["h100"], "gpus_min": 1}})
def test_bad_task_payloads_get_4xx_and_nothing_is_submitted(
    service: tuple[TestClient, Any], payload: Any
) -> None:
    client, coord = service
    before = _shipped(coord)
    # sent as Python's json writes it: NaN and Infinity included, which strict JSON refuses
    r = client.post(
        "/v1/tasks", content=json.dumps(payload), headers={"content-type": "application/json"}
    )
    if r.status_code == 202:  # a valid request by chance: it ran (and shipped exactly once)
        assert _shipped(coord) == before + 1
        return
    _check_refusal(r)
    assert _shipped(coord) == before


@settings(
    max_examples=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(body=st.binary(max_size=200))
@example(body=b'{"command": "true", "envelope": {}')
@example(body=b"\xff\xfe")
def test_unparseable_bodies_get_4xx(service: tuple[TestClient, Any], body: bytes) -> None:
    client, coord = service
    before = _shipped(coord)
    r = client.post("/v1/tasks", content=body, headers={"content-type": "application/json"})
    if r.status_code == 202:
        return
    _check_refusal(r)
    assert _shipped(coord) == before


@settings(
    max_examples=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    params=st.dictionaries(
        st.sampled_from(["after", "timeout_s", "task_id", "kinds", "view"]),
        st.text(max_size=20) | st.integers().map(str),
        max_size=3,
    ),
    draft=json_values,
)
def test_bad_query_params_and_drafts_get_4xx(
    service: tuple[TestClient, Any], params: dict[str, str], draft: Any
) -> None:
    client, _ = service
    try:  # a bad timeout stays (it must be refused); a good one must not make us wait
        if float(params.get("timeout_s", "0")) >= 0:
            params = {**params, "timeout_s": "0"}
    except ValueError:
        pass
    r = client.get("/v1/events", params=params)
    assert r.status_code != 500, r.text
    if r.status_code >= 400:
        _check_refusal(r)
    r = client.post(
        "/v1/envelopes/draft",
        content=json.dumps(draft),
        headers={"content-type": "application/json"},
    )
    assert r.status_code != 500, r.text
    if r.status_code >= 400:
        _check_refusal(r)


# --- template variables --------------------------------------------------------------------------

META = [*list(";|&$`\\\"'\n\r\t{}[]#*!<>()%:,?\x00"), "{{", "}}", "{%", "%}", "- ", ": "]
nasty_text = st.lists(
    st.sampled_from(META) | st.text(max_size=4) | st.sampled_from(["é", "ß", "\u202e", "😀", "Ω"]),
    max_size=12,
).map("".join)
huge = st.integers(min_value=513, max_value=20_000).map(lambda n: "a" * n)
SAFE_WORKER_INIT = re.compile(r"[A-Za-z0-9_./=:,+@%~ -]{0,512}")
SAFE_ACCOUNT = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@pytest.fixture(scope="module")
def local_site() -> Any:
    return load_sites(["local"])[0]


BASE_OPTS = {"partition": "debug", "nodes": 1, "cpus": 1, "mem_gb": 1, "walltime": "00:10:00"}


@settings(
    max_examples=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    var=st.sampled_from(["worker_init", "account", "walltime", "partition"]),
    value=nasty_text | huge,
)
@example(var="worker_init", value="module load x; rm -rf ~")
@example(var="worker_init", value="ok\nprovider: {type: LocalProvider}")
@example(var="account", value="proj\n")
@example(var="walltime", value="01:00:00\n")
@example(var="partition", value="debug\ngpus: 99")
def test_template_variables_with_metacharacters_never_render(
    local_site: Any, var: str, value: str
) -> None:
    from federation.sites.endpoint_config import render_user_config

    safe = {
        "worker_init": SAFE_WORKER_INIT,
        "account": SAFE_ACCOUNT,
        "walltime": re.compile(r"[0-9]{1,3}:[0-5][0-9]:[0-5][0-9]"),
        "partition": re.compile(r"debug|gpu"),
    }[var]
    opts = {**BASE_OPTS, var: value}
    try:
        rendered = render_user_config(local_site, opts)
    except TemplateVariableError as e:
        assert var in str(e)
        assert not safe.fullmatch(value) or var == "walltime"  # walltime: also bounded by partition
        return
    assert safe.fullmatch(value), f"{var}={value!r} was rendered"
    loaded = yaml.safe_load(rendered)
    assert isinstance(loaded, dict)  # the value did not break the YAML's structure


# --- probe outputs -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def probe() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / "probetest-22.05.8.json").read_text())
    return data


def _mutate(text: str, how: str, cut: int, rnd: st.DrawFn) -> str:
    lines = text.splitlines(keepends=True)
    if how == "truncate":
        return text[: cut % (len(text) + 1)]
    if how == "shuffle_columns":
        out = []
        for ln in lines:
            cols = ln.rstrip("\n").split("\x1f")
            out.append("\x1f".join(rnd(st.permutations(cols))) + "\n")
        return "".join(out)
    if how == "unknown_state":
        state = rnd(st.text(max_size=8))
        return re.sub(
            r"\b(idle|mixed|allocated|RUNNING|PENDING|alloc|mix)\b", lambda _: state, text
        )
    if how == "garbage_line":
        i = cut % (len(lines) + 1)
        return "".join([*lines[:i], rnd(st.text(max_size=80)) + "\n", *lines[i:]])
    if how == "drop_field":
        return "".join(ln.rsplit("\x1f", 1)[0] + "\n" if "\x1f" in ln else ln for ln in lines)
    return rnd(st.text(max_size=200))


@settings(
    max_examples=80,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    cmd=st.sampled_from(["sinfo", "squeue", "squeue_start", "scontrol_partition", "version"]),
    how=st.sampled_from(
        ["truncate", "shuffle_columns", "unknown_state", "garbage_line", "drop_field", "replace"]
    ),
    cut=st.integers(min_value=0, max_value=10_000),
    data=st.data(),
)
def test_mangled_probe_output_is_a_probe_error_or_a_warning(
    probe: dict[str, Any], cmd: str, how: str, cut: int, data: st.DataObject
) -> None:
    raw = copy.deepcopy(probe)
    if cmd not in raw:
        return
    raw[cmd]["stdout"] = _mutate(raw[cmd]["stdout"], how, cut, data.draw)
    try:
        snap = build_site_snapshot("probetest", raw)
    except ProbeError as e:  # ParseError is a ProbeError
        assert str(e)
        return
    assert snap.site == "probetest" and snap.health.reachable


@MODEST
@given(st.text(max_size=300), st.booleans())
@example("n1\x1fcpu*\x1fidle\n", False)
@example(
    "n1\x1fcpu*\x1fwhatever\x1fidle\x1f4/4/0/8\x1f16000\x1f4000\x1f(null)\x1fgpu:0\x1fx\x1f1\n",
    False,
)
def test_table_parsers_raise_parse_errors_only(text: str, squeue: bool) -> None:
    with contextlib.suppress(ProbeError):
        parse_squeue(text) if squeue else parse_sinfo(text)


@MODEST
@given(
    key=st.sampled_from(["sinfo", "squeue", "version", "started_at", "format", "probe"]),
    value=json_values,
)
def test_probe_with_wrong_types_is_a_probe_error(
    probe: dict[str, Any], key: str, value: Any
) -> None:
    raw = copy.deepcopy(probe)
    raw[key] = value
    with contextlib.suppress(ProbeError):
        build_site_snapshot("probetest", raw)


# --- trace files ---------------------------------------------------------------------------------

GOOD_SWF = (
    "1 0 10 100 4 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1 -1\n"
    "2 5 0 50 2 -1 -1 2 100 -1 1 2 1 -1 1 -1 -1 -1\n"
)
swf_lines = st.lists(
    st.sampled_from(
        [
            "3 9 1 20 1 -1 -1 1 60 -1 1 1 1 -1 1 -1 -1 -1",
            "; MaxNodes: 100",
            "",
            "4 9 1 -1 1 -1 -1 1 60 -1 1 1 1 -1 1 -1 -1 -1",  # unknown run time: skipped
            "5 9 1 20 0 -1 -1 0 60 -1 1 1 1 -1 1 -1 -1 -1",  # unknown size: skipped
        ]
    )
    | st.text(max_size=60).filter(lambda s: "\n" not in s and "\r" not in s),
    max_size=6,
)


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(extra=swf_lines, limit=st.none() | st.integers(min_value=1, max_value=10))
@example(extra=["1 2 3"], limit=None)
@example(extra=["1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 nan"], limit=None)
@example(extra=["1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 x"], limit=3)
def test_garbage_swf_lines_are_a_clear_error_or_skipped_with_a_count(
    tmp_path: Path, extra: list[str], limit: int | None
) -> None:
    path = tmp_path / "t.swf"
    path.write_text(GOOD_SWF + "\n".join(extra) + "\n")
    try:
        trace = load_swf(path, limit)
    except TraceFormatError as e:
        assert e.line is not None and e.line >= 3 and str(path) in str(e)
        return
    assert len(trace) >= min(2, limit or 2)
    if limit is None:
        assert trace.records == len(trace) + sum(trace.skipped.values())
