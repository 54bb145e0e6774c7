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
from collections.abc import Sequence
from dataclasses import dataclass, field

from federation.core.errors import ParseError
from federation.parsing.common import RowWarnings, as_text, cut_line, snippet

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


@dataclass
class Table:
    """Rows of strings under named columns, plus what was skipped and why."""

    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    skipped: int = 0
    line_numbers: list[int] = field(default_factory=list)
    """The input line each row came from (parallel to ``rows``)."""
    notes: RowWarnings = field(default_factory=RowWarnings, repr=False)

    @property
    def warnings(self) -> list[str]:
        """Skipped lines (the first few of each kind, then a count) and decoding notes."""
        return self.notes.lines()

    def skip(self, line_no: int, why: str, line: str) -> None:
        self.skipped += 1
        self.notes.add(_DIGITS.sub("N", why), f"line {line_no}: {why}: {snippet(line)}")

    def line_of(self, row: int) -> int:
        """The input line of ``rows[row]`` (its 1-based position when not recorded)."""
        return self.line_numbers[row] if row < len(self.line_numbers) else row + 1

    def fail_if_nothing_fit(self, what: str, first_bad: tuple[int, str] | None) -> None:
        """Every line was skipped: not a damaged row but the wrong format; say where."""
        if not self.rows and first_bad is not None and self.skipped:
            line_no, line = first_bad
            reasons = "; ".join(self.notes.lines()[:3])
            raise ParseError(
                f"{what} line {line_no}: no line fits the {len(self.columns)} columns "
                f"{self.columns[:8]} ({reasons}); line was {snippet(line)}"
            )

    def dicts(self) -> list[dict[str, str]]:
        """Rows as dicts (first column wins when a header repeats a name)."""
        out = []
        for row in self.rows:
            d: dict[str, str] = {}
            for k, v in zip(self.columns, row, strict=True):
                d.setdefault(k, v)
            out.append(d)
        return out


CUT = "output ends without a newline: last line cut short"
"""Why the last line of an output without its final newline is skipped."""


def _lines(text: str) -> tuple[list[tuple[int, str]], tuple[int, str] | None]:
    """The non-blank, non-comment lines, numbered; and the last line when the output ends
    without a newline (cut short: it is left out, for the caller to skip and name)."""
    lines = [
        (n, line.rstrip("\r"))
        for n, line in enumerate(text.split("\n"), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    cut = cut_line(text)
    if cut is not None and lines and lines[-1][0] == cut:
        return lines[:-1], lines[-1]
    return lines, None


def _trailing_by_majority(body: list[tuple[int, str]], delimiter: str, n: int) -> bool:
    """Without a header: do most lines carry n fields plus a trailing delimiter?

    Lines are counted, not required to agree, so a truncated line (or a ``-P`` row whose
    last field is empty) cannot flip the decision for the whole table.
    """
    trailing = plain = 0
    for _, line in body:
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
    """
    if not delimiter:
        raise ValueError("delimiter must not be empty")
    notes = RowWarnings()
    lines, cut_last = _lines(as_text(text, "delimited table", notes))
    head: str | None = None
    if columns is None:
        if not lines:
            if cut_last is not None:
                raise ParseError(f"delimited table line {cut_last[0]}: {CUT} (the header)")
            raise ParseError("delimited table: no header line")
        head, body = lines[0][1], lines[1:]
    elif header and lines:
        head, body = lines[0][1], lines[1:]
    else:
        body = lines
    if trailing_delimiter is None:
        if head is not None:
            trailing_delimiter = head.endswith(delimiter)
        else:
            assert columns is not None
            trailing_delimiter = _trailing_by_majority(body, delimiter, len(columns))
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
    rows, numbers = table.rows, table.line_numbers
    first_bad: tuple[int, str] | None = None
    if cut_last is not None:
        table.skip(cut_last[0], CUT, cut_last[1])
    for line_no, line in body:
        if trailing_delimiter:
            if not line.endswith(delimiter):
                table.skip(line_no, f"no trailing {delimiter!r}: line cut short", line)
                first_bad = first_bad or (line_no, line)
                continue
            parts = line[:-cut].split(delimiter)
        else:
            parts = line.split(delimiter)
        if len(parts) != n:
            table.skip(line_no, f"expected {n} fields, got {len(parts)}", line)
            first_bad = first_bad or (line_no, line)
            continue
        rows.append(parts)
        numbers.append(line_no)
    table.fail_if_nothing_fit("delimited table", first_bad)
    return table


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
    lines, cut = _lines(as_text(text, "squeue -o table", table.notes))
    if cut is not None:
        table.skip(cut[0], CUT, cut[1])
    if lines:
        first = lines[0][1]
        is_header = header
        if is_header is None:
            rest = first[len(prefix) :] if prefix and first.startswith(prefix) else first
            is_header = _is_header(rest, cols, layout)
        if is_header:
            lines = lines[1:]
    n = len(cols)
    sep_count = [] if spaced else [(s, "".join(inner).count(s)) for s in set(inner) if s.strip()]
    rows, numbers = table.rows, table.line_numbers
    first_bad: tuple[int, str] | None = None
    for line_no, line in lines:
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
