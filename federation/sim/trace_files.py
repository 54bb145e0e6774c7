"""Reading trace files as bytes and lines: plain or gzip (detected from the bytes), streamed.

The loaders read through :func:`_iter_lines` (line by line, so errors name the line) or
:func:`_read_all` (the whole decompressed file, for the fast SWF path). A damaged gzip
stream (corrupt, truncated, trailing garbage) becomes a
:class:`~federation.sim.trace_model.TraceFormatError` that names the line where the data ends.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

from federation.sim.trace_model import TraceFormatError

_CHUNK = 1 << 20


def _is_gzip(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(2) == b"\x1f\x8b"


def _open_error(path: Path, err: OSError) -> TraceFormatError:
    return TraceFormatError(path, None, f"cannot read the file ({err.strerror or err})")


class _StreamError(Exception):
    """Damaged compressed data; the line-aware callers turn it into a TraceFormatError."""


def _iter_chunks(path: Path) -> Iterator[bytes]:
    """Decompressed (or plain) bytes of ``path``, in chunks; raise on a damaged gzip stream."""
    try:
        gz = _is_gzip(path)
        f = path.open("rb")
    except OSError as err:
        raise _open_error(path, err) from err
    with f:
        if not gz:
            while chunk := f.read(_CHUNK):
                yield chunk
            return
        d = zlib.decompressobj(wbits=31)
        in_member = False  # the current decompressor has been fed data of an unfinished member
        while raw := f.read(_CHUNK):
            while raw:
                if not in_member and not raw.strip(b"\x00"):
                    raw = b""  # zero padding after the last member, as gzip(1) tolerates
                    break
                if not in_member and raw[:2] != b"\x1f\x8b" and len(raw) >= 2:
                    raise _StreamError("trailing garbage after the gzip data")
                in_member = True
                try:
                    out = d.decompress(raw)
                except zlib.error as err:
                    raise _StreamError(f"corrupt gzip data ({err})") from err
                if out:
                    yield out
                if d.eof:  # this member is complete; another may follow (concatenated gzip)
                    raw = d.unused_data
                    d = zlib.decompressobj(wbits=31)
                    in_member = False
                else:
                    raw = b""
        if in_member:
            raise _StreamError("truncated gzip stream")


def _cut_message(problem: str, line: int, partial: bool) -> str:
    cut = " (a partial line was cut)" if partial else ""
    return (
        f"{problem}: the data ends inside line {line}{cut}; "
        "the file is damaged or was not copied completely"
    )


def _iter_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """``(line number, line without newline)`` for each line; errors name the line."""
    lineno = 0
    rest = b""
    try:
        for chunk in _iter_chunks(path):
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for ln in lines:
                lineno += 1
                yield lineno, ln
    except _StreamError as err:
        line = lineno + 1
        raise TraceFormatError(path, line, _cut_message(str(err), line, bool(rest))) from err
    if rest:
        yield lineno + 1, rest


def _read_all(path: Path) -> bytes:
    """The whole decompressed file (fast path); errors name the line where the data ends."""
    parts: list[bytes] = []
    try:
        for chunk in _iter_chunks(path):
            parts.append(chunk)
    except _StreamError as err:
        done = b"".join(parts)
        line = done.count(b"\n") + 1
        partial = bool(done) and not done.endswith(b"\n")
        raise TraceFormatError(path, line, _cut_message(str(err), line, partial)) from err
    return b"".join(parts)
