"""Splitting ``scontrol show partition|job|node`` output into checked ``{key: value}``
records, lazily: the text is read record by record, each handed on as soon as it is
complete (for :mod:`.scontrol`; the format is described there)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from operator import methodcaller
from sys import intern

from federation.core.errors import ParseError
from federation.parsing.common import RowWarnings, as_text, cut_line, snippet
from federation.parsing.scontrol_keys import MAY_BE_EMPTY, ONE_WORD

_KEY = re.compile(r"(?<!\S)([A-Za-z][A-Za-z0-9_/:.()\[\]-]*)=")
"""A key: ``Key=`` at the start of a line or after whitespace."""
_PAIR = re.compile(r"[A-Za-z][A-Za-z0-9_/:.()\[\]-]*=")
"""A word that is a ``Key=value`` pair by itself (its value one word)."""


def read_records(
    text: str | bytes,
    warnings: list[str] | None,
    required: tuple[str, ...],
    share: dict[str, str] | None = None,
) -> Iterator[dict[str, str]]:
    """:func:`parse_scontrol_records`, lazily (its notes reach ``warnings`` at the end)."""
    notes = RowWarnings()
    for _, rec in checked_records(as_text(text, "scontrol"), notes, required, share):
        yield rec
    notes.into(warnings)


def checked_records(
    raw: str,
    notes: RowWarnings,
    required: tuple[str, ...] = (),
    share: dict[str, str] | None = None,
) -> Iterator[tuple[int, dict[str, str]]]:
    """:func:`_numbered_records`, without the records that are damaged (a line that is not
    ``Key=value``, a key given twice with two values, a control character, one of
    ``required`` missing) and without the last record when the output was cut: it ends
    without a newline, or (multi-line records, which scontrol closes with a blank line)
    without the blank line after the last record. Such a record may have lost values or
    whole lines, so it is dropped with a note naming it, not read with defaults."""
    multi_line = any(line[:1] in (" ", "\t") for line in raw.split("\n", 64)[1:])
    cut = cut_line(raw) is not None or (multi_line and not _blank_line_last(raw))
    last: Numbered | None = None
    for numbered in _numbered_records(raw, share):  # lazily, one record behind (the last: cut?)
        if last is not None and (checked := _checked(last, notes, required)) is not None:
            yield checked
        last = numbered
    if last is None:
        return
    if not cut:
        if (checked := _checked(last, notes, required)) is not None:
            yield checked
    else:
        line, rec, _ = last
        first = next(iter(rec.items()), ("?", "?"))
        notes.add(
            "cut",
            f"scontrol line {line}: output ends without "
            f"{'a blank line after its last record' if multi_line else 'a newline'} (cut "
            f"short?); the record {first[0]}={snippet(first[1])} there is not trusted and "
            "skipped",
        )


def _checked(
    numbered: Numbered,
    notes: RowWarnings,
    required: tuple[str, ...],
) -> tuple[int, dict[str, str]] | None:
    """The record, or None (with a note) when it is damaged."""
    line, rec, damage = numbered
    if required and required[0] not in rec:
        raise ParseError(f"scontrol line {line}: no {required[0]}= key")
    if damage is None and not all(map(rec.get, required)):  # (the common case: all there)
        missing = next((k for k in required if not rec.get(k) and k not in MAY_BE_EMPTY), None)
        if missing is not None:
            damage = f"no value for {missing}= (a line or a value lost?)"
    if damage is None and " " in "".join(map(rec.get, ONE_WORD, _NONE)):
        spaced = next((k for k in ONE_WORD if " " in rec.get(k, "")), None)
        if spaced is not None:
            damage = f"{spaced}={snippet(rec[spaced])} is more than one word"
    if damage is not None:
        first = next(iter(rec.items()), ("?", "?"))
        notes.add(
            "damaged record",
            f"scontrol line {line}: record {first[0]}={snippet(first[1])} skipped: {damage}",
        )
        return None
    return line, rec


_NONE = ("",) * len(ONE_WORD)

_KEYLESS = re.compile(r"\s*[A-Za-z]\w*:\S*\s*")
"""A line without ``Key=`` that scontrol prints (22.05: ``NtasksPerTRES:0``)."""


Numbered = tuple[int, dict[str, str], str | None]
"""A record with the line it starts on and the damage found in it (None: none)."""

_ODD_LINE = re.compile(r"\n(?![^\S\n]+[A-Za-z][A-Za-z0-9_/:.()\[\]-]*=|[^\S\n]*(?:\n|\Z))")
"""A line (after a record's first) that is neither indented ``Key=...`` nor blank."""


def _numbered_records(text: str, share: dict[str, str] | None = None) -> Iterator[Numbered]:
    """The records with the line each starts on and the damage found in it, if any; each
    as soon as it is complete. With ``share`` (records that are kept), keys are interned
    and equal values one string.

    Once the first record names the head key (``NodeName``), the text is cut at the lines
    that start with it: a record whose lines all begin with ``Key=``, are indented but its
    first, and hold no control character, quote, repeated key or second ``Head=`` is read
    whole (in C); any other record line by line (:class:`_LineReader`), which finds and
    names what is wrong with it.
    """
    reader = _LineReader(share)
    end = len(text)
    pos, n = 0, 1  # where the next line starts, and its number
    while pos <= end and reader.head is None:  # line by line until the first record
        stop = text.find("\n", pos)
        stop = end if stop < 0 else stop
        yield from reader.line(n, text[pos:stop])
        pos, n = stop + 1, n + 1
    if reader.head is None:
        yield from reader.flush()
        return
    mark, glued = f"\n{reader.head}=", reader.glued
    first = True  # (the first record's own lines after its first: line by line)
    while pos <= end:
        stop = text.find(mark, pos)
        stop = end if stop < 0 else stop
        block = text[pos:stop]
        record = None
        if not first and (
            "\x1f" not in block
            and "\x1e" not in block
            and "\t" not in block
            and '"' not in block
            and glued not in block
            and _ODD_LINE.search(block) is None
        ):
            record = _whole(block, share)
        if record is not None:
            yield from reader.flush()
            yield n, record, None
        else:
            for k, line in enumerate(block.split("\n")):
                yield from reader.line(n + k, line)
        first = False
        n += block.count("\n") + 1
        pos = stop + 1
    yield from reader.flush()


_PAIRS = methodcaller("split", "=", 1)
_HAS_EQ = methodcaller("__contains__", "=")


def _whole(block: str, share: dict[str, str] | None) -> dict[str, str] | None:
    """The record in ``block`` read at once, or None when a key repeats in it."""
    words = block.split()
    if all(map(_HAS_EQ, words)) and all(map(_PAIR.match, words)):  # each value a word
        record = dict(map(_PAIRS, words))
        if len(record) != len(words):
            return None
        if share is not None:
            record = {intern(k): share.setdefault(v, v) for k, v in record.items()}
        return record
    parts = _KEY.split(block)  # ["", key, value, key, value, ...]: values run to the next key
    keys = parts[1::2]
    if len(set(keys)) != len(keys):
        return None
    values = map(str.strip, parts[2::2])
    if share is not None:
        return {intern(k): share.setdefault(v, v) for k, v in zip(keys, values, strict=True)}
    return dict(zip(keys, values, strict=True))


class _LineReader:
    """:func:`_numbered_records` line by line: each line checked, the damage it shows
    named on its record; a record is handed on when the next one starts (a later line
    may show it damaged), the last by :meth:`flush`."""

    def __init__(self, share: dict[str, str] | None) -> None:
        self.share = share
        self.records: list[Numbered] = []  # the current record, until the next starts
        self.head: str | None = None
        self.glued = "\0"  # " Head=" once the first record names the head key
        self.current: dict[str, str] | None = None

    def flush(self) -> Iterator[Numbered]:
        if self.records:
            yield self.records.pop()

    def line(self, n: int, line: str) -> Iterator[Numbered]:
        words = line.split()
        if not words:
            return
        records, share = self.records, self.share
        pairs: dict[str, str] | None = None
        if all(map(_PAIR.match, words)):  # every word Key=value: the value a word
            pairs = dict(map(_PAIRS, words))  # (keys from the words: not interned)
            keyed = True
            if len(pairs) != len(words) or share is not None or '"' in line:
                keys = [w.partition("=")[0] for w in words]
                values = [w.partition("=")[2] for w in words]
                pairs = None
        else:  # a value of several words runs to the next Key= after whitespace
            parts = _KEY.split(line)  # [before, key, value, key, value, ...]: one pass in C
            if len(parts) == 1:  # no Key= at all
                if self.current is None:
                    raise ParseError(
                        f"scontrol line {n}: expected Key=value records, got {snippet(line)}"
                    )
                if _KEYLESS.fullmatch(line) is None:
                    _damage(records, f"line {n} is not Key=value: {snippet(line)}")
                return
            keys = parts[1::2]
            values = list(map(str.strip, parts[2::2]))
            keyed = not parts[0] or parts[0].isspace()  # the line starts with Key=
        if pairs is None:
            keys = list(map(intern, keys))
            if '"' in line:
                values = [v[1:-1] if len(v) >= 2 and v[0] == v[-1] == '"' else v for v in values]
            if share is not None:
                values = list(map(share.setdefault, values, values))
            first_key = keys[0]
        else:
            first_key = next(iter(pairs))
        starts = keyed and not line[0].isspace()
        if self.head is None:
            if not starts:
                raise ParseError(f"scontrol line {n}: record does not start with Key=: {line!r}")
            self.head, self.glued = first_key, f" {first_key}="
        head = self.head
        if starts and first_key == head:
            self.current = {}
            if records:
                yield records.pop()
            records.append((n, self.current, None))
        elif starts:
            raise ParseError(
                f"scontrol line {n}: a {first_key}= line among {head}= records (spliced "
                f"output?): {snippet(line)}"
            )
        elif not keyed:
            _damage(records, f"line {n} starts with words that are not Key=value")
        if self.glued in line:  # a line glued to the start of another record
            _damage(records, f"line {n} holds a second {head}=")
        if "\x1f" in line or "\x1e" in line or "\t" in line:
            _damage(records, f"line {n} holds a control character")
        current = self.current
        assert current is not None
        if pairs is not None:  # keys all distinct: merged at once unless one came before
            if current.keys().isdisjoint(pairs):
                current.update(pairs)
                return
            keys, values = list(pairs), list(pairs.values())
        for k, v in zip(keys, values, strict=True):
            if current.setdefault(k, v) != v:
                _damage(records, f"{k}= twice, as {snippet(current[k], 30)} and {snippet(v, 30)}")


def _damage(records: list[Numbered], what: str) -> None:
    """Mark the current (last) record damaged, keeping the first damage found."""
    n, rec, damage = records[-1]
    if damage is None:
        records[-1] = (n, rec, what)


def _blank_line_last(raw: str) -> bool:
    """Does ``raw`` end with a blank line (blanks after it aside)? Read from its end: the
    text is not copied."""
    k = 64
    while True:
        tail = raw[-k:].rstrip(" \t\r")
        if len(tail) >= 2 or k >= len(raw):
            return tail.endswith("\n\n")
        k *= 4
