"""Who may see what: each caller their own work; operators everything, audited.

Every task, group, transfer and event has an owner, the caller who created it (recorded on
the event bus when the record is made, and in the store). An operation for a caller may
touch a record only when the caller owns it, or is an operator (``operator: true`` in
their policy; ``local``, the in-process user, always is): then each touch of another
caller's record is written to the audit log as ``operator_access``. Anything else is
answered exactly as an id that does not exist (:func:`not_found`), so nobody learns that
someone else's record exists. A caller's event cursor counts their own events only; an
operator's counts every event (:meth:`Ownership.cursor`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Literal

from federation.interfaces.service.errors import OpsError
from federation.runtime.coordinator import Coordinator
from federation.runtime.events import Event
from federation.security.audit import RecordKind
from federation.security.policy import LOCAL_CALLER


@dataclasses.dataclass(frozen=True)
class Who:
    """The caller an operation acts for, and whether they may see everyone's work."""

    name: str
    operator: bool


def not_found(kind: Literal["task", "group", "transfer"], record_id: str) -> OpsError:
    """The answer for a record that does not exist *or* is someone else's (never say which)."""
    if kind == "group":
        return OpsError(
            404,
            "unknown_group",
            f"no group with id {record_id!r} on this coordinator",
            "use the group_id that submit_group returned",
        )
    if kind == "transfer":
        return OpsError(
            404,
            "unknown_transfer",
            f"no transfer with id {record_id!r} on this coordinator",
            "use the transfer_id that move_data returned",
        )
    return OpsError(
        404,
        "unknown_task",
        f"no task with id {record_id!r} on this coordinator",
        "use the task_id that submit returned",
    )


class Ownership:
    """The ownership rules over one coordinator (its event bus knows every record's owner)."""

    def __init__(self, coord: Coordinator) -> None:
        self.coord = coord

    def who(self, caller: str = "") -> Who:
        """``caller`` (empty: the in-process user) and whether they are an operator."""
        name = caller or LOCAL_CALLER
        return Who(name, self.coord.gate.is_operator(name))

    def visible(
        self, who: Who, kind: RecordKind, record_id: str | None, owner: str | None, action: str
    ) -> bool:
        """Whether ``who`` may ``action`` a record of ``owner``'s; an operator's access to
        another caller's record is audited."""
        if owner is None:
            return False
        if owner == who.name:
            return True
        if not who.operator:
            return False
        self.coord.gate.audit.access(who.name, owner, kind, record_id, action)
        return True

    def unseen(self, who: Who, ids: Iterable[str]) -> list[str]:
        """The ids among ``ids`` that ``who`` cannot see (unknown, or another caller's)."""
        owners = {i: self.coord.events.owner_of(i) for i in ids}
        return sorted(
            i for i, o in owners.items() if o is None or (o != who.name and not who.operator)
        )

    def cursor(self, who: Who) -> int:
        """The caller's event cursor now: their own log's, or the whole log's (operators)."""
        bus = self.coord.events
        return bus.last_seq if who.operator else bus.last_seq_of(who.name)

    def shown(self, who: Who, events: list[Event]) -> list[Event]:
        """Events as ``who`` sees them: an operator's as logged (and audited per other owner),
        anyone else's (only their own, by construction) numbered on their own cursor."""
        if not who.operator:
            return [e.as_seen_by_owner() for e in events]
        for other in sorted({e.owner for e in events} - {who.name}):
            self.visible(who, "events", None, other, "read")
        return events
