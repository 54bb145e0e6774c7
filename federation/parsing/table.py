"""Generic delimited tables: third-party Slurm text outputs with a header or a column list.

Sites and tools print ``squeue``/``sacct`` with their own delimiters: ``;`` with a header,
0x1F from ``-O Field:\\x1f``, ``|`` from ``sacct -p`` (trailing ``|`` included), a literal
backslash-t from ``-o '%i\\t%P'`` (squeue does not expand ``\\t``), or a mix of separators in
one ``-o`` format. :func:`parse_format_output` derives the columns and separators from the
``-o`` format string itself; :func:`parse_delimited` takes one delimiter plus a header line
or an explicit column list. Both skip (and count) malformed lines instead of failing:
these formats are not ours.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from federation.core.errors import ParseError
from federation.parsing.common import snippet

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

_CODE = re.compile(r"%(?:[.\-]?\d*)([A-Za-z%])")


@dataclass
class Table:
    """Rows of strings under named columns, plus what was skipped and why."""

    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    skipped: int = 0
    warnings: list[str] = field(default_factory=list)

    def skip(self, line_no: int, why: str, line: str) -> None:
        self.skipped += 1
        if len(self.warnings) < 50:
            self.warnings.append(f"line {line_no}: {why}: {snippet(line)}")

    def dicts(self) -> list[dict[str, str]]:
        """Rows as dicts (first column wins when a header repeats a name)."""
        out = []
        for row in self.rows:
            d: dict[str, str] = {}
            for k, v in zip(self.columns, row, strict=True):
                d.setdefault(k, v)
            out.append(d)
        return out


def _lines(text: str) -> list[tuple[int, str]]:
    return [
        (n, line.rstrip("\r"))
        for n, line in enumerate(text.split("\n"), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]


def parse_delimited(
    text: str,
    delimiter: str,
    columns: Sequence[str] | None = None,
    *,
    header: bool | None = None,
    trailing_delimiter: bool | None = None,
) -> Table:
    """Split ``text`` on ``delimiter`` into a :class:`Table`.

    With ``columns`` the text has no header unless ``header=True`` (it is then skipped);
    without, the first line is the header. A delimiter at the end of every line (``sacct
    -p``, ``-O Field:\\x1f``) is detected and dropped unless ``trailing_delimiter`` says.
    Lines with the wrong number of fields are skipped and counted.
    """
    if not delimiter:
        raise ValueError("delimiter must not be empty")
    lines = _lines(text)
    if trailing_delimiter is None:
        trailing_delimiter = bool(lines) and all(line.endswith(delimiter) for _, line in lines)

    def split(line: str) -> list[str]:
        if trailing_delimiter and line.endswith(delimiter):
            line = line[: -len(delimiter)]
        return line.split(delimiter)

    if columns is None:
        if not lines:
            raise ParseError("delimited table: no header line")
        cols = [c.strip() for c in split(lines[0][1])]
        body = lines[1:]
    else:
        cols = list(columns)
        body = lines[1:] if header else lines
    table = Table(columns=cols)
    n = len(cols)
    for line_no, line in body:
        parts = split(line)
        if len(parts) != n:
            table.skip(line_no, f"expected {n} fields, got {len(parts)}", line)
            continue
        table.rows.append(parts)
    return table


def format_columns(fmt: str) -> tuple[list[str], list[str]]:
    """A squeue ``-o`` format -> (column names, separators between them).

    ``"%i;%t|%.10D"`` -> (["JOBID", "ST", "NODES"], [";", "|"]). A leading or trailing
    literal is returned as separators[0] == prefix / last == suffix only when non-empty:
    the lists are aligned so that ``len(separators) == len(columns) + 1``.
    """
    cols: list[str] = []
    seps: list[str] = []
    pos = 0
    for m in _CODE.finditer(fmt):
        if m.group(1) == "%":
            continue
        seps.append(fmt[pos : m.start()].replace("%%", "%"))
        code = m.group(1)
        if code not in SQUEUE_CODES:
            raise ValueError(f"unknown squeue format code %{code} in {fmt!r}")
        cols.append(SQUEUE_CODES[code])
        pos = m.end()
    seps.append(fmt[pos:].replace("%%", "%"))
    return cols, seps


def parse_format_output(text: str, fmt: str, *, header: bool | None = None) -> Table:
    """Output of ``squeue -o <fmt>`` -> a :class:`Table` with squeue's column names.

    Separators come from the format (so a literal ``\\t`` in it is matched literally, as
    squeue prints it); each value runs to the next separator, the last field to the line's
    end. A header line (auto-detected unless ``header`` says) is skipped. Lines whose
    separators do not all appear are skipped and counted.
    """
    cols, seps = format_columns(fmt)
    if any(not s for s in seps[1:-1]):
        raise ValueError(f"format {fmt!r} has adjacent fields with no separator")
    lines = _lines(text)
    table = Table(columns=cols)
    if lines:
        first = lines[0][1]
        is_header = header
        if is_header is None:
            is_header = cols[0] in first.upper() and all(
                c.split("(")[0] in first.upper() for c in cols[:3]
            )
        if is_header:
            lines = lines[1:]
    prefix, suffix, inner = seps[0], seps[-1], seps[1:-1]
    for line_no, line in lines:
        rest = line
        if prefix:
            if not rest.startswith(prefix):
                table.skip(line_no, f"does not start with {prefix!r}", line)
                continue
            rest = rest[len(prefix) :]
        if suffix:
            if not rest.endswith(suffix):
                table.skip(line_no, f"does not end with {suffix!r}", line)
                continue
            rest = rest[: -len(suffix)]
        values: list[str] = []
        ok = True
        for sep in inner:
            head, found, rest = rest.partition(sep)
            if not found:
                ok = False
                break
            values.append(head)
        if not ok:
            table.skip(line_no, f"expected {len(cols)} fields", line)
            continue
        values.append(rest)
        table.rows.append(values)
    return table
