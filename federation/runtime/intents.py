"""After a crash: which unacknowledged submissions reached their site.

:meth:`~federation.runtime.shipping.Shipping.send` keeps each task's (or copy's) intent on
record (``ship_state='submitting'``) until the site's acknowledgement (its Globus Compute
id) is recorded; the coordinator's work task group holds nothing but tasks and copies
(probes run in a group of their own). After a crash, records still ``submitting`` are
those of the batches in flight.
:func:`settle` asks the site for the group and pairs them:

* one ``submitting`` record and one unclaimed task: the site accepted it; it is re-attached
  under that id (it runs, or ran, once);
* no unclaimed task: the site never received it; it is shipped again;
* a record that never reached ``submitting`` was never handed to a site: shipped again;
* anything else (several records of a batch in flight, and tasks no record claims) cannot
  be paired by the group alone, and says so instead of guessing: never shipped again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

logger = logging.getLogger(__name__)

Key = tuple[str, int | None]
"""A task (``(task id, None)``) or one of its copies (``(task id, copy index)``)."""

Verdict = Literal["claim", "resend", "unknown"]


@dataclass
class Settlement:
    """What to do with each unacknowledged record (see the module's note)."""

    verdicts: dict[Key, Verdict] = field(default_factory=dict)
    claimed_ids: dict[Key, str] = field(default_factory=dict)
    generations: dict[Key, int] = field(default_factory=dict)
    """The tag generation a record ``resend`` is shipped under (its earlier one withdrawn)."""
    reason: str = ""
    """Why a record is ``unknown`` (said in its failure)."""

    def verdict(self, key: Key) -> Verdict | None:
        return self.verdicts.get(key)


def claimed_ids(
    tasks: Iterable[Mapping[str, Any]], copies: Iterable[Mapping[str, Any]]
) -> set[str]:
    """Every Globus Compute id some record claims: tasks, their earlier attempts, copies."""
    out: set[str] = set()
    for row in tasks:
        if row.get("compute_task_id"):
            out.add(str(row["compute_task_id"]))
        for attempt in json.loads(row.get("attempts") or "[]"):
            if attempt.get("compute_task_id"):
                out.add(str(attempt["compute_task_id"]))
    out |= {str(c["compute_task_id"]) for c in copies if c.get("compute_task_id")}
    return out


def settle(
    pending: Mapping[Key, str | None],
    claimed: set[str],
    group_ids: list[str] | None,
) -> Settlement:
    """Verdicts for the records in ``pending`` (key -> its ``ship_state``), given the ids
    every record claims and the work group's ids (None: the site could not be asked)."""
    out = Settlement()
    submitting = [k for k, state in pending.items() if state == "submitting"]
    for key, state in pending.items():
        if state != "submitting":
            out.verdicts[key] = "resend"  # never handed to a site
    if not submitting:
        return out
    if group_ids is None:
        out.reason = "the Globus Compute service could not be asked whether the site received it"
        for key in submitting:
            out.verdicts[key] = "unknown"
        return out
    unclaimed = [t for t in dict.fromkeys(group_ids) if t not in claimed]
    if not unclaimed:
        for key in submitting:
            out.verdicts[key] = "resend"
    elif len(submitting) == 1 and len(unclaimed) == 1:
        out.verdicts[submitting[0]] = "claim"
        out.claimed_ids[submitting[0]] = unclaimed[0]
    else:
        out.reason = (
            f"{len(submitting)} submissions were unacknowledged and the site holds "
            f"{len(unclaimed)} tasks no record claims ({', '.join(unclaimed[:5])}), so which "
            "is which cannot be told"
        )
        for key in submitting:
            out.verdicts[key] = "unknown"
    return out
