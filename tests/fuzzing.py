"""What the fuzz tests share: a durable in-process coordinator, a fingerprint of everything
it has recorded, and value strategies for the wire models' fields.

The coordinator (``FuzzWorld``) has every kind of record a request can create: a SQLite
store (tasks, copies, events, groups, transfers, held tasks, hooks), a token database, an
audit log and a held task; its sites run tasks on threads (tests/inprocess.py).
:meth:`FuzzWorld.fingerprint` reads all of it, so a test can say that a refused input left
no trace. The audit log is the one place a refusal is written on purpose: every decision of
the policy gate (a 403 ``policy_violation`` is one) gets a row.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from inprocess import FixedCoordinator, ThreadSite

from federation.core.envelope import ResourceEnvelope
from federation.core.spec import load_sites
from federation.core.storage import site_storage
from federation.core.workspace import workspace_rel
from federation.interfaces.service.models import (
    EVENT_KINDS,
    GroupRequest,
    TaskRequest,
    TransferRequest,
)
from federation.interfaces.service.ops import LocalOps
from federation.runtime.store import Store
from federation.security.audit import AuditLog
from federation.security.policy import CallerPolicy, PolicyGate, PolicySet
from federation.security.tokens import TokenStore
from federation.transfer import LocalCopyBackend

SITES = ("local", "delta")
FUZZ_POLICY = CallerPolicy(
    allowed_commands=["true", "hostname", "echo *"], max_node_hours_per_task=50
)
"""Every fuzzing caller's policy: a command outside it, or a shape over it, is refused (403)."""

# --- values --------------------------------------------------------------------------------
# Each field of a request is a Field: what a careful client sends (``good``) and what a
# careless or hostile one does (``bad``). OMIT leaves the field out.

OMIT = "<omit>"
omit = st.just(OMIT)


def pick(*choices: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """One of ``choices``, each equally likely (list one twice to weight it)."""
    return st.sampled_from(choices).flatmap(lambda s: s)


@dataclass(frozen=True)
class Field:
    good: st.SearchStrategy[Any]
    bad: st.SearchStrategy[Any]


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
nasty_text = st.sampled_from(
    [
        "",
        " ",
        "\x00",
        "../../etc/passwd",
        "/etc/passwd",
        "a/../../b",
        "%2e%2e%2f",
        "\u202e\u0000é😀",
        "'; DROP TABLE tasks; --",
        "$(id)",
        "`id`",
        "x" * 5_000,
        "\ud7ff\ue000",
        "NaN",
        "-1",
        "1e309",
    ]
) | st.text(max_size=40)
bad_numbers = st.sampled_from([-1, 0, 10**30, -(10**30), 1.5, float("inf"), float("nan")])
ENVELOPE_FIELDS = sorted(ResourceEnvelope.model_fields)
envelope_dicts = st.dictionaries(
    st.sampled_from(ENVELOPE_FIELDS) | st.text(max_size=10),
    json_values | bad_numbers | st.sampled_from([["local"], ["nowhere"], ["a100"], 4]),
    max_size=5,
)
good_envelopes = st.sampled_from(
    [
        {},
        {"walltime_s": 300, "sites": ["local"]},
        {"cpus_min": 2, "walltime_s": 120},
        {"sites": ["delta"], "walltime_s": 600},
        {"gpus_min": 1, "walltime_s": 300},
        {"nodes": 64, "walltime_s": 86400},  # over the node-hour limit, or no site (403/409)
    ]
)
site_names = st.sampled_from(["nowhere", "", "../local", "LOCAL"]) | nasty_text
paths = st.sampled_from(["missing.txt", "sub/", ".", "/", "../in.txt"]) | nasty_text
event_kinds = st.sampled_from([*EVENT_KINDS, "task.*", "", ",", "task.completed,bogus"])
any_bad = nasty_text | json_values


def task_fields() -> dict[str, Field]:
    """A task request's fields (TaskRequest, MCP submit_task and each group child)."""
    return {
        "command": Field(
            st.sampled_from(["true", "hostname", "echo hi"]),
            st.sampled_from(["rm -rf /", "true; id", "echo $(id)", "true\nid"]) | any_bad | omit,
        ),
        "function": Field(omit, st.sampled_from(["square", "os.system", "fail_with"]) | any_bad),
        "args": Field(omit, st.lists(st.integers(-5, 5), max_size=2) | json_values),
        "kwargs": Field(omit, st.dictionaries(st.text(max_size=8), json_values, max_size=3)),
        "name": Field(omit | st.text(max_size=20), any_bad),
        "envelope": Field(good_envelopes, envelope_dicts | json_values | omit),
        "workflow": Field(omit | st.just("wf1"), any_bad | st.text(max_size=140)),
    }


def draft_fields() -> dict[str, Field]:
    """DraftRequest / MCP draft_envelope."""
    hints = st.dictionaries(
        st.sampled_from(["workload_class", "gpus", "nodes", "known_runtime_s", "gpu_types"])
        | st.text(max_size=8),
        json_values,
        max_size=3,
    )
    described = st.sampled_from(["clean a small csv file", "train a resnet on 4 GPUs"])
    return {
        "description": Field(described, any_bad | omit),
        "hints": Field(omit | st.just({"gpus": 1}), hints | json_values),
    }


def draft_request_fields() -> dict[str, Field]:
    """DraftRequest (the service's body): the MCP tool's fields and a proposed envelope."""
    return {
        **draft_fields(),
        "proposal": Field(
            omit | st.just({"envelope": {"cpus_min": 2, "walltime_s": 600}}),
            json_values | st.just({"envelope": {"cpus_min": -1}}) | st.just({"source": ""}),
        ),
    }


def group_fields() -> dict[str, Field]:
    """GroupRequest / MCP submit_group."""
    children = st.deferred(lambda: model_dicts(task_fields()))
    return {
        "children": Field(
            st.lists(children, min_size=1, max_size=3),
            st.lists(children | json_values, max_size=3) | json_values | omit,
        ),
        "objective": Field(omit | st.text(max_size=20), any_bad),
        "distinct_sites": Field(omit | st.booleans(), json_values),
        "workflow": Field(omit | st.just("wf1"), any_bad | st.text(max_size=140)),
    }


def transfer_fields() -> dict[str, Field]:
    """TransferRequest / MCP move_data."""
    return {
        "source_site": Field(st.just("local"), site_names | json_values | omit),
        "source_path": Field(st.just("in.txt"), paths | json_values | omit),
        "dest_site": Field(st.just("delta"), site_names | json_values | omit),
        "dest_path": Field(st.sampled_from(["out.txt", "sub/out.txt"]), paths | json_values),
        "label": Field(omit | st.text(max_size=20), any_bad),
        "sync_level": Field(omit | st.sampled_from(["size", "checksum"]), any_bad),
        "verify_checksum": Field(omit | st.booleans(), json_values),
        "deadline_s": Field(omit | st.floats(1, 1e6), bad_numbers | json_values),
        "paths": Field(omit | st.sampled_from(["workspace", "storage"]), any_bad),
        "workflow": Field(omit | st.none() | st.just("wf1"), any_bad | st.text(max_size=140)),
    }


def id_field(*kinds: str) -> Field:
    """An id argument: real ids of the named kinds (``<task>``..., filled in by the test
    from the world), and random or junk ones."""
    return Field(
        st.sampled_from([f"<{k}>" for k in kinds]),
        st.uuids().map(str) | any_bad | omit,
    )


JUNK_KEYS = ("bogus", "Command", "walltime_s", "envelope ", "taskid")


@st.composite
def model_dicts(draw: st.DrawFn, fields: dict[str, Field]) -> dict[str, Any]:
    """A request from ``fields``: all good; all good but one field bad, or an unknown key
    added (what a client that misspells or invents a field sends); or any mix."""
    mode = draw(st.sampled_from(["one bad", "one bad", "mix", "good"]))
    names = list(fields)
    wrong = draw(st.sampled_from([*names, "<junk>"])) if mode == "one bad" else None
    out = {}
    for name, f in fields.items():
        if mode == "mix":
            value = draw(pick(f.good, f.bad))
        else:
            value = draw(f.bad if name == wrong else f.good)
        if value != OMIT:
            out[name] = value
    if wrong == "<junk>" or (mode == "mix" and draw(st.booleans())):
        out[draw(st.sampled_from(JUNK_KEYS))] = draw(json_values)
    return out


# --- the coordinator and what it has recorded -------------------------------------------------


def _rows(path: Path, skip: dict[str, set[str]] | None = None) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the SQLite file at ``path`` (columns in ``skip`` left
    out: bookkeeping such as a token's ``last_used_at``)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        out = {}
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for t in sorted(tables):
            cols = [r[1] for r in db.execute(f"PRAGMA table_info({t})")]
            keep = [c for c in cols if c not in (skip or {}).get(t, set())]
            out[t] = db.execute(f"SELECT {', '.join(keep)} FROM {t} ORDER BY rowid").fetchall()
        return out
    finally:
        db.close()


@dataclass
class FuzzWorld:
    home: Path
    coord: FixedCoordinator
    ops: LocalOps
    tokens: TokenStore
    issued: dict[str, str]
    ids: dict[str, str]
    """Real ids of records the fuzzing caller owns: task, group, transfer, held."""

    def fingerprint(self) -> dict[str, Any]:
        """Everything recorded: the store's tables, the token and audit databases, the event
        log and the coordinator's memory of tasks, held tasks, shipped jobs, groups and
        transfers."""
        store = _rows(self.home / "coordinator.db")
        return {
            **{f"store.{t}": rows for t, rows in store.items()},
            "tokens": _rows(self.tokens.path, {"tokens": {"last_used_at"}}),
            "audit": _rows(self.home / "audit.db"),
            "events": self.coord.events.last_seq,
            "handles": sorted(h.id for h in self.coord.handles()),
            "held": sorted(h.task_id for h in self.coord.pending_policy()),
            "shipped": len(self.coord._shipped),
            "site_futures": sum(
                len(b._futures) for b in self.coord.backends.values() if isinstance(b, ThreadSite)
            ),
            "groups": sorted(self.coord.groups.groups),
            "transfers": sorted(h.id for h in self.coord.transfers.handles()),
        }

    def settle(self, timeout_s: float = 10.0) -> dict[str, Any]:
        """Wait until every task (but the held one) and transfer is done and nothing changes
        any more; the fingerprint then."""
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            busy = [h for h in self.coord.handles() if not h.done and h.id != self.ids["held"]]
            busy += [t for t in self.coord.transfers.handles() if not _transfer_done(t)]
            now = self.fingerprint()
            if not busy and now == last:
                return now
            last = now
            time.sleep(0.05)
        raise AssertionError(f"the coordinator did not settle in {timeout_s} s")


def _transfer_done(t: Any) -> bool:
    return str(t.state) in ("completed", "succeeded", "failed", "cancelled")


def unchanged(before: dict[str, Any], after: dict[str, Any], policy_refusal: bool) -> list[str]:
    """The parts of the fingerprint that changed (a policy refusal may add audit rows, and
    only rows that record a refusal)."""
    changed = [k for k in before if before[k] != after[k]]
    if policy_refusal and changed == ["audit"]:
        old, new = before["audit"]["audit"], after["audit"]["audit"]
        if new[: len(old)] == old and all("denied" in row for row in new[len(old) :]):
            return []
    return changed


def build_world(home: Path, owner: str = "fuzzer") -> FuzzWorld:
    """The coordinator, with a completed task, a group, a transfer owned by ``owner`` and a
    task held for an operator (so ids of real records can be fuzzed too)."""
    tokens = TokenStore(home / "service" / "tokens.db")
    issued = {
        "fuzzer": tokens.issue("fuzzer", FUZZ_POLICY).token,
        "ops": tokens.issue("ops", CallerPolicy(operator=True)).token,
    }
    audit = AuditLog(home / "audit.db")
    sites = [ThreadSite(s) for s in load_sites(list(SITES))]
    coord = FixedCoordinator(
        sites,
        policy="earliest-start",
        store=Store(home / "coordinator.db"),
        gate=PolicyGate(
            PolicySet(default=FUZZ_POLICY, callers={"held": CallerPolicy(require_approval=True)}),
            audit,
            tokens=tokens,
        ),
        transfer_backends=LocalCopyBackend(list(SITES), home),
    )
    for s in sites:
        s.coord = coord
    (site_storage("local", home) / "in.txt").write_text("input\n")
    for who in {owner, "mcp"}:  # move_data paths are relative to the caller's workspace
        ws = site_storage("local", home) / str(workspace_rel(who))
        ws.mkdir(parents=True, exist_ok=True)
        (ws / "in.txt").write_text("input\n")
    ops = LocalOps(coord, refresh_s=3600)
    env = {"walltime_s": 300, "sites": ["local"]}
    task = ops.submit(
        TaskRequest.model_validate({"function": "square", "args": [3], "envelope": env}), owner
    )
    group = ops.submit_group(
        GroupRequest.model_validate({"children": [{"command": "true", "envelope": env}]}),
        owner,
    )
    transfer = ops.move_data(
        TransferRequest(
            source_site="local", source_path="in.txt", dest_site="delta", dest_path="o"
        ),
        owner,
    )
    held = ops.submit(TaskRequest.model_validate({"command": "true", "envelope": env}), "held")
    assert held.state == "held", held.state
    ids = {
        "task": task.task_id,
        "group": group.group_id,
        "transfer": transfer.transfer_id,
        "held": held.task_id,
    }
    world = FuzzWorld(home, coord, ops, tokens, issued, ids)
    world.settle()
    return world


def close_world(w: FuzzWorld) -> None:
    w.ops.close()
    w.coord.close()
    if w.coord.store is not None:
        w.coord.store.close()
