"""Generic delimited tables: third-party Slurm text outputs with a header or a column list.

Sites and tools print ``squeue``/``sacct`` with their own delimiters: ``;`` with a header,
0x1F from ``-O Field:\\x1f``, ``|`` from ``sacct -p`` (trailing ``|`` included), a literal
backslash-t from ``-o '%i\\t%P'`` (squeue does not expand ``\\t``), or a mix of separators in
one ``-o`` format. :func:`parse_format_output` derives the columns and separators from the
``-o`` format string itself; :func:`parse_delimited` takes one delimiter plus a header line
or an explicit column list. Both skip malformed lines instead of failing (these formats
are not ours): a damaged line costs that line only, counted in ``skipped`` and named in a
capped warning. When no line at all fits, :class:`ParseError` names the first one. Bytes
are decoded as UTF-8 (undecodable bytes replaced, with a warning).

Width-padded formats with whitespace between fields (squeue's default ``%.18i %.9P %.8j
%.8u %.2t %.10M %.6D %R``, :data:`SQUEUE_DEFAULT_FORMAT`) are cut at the columns the
widths fix (squeue pads and cuts every field to its width, in bytes), the last field
running to the end of the line; a line that does not fit that layout is split at runs of
whitespace instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain

from federation.core.errors import ParseError
from federation.parsing.common import RowWarnings, as_text, snippet
from federation.parsing.lines import LineRows, cut_last, kept_lines

SQUEUE_DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
"""What ``squeue`` prints without ``-o``/``-O`` (header ``JOBID PARTITION NAME USER ST TIME
NODES NODELIST(REASON)``)."""

# squeue -o %-codes -> the header squeue prints for them
SQUEUE_CODES: dict[str, str] = {
    "a": "ACCOUNT",
    "A": "JOBID",
    "b": "TRES_PER_NODE",
    "B": "EXEC_HOST",
    "c": "MIN_CPUS",
    "C": "CPUS",
    "d": "MIN_TMP_DISK",
    "D": "NODES",
    "e": "END_TIME",
    "E": "DEPENDENCY",
    "f": "FEATURES",
    "F": "ARRAY_JOB_ID",
    "g": "GROUP",
    "G": "GROUP",
    "h": "OVER_SUBSCRIBE",
    "H": "SOCKETS_PER_NODE",
    "i": "JOBID",
    "I": "CORES_PER_SOCKET",
    "j": "NAME",
    "J": "THREADS_PER_CORE",
    "k": "COMMENT",
    "K": "ARRAY_TASK_ID",
    "l": "TIME_LIMIT",
    "L": "TIME_LEFT",
    "m": "MIN_MEMORY",
    "M": "TIME",
    "n": "REQ_NODES",
    "N": "NODELIST",
    "o": "COMMAND",
    "O": "CONTIGUOUS",
    "p": "PRIORITY",
    "P": "PARTITION",
    "q": "QOS",
    "Q": "PRIORITY",
    "r": "REASON",
    "R": "NODELIST(REASON)",
    "s": "SELECT_JOBINFO",
    "S": "START_TIME",
    "t": "ST",
    "T": "STATE",
    "u": "USER",
    "U": "UID",
    "v": "RESERVATION",
    "V": "SUBMIT_TIME",
    "w": "WCKEY",
    "W": "LICENSES",
    "x": "EXC_NODES",
    "X": "CORE_SPEC",
    "y": "NICE",
    "Y": "SCHEDNODES",
    "z": "S:C:T",
    "Z": "WORK_DIR",
}

_CODE = re.compile(r"%([.\-]?)(\d*)([A-Za-z%])")
_DIGITS = re.compile(r"\d+")


class Table:
    """Rows of strings under named columns, plus what was skipped and why.

    A table read from a large text by a plain split (one delimiter) keeps where each row's
    line starts, not the row: a row is split again when read. :meth:`numbered_rows` yields
    them one at a time; ``rows`` (and ``line_numbers``) make the lists on first use. A
    50 MB table then costs 16 bytes a row until its rows are asked for as a list, not the
    ~400 of a list of strings.
    """

    __slots__ = ("_lazy", "_numbers", "_rows", "columns", "notes", "skipped")

    def __init__(
        self,
        columns: list[str],
        rows: list[list[str]] | None = None,
        skipped: int = 0,
        line_numbers: list[int] | None = None,
        notes: RowWarnings | None = None,
    ) -> None:
        self.columns = columns
        self._rows: list[list[str]] = [] if rows is None else rows
        self.skipped = skipped
        self._numbers: list[int] = [] if line_numbers is None else line_numbers
        """The input line each row came from (parallel to ``rows``)."""
        self.notes = RowWarnings() if notes is None else notes
        self._lazy: LineRows | None = None

    def __repr__(self) -> str:
        return f"Table(columns={self.columns!r}, rows={self.row_count}, skipped={self.skipped})"

    @property
    def rows(self) -> list[list[str]]:
        """Every row, as a list (made on first use for a table that kept its lines)."""
        self._materialize()
        return self._rows

    @rows.setter
    def rows(self, rows: list[list[str]]) -> None:
        self._materialize()
        self._rows = rows

    @property
    def line_numbers(self) -> list[int]:
        """The input line each row came from (parallel to ``rows``)."""
        self._materialize()
        return self._numbers

    @line_numbers.setter
    def line_numbers(self, numbers: list[int]) -> None:
        self._materialize()
        self._numbers = numbers

    @property
    def row_count(self) -> int:
        return len(self._lazy) if self._lazy is not None else len(self._rows)

    def _materialize(self) -> None:
        lazy = self._lazy
        if lazy is not None:
            self._lazy = None
            self._rows = [row for _, row in lazy.numbered()]
            self._numbers = lazy.numbers()

    def numbered_rows(self) -> Iterator[tuple[int, list[str]]]:
        """(input line, row) for every row, one at a time (without making ``rows``)."""
        if self._lazy is not None:
            return self._lazy.numbered()
        return zip(self.row_lines(), self._rows, strict=True)

    def row_lines(self) -> list[int]:
        """The input line of every row (without splitting any)."""
        if self._lazy is not None:
            return self._lazy.numbers()
        numbers = self._numbers
        return [numbers[i] if i < len(numbers) else i + 1 for i in range(len(self._rows))]

    def row(self, i: int) -> list[str]:
        """Row ``i`` (split again from its line when the table kept lines)."""
        return self._lazy.row(i) if self._lazy is not None else self._rows[i]

    @property
    def warnings(self) -> list[str]:
        """Skipped lines (the first few of each kind, then a count) and decoding notes."""
        return self.notes.lines()

    def skip(self, line_no: int, why: str, line: str) -> None:
        self.skipped += 1
        self.notes.add(_DIGITS.sub("N", why), f"line {line_no}: {why}: {snippet(line)}")

    def line_of(self, row: int) -> int:
        """The input line of ``rows[row]`` (its 1-based position when not recorded)."""
        if self._lazy is not None:
            return self._lazy.line_of(row)
        return self._numbers[row] if row < len(self._numbers) else row + 1

    def fail_if_nothing_fit(self, what: str, first_bad: tuple[int, str] | None) -> None:
        """Every line was skipped: not a damaged row but the wrong format; say where."""
        if not self.row_count and first_bad is not None and self.skipped:
            line_no, line = first_bad
            reasons = "; ".join(self.notes.lines()[:3])
            raise ParseError(
                f"{what} line {line_no}: no line fits the {len(self.columns)} columns "
                f"{self.columns[:8]} ({reasons}); line was {snippet(line)}"
            )

    def dicts(self) -> list[dict[str, str]]:
        """Rows as dicts (first column wins when a header repeats a name)."""
        out = []
        for _, row in self.numbered_rows():
            d: dict[str, str] = {}
            for k, v in zip(self.columns, row, strict=True):
                d.setdefault(k, v)
            out.append(d)
        return out


CUT = "output ends without a newline: last line cut short"
"""Why the last line of an output without its final newline is skipped."""


def _trailing_by_majority(body: Iterable[tuple[int, int, str]], delimiter: str, n: int) -> bool:
    """Without a header: do most lines carry n fields plus a trailing delimiter?

    Lines are counted, not required to agree, so a truncated line (or a ``-P`` row whose
    last field is empty) cannot flip the decision for the whole table.
    """
    trailing = plain = 0
    for _, _, line in body:
        c = line.count(delimiter)
        if c == n and line.endswith(delimiter):
            trailing += 1
        elif c == n - 1:
            plain += 1
    return trailing > plain


def parse_delimited(
    text: str | bytes,
    delimiter: str,
    columns: Sequence[str] | None = None,
    *,
    header: bool | None = None,
    trailing_delimiter: bool | None = None,
) -> Table:
    """Split ``text`` on ``delimiter`` into a :class:`Table`.

    With ``columns`` the text has no header unless ``header=True`` (it is then skipped);
    without, the first line is the header. A delimiter at the end of each line (``sacct
    -p``, ``-O Field:\\x1f``) is detected from the header (a column name is never empty),
    or without one from the majority of lines, unless ``trailing_delimiter`` says. Lines
    with the wrong number of fields, or without the trailing delimiter the table has (cut
    short), are skipped and counted; :class:`ParseError` when no line fits.

    The table keeps where each row's line starts (:class:`Table`): the text is read line
    by line and no row is split until it is read.
    """
    if not delimiter:
        raise ValueError("delimiter must not be empty")
    notes = RowWarnings()
    raw = as_text(text, "delimited table", notes)
    cut_at = cut_last(raw)
    head: str | None = None
    after = 0  # the header's line
    if columns is None or header:
        first = next(kept_lines(raw, cut_at), None)
        if first is None and columns is None:
            if cut_at is not None:
                raise ParseError(f"delimited table line {cut_at[0]}: {CUT} (the header)")
            raise ParseError("delimited table: no header line")
        if first is not None:
            after, _, head = first
    if trailing_delimiter is None:
        if head is not None:
            trailing_delimiter = head.endswith(delimiter)
        else:
            assert columns is not None
            trailing_delimiter = _trailing_by_majority(
                kept_lines(raw, cut_at), delimiter, len(columns)
            )
    cut = len(delimiter)
    if columns is None:
        assert head is not None
        if trailing_delimiter and head.endswith(delimiter):
            head = head[:-cut]
        cols = [c.strip() for c in head.split(delimiter)]
    else:
        cols = list(columns)
    table = Table(columns=cols, notes=notes)
    n = len(cols)

    def why(line: str) -> str | None:
        if trailing_delimiter:
            if not line.endswith(delimiter):
                return f"no trailing {delimiter!r}: line cut short"
            fields = line.count(delimiter, 0, len(line) - cut) + 1
        else:
            fields = line.count(delimiter) + 1
        return None if fields == n else f"expected {n} fields, got {fields}"

    if cut_at is not None:
        table.skip(cut_at[0], CUT, cut_at[1])
    kept = LineRows(raw, delimiter, 0, cut if trailing_delimiter else 0)
    seps = n - 1 if n > 1 and (cut == 1 or not trailing_delimiter) else 0
    first_bad = _scan(table, kept, raw, after, cut_at, why, seps, bool(trailing_delimiter))
    table.fail_if_nothing_fit("delimited table", first_bad)
    return table


def _scan(
    table: Table,
    kept: LineRows,
    raw: str,
    after: int,
    cut: tuple[int, str] | None,
    why: Callable[[str], str | None],
    seps: int,
    trailing: bool,
) -> tuple[int, str] | None:
    """Read the lines past line ``after`` into ``kept`` (:meth:`LineRows.scan`), skipping
    those that do not fit; the first of them, or None."""
    start = 0
    for _ in range(after):  # past the header (a few lines at most)
        start = raw.find("\n", start) + 1
    # the lines end before the cut last line, or the final newline
    stop = raw.rfind("\n") if cut is not None or raw.endswith("\n") else len(raw)
    first_bad: tuple[int, str] | None = None
    if after == 0 or start > 0:
        for line_no, reason, line in kept.scan(start, stop, after + 1, why, seps, trailing):
            table.skip(line_no, reason, line)
            first_bad = first_bad or (line_no, line)
    table._lazy = kept
    return first_bad


def _format_spec(fmt: str) -> tuple[list[str], list[str], list[int | None]]:
    """(column names, separators, widths) of a squeue ``-o`` format."""
    cols: list[str] = []
    seps: list[str] = []
    widths: list[int | None] = []
    pos = 0
    for m in _CODE.finditer(fmt):
        if m.group(3) == "%":
            continue
        seps.append(fmt[pos : m.start()].replace("%%", "%"))
        code = m.group(3)
        if code not in SQUEUE_CODES:
            raise ValueError(f"unknown squeue format code %{code} in {fmt!r}")
        cols.append(SQUEUE_CODES[code])
        widths.append(int(m.group(2)) if m.group(2) else None)
        pos = m.end()
    seps.append(fmt[pos:].replace("%%", "%"))
    return cols, seps, widths


def format_columns(fmt: str) -> tuple[list[str], list[str]]:
    """A squeue ``-o`` format -> (column names, separators between them).

    ``"%i;%t|%.10D"`` -> (["JOBID", "ST", "NODES"], [";", "|"]). A leading or trailing
    literal is returned as separators[0] == prefix / last == suffix only when non-empty:
    the lists are aligned so that ``len(separators) == len(columns) + 1``.
    """
    cols, seps, _ = _format_spec(fmt)
    return cols, seps


class _Layout:
    """Where each field of a width-padded, whitespace-separated format sits in a line.

    squeue pads every field to its width and cuts it there (``_print_str``), counting
    bytes, so the columns are fixed; the last field runs to the end of the line.
    """

    def __init__(self, widths: Sequence[int], inner: Sequence[str]) -> None:
        self.spans: list[tuple[int, int]] = []
        self.seps: list[tuple[int, str]] = []
        pos = 0
        for w, sep in zip(widths, inner, strict=True):
            self.spans.append((pos, pos + w))
            pos += w
            self.seps.append((pos, sep))
            pos += len(sep)
        self.last = pos
        # shortest line that fits: every field but the last, padded (the last may be
        # empty, and trailing blanks stripped)
        self.least = self.seps[-1][0] if self.seps else 0

    def cut(self, rest: str) -> list[str] | None:
        """The stripped fields of ``rest``, or None when the line does not fit the layout."""
        if rest.isascii():
            if len(rest) < self.least or any(
                rest[at : at + len(sep)] != sep for at, sep in self.seps if at < len(rest)
            ):
                return None
            return [rest[a:b].strip() for a, b in self.spans] + [rest[self.last :].strip()]
        raw = rest.encode()  # squeue counts widths in bytes
        if len(raw) < self.least or any(
            raw[at : at + len(sep)] != sep.encode() for at, sep in self.seps if at < len(raw)
        ):
            return None
        values = [raw[a:b] for a, b in self.spans] + [raw[self.last :]]
        return [v.decode(errors="replace").strip() for v in values]


_COLUMN_SHAPES: dict[str, tuple[re.Pattern[str], str]] = {
    "JOBID": (re.compile(r"\d+(?:[_+][\w\[\]%,-]*)?"), "a job id"),
    "ST": (
        re.compile(r"BF|CA|CD|CF|CG|DL|F|NF|OOM|PD|PR|R|RD|RF|RH|RQ|RS|RV|S|SE|SI|SO|ST|TO"),
        "a state code",
    ),
    # (squeue cuts a long time to the column's width: "16-20:52:5")
    "TIME": (re.compile(r"(?:\d+-)?\d+(?::\d*){0,2}|INVALID|NOT_SET|UNLIMITED"), "a time"),
    "NODES": (re.compile(r"\d+"), "a node count"),
}
"""What a squeue column holds, for the columns whose values have a fixed shape."""


def _misfit(cols: Sequence[str], values: Sequence[str]) -> str | None:
    """The first value that is not what its column holds ("field ST 'alice' is not a state
    code"), or None."""
    for col, value in zip(cols, values, strict=False):
        shape = _COLUMN_SHAPES.get(col)
        if shape is not None and not shape[0].fullmatch(value):
            return f"field {col} {snippet(value)} is not {shape[1]}"
    return None


def _is_header(first: str, cols: list[str], layout: _Layout | None) -> bool:
    up = first.upper()
    if cols[0] in up and all(c.split("(")[0] in up for c in cols[:3]):
        return True
    if layout is None:
        return False
    values = layout.cut(first)  # squeue cuts a label longer than its width too
    return values is not None and all(
        v and c.startswith(v.upper()) for v, c in zip(values[:-1], cols, strict=False)
    )


def parse_format_output(text: str | bytes, fmt: str, *, header: bool | None = None) -> Table:
    """Output of ``squeue -o <fmt>`` -> a :class:`Table` with squeue's column names.

    Separators come from the format (so a literal ``\\t`` in it is matched literally, as
    squeue prints it); each value runs to the next separator, the last field to the line's
    end. Width-padded fields separated by whitespace (squeue's default format) are cut at
    their fixed columns instead. A header line (auto-detected unless ``header`` says) is
    skipped. Lines that do not fit are skipped and counted; :class:`ParseError` naming the
    first line when none does.
    """
    cols, seps, widths = _format_spec(fmt)
    if any(not s for s in seps[1:-1]):
        raise ValueError(f"format {fmt!r} has adjacent fields with no separator")
    prefix, suffix, inner = seps[0], seps[-1], seps[1:-1]
    spaced = bool(inner) and all(not s.strip() for s in inner)
    fixed = widths[:-1]
    layout = (
        _Layout([w for w in fixed if w is not None], inner)
        if spaced and all(w is not None for w in fixed)
        else None
    )
    words = spaced and any(w is not None for w in widths)  # padding: split at whitespace
    table = Table(columns=cols)
    raw = as_text(text, "squeue -o table", table.notes)
    cut = cut_last(raw)
    lines = kept_lines(raw, cut)
    if cut is not None:
        table.skip(cut[0], CUT, cut[1])
    first = next(lines, None)
    after = 0
    if first is not None:
        is_header = header
        if is_header is None:
            line = first[2]
            rest = line[len(prefix) :] if prefix and line.startswith(prefix) else line
            is_header = _is_header(rest, cols, layout)
        if not is_header:
            lines = chain((first,), lines)
        else:
            after = first[0]
    n = len(cols)
    first_bad: tuple[int, str] | None = None
    if not spaced and len(set(inner)) == 1 and "".join(inner).count(inner[0]) == n - 1:
        # one separator between every two fields (``%i;%t;%D``): a line fits when it holds
        # it once between each two fields; rows are kept as lines, split when read
        sep, lo, hi = inner[0], len(prefix), len(suffix)

        def why(line: str) -> str | None:
            if prefix and not line.startswith(prefix):
                return f"does not start with {prefix!r}"
            if suffix and (len(line) < lo + hi or not line.endswith(suffix)):
                return f"does not end with {suffix!r}"
            # more separators: a field holds one (more fields than the format: glued lines)
            return None if line.count(sep, lo, len(line) - hi) == n - 1 else f"expected {n} fields"

        kept = LineRows(raw, sep, lo, hi)
        count = 0 if prefix or suffix else n - 1
        first_bad = _scan(table, kept, raw, after, cut, why, count, False)
        table.fail_if_nothing_fit("squeue -o table", first_bad)
        return table
    sep_count = [] if spaced else [(s, "".join(inner).count(s)) for s in set(inner) if s.strip()]
    rows, numbers = table.rows, table.line_numbers
    for line_no, _, line in lines:
        rest = line
        if prefix:
            if not rest.startswith(prefix):
                table.skip(line_no, f"does not start with {prefix!r}", line)
                first_bad = first_bad or (line_no, line)
                continue
            rest = rest[len(prefix) :]
        if suffix:
            if not rest.endswith(suffix):
                table.skip(line_no, f"does not end with {suffix!r}", line)
                first_bad = first_bad or (line_no, line)
                continue
            rest = rest[: -len(suffix)]
        values: list[str] | None = None
        if layout is not None:
            values = layout.cut(rest)
        if values is None and words:
            values = rest.split(None, n - 1)
            if len(values) != n:
                values = None
            elif layout is not None and (bad := _misfit(cols, values)) is not None:
                # it does not fit the columns, and split at spaces a field is not what its
                # column holds (a stray word shifts the rest): not a row to guess at
                table.skip(line_no, f"does not fit the column layout; split at spaces, {bad}", line)
                first_bad = first_bad or (line_no, line)
                continue
        elif values is None:
            if any(rest.count(s) != c for s, c in sep_count):
                # a field holds a separator (more fields than the format: a glued line)
                table.skip(line_no, f"expected {n} fields", line)
                first_bad = first_bad or (line_no, line)
                continue
            values = []
            for sep in inner:
                head, found, rest = rest.partition(sep)
                if not found:
                    values = None
                    break
                values.append(head)
            if values is not None:
                values.append(rest)
        if values is None:
            table.skip(line_no, f"expected {n} fields", line)
            first_bad = first_bad or (line_no, line)
            continue
        rows.append(values)
        numbers.append(line_no)
    table.fail_if_nothing_fit("squeue -o table", first_bad)
    return table
