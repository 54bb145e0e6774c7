"""Helpers shared by the parsers: null-like values, JSON numbers, record splitting, errors."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from federation.core.errors import ParseError

UNIT_SEP = "\x1f"
RECORD_SEP = "\x1e"

NULLISH: frozenset[str] = frozenset({"", "(null)", "null", "n/a", "none", "unknown", "(none)"})
"""Values Slurm prints for "nothing here" (compared lower-cased)."""


def nullish(value: str | None) -> bool:
    return value is None or value.strip().lower() in NULLISH


def clean(value: str | None) -> str | None:
    """The stripped value, or None when Slurm printed a null-like placeholder."""
    if value is None:
        return None
    v = value.strip()
    return None if v.lower() in NULLISH else v


def snippet(text: str, limit: int = 80) -> str:
    """A short repr of ``text`` for error messages."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def line_of(text: str, offset: int) -> int:
    """1-based line number of character ``offset`` in ``text``."""
    return text.count("\n", 0, offset) + 1


LINE_CHUNK = 1 << 20
"""Characters :func:`iter_lines` splits at a time."""


def iter_lines(text: str, chunk: int = LINE_CHUNK) -> Iterator[str]:
    """``text.split("\\n")``, lazily: a chunk of about ``chunk`` characters is split at a
    time, so 50 MB of output is never held a second time as a list of lines."""
    if len(text) <= chunk:
        yield from text.split("\n")
        return
    find = text.find
    pos = 0
    while True:
        end = find("\n", pos + chunk)
        if end < 0:
            yield from text[pos:].split("\n")
            return
        yield from text[pos:end].split("\n")
        pos = end + 1


ROW_WARNING_CAP = 50
"""Per-row warnings kept of each kind; the rest are counted in one summary line."""
ROW_WARNING_KINDS = 10
"""Distinct kinds kept apart; rows of further kinds are counted under ``other``."""


class RowWarnings:
    """Warnings about single rows, capped: the first :data:`ROW_WARNING_CAP` of each kind
    are kept, the rest counted ("... and K more rows like this"), so a 50 MB input of bad
    rows yields a few dozen lines, not hundreds of thousands.

    ``kind`` is a short stable label (a reason with its numbers replaced, or the caller's
    name for the failure), never a row's values: kinds must stay few.
    """

    __slots__ = ("cap", "counts", "kept")

    def __init__(self, cap: int = ROW_WARNING_CAP) -> None:
        self.cap = cap
        self.kept: list[str] = []
        self.counts: dict[str, int] = {}

    def add(self, kind: str, message: str) -> None:
        counts = self.counts
        n = counts.get(kind)
        if n is None and len(counts) >= ROW_WARNING_KINDS:
            kind, n = "other", counts.get("other")
        n = 1 if n is None else n + 1
        counts[kind] = n
        if n <= self.cap:
            self.kept.append(message)

    @property
    def total(self) -> int:
        """Rows warned about, kept or not."""
        return sum(self.counts.values())

    def lines(self) -> list[str]:
        """The kept warnings, then one summary line per kind that went over the cap."""
        more = [
            f"... and {n - self.cap} more rows like this ({kind})"
            for kind, n in self.counts.items()
            if n > self.cap
        ]
        return self.kept + more if more else list(self.kept)

    def into(self, out: list[str] | None) -> None:
        """Append :meth:`lines` to the caller's ``warnings`` list (if it gave one)."""
        if out is not None:
            out.extend(self.lines())


_REPLACEMENT = "\ufffd".encode()


def as_text(source: object, what: str, warnings: RowWarnings | None = None) -> str:
    """Command output as ``str``: bytes are decoded as UTF-8.

    Undecodable bytes are replaced (U+FFFD) with a warning naming the first bad line when
    ``warnings`` is given, and raise :class:`ParseError` naming that line otherwise.
    Anything but ``str``/``bytes`` raises :class:`ParseError`.
    """
    if isinstance(source, str):
        return source
    if isinstance(source, bytes | bytearray | memoryview):
        raw = bytes(source)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line = raw.count(b"\n", 0, e.start) + 1
            if warnings is None:
                raise ParseError(
                    f"{what} line {line}: output is not UTF-8 ({e.reason} at byte {e.start})"
                ) from None
            text = raw.decode("utf-8", errors="replace")
            replaced = text.count("\ufffd") - raw.count(_REPLACEMENT)
            warnings.add(
                "not UTF-8",
                f"{what}: output is not UTF-8 from line {line} on; "
                f"{replaced} undecodable byte sequence(s) replaced by U+FFFD",
            )
            return text
    raise ParseError(f"{what}: expected text output, got {type(source).__name__}")


def split_records(text: str, nfields: int, what: str) -> Iterator[list[str]]:
    """Split the probe's own format: 0x1F between fields, 0x1E + newline after each record.

    Lazily, record by record (50 MB of output is not copied into a list of rows first).
    Fails loudly (naming the line) on a record with the wrong number of fields or a line
    break inside one (a foreign or repeated line), and on output that stops before the last
    record's terminator or without the newline after it, i.e. truncated output.
    """
    if not isinstance(text, str):
        raise ParseError(f"{what}: expected text output, got {type(text).__name__}")
    if not text.strip():
        return
    if "\x00" in text:
        raise ParseError(f"{what} line {line_of(text, text.index(chr(0)))}: NUL byte in output")
    end = RECORD_SEP + "\n"
    find = text.find
    pos = 0
    k = 0
    while True:
        stop = find(end, pos)
        if stop < 0:
            break
        k += 1
        part = text[pos:stop]
        fields = part.split(UNIT_SEP)
        if len(fields) != nfields:
            raise ParseError(
                f"{what} line {line_of(text, pos)}: expected {nfields} fields separated by "
                f"0x1F and closed by 0x1E, got {len(fields)}: {snippet(part)}"
            )
        if "\n" in part:  # Slurm's fields hold no newline: a line of something else
            raise ParseError(
                f"{what} record {k}: a line break inside a record (a foreign or repeated "
                f"line?): {snippet(part)}"
            )
        yield fields
        pos = stop + 2
    tail = text[pos:]
    if tail.endswith(RECORD_SEP):  # last record without its newline: cut after it?
        raise ParseError(
            f"{what} line {text.count(chr(10)) + 1}: output ends without a newline after its "
            "last record (cut short?)"
        )
    if tail.strip():
        raise ParseError(
            f"{what} line {line_of(text, pos)}: record not closed by 0x1E (output truncated "
            f"or not in the probe's format): {snippet(tail)}"
        )


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all distinct (``json`` keeps the last of a repeated
    key silently: a repeated line of pretty-printed output would change a value)."""
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        raise _DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))  # type: ignore[func-returns-value]
    return d


def load_json(source: str | bytes | Mapping[str, Any], what: str) -> dict[str, Any]:
    """Parse JSON text (or accept an already-parsed mapping) whose top level is an object."""
    if isinstance(source, Mapping):
        return dict(source)
    try:
        data = json.loads(source, object_pairs_hook=_unique_keys)
    except _DuplicateKey as e:
        raise ParseError(
            f"{what}: key {e.args[0]!r} twice in one object: duplicated output"
        ) from None
    except RecursionError:
        raise ParseError(f"{what}: JSON nested too deep to be Slurm output") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        head = source[:200] if isinstance(source, str) else repr(source[:200])
        hint = ""
        if "unable to find plugin" in head or "serializer/json" in head:
            hint = " (this Slurm was built without the JSON serializer plugin)"
        raise ParseError(f"{what}: not JSON{hint}: {e}; output starts {snippet(head)}") from e
    if not isinstance(data, dict):
        raise ParseError(f"{what}: expected a JSON object, got {type(data).__name__}")
    return data


MAX_INT = 2**63 - 1
"""The largest whole number any Slurm field holds (an int64); beyond it a value is damage."""
MAX_COUNT = 2**32 - 1
"""Counts Slurm keeps in 32 bits (CPUs, nodes, tasks, GPUs): larger is damage."""
_MAX_EXACT = 2**53
"""A JSON float at or past this is not an exact whole number any more."""
MAX_NESTING = 64
"""JSON numbers nest ``{"number": ...}`` this deep at most before they are damage."""


def json_number(value: Any, _depth: int = 0) -> float | None:
    """A Slurm JSON number: plain, or ``{"set", "infinite", "number"}`` (23.02+).

    Unset and infinite values are None (a bare JSON ``Infinity`` or ``NaN`` too, as Python's
    ``json`` reads them); the caller decides what infinite means. Lenient: anything else
    that is not a number is None too; :func:`json_float` and :func:`json_int` are strict.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, Mapping):
        if _depth >= MAX_NESTING:
            return None
        _flags(value)
        if value.get("infinite") or not value.get("set", True):
            return None
        return json_number(value.get("number"), _depth + 1)
    if isinstance(value, str):
        try:
            n = float(value)
        except ValueError:
            return None
        return n if math.isfinite(n) else None
    return None


def _flags(value: Mapping[str, Any]) -> None:
    """``set`` and ``infinite`` of a ``{"set", "infinite", "number"}`` are true or false:
    anything else (``NaN``, a number, a word) is damage."""
    for flag in ("set", "infinite"):
        if flag in value and not isinstance(value[flag], bool):
            raise ParseError(f"{flag!r}: expected true or false, got {_short_repr(value[flag])}")
    if (value.get("infinite") is True or value.get("set") is False) and value.get("number"):
        # Slurm writes 0 beside an infinite or unset flag: a number there is a flag damaged
        raise ParseError(f"an infinite or unset value with the number {value['number']!r}")


def json_float(value: Any, what: str) -> float | None:
    """A JSON number as a float: None when absent, unset or infinite (Slurm's own
    ``{"infinite": true}``); a present value that is not a finite number (a bare
    ``Infinity`` or ``NaN``, a word, a list, an object without a number) is a
    :class:`ParseError` naming ``what``."""
    n = json_number(value)
    if n is None and value is not None and not _unset(value):
        raise ParseError(f"{what}: expected a number, got {snippet(_short_repr(value))}")
    return None if n is None else float(n)


def json_int(value: Any, what: str, hi: int = MAX_INT, lo: int = 0) -> int | None:
    """A JSON whole number in ``[lo, hi]``; None when absent, unset or infinite.

    Anything else present (``Infinity``, ``NaN``, ``8.5``, a word, a list, a number out of
    range or past a float's precision) is a :class:`ParseError` naming ``what``.
    """
    n = json_number(value)
    if n is None:
        if value is not None and not _unset(value):
            raise ParseError(f"{what}: expected a number, got {snippet(_short_repr(value))}")
        return None
    if isinstance(n, float):
        # Slurm writes whole numbers as JSON integers: ``1e9`` or ``5.0`` is damage
        raise ParseError(f"{what}: expected a whole number, got {n!r}")
    if not lo <= n <= hi:
        raise ParseError(f"{what}: {n} is out of range ({lo}..{hi})")
    return int(n)


def _short_repr(value: Any) -> str:
    """``repr`` of a JSON value, safe for any depth and size (for messages)."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(repr(k) for k in list(value)[:5]) + ": ...}"
    if isinstance(value, list):
        return f"[... {len(value)} items]"
    return repr(value)[:80]


def _unset(value: Any) -> bool:
    """Slurm's own "no value": an unset or infinite ``{"set", "infinite", "number"}``."""
    if isinstance(value, Mapping):
        _flags(value)
    return isinstance(value, Mapping) and (
        bool(value.get("infinite")) or not value.get("set", True)
    )


@contextmanager
def field_errors(where: str) -> Iterator[None]:
    """Turn a raw exception from reading one record (a wrong-typed or out-of-range field,
    a structure nested too deep) into a :class:`ParseError` naming the record: no raw
    exception type leaves a parser."""
    try:
        yield
    except ParseError:
        raise
    except (
        TypeError,
        ValueError,
        AttributeError,
        KeyError,
        IndexError,
        OverflowError,
        OSError,
        RecursionError,
    ) as e:
        raise ParseError(f"{where}: unreadable value ({type(e).__name__}: {e})"[:300]) from None


def json_infinite(value: Any) -> bool:
    return isinstance(value, Mapping) and bool(value.get("infinite"))


def json_str(value: Any, what: str = "JSON text field") -> str | None:
    """A JSON string field (or a list of strings, joined by commas), with Slurm's empty and
    null-like values as None; any other type (a number, ``NaN``, an object) is a
    :class:`ParseError` naming ``what``, never the text ``nan``."""
    if value is None:
        return None
    if isinstance(value, list):
        if not all(isinstance(v, str) for v in value):
            raise ParseError(f"{what}: expected text, got {snippet(_short_repr(value))}")
        value = ",".join(value)
    elif not isinstance(value, str):
        raise ParseError(f"{what}: expected text, got {snippet(_short_repr(value))}")
    return clean(value)


def json_name(value: Any, what: str) -> str | None:
    """A JSON field holding one name (a node, a partition, a user): a string, or None when
    absent or null-like; anything else (a number, a list, an object) is a
    :class:`ParseError` naming ``what``, never the name ``{'a': 1}``."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ParseError(f"{what}: expected a name, got {snippet(_short_repr(value))}")
    return clean(value)


def slurm_version(meta: Mapping[str, Any]) -> str | None:
    """The Slurm release from a JSON ``meta`` block (``Slurm`` before 23.11, ``slurm`` after)."""
    block = meta.get("slurm") or meta.get("Slurm")
    if not isinstance(block, Mapping):
        return None
    release = block.get("release")
    if release:
        return str(release)
    ver = block.get("version")
    if isinstance(ver, Mapping):
        return f"{ver.get('major')}.{int(ver.get('minor', 0)):02d}.{ver.get('micro', 0)}"
    return None


def to_int(value: str, what: str) -> int:
    """An integer field of the probe's format, or a ParseError naming it."""
    try:
        return int(value)
    except ValueError:
        raise ParseError(f"{what}: expected an integer, got {snippet(value)}") from None


def check_errors(data: Mapping[str, Any], what: str) -> None:
    """A :class:`ParseError` quoting Slurm's ``errors`` when the document has any."""
    errors = data.get("errors")
    if errors:
        try:
            text = str(errors)[:200]
        except RecursionError:
            text = _short_repr(errors)
        raise ParseError(f"{what} reports errors: {snippet(text, 200)}")


_RANGE = r"\d{1,10}(?:-\d{1,10})?(?::\d{1,10})?"
JOB_ID = re.compile(
    rf"\d{{1,10}}(?:_(?:\d{{1,10}}|\[{_RANGE}(?:,{_RANGE})*(?:%\d{{1,10}})?\]"
    r"|\[\d{1,10}(?:[-:,%]\d{1,10})*[-:,%]?))?(?:\+\d{1,10})?"
)
"""A Slurm job id as its commands print it: ``123``, ``123_4``, ``123_[1-10%2]``, ``123+1``
(heterogeneous); each number at most 10 digits (Slurm keeps ids in 32 bits). A pending
array's ``[...]`` may lack its ``]``: squeue's default JOBID column cuts it at 18 characters."""
STEP_ID = re.compile(rf"(?:{JOB_ID.pattern})(?:\.(?:\d{{1,10}}|[A-Za-z][\w-]{{0,63}}))?")
"""A job or step id as sacct prints it: ``123.batch``, ``123_4.0``, ``123+1.extern``."""
_DIGITS = re.compile(r"\d+")
_TEN_DIGITS = re.compile(r"\d{10}")
"""Only a number of 10 digits can pass 2**32 - 1 (the regex allows at most 10)."""


NAME = re.compile(r"[^\s|;,=\\\x1e\x1f]{1,256}")
"""A user, account or partition name: one token, none of the separators Slurm's tables use."""


_COMMON_STEPS = frozenset({"batch", "extern", "interactive"})


def job_id(text: str, what: str = "job id", steps: bool = False) -> str:
    """A job id (with ``steps``, a step id too), checked against :data:`JOB_ID` (or
    :data:`STEP_ID`) and each of its numbers below 2**32: ``5376666x``, ``4.5`` in squeue,
    ``99999999999999999999999`` and ``12_[x-4]`` are damage, not jobs."""
    t = text.strip()
    if t.isdigit() and len(t) < 10 and t.isascii():  # the common case, fast
        return t
    if steps and "." in t:  # 123.batch, 123.0: the common steps, fast
        head, _, step = t.partition(".")
        if (
            head.isdigit()
            and len(head) < 10
            and head.isascii()
            and (step in _COMMON_STEPS or (step.isdigit() and len(step) < 10 and step.isascii()))
        ):
            return t
    if (STEP_ID if steps else JOB_ID).fullmatch(t) is None or not t.isascii():
        raise ParseError(f"{what}: {snippet(t)} is not a Slurm job id")
    if _TEN_DIGITS.search(t) and any(int(n) > MAX_COUNT for n in _DIGITS.findall(t)):
        raise ParseError(f"{what}: {snippet(t)} is out of range (ids are 32-bit)")
    return t


def whole(text: str, what: str, hi: int = MAX_INT) -> int:
    """A whole-number field of Slurm's text: digits only (the whole token, no sign, no
    trailing letters) and at most ``hi``; a :class:`ParseError` naming ``what`` otherwise.
    ``30x96101`` is damage, not 30."""
    t = text.strip()
    if not (t.isdigit() and t.isascii()):
        raise ParseError(f"{what}: expected a whole number, got {snippet(t)}")
    n = int(t)
    if n > hi:
        raise ParseError(f"{what}: {n} is out of range (at most {hi})")
    return n


def cut_line(text: str) -> int | None:
    """The number of the last line when ``text`` does not end with a newline (output cut
    short: its last line, maybe its last value, is incomplete), else None.

    Slurm's commands end every line with a newline; a caller that holds complete output
    without its final newline (a file that lost it) gives it back with one.
    """
    if not text or text.endswith("\n"):
        return None
    if not text.rstrip(" \t\r\x1e"):  # only blanks after the last newline
        return None
    tail = text.rfind("\n")
    if not text[tail + 1 :].strip():
        return None
    return text.count("\n") + 1


def json_objects(
    source: str | bytes | Mapping[str, Any], what: str, key: str = "jobs"
) -> list[Mapping[str, Any]]:
    """The list of objects under ``key`` of a Slurm ``--json`` document.

    Raises :class:`ParseError` when Slurm reported errors, the list is missing, or an
    entry is not an object, naming the entry.
    """
    data = load_json(source, what)
    check_errors(data, what)
    items = data.get(key)
    if not isinstance(items, list):
        raise ParseError(f"{what}: no {key!r} list (keys: {sorted(data)[:10]})")
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ParseError(f"{what} {key}[{i}]: expected an object")
    return items
