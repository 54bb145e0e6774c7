"""What a task description states about its own shape: cores, nodes, GPUs (count, type,
memory), host memory, duration, "CPU only".

:func:`read_stated` reads the quantities written in a description, in digits or words ("4",
"four", "a dozen", "an hour", "half an hour"), and keeps the words each came from, so a
draft can quote them. It reads only what is said next to a unit it knows: "3 MB CSV" is the
data's size, not memory; "ResNet-50", "A100", "Python 3.11", "2D", "top 5" and years are not
quantities of anything. Nothing is guessed: what the text does not state is left out, and
the drafter falls back to its class defaults for it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

Scope = Literal["node", "total", "core"]
"""A count per node, for the whole job, or (memory) per core."""

GPU_TYPES = (
    "gh200",
    "gb200",
    "h200",
    "h100",
    "b200",
    "b100",
    "a100",
    "a40",
    "a30",
    "a10",
    "l40s",
    "l40",
    "l4",
    "v100",
    "p100",
    "t4",
    "mi300x",
    "mi300a",
    "mi300",
    "mi250x",
    "mi250",
    "mi210",
    "mi100",
)
"""GPU models a description may name (lowercase, as envelopes name them). A type the
federation lacks is still read: the draft asks for it and its validation says no site has
it."""

_ONES = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
_ONES += ["eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen"]
_ONES += ["eighteen", "nineteen"]
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60}
_TENS |= {"seventy": 70, "eighty": 80, "ninety": 90}
_WORDS: dict[str, float] = {w: i + 1 for i, w in enumerate(_ONES)}
_WORDS |= _TENS | {"hundred": 100, "dozen": 12, "couple": 2, "pair": 2, "single": 1}
_WORDS |= {"a": 1, "an": 1, "half": 0.5}

_TENS_RE = "|".join(_TENS)
_ONES_RE = "|".join(sorted(_ONES, key=len, reverse=True))
_WORD_NUM = (
    rf"(?:(?:{_TENS_RE})(?:[- ](?:{_ONES_RE}))?|{_ONES_RE}|a\s+hundred|hundred"
    r"|(?:a\s+|two\s+)?dozen|a\s+couple(?:\s+of)?|a\s+pair\s+of|a\s+single|single)"
)
NUM = rf"(?:(?<![\w.\-/:])\d+(?:\.\d+)?(?![\d.]\d)|\b{_WORD_NUM}\b)"
"""A number in digits (not glued to a word: 'ResNet-50', 'A100', '3.11') or in words."""
_ARTICLE = r"(?:\b(?:an?|one|a\s+single|single)\b)"
_RANGE = rf"(?P<n>{NUM})(?:\s*(?:-|\u2013|to)\s*(?P<m>\d+(?:\.\d+)?|{_WORD_NUM}))?"
_COUNT = rf"(?:{_RANGE}|{_ARTICLE})"
"""A number, a range ('8-16', 'two to four') or an article ('an hour', 'a GPU': one)."""
_AT_LEAST = r"(?:at\s+least|min(?:imum)?(?:\s+of)?|no\s+less\s+than|>=?)"
_AT_MOST = r"(?:up\s+to|at\s+most|max(?:imum)?(?:\s+of)?|no\s+more\s+than|<=?)"
_QUAL = rf"(?:(?P<least>{_AT_LEAST})|(?P<most>{_AT_MOST}))?\s*"
_TYPE_NAME = r"(?P<type>" + "|".join(GPU_TYPES) + ")"
_TYPE = rf"(?:(?<=\d[x\u00d7])|\b)(?:nvidia\s+|amd\s+)?{_TYPE_NAME}s?\b"
_PER_NODE = re.compile(r"^\W{0,3}(?:per|each|a|/)\s*node|^\W{0,3}each\b", re.I)
_TOTAL = re.compile(
    r"^\W{0,3}(?:in\s+total|total|altogether|across|spread|over\s+(?:the\s+)?\w+\s+nodes)",
    re.I,
)
_PER_CORE = re.compile(r"^\W{0,3}(?:per|each|a|/)\s*(?:cpu\s+)?(?:core|cpu|thread)\b", re.I)
_TOTAL_BEFORE = re.compile(r"(?:a\s+total\s+of|total(?:\s+of)?|overall)\s*$", re.I)


def number(text: str) -> float:
    """'4' -> 4, 'four' -> 4, 'twenty-four' -> 24, 'a dozen' -> 12, 'an' -> 1."""
    t = " ".join(text.lower().replace("-", " ").split())
    try:
        return float(t)
    except ValueError:
        pass
    words = [w for w in t.split() if w not in ("of",)]
    if words[:1] == ["a"] and len(words) > 1:
        words = words[1:]
    if words[:1] == ["two"] and words[1:] == ["dozen"]:
        return 24.0
    return float(sum(_WORDS[w] for w in words))


@dataclass(frozen=True)
class Quantity:
    """A stated bound: ``lo``/``hi`` (either may be open), the words, and whether a count
    is per node or for the whole job."""

    lo: float | None
    hi: float | None
    quote: str
    scope: Scope = "node"


@dataclass(frozen=True)
class Stated:
    """Everything a description states about its shape (None: not stated)."""

    cpus: Quantity | None = None
    gpus: Quantity | None = None
    gpu_types: tuple[str, ...] = ()
    gpu_types_quote: str = ""
    gpu_mem_gb: Quantity | None = None
    nodes: Quantity | None = None
    mem_gb: Quantity | None = None
    walltime_s: Quantity | None = None
    cpu_only: str | None = None
    data_gb: Quantity | None = None
    ignored: tuple[str, ...] = field(default=())
    """Words that looked like a quantity but were not read (and why)."""

    def bounds(self) -> dict[str, str]:
        """Bound name -> the words it was read from."""
        out: dict[str, str] = {}
        for name in ("cpus", "gpus", "gpu_mem_gb", "nodes", "mem_gb", "walltime_s"):
            q = getattr(self, name)
            if q is not None:
                out[name] = q.quote
        if self.cpu_only and "gpus" not in out:
            out["gpus"] = self.cpu_only
        if self.gpu_types:
            out["gpu_types"] = self.gpu_types_quote
        return out


class _Text:
    """The description, with the spans already read (so no words are read twice)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.used: list[tuple[int, int]] = []

    def find(self, pattern: str) -> list[re.Match[str]]:
        found = []
        for m in re.finditer(pattern, self.text, re.I):
            if not any(m.start() < b and a < m.end() for a, b in self.used):
                found.append(m)
        return found

    def take(self, m: re.Match[str]) -> str:
        self.used.append((m.start(), m.end()))
        return " ".join(m.group(0).split()).strip(" ,;:.")

    def scope(self, m: re.Match[str]) -> Scope:
        after = self.text[m.end() : m.end() + 40]
        before = self.text[max(0, m.start() - 20) : m.start()]
        if _TOTAL.search(after) or _TOTAL_BEFORE.search(before):
            return "total"
        if _PER_CORE.search(after):
            return "core"
        return "node"

    def per_node(self, m: re.Match[str]) -> bool:
        return bool(_PER_NODE.search(self.text[m.end() : m.end() + 20]))


def _bounds(m: re.Match[str], scale: float = 1.0) -> tuple[float | None, float | None]:
    lo = number(m.group("n") or "1") * scale  # no number: an article
    hi = number(m.group("m")) * scale if m.groupdict().get("m") else lo
    if m.groupdict().get("least"):
        return lo, None
    if m.groupdict().get("most"):
        return None, hi
    return lo, hi


def _quantity(t: _Text, m: re.Match[str], scale: float = 1.0, group: str = "") -> Quantity:
    """The bound ``m`` states; only ``group``'s words are used up when given (the rest, a
    GPU type beside its memory, is read again for its count)."""
    lo, hi = _bounds(m, scale)
    scope: Scope = "node" if t.per_node(m) else t.scope(m)
    quote = " ".join(m.group(0).split()).strip(" ,;:.()")
    if group:
        t.used.append((m.start(group), m.end("unit")))
    else:
        t.take(m)
    return Quantity(lo, hi, quote, scope)


# --- the patterns, most specific first --------------------------------------------------------
_CPU_ONLY = (
    r"\b(?:cpu[- ]only|cpus?\s+only|only\s+(?:on\s+)?cpus?|no\s+gpus?|without\s+(?:any\s+|a\s+)?"
    r"gpus?|gpu[- ]free|non[- ]gpu|no\s+need\s+for\s+(?:a\s+|any\s+)?gpus?|(?:does\s+not|doesn't|"
    r"won't|will\s+not)\s+(?:need|use)\s+(?:a\s+|any\s+)?gpus?|no\s+accelerators?|gpus?\s+"
    r"(?:is\s+|are\s+)?not\s+(?:required|needed|used)|run\s+on\s+(?:the\s+)?cpus?(?!\s+and))\b"
)
_MEM_UNIT = r"(?P<unit>[gmt]i?b|[gmt](?![a-z]))"
_GPU_MEM_WORDS = (
    r"(?:of\s+)?(?:gpu\s+(?:memory|ram|mem)|vram|hbm\d?e?|device\s+memory|memory\s+per\s+gpu|"
    r"per\s+gpu|gpu\s+mem)"
)
_GPU_MEM = (
    rf"{_QUAL}(?P<n>{NUM})\s*{_MEM_UNIT}\s*{_GPU_MEM_WORDS}",
    rf"(?:gpu\s+memory|vram|gpus?\s+with)\s*(?:of|:|=|>=)?\s*{_QUAL}(?P<n>{NUM})\s*{_MEM_UNIT}"
    r"(?!\s*(?:of\s+)?(?:host|system|cpu|main)?\s*(?:ram|memory))",
    rf"{_TYPE}[\s-]*\(?\s*(?P<n>\d+)\s*{_MEM_UNIT}\)?",
    rf"(?<![\w.])(?P<n>\d+)\s*{_MEM_UNIT}\s+{_TYPE}",
)
_BESIDE_TYPE = 2
"""The last patterns of _GPU_MEM name a type beside the memory: only the memory is used up."""
_GPU_COUNT = (
    rf"{_QUAL}{_COUNT}\s*[x\u00d7*]?\s*{_TYPE}(?:\s+(?:gpus?|cards?|accelerators?|devices?))?",
    rf"\b{_TYPE_NAME}\s*[x\u00d7]\s*(?P<n>\d+)\b",
    rf"{_QUAL}{_COUNT}(?:-|\s+)?(?:gpus?|gpu\s+cards?|accelerators?)\b",
    r"\bgpus?(?:-per-node)?\s*[:=]\s*(?P<n>\d+)\b",
)
_CPUS = (
    rf"{_QUAL}{_RANGE}(?:-|\s+)?(?:physical\s+|logical\s+)?(?:cpu[\s-]+)?"
    r"(?:cores?|cpus?|vcpus?|threads?|processors?)\b",
    r"(?:\bcores?|\bcpus?|\bthreads|cpus[-_]per[-_]task|\bnproc)\s*[:=]\s*(?P<n>\d+)\b",
    r"\bsingle[- ]thread(?:ed)?(?P<n>)\b",
)
_RANKS = rf"{_QUAL}{_RANGE}\s*(?:mpi\s+)?(?:ranks|processes|procs)\b"
_NODES = (
    rf"{_QUAL}{_RANGE}(?:-|\s+)?(?:compute\s+|gpu\s+|cpu\s+|worker\s+)?nodes?\b",
    r"\bnodes?\s*[:=]\s*(?P<n>\d+)\b",
    r"(?<![\w-])(?-i:-N)\s*(?P<n>\d+)\b",
    r"\b(?:a\s+single|single|one)[\s-]node(?P<n>)\b",
)
_MEM = (
    rf"{_QUAL}(?P<n>{NUM})\s*{_MEM_UNIT}\s*(?:of\s+)?(?:host\s+|system\s+|main\s+|cpu\s+)?"
    r"(?:ram|memory|mem)\b",
    rf"(?:\bram|\bmemory|\bmem)\s*(?:of|:|=|>=)?\s*{_QUAL}(?P<n>{NUM})\s*{_MEM_UNIT}",
)
_DATA = (
    rf"(?P<n>{NUM})\s*{_MEM_UNIT}\s+(?:of\s+)?(?:\w+\s+)?(?:csv|data(?:set)?|files?|parquet|"
    r"corpus|inputs?|text|images|json|tables?|archives?|tarballs?|logs?|records)\b"
)
_SECONDS = {
    "s": 1,
    "sec": 1,
    "secs": 1,
    "second": 1,
    "seconds": 1,
    "min": 60,
    "mins": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hr": 3600,
    "hrs": 3600,
    "hour": 3600,
    "hours": 3600,
    "day": 86400,
    "days": 86400,
    "week": 604800,
    "weeks": 604800,
}
_TIME_UNIT = r"(?P<unit>seconds?|secs?|s|minutes?|mins?|hours?|hrs?|hr|h|days?|weeks?)(?![a-z])"
_DURATION = (
    rf"{_QUAL}{_COUNT}\s*[- ]?{_TIME_UNIT}"
    r"(?:\s*(?:and\s+)?(?P<min>\d+)\s*(?:m|mins?|minutes?)(?![a-z]))?"
)
_HALF = r"\bhalf\s+(?:an?\s+)?(?P<unit>hour|day|minute)\b"
_CLOCK = (
    r"(?:walltime|wall\s+time|time\s+limit|--time|-t)\s*(?:of|:|=)?\s*"
    r"(?P<h>\d{1,3}):(?P<mm>\d{2})(?::(?P<ss>\d{2}))?\b"
)
_NOT_A_DURATION = re.compile(r"(?:every|each|per|after|ago|last|past|once|twice|times)\s*$", re.I)


def read_stated(description: str) -> Stated:
    """The quantities ``description`` states, each with the words it was read from."""
    t = _Text(description)
    ignored: list[str] = []
    cpu_only = None
    if m := next(iter(t.find(_CPU_ONLY)), None):
        cpu_only = t.take(m)

    gpu_mem = _first(t, _GPU_MEM[:-_BESIDE_TYPE], lambda m: _quantity(t, m, _gb(m["unit"])))
    gpu_mem = gpu_mem or _first(
        t, _GPU_MEM[-_BESIDE_TYPE:], lambda m: _quantity(t, m, _gb(m["unit"]), group="n")
    )
    types: list[str] = []
    type_words: list[str] = []
    gpus = None
    for pat in _GPU_COUNT:
        for m in t.find(pat):
            if gpus is not None:
                break
            q = _quantity(t, m)
            gpus = q
            if m.groupdict().get("type"):
                types.append(m.group("type").lower())
                type_words.append(q.quote)
    for m in t.find(_TYPE):  # a type named without a count
        if (ty := m.group("type").lower()) not in types:
            types.append(ty)
            type_words.append(t.take(m))

    nodes = _first(t, _NODES, lambda m: _quantity(t, m) if m.group("n") else _one(t, m))
    cpus = _first(t, _CPUS, lambda m: _quantity(t, m) if m.group("n") else _one(t, m))
    if cpus is None and (m := next(iter(t.find(_RANKS)), None)):
        q = _quantity(t, m)
        cpus = Quantity(q.lo, q.hi, q.quote, "total")  # ranks are counted over the job
    mem = _first(t, _MEM, lambda m: _quantity(t, m, _gb(m.group("unit"))))
    data = _first(t, (_DATA,), lambda m: _quantity(t, m, _gb(m.group("unit"))))
    if data is not None:
        ignored.append(f"{data.quote!r} is the data's size, not memory")
    wall = _walltime(t)
    return Stated(
        cpus=cpus,
        gpus=gpus,
        gpu_types=tuple(types),
        gpu_types_quote=", ".join(type_words),
        gpu_mem_gb=gpu_mem,
        nodes=nodes,
        mem_gb=mem,
        walltime_s=wall,
        cpu_only=cpu_only,
        data_gb=data,
        ignored=tuple(ignored),
    )


def _first(
    t: _Text, patterns: tuple[str, ...], make: Callable[[re.Match[str]], Quantity]
) -> Quantity | None:
    for pat in patterns:
        for m in t.find(pat):
            q: Quantity = make(m)
            return q
    return None


def _one(t: _Text, m: re.Match[str]) -> Quantity:
    return Quantity(1.0, 1.0, t.take(m), "node")


def _gb(unit: str) -> float:
    u = unit.lower()[0]
    return {"t": 1024.0, "g": 1.0, "m": 1 / 1024}[u]


def _walltime(t: _Text) -> Quantity | None:
    """The longest duration stated (a run 'for 6 hours, checkpointing every 30 minutes' is
    6 hours); a range's upper end; 'every/each/per ...' durations are intervals, not it."""
    found: list[tuple[float, str]] = []
    s: float
    for m in t.find(_CLOCK):
        s = int(m.group("h")) * 3600 + int(m.group("mm")) * 60 + int(m.group("ss") or 0)
        found.append((s, t.take(m)))
    for m in t.find(_HALF):
        found.append((_SECONDS[m.group("unit").lower()] / 2, t.take(m)))
    for m in t.find(_DURATION):
        if _NOT_A_DURATION.search(t.text[max(0, m.start() - 10) : m.start()]):
            continue
        unit = m.group("unit").lower()
        raw = m.group("n") or ""
        if len(unit) == 1 and (not raw[:1].isdigit() or (unit == "s" and number(raw) >= 1000)):
            continue  # 'the 1990s', 'a h': not a duration
        lo, hi = _bounds(m, _SECONDS[unit])
        s = hi if hi is not None else lo or 0.0
        if m.group("min"):
            s += int(m.group("min")) * 60
        found.append((s, t.take(m)))
    if not found:
        return None
    s, quote = max(found)
    return Quantity(float(math.ceil(s)), float(math.ceil(s)), quote)


# --- stated quantities into an envelope's bounds -------------------------------------------------
MAX_WALLTIME_S = 30 * 24 * 3600


def apply_stated(b: dict[str, object], r: dict[str, str], stated: Stated) -> set[str]:
    """Put what ``stated`` says into the bounds ``b`` (over the class defaults there), each
    with its rationale in ``r`` quoting the words; the names of the bounds the text set.

    Counts are per node; a count said to be for the whole job ("8 GPUs across 2 nodes",
    "256 MPI ranks") is divided over the nodes. An impossible request is kept as said:
    validation against the sites flags it and names the nearest feasible envelope."""
    known: set[str] = set()
    if stated.nodes is not None:
        b["nodes"] = max(1, math.ceil(stated.nodes.lo or stated.nodes.hi or 1))
        r["nodes"] = f"{b['nodes']} from {stated.nodes.quote!r}"
    nodes = int(b.get("nodes") or 1)  # type: ignore[call-overload]

    def per_node(q: Quantity, what: str) -> tuple[int | None, int | None, str]:
        div = nodes if q.scope == "total" else 1
        lo = math.ceil(q.lo / div) if q.lo is not None else None
        hi = math.ceil(q.hi / div) if q.hi is not None else None
        how = f" ({q.quote!r} over {nodes} nodes)" if div > 1 else f" from {q.quote!r}"
        return lo, hi, _range_text(lo, hi, what) + how

    if stated.cpus is not None:
        lo, hi, text = per_node(stated.cpus, "cores per node")
        _set(b, "cpus", lo, hi)
        r["cpus"] = text
        known.add("cpus")
    if stated.cpu_only:
        b.update(gpus_min=0, gpus_max=0)
        b.pop("gpu_mem_gb_min", None)
        r["gpus"] = f"none: {stated.cpu_only!r}"
        if stated.gpus is not None or stated.gpu_types:
            r["gpus"] += f" (the description also says {stated.bounds().get('gpus', '')!r})"
        known.add("gpus")
        return known | _apply_rest(b, r, stated)
    if stated.gpus is not None:
        lo, hi, text = per_node(stated.gpus, "GPUs per node")
        _set(b, "gpus", lo, hi)
        r["gpus"] = text
        known.add("gpus")
    if stated.gpu_types:
        b["gpu_types"] = stated.gpu_types
        r["gpu_types"] = f"from {stated.gpu_types_quote!r}"
    if stated.gpu_mem_gb is not None:
        q = stated.gpu_mem_gb
        b["gpu_mem_gb_min"] = q.lo if q.lo is not None else q.hi
        r["gpu_mem_gb"] = f"at least {b['gpu_mem_gb_min']:g} GB per GPU from {q.quote!r}"
    if (stated.gpu_types or stated.gpu_mem_gb) and not b.get("gpus_min"):
        b["gpus_min"] = 1
        b["gpus_max"] = max(1, int(b.get("gpus_max") or 1))  # type: ignore[call-overload]
        r.setdefault("gpus", "at least 1: the description names a GPU type or GPU memory")
    return known | _apply_rest(b, r, stated)


def _apply_rest(b: dict[str, object], r: dict[str, str], stated: Stated) -> set[str]:
    known: set[str] = set()
    if stated.mem_gb is not None:
        q = stated.mem_gb
        how = f" from {q.quote!r}"
        if q.scope == "core":  # 2 GB per core, on the cores per node
            cores = int(b.get("cpus_min") or 1)  # type: ignore[call-overload]
            q = Quantity(
                None if q.lo is None else q.lo * cores,
                None if q.hi is None else q.hi * cores,
                q.quote,
            )
            how = f" ({stated.mem_gb.quote!r} per core, {cores} cores)"
        _set(b, "mem_gb", q.lo, q.hi)
        r["mem_gb"] = _range_text(q.lo, q.hi, "GB per node") + how
        known.add("mem_gb")
    if stated.walltime_s is not None:
        q = stated.walltime_s
        said = int(q.hi or q.lo or 60)
        wall = min(MAX_WALLTIME_S, max(60, said))
        b["walltime_s"] = wall
        r["walltime_s"] = f"{wall} s from {q.quote!r}" + (
            f" (the envelope's {'least' if wall > said else 'most'} is {wall} s)"
            if wall != said
            else ""
        )
        known.add("walltime_s")
    if stated.ignored:
        r["not_read"] = "; ".join(stated.ignored)
    return known


def _set(b: dict[str, object], name: str, lo: float | None, hi: float | None) -> None:
    """``name_min``/``name_max`` from a stated range; an open end keeps the class default
    where it is still consistent ('up to 16 cores' keeps a default minimum of 4)."""
    lo_key, hi_key = f"{name}_min", f"{name}_max"
    cast = float if name == "mem_gb" else int
    if lo is not None:
        b[lo_key] = cast(lo)
    elif hi is not None:
        default = b.get(lo_key)
        b[lo_key] = cast(min(default, hi)) if isinstance(default, int | float) else cast(hi)
    b[hi_key] = cast(hi) if hi is not None else None


def _range_text(lo: float | None, hi: float | None, what: str) -> str:
    if lo is not None and hi is not None:
        return f"{lo:g} {what}" if lo == hi else f"{lo:g}-{hi:g} {what}"
    if lo is not None:
        return f"at least {lo:g} {what}"
    return f"at most {hi:g} {what}"
