"""The lines of a text table, read without copying the text (the 50 MB path of :mod:`.table`).

:func:`kept_lines` yields the lines a table reads (not blank, not ``#`` comments) with
where each starts. :class:`LineRows` holds the rows of a table split at one separator as
runs of consecutive lines of the text, found by :meth:`LineRows.scan`: a chunk of lines
whose every line holds the separator the right number of times is taken whole (checked in
C); any other chunk line by line, each line that does not fit skipped and named by the
caller. A row is split when it is read, so a table of 50 MB holds a few runs, not a list
of lists of strings.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterator
from itertools import count
from operator import methodcaller

from federation.parsing.common import LINE_CHUNK, cut_line, iter_lines


def cut_last(text: str) -> tuple[int, str] | None:
    """The last line, numbered, when the output ends without a newline (cut short: it is
    left out of :func:`kept_lines`, for the caller to skip and name) and it is a line
    that would be read (not blank, not a comment)."""
    cut = cut_line(text)
    if cut is None:
        return None
    line = text[text.rfind("\n") + 1 :]
    if not line.strip() or line.lstrip().startswith("#"):
        return None
    return cut, line.rstrip("\r")


def _comment(line: str) -> bool:
    return line[0] == "#" or (line[0].isspace() and line.lstrip().startswith("#"))


def kept_lines(
    text: str, cut: tuple[int, str] | None, after: int = 0
) -> Iterator[tuple[int, int, str]]:
    """The non-blank, non-comment lines past line ``after`` (``\\r`` stripped), lazily:
    (number, offset of its start in ``text``, line); without the cut last line."""
    stop = cut[0] if cut is not None else 0
    pos = 0
    for n, line in enumerate(iter_lines(text), start=1):
        start = pos
        pos += len(line) + 1
        if n <= after or not line or line.isspace() or n == stop or _comment(line):
            continue
        yield n, start, (line.rstrip("\r") if line[-1] == "\r" else line)


class LineRows:
    """The rows of a table as runs of consecutive lines in ``text``; a row is its line
    without ``lo`` characters in front and ``hi`` at the end, split at ``sep``."""

    __slots__ = ("_offsets", "ends", "firsts", "hi", "lines", "lo", "sep", "starts", "text")

    def __init__(self, text: str, sep: str, lo: int = 0, hi: int = 0) -> None:
        self.text, self.sep, self.lo, self.hi = text, sep, lo, hi
        self.starts = array("q")  # where each run's first line starts in the text
        self.ends = array("q")  # where its last line ends (before the newline)
        self.lines = array("q")  # the number of its first line
        self.firsts = array("q", [0])  # the index of its first row (and the row count last)
        self._offsets: array[int] | None = None

    def __len__(self) -> int:
        return self.firsts[-1]

    def _add(self, start: int, end: int, line: int, rows: int) -> None:
        self.starts.append(start)
        self.ends.append(end)
        self.lines.append(line)
        self.firsts.append(self.firsts[-1] + rows)

    def scan(
        self,
        start: int,
        stop: int,
        line: int,
        why: Callable[[str], str | None],
        seps: int,
        trailing: bool = False,
    ) -> Iterator[tuple[int, str, str]]:
        """Read the lines in ``text[start:stop]`` (``line`` the number of the first) as
        rows: the lines that fit (``why(line)`` None) are kept; the others are yielded
        as (number, reason, line) for the caller to skip. Blank and comment lines are
        passed over. A chunk of lines each holding ``seps`` separators (plus the last
        one at its end when ``trailing``) and nothing else to look at is kept whole;
        ``seps`` is 0 when only :func:`why` can tell (``lo``, ``hi``, a long separator)."""
        text, find, sep = self.text, self.text.find, self.sep
        counts, ends = methodcaller("count", sep), methodcaller("endswith", sep)
        target = {seps + 1 if trailing else seps}
        pos = start
        while pos < stop:
            end = find("\n", pos + LINE_CHUNK)
            if end < 0 or end > stop:
                end = stop
            chunk = text[pos:end]
            rows = chunk.split("\n")
            if (
                seps
                and "#" not in chunk
                and "\r" not in chunk
                and set(map(counts, rows)) == target
                and (not trailing or all(map(ends, rows)))
            ):
                self._add(pos, end, line, len(rows))
            else:
                yield from self._lines(rows, pos, line, why)
            line += len(rows)
            pos = end + 1

    def _lines(
        self, rows: list[str], pos: int, number: int, why: Callable[[str], str | None]
    ) -> Iterator[tuple[int, str, str]]:
        """:meth:`scan` of one chunk, line by line."""
        run_start = run_line = run_end = -1
        for n, raw in enumerate(rows, start=number):
            at = pos
            pos += len(raw) + 1
            if raw and not raw.isspace() and not _comment(raw):
                line = raw.rstrip("\r") if raw[-1] == "\r" else raw
                reason = why(line)
                if reason is None:  # a row: the run goes on
                    if run_start < 0:
                        run_start, run_line = at, n
                    run_end = at + len(raw)
                    continue
                yield n, reason, line
            if run_start >= 0:  # a line passed over or skipped ends the run
                self._add(run_start, run_end, run_line, n - run_line)
                run_start = -1
        if run_start >= 0:
            self._add(run_start, run_end, run_line, number + len(rows) - run_line)

    def _split(self, lines: list[str]) -> Iterator[list[str]]:
        sep, lo, hi = self.sep, self.lo, self.hi
        if not lo and not hi:
            return map(methodcaller("split", sep), lines)
        return (line[lo : len(line) - hi].split(sep) for line in lines)

    def _run_lines(self, run: int) -> list[str]:
        piece = self.text[self.starts[run] : self.ends[run]]
        lines = piece.split("\n")
        if "\r" in piece:
            lines = [line.rstrip("\r") for line in lines]
        return lines

    def numbered(self) -> Iterator[tuple[int, list[str]]]:
        """(line number, row) of every row, in order."""
        for run, first in enumerate(self.lines):
            yield from zip(count(first), self._split(self._run_lines(run)))

    def numbers(self) -> list[int]:
        """The line number of every row."""
        out: list[int] = []
        for run, first in enumerate(self.lines):
            out.extend(range(first, first + self.firsts[run + 1] - self.firsts[run]))
        return out

    def line_of(self, row: int) -> int:
        run = bisect_right(self.firsts, row) - 1
        return self.lines[run] + row - self.firsts[run]

    def row(self, i: int) -> list[str]:
        """Row ``i`` (an index of where each row starts is made at the first call)."""
        if self._offsets is None:
            self._offsets = array("q")
            for run, start in enumerate(self.starts):
                pos = start
                for line in self.text[start : self.ends[run]].split("\n"):
                    self._offsets.append(pos)
                    pos += len(line) + 1
        start = self._offsets[i]
        end = self.text.find("\n", start)
        line = self.text[start:] if end < 0 else self.text[start:end]
        return next(self._split([line.rstrip("\r")]))
