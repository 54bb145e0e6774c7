"""GRES and TRES strings -> GPUs by type.

GRES (``sinfo`` Gres/GresUsed, ``scontrol`` Gres=): comma-separated ``name[:type][:flags]:count``
entries, each optionally followed by ``(S:0-1)`` or ``(IDX:0-1,3)`` (commas inside the
parentheses belong to the entry). Untyped GPUs (``gpu:8``, ``gpu:(null):5``) are counted under
:data:`UNTYPED`. ``mps``, ``shard``, ``tmp:300G`` and other non-GPU GRES are ignored;
``no_consume`` is a flag, not a type.

TRES (``tres-alloc``, ``TRES=``, ``AllocTRES=``): ``cpu=4,mem=8G,gres/gpu=2,gres/gpu:a100=2``.
Requests (``tres-per-node`` and friends): ``gres:gpu:a100:2`` (22.05), ``gres/gpu:a100:2``
(23.02+), or ``gpu:2``.
"""

from __future__ import annotations

import re

from federation.core.errors import ParseError
from federation.parsing.common import clean, snippet
from federation.parsing.hostlist import split_top

UNTYPED = "untyped"
"""The type key for GPUs that Slurm reports without a type."""

GPU_NAMES = frozenset({"gpu"})
_FLAGS = frozenset({"no_consume", "no-consume"})
_NULL_TYPES = frozenset({"", "(null)", "null", "none"})
_SUFFIX = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}


_MAX_GRES = 2**63 - 1


def _count(text: str, entry: str, whole: str) -> int:
    t = text.strip().lower()
    if t.isdigit() and len(t) <= 18:
        return int(t)
    if t and t[-1] in _SUFFIX and t[:-1].isdigit() and len(t) <= 13:
        return int(t[:-1]) * _SUFFIX[t[-1]]
    raise ParseError(f"GRES {snippet(whole)}: bad count {text!r} in entry {entry!r}")


def parse_gres_entries(
    text: str | None, counted: bool = False
) -> list[tuple[str, str | None, int]]:
    """Every GRES entry as ``(name, type or None, count)``, in order. ``counted``: every GPU
    entry ends with its count, as GRES in use does (``gpu:0``): ``gpu:x`` is damage then,
    not one GPU of type ``x``."""
    value = clean(text)
    if value is None:
        return []
    out: list[tuple[str, str | None, int]] = []
    for raw in split_top(value):
        entry = raw.strip()
        if not entry:
            continue
        entry = entry.replace("(null)", "")  # gpu:(null):5 is an untyped gpu:5
        paren = entry.find("(")
        if paren >= 0 and not entry.endswith(")"):
            raise ParseError(f"GRES {snippet(value)}: unclosed '(' in entry {raw.strip()!r}")
        core = entry[:paren] if paren >= 0 else entry
        parts = [p for p in core.split(":") if p.strip().lower() not in _FLAGS]
        name = parts[0].strip().lower()
        if _GRES_NAME.fullmatch(name) is None:
            raise ParseError(f"GRES {snippet(value)}: {snippet(name)} is not a GRES name")
        if len(parts) > 1 and not parts[-1].strip():
            raise ParseError(f"GRES {snippet(value)}: entry {entry!r} ends with ':'")
        if not name:
            raise ParseError(f"GRES {snippet(value)}: entry {entry!r} has no name")
        if len(parts) == 1:
            out.append((name, None, 1))
            continue
        last = parts[-1].strip().lower()
        countable = last.isdigit() or (last[-1:] in _SUFFIX and last[:-1].isdigit())
        if not countable and counted and name in GPU_NAMES:
            raise ParseError(f"GRES {snippet(value)}: entry {entry!r} has no count")
        if not countable and _NUMBERISH.fullmatch(last):
            raise ParseError(f"GRES {snippet(value)}: bad count {last!r} in entry {entry!r}")
        if not countable and len(parts) == 2:  # gpu:tesla -> one GPU of type tesla
            parts.append("1")
        elif not countable and name not in GPU_NAMES:
            out.append((name, ":".join(parts[1:]) or None, 0))  # not ours to judge
            continue
        count = _count(parts[-1], entry, value)
        gtype = ":".join(parts[1:-1]).strip() or None
        if gtype is not None and _GRES_TYPE.fullmatch(gtype) is None:
            raise ParseError(f"GRES {snippet(value)}: {snippet(gtype)} is not a GRES type")
        if gtype is not None and gtype.lower() in _NULL_TYPES:
            gtype = None
        out.append((name, gtype, count))
    return out


def gpus_by_type(text: str | None, counted: bool = False) -> dict[str, int]:
    """GPUs per type in a GRES string; untyped GPUs under :data:`UNTYPED`; zeros dropped.
    ``counted``: see :func:`parse_gres_entries`."""
    out: dict[str, int] = {}
    for name, gtype, count in parse_gres_entries(text, counted):
        if name not in GPU_NAMES or count <= 0:
            continue
        key = gtype or UNTYPED
        out[key] = out.get(key, 0) + count
    return out


_NUMBERISH = re.compile(r"[\d.e+-]+")
"""A count damaged (``2.5``, ``1e9``), not a type name."""
_GRES_TYPE = re.compile(r"[\w.()-]{1,128}")
_GRES_NAME = re.compile(r"[a-z][\w./-]{0,63}")
_TRES_KEY = re.compile(r"[a-z][\w/:.@+-]{0,127}")
_TRES_VALUE = re.compile(r"\d{1,20}[kmgtpe]?|\d{1,20}\.\d{1,6}[kmgtpe]", re.IGNORECASE)
"""A TRES value: a count, or a size with Slurm's unit (``48000M``, ``1.50G``)."""


def parse_tres(text: str | None) -> dict[str, str]:
    """A TRES list ``cpu=4,mem=8G,gres/gpu:a100=2`` -> ``{"cpu": "4", ...}`` (keys lower case)."""
    value = clean(text)
    if value is None:
        return {}
    out: dict[str, str] = {}
    for item in value.split(","):
        key, sep, val = item.partition("=")
        key, val = key.strip().lower(), val.strip()
        if not sep or _TRES_KEY.fullmatch(key) is None or _TRES_VALUE.fullmatch(val) is None:
            raise ParseError(f"TRES {snippet(value)}: bad entry {snippet(item)}")
        if key in out and out[key] != val:
            raise ParseError(f"TRES {snippet(value)}: {key} given twice")
        out[key] = val
    return out


def tres_gpus(tres: dict[str, str]) -> tuple[int, str | None]:
    """(GPU count, type if exactly one type) from a parsed TRES list; (0, None) when absent."""
    total = 0
    typed: dict[str, int] = {}
    for key, val in tres.items():
        if not key.startswith("gres/gpu"):
            continue
        try:
            n = int(val)
        except ValueError:
            continue
        if key == "gres/gpu":
            total = n
        elif key.startswith("gres/gpu:"):
            typed[key.split(":", 1)[1]] = n
    if not total:
        total = sum(typed.values())
    gtype = next(iter(typed)) if len(typed) == 1 else None
    return total, gtype


def request_gpus(text: str | None) -> tuple[int, str | None]:
    """(GPU count, type) from a request like ``gres:gpu:a100:2``, ``gres/gpu:2``, ``gpu:2``.

    Several entries are summed (``gres/gpu:a100:1,gres/gpu:v100:1`` -> 2, type None).
    """
    value = clean(text)
    if value is None:
        return 0, None
    total = 0
    types: set[str | None] = set()
    for raw in split_top(value):
        item = raw.strip()
        for prefix in ("gres:", "gres/"):
            if item.startswith(prefix):
                item = item[len(prefix) :]
                break
        if "=" in item:  # tres style gpu=2 / gpu:a100=2
            key, _, val = item.partition("=")
            item = f"{key}:{val}"
        entries = parse_gres_entries(item, counted=True)  # a request states its count
        for name, gtype, count in entries:
            if name in GPU_NAMES:
                total += count
                types.add(gtype)
    gtype = next(iter(types)) if len(types) == 1 else None
    return total, gtype
