"""Node and job states -> the names in :mod:`federation.core.snapshot`, through one table each.

Node states arrive as ``sinfo`` long or short names with suffixes (``drained*``, ``mixed-``,
``draining@``, ``allocated+``), as ``+``-joined flag lists (``IDLE+DRAIN``,
``down+not_responding``), as JSON arrays (``["IDLE", "DRAIN"]``) or as a base state plus a
separate ``state_flags`` list (21.08 JSON). The rules that combine a base state with flags
follow Slurm's own ``node_state_string()``: DRAIN makes an idle node *drained* and a busy one
*draining*, FAIL does the same with *down*, MAINT/RESERVED/PLANNED only rename idle nodes.
Anything not in the table maps to ``unknown`` (with the raw text kept as a flag), never an
exception.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from federation.core.snapshot import JobStateName, NodeStateName

# --- node states ------------------------------------------------------------------------

# token (lower case) -> (base state or None, flag or None). Base states are the first token
# of a state; flags are every later token (or the suffix characters below).
NODE_STATE_TABLE: Final[dict[str, tuple[str | None, str | None]]] = {
    # long names, as StateLong/StateComplete and JSON print them
    "idle": ("idle", None),
    "mixed": ("mixed", None),
    "allocated": ("allocated", None),
    "completing": ("completing", "completing"),
    "down": ("down", None),
    "drained": ("drained", "drain"),
    "draining": ("draining", "drain"),
    "drain": ("drained", "drain"),
    "fail": ("fail", "fail"),
    "failing": ("failing", "fail"),
    "maint": ("maint", "maint"),
    "maintenance": ("maint", "maint"),
    "reserved": ("reserved", "reserved"),
    "planned": ("planned", "planned"),
    "future": ("future", "future"),
    "inval": ("inval", "invalid_reg"),
    "invalid": ("inval", "invalid_reg"),
    "invalid_reg": ("inval", "invalid_reg"),
    "unknown": ("unknown", None),
    "error": ("error", None),
    "reboot": ("reboot", "reboot_requested"),
    "reboot_requested": ("reboot", "reboot_requested"),
    "reboot_issued": ("reboot", "reboot_issued"),
    "powered_down": ("powered_down", "powered_down"),
    "power_down": ("powered_down", "power_down"),
    "powering_down": ("powered_down", "powering_down"),
    "powering_up": ("powering_up", "powering_up"),
    "power_up": ("powering_up", "powering_up"),
    "perfctrs": ("allocated", "perfctrs"),
    "blocked": ("reserved", "blocked"),
    "cloud": ("idle", "cloud"),
    # short names (sinfo %t)
    "alloc": ("allocated", None),
    "mix": ("mixed", None),
    "comp": ("completing", "completing"),
    "drng": ("draining", "drain"),
    "failg": ("failing", "fail"),
    "futr": ("future", "future"),
    "resv": ("reserved", "reserved"),
    "plnd": ("planned", "planned"),
    "unk": ("unknown", None),
    "boot": ("reboot", "reboot_issued"),
    "npc": ("allocated", "perfctrs"),
    "pow_dn": ("powered_down", "power_down"),
    "pow_up": ("powering_up", "powering_up"),
    # flags only
    "not_responding": (None, "not_responding"),
    "no_respond": (None, "not_responding"),
    "dynamic_norm": (None, "dynamic_norm"),
    "dynamic_future": (None, "dynamic_future"),
    "res": (None, "reserved"),
    "resume": (None, "resume"),
    "undrain": (None, "undrain"),
    "external": (None, "external"),
    "rebooting": (None, "reboot_issued"),
}

# sinfo suffix characters (after the state name) -> flag
NODE_SUFFIX_FLAGS: Final[dict[str, str]] = {
    "*": "not_responding",
    "~": "powered_down",
    "#": "powering_up",
    "!": "power_down",
    "%": "powering_down",
    "$": "maint",
    "@": "reboot_requested",
    "^": "reboot_issued",
    "-": "planned",
    "+": "completing",
}

# base (after the table) -> name, when no flag changes it
_NODE_BASE_NAME: Final[dict[str, NodeStateName]] = {
    "idle": "idle",
    "mixed": "mixed",
    "allocated": "allocated",
    "completing": "completing",
    "down": "down",
    "drained": "drained",
    "draining": "draining",
    "fail": "down",
    "failing": "draining",
    "maint": "maint",
    "reserved": "reserved",
    "planned": "planned",
    "future": "down",
    "inval": "down",
    "error": "down",
    "reboot": "down",
    "powered_down": "down",
    "powering_up": "down",
    "unknown": "unknown",
}
_BUSY = frozenset({"allocated", "mixed", "completing"})
_NODE_CACHE: dict[str, tuple[NodeStateName, tuple[str, ...]]] = {}


def _tokens(value: str) -> tuple[list[str], list[str]]:
    """Split ``drained*+maint`` style text into state tokens and suffix flags."""
    text = value.strip().lower()
    suffix_flags: list[str] = []
    while text and text[-1] in NODE_SUFFIX_FLAGS:
        suffix_flags.append(NODE_SUFFIX_FLAGS[text[-1]])
        text = text[:-1]
    tokens: list[str] = []
    for tok in text.split("+"):
        tok = tok.strip()
        while tok and tok[-1] in NODE_SUFFIX_FLAGS:
            suffix_flags.append(NODE_SUFFIX_FLAGS[tok[-1]])
            tok = tok[:-1]
        if tok:
            tokens.append(tok)
    return tokens, suffix_flags


def _resolve(base: str | None, flags: list[str]) -> NodeStateName:
    fl = set(flags)
    if base is None:
        if "drain" in fl:
            base = "drained"
        else:
            return "unknown"
    if base == "inval" or "invalid_reg" in fl:
        return "down"
    busy = base in _BUSY or ("completing" in fl and base not in ("drained", "down"))
    if base in ("drained", "draining") or "drain" in fl:
        if base == "draining" or (busy and base != "drained"):
            return "draining"
        return "drained"
    if base in ("fail", "failing") or "fail" in fl:
        return "draining" if (busy or base == "failing") else "down"
    if base == "idle":
        if "maint" in fl:
            return "maint"
        if "reboot_issued" in fl or "reboot_requested" in fl:
            return "down"
        if "reserved" in fl or "blocked" in fl:
            return "reserved"
        if "planned" in fl:
            return "planned"
        if "completing" in fl:
            return "completing"
    return _NODE_BASE_NAME.get(base, "unknown")


def parse_node_state(
    value: str | Sequence[str] | None, extra_flags: Iterable[str] = ()
) -> tuple[NodeStateName, tuple[str, ...]]:
    """A node state (text, JSON array, or base + ``extra_flags``) -> (name, flags).

    Flags are Slurm's (``drain``, ``not_responding``, ``planned``...), lower case, in order
    of appearance; an unrecognised token is kept as a flag and, if it was the base state,
    the name is ``unknown``.
    """
    extra = tuple(extra_flags)
    if isinstance(value, str) and not extra:
        hit = _NODE_CACHE.get(value)
        if hit is not None:
            return hit
    if value is None:
        parts: list[str] = []
    elif isinstance(value, str):
        parts = [value]
    else:
        parts = [str(v) for v in value]
    tokens: list[str] = []
    flags: list[str] = []
    for p in [*parts, *extra]:
        toks, suffix = _tokens(p)
        tokens.extend(toks)
        flags.extend(suffix)
    base: str | None = None
    for i, tok in enumerate(tokens):
        entry = NODE_STATE_TABLE.get(tok)
        if entry is None:
            flags.append(tok)  # unknown: keep the raw text visible
            if i == 0:
                base = "unknown"
            continue
        tbase, tflag = entry
        if i == 0:
            base = tbase
            if tflag is not None and tflag != tbase:
                flags.append(tflag)
        else:
            flags.append(tflag or tok)
    name = _resolve(base, flags)
    result = (name, tuple(dict.fromkeys(flags)))
    if isinstance(value, str) and not extra and len(_NODE_CACHE) < 4096:
        _NODE_CACHE[value] = result
    return result


# --- job states -------------------------------------------------------------------------

JOB_STATE_TABLE: Final[dict[str, JobStateName]] = {
    "pending": "pending",
    "pd": "pending",
    "running": "running",
    "r": "running",
    "suspended": "suspended",
    "s": "suspended",
    "stopped": "suspended",
    "st": "suspended",
    "completing": "completing",
    "cg": "completing",
    "stage_out": "completing",
    "so": "completing",
    "completed": "completed",
    "cd": "completed",
    "cancelled": "cancelled",
    "ca": "cancelled",
    "revoked": "cancelled",
    "rv": "cancelled",
    "failed": "failed",
    "f": "failed",
    "special_exit": "failed",
    "se": "failed",
    "launch_failed": "failed",
    "timeout": "timeout",
    "to": "timeout",
    "node_fail": "node_fail",
    "nf": "node_fail",
    "preempted": "preempted",
    "pr": "preempted",
    "out_of_memory": "out_of_memory",
    "oom": "out_of_memory",
    "boot_fail": "boot_fail",
    "bf": "boot_fail",
    "deadline": "deadline",
    "dl": "deadline",
    "requeued": "requeued",
    "rq": "requeued",
    "requeue": "requeued",
    "requeue_fed": "requeued",
    "rf": "requeued",
    "requeue_hold": "held",
    "rh": "held",
    "resv_del_hold": "held",
    "rd": "held",
    "configuring": "configuring",
    "cf": "configuring",
    "resizing": "resizing",
    "rs": "resizing",
    "signaling": "running",
    "si": "running",
}
"""Every job state spelling (long, compact, JSON) -> snapshot name."""

# JSON flag tokens that override the base state, in priority order
_JOB_FLAG_PRIORITY: Final[tuple[str, ...]] = (
    "requeue_hold",
    "resv_del_hold",
    "completing",
    "stage_out",
    "configuring",
    "resizing",
    "requeued",
    "requeue_fed",
    "signaling",
    "stopped",
    "special_exit",
    "revoked",
)
HELD_REASONS: Final[frozenset[str]] = frozenset({"jobheldadmin", "jobhelduser"})


def parse_job_state(value: str | Sequence[str] | None, reason: str | None = None) -> JobStateName:
    """A job state (``PENDING``, ``PD``, ``CANCELLED by 123``, ``["RUNNING","COMPLETING"]``).

    A pending job whose reason is ``JobHeldUser``/``JobHeldAdmin`` is ``held``: it is not
    competing for resources. Unknown spellings give ``unknown``.
    """
    if value is None:
        return "unknown"
    if isinstance(value, str):
        token = value.strip().lower()
        if " " in token:  # sacct: "CANCELLED by 12345"
            token = token.split(" ", 1)[0]
        token = token.rstrip("+")
        state = JOB_STATE_TABLE.get(token, "unknown")
    else:
        toks = [str(v).strip().lower() for v in value]
        state = JOB_STATE_TABLE.get(toks[0], "unknown") if toks else "unknown"
        for flag in _JOB_FLAG_PRIORITY:
            if flag in toks[1:]:
                state = JOB_STATE_TABLE[flag]
                break
    if state == "pending" and reason and reason.strip().lower() in HELD_REASONS:
        return "held"
    return state
