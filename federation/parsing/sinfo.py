"""``sinfo`` -> :class:`NodeRecord` per (node, partition).

Two sources:

* the probe's own text (``sinfo --noheader --Node --Format`` with the fields in
  :data:`SINFO_FIELDS`, 0x1F/0x1E delimited; see :mod:`functions.probes`), parsed strictly;
* ``sinfo --json`` / slurmrestd ``/nodes`` in every shape seen so far: per-node ``nodes[]``
  (21.08 openapi v0.0.37, 22.05 v0.0.38, slurmrestd v0.0.4x with ``{set, infinite, number}``
  numbers and state arrays) and grouped ``sinfo[]`` (data_parser v0.0.39+, 23.02 on).

Grouped ``sinfo[]`` records merge nodes that share a partition, state, features and GRES.
Their CPU counts are sums (split back exactly across the record's nodes), but Slurm keeps
only the *last* node's allocated memory and the *first* node's GRES usage, and memory only
as min/max: those per-node values are approximations, and a warning says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from federation.core.errors import ParseError
from federation.core.gcpause import gc_paused
from federation.core.snapshot import NodeRecord
from federation.parsing.common import (
    MAX_COUNT,
    MAX_INT,
    RowWarnings,
    check_errors,
    clean,
    field_errors,
    json_int,
    json_name,
    json_str,
    load_json,
    snippet,
    split_records,
    whole,
)
from federation.parsing.gres import gpus_by_type
from federation.parsing.hostlist import MAX_HOSTS, expand_hostlist
from federation.parsing.records import NODES
from federation.parsing.states import parse_node_state

SINFO_FIELDS: tuple[str, ...] = (
    "NodeList",
    "Partition",
    "StateLong",
    "StateComplete",
    "CPUsState",
    "Memory",
    "AllocMem",
    "Gres",
    "GresUsed",
    "Features",
    "Reason",
)
"""The probe's ``sinfo -O`` fields, in order (StateComplete may be missing on old Slurm)."""

_REQUIRED = ("NodeList", "Partition", "CPUsState", "Memory", "AllocMem", "Gres", "GresUsed")


def _features(text: str | None) -> tuple[str, ...]:
    value = clean(text)
    if value is None:
        return ()
    return tuple(f.strip() for f in value.replace("&", ",").split(",") if f.strip())


def _node(data: dict[str, Any], where: str) -> NodeRecord:
    try:
        return NodeRecord.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise ParseError(f"{where}: field {loc}: {first['msg']}") from None


_MAKE_NODE = NODES.values
"""A NodeRecord from the values of its fields, in order (name, partition, state,
state_flags, reason, cpus_total, cpus_alloc, mem_mb_total, mem_mb_alloc,
gpus_total_by_type, gpus_alloc_by_type, features), checked by :func:`parse_sinfo`
(whole numbers, states from the table, strings), without pydantic's second pass (the
50 MB path); tests compare it with ``model_validate`` on every fixture."""


class _Cache(dict[str, Any]):
    """Parsed values per distinct string (states, GRES, features repeat across nodes)."""

    def get_or(self, key: str, make: Any) -> Any:
        hit = self.get(key, _MISS)
        if hit is _MISS:
            hit = make(key)
            if len(self) < 100_000:
                self[key] = hit
        return hit


_MISS = object()


def parse_sinfo(stdout: str, fields: Sequence[str] = SINFO_FIELDS) -> list[NodeRecord]:
    """The probe's ``sinfo -N -O`` output -> one :class:`NodeRecord` per (node, partition).

    Raises :class:`ParseError` naming the line for anything not in that format: a number
    that is not a whole token, a node listed twice in one partition, a cut record.
    """
    fields = tuple(fields)
    missing = [f for f in _REQUIRED if f not in fields]
    if missing or not ({"StateComplete", "StateLong"} & set(fields)):
        raise ParseError(
            f"sinfo: probe field list {list(fields)} lacks {missing or ['StateLong']}; "
            "expected the fields of functions.probes.probe_slurm"
        )
    idx = {f: i for i, f in enumerate(fields)}
    i_node, i_part, i_cpus = idx["NodeList"], idx["Partition"], idx["CPUsState"]
    i_mem, i_amem, i_gres, i_used = idx["Memory"], idx["AllocMem"], idx["Gres"], idx["GresUsed"]
    i_long, i_comp = idx.get("StateLong"), idx.get("StateComplete")
    i_feat, i_reason = idx.get("Features"), idx.get("Reason")
    states, gres, used_, feats, texts, parts_ = (_Cache() for _ in range(6))
    cpu_states, numbers, alloc_mems = _Cache(), _Cache(), _Cache()  # (few values repeat)

    def state_of(key: str) -> tuple[str, tuple[str, ...]]:
        comp, _, long = key.partition("\x1f")
        if i_comp is None:
            return parse_node_state(long)
        state, flags = parse_node_state(comp)
        if i_long is not None:
            lstate, lflags = parse_node_state(long)
            if state == "unknown" and lstate != "unknown":
                state = lstate
            flags = tuple(dict.fromkeys((*flags, *lflags)))
        return state, flags

    nodes: list[NodeRecord] = []
    append = nodes.append
    seen: set[tuple[str, str]] = set()  # (record n made nodes[n - 1])
    n = 0
    try:
        with gc_paused():
            for n, row in enumerate(split_records(stdout, len(fields), "sinfo"), 1):  # noqa: B007
                name = row[i_node].strip()
                if not name or "[" in name or "," in name:
                    raise ParseError(f"NodeList {name!r} is not one node name (run with -N)")
                part = parts_.get_or(row[i_part], _partition)
                if not part:
                    raise ParseError(f"empty Partition for node {name}")
                key = (name, part)
                if key in seen:
                    first = next(k for k, r in enumerate(nodes, 1) if (r.name, r.partition) == key)
                    raise ParseError(
                        f"node {name} in partition {part} is listed twice (first on line "
                        f"{first}): duplicated output"
                    )
                seen.add(key)
                alloc, total = cpu_states.get_or(row[i_cpus], _cpus_state)
                state_key = (
                    f"{row[i_comp] if i_comp is not None else ''}\x1f"
                    f"{row[i_long] if i_long is not None else ''}"
                )
                state, flags = states.get_or(state_key, state_of)
                mem = row[i_mem].strip().rstrip("+")
                amem = row[i_amem].strip()
                append(
                    _MAKE_NODE(
                        (
                            name,
                            part,
                            state,
                            flags,
                            texts.get_or(row[i_reason], clean) if i_reason is not None else None,
                            total,  # cpus_total
                            alloc,  # cpus_alloc
                            numbers.get_or(mem, _memory),  # mem_mb_total
                            alloc_mems.get_or(amem, _alloc_mem),  # mem_mb_alloc
                            gres.get_or(row[i_gres], gpus_by_type),  # gpus_total_by_type
                            used_.get_or(row[i_used], _used_gpus),  # gpus_alloc_by_type
                            feats.get_or(row[i_feat], _features) if i_feat is not None else (),
                        )
                    )
                )
    except ParseError as e:
        raise ParseError(f"sinfo line {n}: {e}") from None
    return nodes


def _partition(text: str) -> str:
    return text.strip().rstrip("*")


# --- JSON -------------------------------------------------------------------------------


def _cpus_state(text: str) -> tuple[int, int]:
    """``CPUsState`` ``A/I/O/T`` -> (allocated, total), each a whole token."""
    cpus = text.split("/")
    if len(cpus) != 4:
        raise ParseError(f"CPUsState {text!r}: expected A/I/O/T")
    alloc, _idle, _other, total = (whole(c, "CPUsState", MAX_COUNT) for c in cpus)
    return alloc, total


def _memory(text: str) -> int:
    return whole(text, "Memory")


def _alloc_mem(text: str) -> int:
    return whole(text, "AllocMem")


def _used_gpus(text: str | None) -> dict[str, int]:
    return gpus_by_type(text, counted=True)


def _given(block: Mapping[str, Any], key: str, where: str) -> Any:
    """``block[key]`` (None when absent); a ``null`` there is damage: Slurm writes a count
    or ``{"set": false}``, never ``null``, so ``null`` is not "none allocated"."""
    if key in block and block[key] is None:
        raise ParseError(f"{where} {key}: null where a count belongs")
    return block.get(key)


def _state_of(value: Any, flags: Any = None) -> tuple[str, tuple[str, ...]]:
    if not (value is None or isinstance(value, str | list)):
        raise ParseError(f"node state: expected a name, got {snippet(repr(value))}")
    for names in (value, flags):
        if isinstance(names, list) and (
            len(set(map(str, names))) != len(names) or not all(isinstance(v, str) for v in names)
        ):  # Slurm lists each state flag once, as a name: a repeat is a repeated line
            raise ParseError(f"node state {snippet(str(names))}: a flag twice or not a name")
    extra = [str(f) for f in flags] if isinstance(flags, list) else []
    if isinstance(value, list):
        return parse_node_state([str(v) for v in value], extra)
    return parse_node_state(str(value) if value is not None else None, extra)


def _per_node_record(n: Mapping[str, Any], i: int, warnings: RowWarnings) -> list[NodeRecord]:
    where = f"sinfo JSON nodes[{i}]"
    name = json_name(n.get("name"), f"{where} name")
    if name is None:
        raise ParseError(f"{where}: node without a name")
    parts = n.get("partitions") or []
    if isinstance(parts, str):
        parts = [p for p in parts.split(",") if p]
    if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
        raise ParseError(f"{where} partitions: expected a list of names")
    if not parts:
        warnings.add("no partition", f"{where}: node {name} is in no partition; skipped")
        return []
    state, flags = _state_of(n.get("state"), n.get("state_flags"))
    cpus = _required(n, "cpus", where, MAX_COUNT)
    alloc = json_int(_given(n, "alloc_cpus", where), f"{where} alloc_cpus", MAX_COUNT) or 0
    feats = n.get("features")
    if isinstance(feats, list) and not all(isinstance(f, str) for f in feats):
        raise ParseError(f"{where} features: expected names, got {snippet(repr(feats))}")
    features = (
        tuple(feats) if isinstance(feats, list) else _features(json_str(feats, f"{where} features"))
    )
    common = {
        "name": name,
        "state": state,
        "state_flags": flags,
        "reason": json_str(n.get("reason"), f"{where} reason"),
        "cpus_total": cpus,
        "cpus_alloc": alloc,
        "mem_mb_total": _required(n, "real_memory", where),
        "mem_mb_alloc": json_int(_given(n, "alloc_memory", where), f"{where} alloc_memory") or 0,
        "gpus_total_by_type": gpus_by_type(json_str(n.get("gres"), f"{where} gres")),
        "gpus_alloc_by_type": gpus_by_type(json_str(n.get("gres_used"), f"{where} gres_used")),
        "features": features,
    }
    return [_node({**common, "partition": p}, where) for p in parts]


def _required(block: Mapping[str, Any], key: str, where: str, hi: int = MAX_INT) -> int:
    """A whole number the record must have (a missing one is not 0)."""
    value = json_int(block.get(key), f"{where} {key}", hi)
    if value is None:
        raise ParseError(f"{where}: no {key}")
    return value


def _split(total: int, n: int) -> list[int]:
    base, extra = divmod(max(0, total), n)
    return [base + (1 if k < extra else 0) for k in range(n)]


def _block(r: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    block = r.get(key)
    if not isinstance(block, Mapping):
        raise ParseError(f"{where}: no {key} object")
    return block


def _grouped_records(r: Mapping[str, Any], i: int, warnings: RowWarnings) -> list[NodeRecord]:
    where = f"sinfo JSON sinfo[{i}]"
    nodes_block = r.get("nodes") or {}
    names = nodes_block.get("nodes") if isinstance(nodes_block, Mapping) else None
    if not isinstance(names, list):
        raise ParseError(f"{where}: no nodes.nodes list")
    hosts: list[str] = []
    for entry in names:
        if not isinstance(entry, str):
            raise ParseError(
                f"{where} nodes.nodes: expected host names, got {type(entry).__name__}"
            )
        hosts.extend(expand_hostlist(entry, MAX_HOSTS - len(hosts)))
    n = len(hosts)
    if n == 0:
        return []
    total_n = json_int(nodes_block.get("total"), f"{where} nodes.total")
    if total_n is not None and total_n != n:
        raise ParseError(f"{where}: nodes.total={total_n} but {n} node names")
    part_block = r.get("partition") or {}
    part = (
        json_name(part_block.get("name"), f"{where} partition.name")
        if isinstance(part_block, Mapping)
        else None
    )
    if part is None:
        raise ParseError(f"{where}: record without partition.name")
    node_block = r.get("node") or {}
    state, flags = _state_of(node_block.get("state") if isinstance(node_block, Mapping) else None)
    cpus = _block(r, "cpus", where)
    mem = _block(r, "memory", where)
    gres = r.get("gres") or {}
    feats = r.get("features") or {}
    reason = r.get("reason")
    reason_text = (
        json_str(reason.get("description"), f"{where} description")
        if isinstance(reason, Mapping)
        else None
    )
    total = _required(cpus, "total", f"{where} cpus", MAX_COUNT)
    allocated = (
        json_int(_given(cpus, "allocated", where), f"{where} cpus.allocated", MAX_COUNT) or 0
    )
    if allocated > total:
        raise ParseError(f"{where}: cpus.allocated={allocated} exceeds cpus.total={total}")
    cpus_total = _split(total, n)
    cpus_alloc = _split(allocated, n)
    mem_min = _required(mem, "minimum", f"{where} memory")
    mem_max = json_int(mem.get("maximum"), f"{where} memory.maximum")
    mem_max = mem_min if mem_max is None else mem_max
    mem_alloc = json_int(_given(mem, "allocated", where), f"{where} memory.allocated") or 0
    gtot = gpus_by_type(json_str(gres.get("total"), f"{where} total"))
    gused = gpus_by_type(json_str(gres.get("used"), f"{where} used"))
    features = _features(json_str(feats.get("total"), f"{where} total"))
    if n > 1 and (mem_min != mem_max or mem_alloc or gused):
        warnings.add(
            "approximated",
            f"{where}: {n} nodes grouped in partition {part}; per-node memory and GPU use "
            "approximated (Slurm keeps one node's value; use sinfo -N for exact numbers)",
        )
    out = []
    for k, host in enumerate(hosts):
        out.append(
            _node(
                {
                    "name": host,
                    "partition": part,
                    "state": state,
                    "state_flags": flags,
                    "reason": reason_text,
                    "cpus_total": cpus_total[k],
                    "cpus_alloc": min(cpus_alloc[k], cpus_total[k]),
                    "mem_mb_total": mem_min,
                    "mem_mb_alloc": min(mem_alloc, mem_min),
                    "gpus_total_by_type": gtot,
                    "gpus_alloc_by_type": {t: min(c, gtot.get(t, c)) for t, c in gused.items()},
                    "features": features,
                },
                where,
            )
        )
    return out


def _no_duplicates(nodes: list[NodeRecord]) -> None:
    """A node listed twice in one partition is duplicated output (it would count twice)."""
    seen: set[tuple[str, str]] = set()
    for node in nodes:
        key = (node.name, node.partition)
        if key in seen:
            raise ParseError(
                f"sinfo JSON: node {node.name} in partition {node.partition} is listed "
                "twice: duplicated output"
            )
        seen.add(key)


def parse_sinfo_json(
    source: str | bytes | Mapping[str, Any], warnings: list[str] | None = None
) -> list[NodeRecord]:
    """``sinfo --json`` (any version) or slurmrestd ``/nodes`` -> node records.

    ``warnings`` (if given) collects notes about skipped or approximated records, capped
    per kind (:class:`RowWarnings`).
    """
    data = load_json(source, "sinfo JSON")
    notes = RowWarnings()
    check_errors(data, "sinfo JSON")
    out: list[NodeRecord] = []
    if isinstance(data.get("sinfo"), list):
        for i, rec in enumerate(data["sinfo"]):
            if not isinstance(rec, Mapping):
                raise ParseError(f"sinfo JSON sinfo[{i}]: expected an object")
            with field_errors(f"sinfo JSON sinfo[{i}]"):
                out.extend(_grouped_records(rec, i, notes))
    elif isinstance(data.get("nodes"), list):
        for i, node in enumerate(data["nodes"]):
            if not isinstance(node, Mapping):
                raise ParseError(f"sinfo JSON nodes[{i}]: expected an object")
            with field_errors(f"sinfo JSON nodes[{i}]"):
                out.extend(_per_node_record(node, i, notes))
    else:
        raise ParseError(
            f"sinfo JSON: neither a 'sinfo' nor a 'nodes' list (keys: {sorted(data)[:10]})"
        )
    _no_duplicates(out)
    notes.into(warnings)
    return out
