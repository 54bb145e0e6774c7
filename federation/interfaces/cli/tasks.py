"""``federation draft | submit | group | move | result | watch``: work from the command line.

``register(app)`` adds the commands to a typer app (``federation.interfaces.cli.main`` calls it);
they live by concept: :mod:`.submit` (draft, submit), :mod:`.groups`, :mod:`.moves`,
:mod:`.results` (result, watch), on :mod:`.follow` (live events, waiting), :mod:`.render`
(tables) and :mod:`.output` (exit codes, options, errors, the service client).

Two ways to run: with ``--service URL`` (or ``$FEDERATION_SERVICE``) and a token (``--token``
or ``$FEDERATION_TOKEN``), commands talk to a running ``federation serve``, whose coordinator
outlives them, so ``result`` and ``watch`` can follow work submitted earlier or elsewhere.
Without a service, ``submit``, ``group`` and ``move`` run their own coordinator in this
process over the local sites and follow their work with ``--wait``; ``result`` and ``watch``
need the service (there is nothing to follow across processes otherwise) and say so.

Exit codes: 0 ok; 1 the task (a child, the transfer) failed, or did not finish within
``--timeout-s``; 2 usage or federation error (bad envelope, no feasible site, unknown site or
id, service unreachable); 3 (``result`` only) still queued or running.
"""

from __future__ import annotations

import typer

from federation.core.envelope import envelope_rows
from federation.interfaces.cli.groups import group
from federation.interfaces.cli.moves import move
from federation.interfaces.cli.output import EXIT_ERROR, EXIT_NOT_DONE, EXIT_OK, EXIT_TASK_FAILED
from federation.interfaces.cli.results import result, watch
from federation.interfaces.cli.submit import draft, submit


def register(app: typer.Typer) -> None:
    """Add ``draft``, ``submit``, ``group``, ``move``, ``result`` and ``watch`` to ``app``."""
    app.command("draft")(draft)
    app.command("submit")(submit)
    app.command("group")(group)
    app.command("move")(move)
    app.command("result")(result)
    app.command("watch")(watch)


__all__ = [
    "EXIT_ERROR",
    "EXIT_NOT_DONE",
    "EXIT_OK",
    "EXIT_TASK_FAILED",
    "draft",
    "envelope_rows",
    "group",
    "move",
    "register",
    "result",
    "submit",
    "watch",
]
