"""Reading errors that came back from a site: a lost result stream, a remote traceback."""

from __future__ import annotations

import re

from federation.core.failures import classify


def stream_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is the SDK's own result stream dying, not the task failing."""
    return "SDK thread quit unexpectedly" in str(exc)


def remote(exc: BaseException) -> bool:
    """Whether ``exc`` carries a traceback from the worker (the task's own code raised)."""
    return "Traceback (most recent call last)" in str(exc)


_EXC_LINE = re.compile(r"^\s*[A-Za-z_][\w.]*(Error|Exception|Failed|Timeout|Exit|Lost)\w*:")


def first_line(exc: BaseException) -> str:
    """The informative line of an error: a remote traceback's final exception line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for ln in reversed(lines):
        if _EXC_LINE.match(ln):
            return ln
    worded = [ln for ln in lines if any(c.isalnum() for c in ln)]  # not a '+++' banner
    return worded[0] if worded else type(exc).__name__


def ran_own_code(exc: BaseException) -> bool:
    """Whether ``exc`` is the task's own code raising at the site: the task ran (its start
    is announced before its end; a copy that raised it won its race)."""
    return remote(exc) and classify(first_line(exc), str(exc)).cls == "user_error"
