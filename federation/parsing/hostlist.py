"""Slurm host lists: ``o[0002-0006,0008],gpu1``, ``a[1-2]b[3-4]`` -> node names."""

from __future__ import annotations

import re

from federation.core.errors import ParseError
from federation.parsing.common import clean, snippet

_BRACKET = re.compile(r"\[([^\[\]]*)\]")
MAX_HOSTS = 1_000_000


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside brackets and parentheses (``a[1,2],b`` -> ``a[1,2]``, ``b``)."""
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


def _ranges(spec: str, whole: str) -> list[str]:
    values: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, _, hi = part.partition("-")
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                raise ParseError(f"host list {snippet(whole)}: bad range {part!r}")
            width = len(lo)
            if int(hi) - int(lo) > MAX_HOSTS:
                raise ParseError(f"host list {snippet(whole)}: range {part!r} is too large")
            values.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
        elif part.isdigit():
            values.append(part)
        else:
            raise ParseError(f"host list {snippet(whole)}: bad index {part!r}")
    return values


def expand_hostlist(text: str | None) -> list[str]:
    """Every host name in a Slurm host list, in order; ``(null)`` and empty give ``[]``."""
    value = clean(text)
    if value is None:
        return []
    hosts: list[str] = []
    for item in split_top(value):
        item = item.strip()
        if not item:
            continue
        if item.count("[") != item.count("]"):
            raise ParseError(f"host list {snippet(value)}: unbalanced brackets in {item!r}")
        names = [""]
        pos = 0
        for m in _BRACKET.finditer(item):
            prefix = item[pos : m.start()]
            names = [n + prefix + v for n in names for v in _ranges(m.group(1), value)]
            pos = m.end()
        suffix = item[pos:]
        hosts.extend(n + suffix for n in names)
    return hosts


def count_hosts(text: str | None) -> int:
    return len(expand_hostlist(text))
