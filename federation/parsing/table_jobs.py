"""The JobRecords of a third-party squeue table, kept as a few bytes a row (the 50 MB path).

A 50 MB ``squeue -o '%i;%t;%D;%C;%a;%u'`` queue holds a million and a half jobs, most of
them equal to an earlier row but for the job id. As a list of records it would cost about
375 bytes a job (a pydantic model with its own copy of every field value, and its id
string): some 600 MB. :class:`TableJobs` keeps each distinct record once and, per row,
which record it is like (4 bytes) and its job id (8 bytes: the number itself when the id
is a plain one, else an index into the other ids). A row's record is built when it is
read, equal to the one a list would hold (each value was checked when the row was read;
only the copy with its own id is left for later); read twice, it is built twice.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterator, Sequence
from operator import eq
from typing import Any, overload

import numpy as np

from federation.core.snapshot import JobRecord
from federation.parsing.common import RowWarnings
from federation.parsing.records import JOBS

_WITH = JOBS.with_dict


class TableJobs(Sequence[JobRecord]):
    """The jobs of a table, in row order: a read-only sequence of :class:`JobRecord`.

    It compares equal to a list (or another :class:`TableJobs`) of equal records; a slice
    is a list.
    """

    __slots__ = ("_ids", "_like", "_odd", "_records")

    def __init__(self) -> None:
        self._records: list[JobRecord] = []
        """Every distinct record (but for the job id), with the id of its first row."""
        self._like = array("I")
        """Per row: the index in ``_records`` of the record it is like."""
        self._ids = array("q")
        """Per row: its job id as a number when ``str`` of it gives the id back, else
        ``-1 - i`` for ``_odd[i]``."""
        self._odd: list[str] = []
        """The other job ids (array tasks ``123_4``, leading zeros), in row order."""

    @property
    def kinds(self) -> int:
        """How many distinct records the rows share (the index the next one gets)."""
        return len(self._records)

    def add(self, job: JobRecord) -> None:
        """A row read as a record of its own (the first of its kind)."""
        self._like.append(len(self._records))
        self._records.append(job)
        self._ids.append(self._code(job.job_id))

    def add_like(self, kind: int, job_id: str) -> None:
        """A row equal to record ``kind`` but for its job id (already checked)."""
        code = self._code(job_id)  # (before the append: the row is all or nothing)
        self._like.append(kind)
        self._ids.append(code)

    def _code(self, job_id: str) -> int:
        plain = job_id.isdigit() and len(job_id) < 19 and job_id.isascii()
        if plain and (job_id[0] != "0" or len(job_id) == 1):  # str(int(id)) is the id
            return int(job_id)
        self._odd.append(job_id)
        return -len(self._odd)

    def _job(self, kind: int, code: int) -> JobRecord:
        job = self._records[kind]
        job_id = str(code) if code >= 0 else self._odd[-1 - code]
        if job_id == job.job_id:
            return job
        data = job.__dict__.copy()
        data["job_id"] = job_id
        return _WITH(data)

    def __len__(self) -> int:
        return len(self._like)

    def __iter__(self) -> Iterator[JobRecord]:
        return map(self._job, self._like, self._ids)

    @overload
    def __getitem__(self, i: int) -> JobRecord: ...

    @overload
    def __getitem__(self, i: slice) -> list[JobRecord]: ...

    def __getitem__(self, i: int | slice) -> JobRecord | list[JobRecord]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return self._job(self._like[i], self._ids[i])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TableJobs | list):
            return NotImplemented
        return len(self) == len(other) and all(map(eq, self, other))

    __hash__ = None  # type: ignore[assignment]

    def __add__(self, other: Sequence[Any]) -> list[Any]:
        return [*self, *other]

    def __radd__(self, other: Sequence[Any]) -> list[Any]:
        return [*other, *self]

    def __repr__(self) -> str:
        return f"<TableJobs: {len(self)} jobs, {len(self._records)} distinct but for the id>"

    def repeats(self) -> set[int | str]:
        """The job ids on two rows or more, as kept (a number or an odd id); the numbers
        sorted in one copy of 8 bytes a row, not a set of every id."""
        odd = self._odd
        twice: set[int | str] = set()
        if len(set(odd)) != len(odd):
            twice.update(k for k, n in Counter(odd).items() if n > 1)
        if len(self._ids) > 1:
            codes = np.frombuffer(self._ids, dtype=np.int64)
            numbers = np.sort(codes[codes >= 0])
            twice.update(numbers[1:][numbers[1:] == numbers[:-1]].tolist())
        return twice

    def drop_repeats(self, twice: set[int | str], lines: Sequence[int], notes: RowWarnings) -> None:
        """Keep the first row of each job id in ``twice`` (:meth:`repeats`), naming the others
        in ``notes`` with the line of the first (``lines``: the input line of every row)."""
        first: dict[int | str, int] = {}
        like, ids = array("I"), array("q")
        for kind, code, line in zip(self._like, self._ids, lines, strict=True):
            key: int | str = code if code >= 0 else self._odd[-1 - code]
            if key in twice:
                at = first.setdefault(key, line)
                if at != line:
                    notes.add(
                        "duplicate",
                        f"squeue line {line} skipped: job {key} is listed twice "
                        f"(first on line {at}): duplicated output",
                    )
                    continue
            like.append(kind)
            ids.append(code)
        self._like, self._ids = like, ids
