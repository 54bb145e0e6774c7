"""``sacctmgr show qos`` -> every QOS with its live limits (:class:`QosLimits`).

The probe runs ``sacctmgr --noheader --parsable2 show qos format=<QOS_FIELDS>``: one line per
QOS, fields separated by ``|`` (none after the last). Columns are read by their names in
``fields`` (the probe records the list it asked for; a capture with a header passes its
header), so a wider capture (``sacctmgr -P show qos`` with every default column) reads too.

What sacctmgr prints: ``Priority`` a whole number (0 unless set); ``MaxWall`` a duration,
``HH:MM:SS`` or ``D-HH:MM:SS`` (``MM:SS`` is read too), empty when unset (``UNLIMITED`` and
``INFINITE`` also read as no limit); ``MaxJobsPU`` and ``MaxSubmitPU`` whole numbers, empty
when unset; ``MaxTRESPU`` a TRES list (``cpu=128,gres/gpu=4``); ``Flags`` comma-separated
words (``DenyOnLimit,OverPartQOS``), empty when none.

Strict, like the probe's other formats: a :class:`ParseError` names the line, the QOS and the
field of a damaged value (``30x``, ``-2``, ``00:3:00``, a number past 32 bits), a line with
the wrong number of fields, a QOS listed twice, and a last line without its newline (output
cut short). A flag this module does not know is kept, with a warning naming the QOS.
Unseeable, as in any parser: a count cut to nothing (``5`` made empty) reads as "no limit".
"""

from __future__ import annotations

import re

from federation.core.errors import ParseError
from federation.core.snapshot import QosLimits
from federation.parsing.common import MAX_COUNT, NAME, as_text, cut_line, line_of, snippet, whole
from federation.parsing.gres import parse_tres
from federation.parsing.times import UNLIMITED_WORDS, parse_duration

QOS_FIELDS: tuple[str, ...] = (
    "Name",
    "Priority",
    "MaxWall",
    "MaxTRESPU",
    "MaxJobsPU",
    "MaxSubmitPU",
    "Flags",
)
"""The ``format=`` fields the probe asks ``sacctmgr show qos`` for, in order."""

KNOWN_FLAGS = frozenset(
    {
        "DenyOnLimit",
        "EnforceUsageThreshold",
        "NoDecay",
        "NoReserve",
        "NotSet",
        "OverPartQOS",
        "PartitionMaxNodes",
        "PartitionMinNodes",
        "PartitionTimeLimit",
        "Relative",
        "RequiresReservation",
        "UsageFactorSafe",
    }
)
"""The QOS flags Slurm prints (``slurmdb_qos_flags_str``, 17.x to 25.x)."""

_WALL = re.compile(r"(?:\d{1,7}-)?\d{1,10}:\d\d(?::\d\d)?")
"""``HH:MM:SS``, ``D-HH:MM:SS`` (as sacctmgr prints MaxWall) and ``MM:SS``."""
_FLAG = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def _wall(value: str, what: str) -> int | None:
    v = value.strip()
    if not v or v.lower() in UNLIMITED_WORDS:
        return None
    if _WALL.fullmatch(v) is None:
        raise ParseError(f"{what}: expected a duration like 00:30:00 or 1-00:00:00, got {v!r}")
    try:
        return parse_duration(v)
    except ParseError as e:
        raise ParseError(f"{what}: {e}") from None


def _count(value: str, what: str) -> int | None:
    v = value.strip()
    if len(v) > 10:  # past 32 bits whatever it is (and no 5000-digit int() to refuse)
        raise ParseError(f"{what}: expected a whole number below 2**32, got {snippet(v)}")
    return None if not v else whole(v, what, MAX_COUNT)


def _flags(value: str, what: str, warnings: list[str] | None) -> tuple[str, ...]:
    v = value.strip()
    if not v:
        return ()
    flags = tuple(f.strip() for f in v.split(","))
    for f in flags:
        if _FLAG.fullmatch(f) is None:
            raise ParseError(f"{what}: {snippet(f)} is not a QOS flag")
        if f not in KNOWN_FLAGS and warnings is not None:
            warnings.append(f"{what}: unknown flag {f} (kept)")
    if len(set(flags)) != len(flags):
        raise ParseError(f"{what}: a flag given twice in {snippet(v)}")
    return flags


def parse_sacctmgr_qos(
    text: str | bytes, fields: tuple[str, ...] = QOS_FIELDS, warnings: list[str] | None = None
) -> list[QosLimits]:
    """``sacctmgr --noheader --parsable2 show qos format=<fields>`` -> the QOS in its order.

    ``fields``: the columns in the order printed (the probe's list; any other list with a
    ``Name`` column, such as a capture's header). Unknown flags are kept and named in
    ``warnings`` (when given); every other oddity is a :class:`ParseError`.
    """
    out_text = as_text(text, "sacctmgr qos")
    index = {f.strip().lower(): i for i, f in enumerate(fields)}
    if "name" not in index:
        raise ParseError(f"sacctmgr qos: the format has no Name field ({fields})")
    if "\x00" in out_text:
        raise ParseError(f"sacctmgr qos line {line_of(out_text, out_text.index(chr(0)))}: NUL byte")
    cut = cut_line(out_text) or (
        out_text.count("\n") + 1 if out_text and out_text[-1] != "\n" else None
    )
    if cut is not None:
        raise ParseError(f"sacctmgr qos line {cut}: output ends without a newline: cut short")
    col = {name: index.get(name.lower()) for name in QOS_FIELDS}
    nfields = len(fields)
    out: list[QosLimits] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(out_text.split("\n"), 1):
        if not line.strip():
            continue
        cols = line.split("|")
        if len(cols) != nfields:
            raise ParseError(
                f"sacctmgr qos line {lineno}: {len(cols)} fields, expected {nfields} "
                f"({'|'.join(fields)}): {snippet(line)}"
            )
        c = {name: ("" if i is None else cols[i]) for name, i in col.items()}
        name = c["Name"].strip()
        if NAME.fullmatch(name) is None:
            raise ParseError(f"sacctmgr qos line {lineno}: {snippet(name)} is not a QOS name")
        first = seen.setdefault(name.lower(), lineno)
        if first != lineno:
            raise ParseError(
                f"sacctmgr qos line {lineno}: QOS {name} is listed twice (first on line "
                f"{first}): duplicated output"
            )
        where = f"sacctmgr qos line {lineno} ({name})"
        if col["Priority"] is not None and not c["Priority"].strip():
            raise ParseError(f"{where} Priority: empty (sacctmgr prints every QOS's, 0 too)")
        try:
            tres = parse_tres(c["MaxTRESPU"])
        except ParseError as e:
            raise ParseError(f"{where} MaxTRESPU: {e}") from None
        out.append(
            QosLimits(
                name=name,
                priority=_count(c["Priority"], f"{where} Priority"),
                max_wall_s=_wall(c["MaxWall"], f"{where} MaxWall"),
                max_jobs_per_user=_count(c["MaxJobsPU"], f"{where} MaxJobsPU"),
                max_submit_per_user=_count(c["MaxSubmitPU"], f"{where} MaxSubmitPU"),
                max_tres_per_user=tres,
                flags=_flags(c["Flags"], f"{where} Flags", warnings),
            )
        )
    return out
