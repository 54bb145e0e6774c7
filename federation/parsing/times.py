"""Slurm durations, timestamps and memory sizes.

Durations: ``[D-]HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``HH:MM:SS``, ``MM:SS``, bare minutes (the
forms Slurm accepts and prints); ``UNLIMITED``/``INFINITE`` and ``INVALID``/``N/A``/``NONE``
are None (use :func:`is_unlimited` to tell them apart). Timestamps: ISO ``2026-03-10T12:34:51``
as printed with ``SLURM_TIME_FORMAT=standard`` (local time of the cluster, no zone: pass its
UTC offset), epoch seconds from JSON; ``Unknown``, ``N/A``, ``None`` and 0 are None.
Memory: ``4000M``, ``1G``, ``62.50G``, ``4000Mn``/``4000Mc`` (per node/CPU, old sacct), bare
numbers in MB.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, timezone
from functools import cache
from typing import Literal

from federation.core.errors import ParseError
from federation.parsing.common import NULLISH, snippet

UNLIMITED_WORDS = frozenset({"unlimited", "infinite"})
_NONE_DURATIONS = frozenset({*NULLISH, "invalid", "partition_limit"})


MAX_DURATION_S = (2**32 - 1) * 60
"""Slurm keeps time limits as 32-bit minutes: a longer duration is damage."""
_MAX_DAYS = MAX_DURATION_S // 86400
ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:Z|[+-]\d\d:\d\d)?")
"""Slurm's standard time (``datetime.fromisoformat`` alone reads ``00:-21:42`` as a time)."""
_FRACTION = re.compile(r"\d{1,2}\.\d{1,9}")


def is_unlimited(text: str | None) -> bool:
    return text is not None and text.strip().lower() in UNLIMITED_WORDS


def parse_duration(text: str | None) -> int | None:
    """Seconds in a Slurm duration; None for unlimited, invalid or absent values."""
    if text is None:
        return None
    t = text.strip()
    low = t.lower()
    if low in UNLIMITED_WORDS or low in _NONE_DURATIONS:
        return None
    days = 0
    rest = t
    if "-" in t:
        d, _, rest = t.partition("-")
        if not d.isdigit():
            raise ParseError(f"duration {snippet(t)}: expected [D-]HH:MM:SS")
        days = int(d)
    parts = rest.split(":")
    if not all(p.isdigit() for p in parts) or len(parts) > 3:
        # fractional seconds appear in a few sacct columns (e.g. 00:00:01.234)
        try:
            *hm, sec = parts
            if len(hm) > 2 or not all(p.isdigit() for p in hm) or not _FRACTION.fullmatch(sec):
                raise ValueError
            parts = [*hm, str(math.floor(float(sec)))]
        except ValueError:
            raise ParseError(f"duration {snippet(t)}: expected [D-]HH:MM:SS") from None
    if days > _MAX_DAYS or any(len(p) > 10 for p in parts):
        raise ParseError(f"duration {snippet(t)}: out of range")
    nums = [int(p) for p in parts]
    if len(nums) > 1 and any(n > 59 for n in nums[1:]):
        raise ParseError(f"duration {snippet(t)}: minutes or seconds past 59")
    if days or "-" in t:
        # D-HH, D-HH:MM, D-HH:MM:SS
        h, m, s = [*nums, 0, 0][:3]
    elif len(nums) == 3:
        h, m, s = nums
    elif len(nums) == 2:
        h, m, s = 0, nums[0], nums[1]
    else:
        h, m, s = 0, nums[0], 0  # bare minutes
    total = ((days * 24 + h) * 60 + m) * 60 + s
    if total > MAX_DURATION_S:
        raise ParseError(f"duration {snippet(t)}: out of range")
    return total


def zone(utc_offset_s: float | None) -> timezone:
    if not utc_offset_s:
        return UTC
    return timezone(timedelta(seconds=int(utc_offset_s)))


_ZERO = timedelta(0)


@cache
def zone_suffix(utc_offset_s: float | None) -> str:
    """``+HH:MM`` for a UTC offset in seconds."""
    off = int(utc_offset_s or 0)
    sign = "-" if off < 0 else "+"
    hours, rest = divmod(abs(off), 3600)
    return f"{sign}{hours:02d}:{rest // 60:02d}"


def parse_timestamp(text: str | None, utc_offset_s: float | None = 0) -> datetime | None:
    """An aware UTC datetime from Slurm's local ISO time; None for Unknown/N/A/None."""
    if text is None:
        return None
    t = text.strip()
    if t.lower() in NULLISH or t == "0":
        return None
    if ISO_TIME.fullmatch(t) is None:
        raise ParseError(f"timestamp {snippet(t)}: expected YYYY-MM-DDTHH:MM:SS")
    try:
        # appending the zone is ~5x faster than parsing then .replace(tzinfo=...)
        dt = datetime.fromisoformat(t + zone_suffix(utc_offset_s) if len(t) == 19 else t)
    except ValueError:
        raise ParseError(f"timestamp {snippet(t)}: expected YYYY-MM-DDTHH:MM:SS") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=zone(utc_offset_s))
    return dt if dt.utcoffset() == _ZERO else dt.astimezone(UTC)


MAX_EPOCH_S = 253_402_300_799
"""9999-12-31T23:59:59Z, the last second a datetime holds: a later time is damage."""


def epoch(value: float | None, what: str = "time") -> datetime | None:
    """Epoch seconds (JSON) -> aware UTC datetime; 0 and None are None.

    A negative time or one past year 9999 is a :class:`ParseError` naming ``what`` (not
    the ``OSError``/``ValueError``/``OverflowError`` the conversion would raise).
    """
    if value is None or value == 0:
        return None
    if not 0 < value <= MAX_EPOCH_S:  # NaN too
        raise ParseError(f"{what}: epoch time {value!r} is out of range")
    return datetime.fromtimestamp(value, tz=UTC)


_MEM_UNITS = {"k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0**2, "p": 1024.0**3}


def parse_memory(text: str | None) -> tuple[int | None, Literal["node", "cpu"] | None]:
    """(MB, per) from ``4000M``, ``1G``, ``4000Mn``, ``4000Mc``; per is None when unstated."""
    if text is None:
        return None, None
    t = text.strip().lower()
    if t in NULLISH or t in UNLIMITED_WORDS:
        return None, None
    per: Literal["node", "cpu"] | None = None
    if t[-1:] in ("n", "c"):
        per = "node" if t[-1] == "n" else "cpu"
        t = t[:-1]
    if t.endswith("b"):
        t = t[:-1]
    unit = 1.0
    if t and t[-1] in _MEM_UNITS:
        unit = _MEM_UNITS[t[-1]]
        t = t[:-1]
    try:
        mb = float(t) * unit
    except ValueError:
        raise ParseError(f"memory {snippet(text)}: expected a size like 4000M or 1G") from None
    if mb < 0 or math.isnan(mb):
        raise ParseError(f"memory {snippet(text)}: negative or not a number")
    return round(mb), per


def parse_memory_mb(text: str | None) -> int | None:
    """MB in a memory size, ignoring any per-node/per-CPU marker."""
    return parse_memory(text)[0]
