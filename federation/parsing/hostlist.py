"""Slurm host lists: ``o[0002-0006,0008],gpu1``, ``a[1-2]b[3-4]`` -> node names."""

from __future__ import annotations

import re

from federation.core.errors import ParseError
from federation.parsing.common import clean, snippet

_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_NOT_HOSTS = re.compile(r"[\s=|;\\\x1e\x1f]")
MAX_HOSTS = 1_000_000


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside brackets and parentheses (``a[1,2],b`` -> ``a[1,2]``, ``b``)."""
    if "[" not in text and "(" not in text:  # nothing nested: a plain split
        return text.split(sep)
    out: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth = max(0, depth - 1)
        elif ch == sep and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return out


def _ranges(spec: str, whole: str) -> list[tuple[int, int, int]]:
    """The ``(low, high, width)`` ranges of one bracket's contents (``01-03,7``)."""
    out: list[tuple[int, int, int]] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:  # n[,2] or n[1,]: an index lost
            raise ParseError(f"host list {snippet(whole)}: empty index in [{spec}]")
        lo, dash, hi = part.partition("-")
        if not dash:
            hi = lo
        if not (lo.isdigit() and hi.isdigit() and lo.isascii() and hi.isascii() and len(hi) <= 10):
            what = "range" if dash else "index"
            raise ParseError(f"host list {snippet(whole)}: bad {what} {part!r}")
        low, high = int(lo), int(hi)
        if high < low:
            raise ParseError(f"host list {snippet(whole)}: bad range {part!r}")
        if high - low >= MAX_HOSTS:
            raise ParseError(f"host list {snippet(whole)}: range {part!r} is too large")
        out.append((low, high, len(lo)))
    return out


def _size(ranges: list[tuple[int, int, int]]) -> int:
    return sum(hi - lo + 1 for lo, hi, _ in ranges)


def expand_hostlist(text: str | None, limit: int = MAX_HOSTS) -> list[str]:
    """Every host name in a Slurm host list, in order; ``(null)`` and empty give ``[]``.

    The whole list expands to at most ``limit`` names (each bracket's ranges multiply: a
    damaged ``n[0-99999]x[0-99999]`` would be ten billion); more is a :class:`ParseError`,
    found before any name is built.
    """
    value = clean(text)
    if value is None:
        return []
    plain, items = _items(value, limit)
    if plain is not None:
        return plain
    hosts: list[str] = []
    for _, parts, suffix in items:
        names = [""]
        for prefix, ranges in parts:
            values = [str(n).zfill(w) for lo, hi, w in ranges for n in range(lo, hi + 1)]
            names = [n + prefix + v for n in names for v in values]
        hosts.extend(n + suffix for n in names)
    return hosts


_Items = list[tuple[str, list[tuple[str, list[tuple[int, int, int]]]], str]]


def _items(value: str, limit: int) -> tuple[list[str] | None, _Items]:
    """A host list checked and cut into its items, none expanded yet: (the names, []) when
    it has no brackets, else (None, items)."""
    if _NOT_HOSTS.search(value) is not None:
        raise ParseError(f"host list {snippet(value)}: not a host list (a space, = or |)")
    if "[" not in value:
        if "]" in value:
            raise ParseError(f"host list {snippet(value)}: unbalanced brackets")
        plain = [h.strip() for h in split_top(value) if h.strip()]
        if len(plain) > limit:
            raise ParseError(f"host list {snippet(value)}: more than {limit} hosts")
        return plain, []
    items: _Items = []
    total = 0
    for item in split_top(value):
        item = item.strip()
        if not item:
            continue
        if item.count("[") != item.count("]"):
            raise ParseError(f"host list {snippet(value)}: unbalanced brackets in {item!r}")
        parts: list[tuple[str, list[tuple[int, int, int]]]] = []
        pos = 0
        count = 1
        for m in _BRACKET.finditer(item):
            ranges = _ranges(m.group(1), value)
            parts.append((item[pos : m.start()], ranges))
            count *= _size(ranges)
            pos = m.end()
        suffix = item[pos:]
        if "[" in suffix or "]" in suffix:
            raise ParseError(f"host list {snippet(value)}: nested brackets in {item!r}")
        total += count
        if total > limit:
            raise ParseError(f"host list {snippet(value)}: expands to more than {limit} hosts")
        items.append((item, parts, suffix))
    return None, items


def count_hosts(text: str | None, limit: int = MAX_HOSTS) -> int:
    """How many hosts a host list names, checked as :func:`expand_hostlist` checks it,
    without building their names."""
    value = clean(text)
    if value is None:
        return 0
    plain, items = _items(value, limit)
    if plain is not None:
        return len(plain)
    total = 0
    for _, parts, _suffix in items:
        count = 1
        for _prefix, ranges in parts:
            count *= _size(ranges)
        total += count
    return total
