"""Building many snapshot models from values a parser has already checked (the 50 MB path).

``model_validate`` checks every value a second time and gives each record a dict of its
own (about 550 bytes for a :class:`~federation.core.snapshot.JobRecord`); a 50 MB queue
holds a million and a half of them. :class:`Trusted` builds the same model without the
second pass, its fields kept in the compact per-instance values CPython shares between
instances of one class (about 320 bytes). Only a parser that has checked every value
itself (whole numbers in range, states from the table, names) may use it; tests compare
its records with validated ones on every fixture.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from federation.core.snapshot import JobRecord, NodeRecord

M = TypeVar("M", bound=BaseModel)


class Trusted(Generic[M]):
    """Unvalidated constructors of one model class: :attr:`values` (every field's value, in
    the order the class declares them), :attr:`with_dict` (another record's fields, copied
    and changed: the fastest) and :meth:`mapping`."""

    __slots__ = ("cls", "names", "values", "with_dict")

    def __init__(self, cls: type[M]) -> None:
        self.cls = cls
        names = self.names = tuple(cls.model_fields)
        fields_set = set(names)  # (the same for every record: a copy copies it)
        setattr_ = object.__setattr__
        new = cls.__new__
        # An instance keeps its attributes in a compact array keyed by its class's shared
        # keys once they hold the field names; they take names only while few instances
        # have been made: register them now, before other code makes many records.
        first = new(cls)
        for name in names:
            setattr_(first, name, None)

        def values(values: Sequence[Any]) -> M:
            """A record from the value of every field, in declaration order."""
            obj = new(cls)
            obj.__dict__.update(zip(names, values, strict=True))  # (pair by pair: compact)
            setattr_(obj, "__pydantic_fields_set__", fields_set)
            setattr_(obj, "__pydantic_extra__", None)
            setattr_(obj, "__pydantic_private__", None)
            return obj

        def with_dict(data: dict[str, Any]) -> M:
            """A record whose fields are ``data``: a copy of another record's ``__dict__``
            with some values changed (a copy keeps the compact layout; the fastest)."""
            obj = new(cls)
            setattr_(obj, "__dict__", data)
            setattr_(obj, "__pydantic_fields_set__", fields_set)
            setattr_(obj, "__pydantic_extra__", None)
            setattr_(obj, "__pydantic_private__", None)
            return obj

        self.values: Callable[[Sequence[Any]], M] = values
        self.with_dict: Callable[[dict[str, Any]], M] = with_dict

    def mapping(self, data: Mapping[str, Any]) -> M:
        """A record from ``{field: value}`` holding every field."""
        return self.values([data[name] for name in self.names])


JOBS = Trusted(JobRecord)
"""Unvalidated JobRecord constructors, for values the squeue and scontrol parsers check."""
NODES = Trusted(NodeRecord)
"""Unvalidated NodeRecord constructors, for values the sinfo and scontrol parsers check."""
