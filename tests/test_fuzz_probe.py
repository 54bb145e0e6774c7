"""The probe-result parser, fuzzed: whatever a site sends back is a snapshot or a ProbeError.

A probe result is a dict the site's endpoint returns (``functions.probes.probe_slurm``): the
coordinator has no say in what arrives. Starting from real probe results (fixtures), the
strategies replace the whole result (arbitrary JSON, bytes, strings), a top-level value, a
command's entry or one of its fields (``rc``, ``stdout``, ``fields``, ``timed_out``,
``stdout_zlib_b64`` with random or corrupt compressed bytes...), or a command's output
(truncated, garbage lines, arbitrary text, bytes). :func:`build_site_snapshot` must return
a snapshot that survives its own JSON round trip, or raise :class:`ProbeError`
(:class:`ParseError` included) with a message; never any other exception. The coordinator's
probing path then turns the error into an unreachable site, without logging a crash.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import os
import zlib
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from fuzzing import json_values
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from federation.core.errors import ProbeError
from federation.core.snapshot import SiteSnapshot
from federation.parsing.snapshot_builder import build_site_snapshot
from federation.runtime.probing import site_snapshot

FIXTURES = Path(__file__).parent / "fixtures" / "probe_output"
PROBES = {
    p.stem: json.loads(p.read_text())
    for p in sorted(FIXTURES.glob("*.json"))
    if "probe" in json.loads(p.read_text())
}
# the recorded probes predate sacctmgr_qos: one of them is given the probe's own answer
QOS_OUT = Path(__file__).parent / "fixtures" / "sacctmgr_qos" / "written-local-federation-qos.txt"
PROBES["probetest-qos"] = {
    **PROBES["probetest-22.05.8"],
    "sacctmgr_qos": {
        "argv": ["sacctmgr", "--noheader", "--parsable2", "show", "qos"],
        "rc": 0,
        "stdout": QOS_OUT.read_text(),
        "stderr": "",
        "fields": ["Name", "Priority", "MaxWall", "MaxTRESPU", "MaxJobsPU", "MaxSubmitPU", "Flags"],
    },
}
COMMANDS = [
    "sinfo",
    "squeue",
    "squeue_start",
    "scontrol_partition",
    "version",
    "sshare",
    "sacctmgr_qos",
]
TOP_KEYS = [
    "probe",
    "format",
    "started_at",
    "utc_offset_s",
    "duration_s",
    "account",
    "accounts",
    "budgets",
    "budget_core_hours",
    "hostname",
    *COMMANDS,
]
ENTRY_KEYS = [
    "argv",
    "rc",
    "stdout",
    "stderr",
    "duration_s",
    "timed_out",
    "error",
    "fields",
    "stdout_zlib_b64",
    "first_attempt",
]
EXAMPLES = int(os.environ.get("FEDERATION_FUZZ_EXAMPLES", "300"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

anything = (
    json_values
    | st.binary(max_size=100)
    | st.sampled_from([float("nan"), float("inf"), -1, 2**64, True, "", [], {}])
)
packed = st.binary(max_size=300).map(lambda b: base64.b64encode(zlib.compress(b)).decode())
cells = st.sampled_from(
    [
        "",
        "N/A",
        "(null)",
        "-1",
        "4294967294",
        "1e309",
        "nan",
        "inf",
        "١٢",
        "5K",
        "2G",
        "1-00:00:00",
        "UNLIMITED",
        "INFINITE",
        "gpu:a100:-1",
        "gpu::",
        "0/0/0",
        "1/2/3/x",
        "n[1-",
        "n[3-1]",
        "n[1-100000000]",
        "2026-13-40T25:61:61",
        "None",
        "\x1e",
        "a\x1fb",
    ]
)
corrupt = st.binary(max_size=100).map(lambda b: base64.b64encode(b).decode()) | st.text()


def _mangle(text: str, how: str, cut: int, junk: str) -> Any:
    lines = text.splitlines(keepends=True)
    if how == "truncate":
        return text[: cut % (len(text) + 1)]
    if how == "garbage_line":
        i = cut % (len(lines) + 1)
        return "".join([*lines[:i], junk + "\n", *lines[i:]])
    if how == "bytes":
        return text.encode()[: cut % (len(text) + 2)]
    if how == "packed":  # the same output as the probe compresses a large one
        return None
    if how == "cell" and lines:  # one value of one row: reaches the field parsers
        i = cut % len(lines)
        cells = lines[i].rstrip("\n").split("\x1f")
        cells[(cut // 7) % len(cells)] = junk
        return "".join([*lines[:i], "\x1f".join(cells) + "\n", *lines[i + 1 :]])
    return junk


@st.composite
def probe_results(draw: st.DrawFn) -> Any:
    probe = copy.deepcopy(PROBES[draw(st.sampled_from(sorted(PROBES)))])
    how = draw(st.sampled_from(["whole", "top", "entry", "field", "stdout", "stdout", "two"]))
    if how == "whole":
        return draw(anything | st.text())
    for _ in range(2 if how == "two" else 1):
        what = draw(st.sampled_from(["top", "entry", "field", "stdout"])) if how == "two" else how
        cmd = draw(st.sampled_from(COMMANDS))
        if what == "top":
            probe[draw(st.sampled_from(TOP_KEYS) | st.text(max_size=8))] = draw(anything)
        elif what == "entry":
            probe[cmd] = draw(anything)
        elif what == "field":
            entry = probe.setdefault(cmd, {})
            if isinstance(entry, dict):
                key = draw(st.sampled_from(ENTRY_KEYS))
                value = draw(packed | corrupt if key == "stdout_zlib_b64" else anything)
                entry[key] = value
        elif isinstance(probe.get(cmd), dict) and isinstance(probe[cmd].get("stdout"), str):
            entry = probe[cmd]
            mode = draw(
                st.sampled_from(["truncate", "garbage_line", "bytes", "packed", "text", "cell"])
            )
            junk = draw(cells | st.text()) if mode == "cell" else draw(st.text())
            out = _mangle(entry["stdout"], mode, draw(st.integers(0, 10**5)), junk)
            if out is None:
                entry["stdout_zlib_b64"] = base64.b64encode(
                    zlib.compress(entry.pop("stdout").encode())
                ).decode()
            else:
                entry["stdout"] = out
    return probe


def _build(raw: Any) -> SiteSnapshot | ProbeError:
    try:
        snap = build_site_snapshot("fuzzed", raw)
    except ProbeError as e:  # ParseError is one
        assert str(e).strip(), f"{type(e).__name__} without a message"
        return e
    again = SiteSnapshot.model_validate_json(snap.model_dump_json())
    assert again.site == "fuzzed" and again.health.reachable
    return snap


def test_the_fixtures_parse() -> None:
    assert {"probetest-22.05.8", "delta-22.05.8", "noconf-22.05.8"} <= set(PROBES)
    for name, raw in PROBES.items():
        got = _build(raw)
        # noconf: a site whose sinfo cannot find its controller
        assert isinstance(got, ProbeError if name.startswith("noconf") else SiteSnapshot), name


@SETTINGS
@given(raw=probe_results())
@example(raw={**PROBES["probetest-22.05.8"], "utc_offset_s": float("inf")})
@example(raw={**PROBES["probetest-22.05.8"], "utc_offset_s": float("nan")})
@example(raw={**PROBES["probetest-22.05.8"], "utc_offset_s": 10**20})
@example(raw={**PROBES["probetest-22.05.8"], "budget_core_hours": float("nan")})
@example(raw={**PROBES["probetest-22.05.8"], "accounts": ["a"], "budgets": {"a": float("nan")}})
@example(raw={**PROBES["probetest-22.05.8"], "accounts": "a,b"})
@example(raw={**PROBES["probetest-22.05.8"], "duration_s": float("inf")})
@example(raw={**PROBES["probetest-22.05.8"], "started_at": "9999-12-31T23:59:59+00:00"})
@example(raw={**PROBES["probetest-22.05.8"], "started_at": "0001-01-01T00:00:00-05:00"})
@example(raw={**PROBES["probetest-22.05.8"], "sinfo": {"rc": 0, "stdout": b"n1"}})
@example(raw=b'{"sinfo": {}}')
def test_any_probe_result_is_a_snapshot_or_a_probe_error(raw: Any) -> None:
    _build(raw)


@settings(
    max_examples=max(10, EXAMPLES // 5),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(raw=probe_results())
def test_probing_turns_any_result_into_a_snapshot_without_a_crash(
    raw: Any, caplog: pytest.LogCaptureFixture
) -> None:
    fut: Future[Any] = Future()
    fut.set_result(raw)
    with caplog.at_level(logging.ERROR, logger="federation.runtime.probing"):
        caplog.clear()
        snap = site_snapshot("fuzzed", fut, 0.0, 10.0)
    assert snap.site == "fuzzed"
    assert snap.health.reachable or snap.health.error
    assert not caplog.records, [r.getMessage() for r in caplog.records]
