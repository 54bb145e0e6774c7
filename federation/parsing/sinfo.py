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
from federation.core.snapshot import NodeRecord
from federation.parsing.common import (
    RowWarnings,
    clean,
    field_errors,
    json_int,
    json_str,
    load_json,
    snippet,
    split_records,
    to_int,
)
from federation.parsing.gres import gpus_by_type
from federation.parsing.hostlist import expand_hostlist
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


def parse_sinfo(stdout: str, fields: Sequence[str] = SINFO_FIELDS) -> list[NodeRecord]:
    """The probe's ``sinfo -N -O`` output -> one :class:`NodeRecord` per (node, partition).

    Raises :class:`ParseError` naming the line for anything not in that format.
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
    nodes: list[NodeRecord] = []
    for n, row in enumerate(split_records(stdout, len(fields), "sinfo"), start=1):
        where = f"sinfo line {n}"
        name = row[i_node].strip()
        if not name or "[" in name or "," in name:
            raise ParseError(f"{where}: NodeList {name!r} is not one node name (run with -N)")
        part = row[i_part].strip().rstrip("*")
        if not part:
            raise ParseError(f"{where}: empty Partition for node {name}")
        cpus = row[i_cpus].split("/")
        if len(cpus) != 4:
            raise ParseError(f"{where}: CPUsState {row[i_cpus]!r}: expected A/I/O/T")
        alloc, _idle, _other, total = (to_int(c, f"{where} CPUsState") for c in cpus)
        if i_comp is not None:
            state, flags = parse_node_state(row[i_comp])
            if i_long is not None:
                lstate, lflags = parse_node_state(row[i_long])
                if state == "unknown" and lstate != "unknown":
                    state = lstate
                flags = tuple(dict.fromkeys((*flags, *lflags)))
        else:
            assert i_long is not None
            state, flags = parse_node_state(row[i_long])
        mem_alloc_text = row[i_amem].strip()
        try:
            gtot = gpus_by_type(row[i_gres])
            gused = gpus_by_type(row[i_used])
        except ParseError as e:
            raise ParseError(f"{where}: {e}") from None
        record = {
            "name": name,
            "partition": part,
            "state": state,
            "state_flags": flags,
            "reason": clean(row[i_reason]) if i_reason is not None else None,
            "cpus_total": total,
            "cpus_alloc": alloc,
            "mem_mb_total": to_int(row[i_mem].strip().rstrip("+"), f"{where} Memory"),
            "mem_mb_alloc": 0
            if clean(mem_alloc_text) is None
            else to_int(mem_alloc_text, f"{where} AllocMem"),
            "gpus_total_by_type": gtot,
            "gpus_alloc_by_type": gused,
            "features": _features(row[i_feat]) if i_feat is not None else (),
        }
        nodes.append(_node(record, where))
    return nodes


# --- JSON -------------------------------------------------------------------------------


def _state_of(value: Any, flags: Any = None) -> tuple[str, tuple[str, ...]]:
    extra = [str(f) for f in flags] if isinstance(flags, list) else []
    if isinstance(value, list):
        return parse_node_state([str(v) for v in value], extra)
    return parse_node_state(str(value) if value is not None else None, extra)


def _per_node_record(n: Mapping[str, Any], i: int, warnings: RowWarnings) -> list[NodeRecord]:
    where = f"sinfo JSON nodes[{i}]"
    name = json_str(n.get("name"))
    if name is None:
        raise ParseError(f"{where}: node without a name")
    parts = n.get("partitions") or []
    if isinstance(parts, str):
        parts = [p for p in parts.split(",") if p]
    if not parts:
        warnings.add("no partition", f"{where}: node {name} is in no partition; skipped")
        return []
    state, flags = _state_of(n.get("state"), n.get("state_flags"))
    cpus = json_int(n.get("cpus")) or 0
    alloc = json_int(n.get("alloc_cpus")) or 0
    feats = n.get("features")
    features = tuple(str(f) for f in feats) if isinstance(feats, list) else _features(feats)
    out = []
    for p in parts:
        out.append(
            _node(
                {
                    "name": name,
                    "partition": str(p),
                    "state": state,
                    "state_flags": flags,
                    "reason": json_str(n.get("reason")),
                    "cpus_total": cpus,
                    "cpus_alloc": alloc,
                    "mem_mb_total": json_int(n.get("real_memory")) or 0,
                    "mem_mb_alloc": json_int(n.get("alloc_memory")) or 0,
                    "gpus_total_by_type": gpus_by_type(json_str(n.get("gres"))),
                    "gpus_alloc_by_type": gpus_by_type(json_str(n.get("gres_used"))),
                    "features": features,
                },
                where,
            )
        )
    return out


def _split(total: int, n: int) -> list[int]:
    base, extra = divmod(max(0, total), n)
    return [base + (1 if k < extra else 0) for k in range(n)]


def _grouped_records(r: Mapping[str, Any], i: int, warnings: RowWarnings) -> list[NodeRecord]:
    where = f"sinfo JSON sinfo[{i}]"
    nodes_block = r.get("nodes") or {}
    names = nodes_block.get("nodes") if isinstance(nodes_block, Mapping) else None
    if not isinstance(names, list):
        raise ParseError(f"{where}: no nodes.nodes list")
    hosts: list[str] = []
    for entry in names:
        hosts.extend(expand_hostlist(str(entry)))
    n = len(hosts)
    if n == 0:
        return []
    total_n = json_int(nodes_block.get("total"))
    if total_n is not None and total_n != n:
        raise ParseError(f"{where}: nodes.total={total_n} but {n} node names")
    part_block = r.get("partition") or {}
    part = json_str(part_block.get("name")) if isinstance(part_block, Mapping) else None
    if part is None:
        raise ParseError(f"{where}: record without partition.name")
    node_block = r.get("node") or {}
    state, flags = _state_of(node_block.get("state") if isinstance(node_block, Mapping) else None)
    cpus = r.get("cpus") or {}
    mem = r.get("memory") or {}
    gres = r.get("gres") or {}
    feats = r.get("features") or {}
    reason = r.get("reason")
    reason_text = json_str(reason.get("description")) if isinstance(reason, Mapping) else None
    cpus_total = _split(json_int(cpus.get("total")) or 0, n)
    cpus_alloc = _split(json_int(cpus.get("allocated")) or 0, n)
    mem_min = json_int(mem.get("minimum")) or 0
    mem_max = json_int(mem.get("maximum")) or mem_min
    mem_alloc = json_int(mem.get("allocated")) or 0
    gtot = gpus_by_type(json_str(gres.get("total")))
    gused = gpus_by_type(json_str(gres.get("used")))
    features = _features(json_str(feats.get("total")))
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


def parse_sinfo_json(
    source: str | bytes | Mapping[str, Any], warnings: list[str] | None = None
) -> list[NodeRecord]:
    """``sinfo --json`` (any version) or slurmrestd ``/nodes`` -> node records.

    ``warnings`` (if given) collects notes about skipped or approximated records, capped
    per kind (:class:`RowWarnings`).
    """
    data = load_json(source, "sinfo JSON")
    notes = RowWarnings()
    errors = data.get("errors")
    if errors:
        raise ParseError(f"sinfo JSON reports errors: {snippet(str(errors), 200)}")
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
            with field_errors(f"sinfo JSON nodes[{i}] ({snippet(str(node.get('name')))})"):
                out.extend(_per_node_record(node, i, notes))
    else:
        raise ParseError(
            f"sinfo JSON: neither a 'sinfo' nor a 'nodes' list (keys: {sorted(data)[:10]})"
        )
    notes.into(warnings)
    return out
