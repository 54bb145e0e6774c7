"""``sshare`` -> fair-share records (association tree with usage, factors and limits).

Two inputs: ``sshare --json`` (data_parser v0.0.40+, Slurm 23.11 and later) and the
parsable text every Slurm prints (``sshare --noheader --parsable2 --format=...``, as the
probe runs it, for every account the site charges). Both give the same :class:`ShareRecord`
rows; :func:`allocation_from_shares` turns them into the
:class:`~federation.core.snapshot.AllocationScope` of one account.

Units: ``RawUsage`` is Slurm's decayed usage in billing-TRES-seconds and ``GrpTRESMins``
limits are TRES-minutes, so both are read as the site's own unit (hours = seconds / 3600,
minutes / 60), which holds when the site's ``TRESBillingWeights`` make one billing unit one
service unit of its charge unit (:mod:`federation.core.charge`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from federation.core.charge import AllocationUnit
from federation.core.errors import ParseError
from federation.core.gcpause import gc_paused
from federation.core.snapshot import AllocationScope
from federation.parsing.common import (
    NAME,
    check_errors,
    clean,
    cut_line,
    field_errors,
    iter_lines,
    json_float,
    json_int,
    json_str,
    load_json,
    snippet,
    whole,
)
from federation.parsing.gres import parse_tres

SSHARE_FIELDS: tuple[str, ...] = (
    "Account",
    "User",
    "RawShares",
    "NormShares",
    "RawUsage",
    "NormUsage",
    "EffectvUsage",
    "FairShare",
    "LevelFS",
    "GrpTRESMins",
)
"""The ``--format`` fields the probe asks ``sshare`` for, in order."""


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """One association in the fair-share tree."""

    name: str
    kind: str
    """``association`` (account) or ``user``."""
    parent: str | None = None
    cluster: str | None = None
    partition: str | None = None
    shares: int | None = None
    shares_normalized: float | None = None
    usage: int | None = None
    usage_normalized: float | None = None
    effective_usage: float | None = None
    fairshare_factor: float | None = None
    fairshare_level: float | None = None
    grp_cpu_minutes: int | None = None
    """The association's ``GrpTRESMins`` cpu limit, when one is set."""
    grp_billing_minutes: int | None = None
    """The association's ``GrpTRESMins`` billing limit (its allocation in billing units),
    when one is set; preferred to the cpu limit."""


def parse_sshare_json(source: str | bytes | Mapping[str, Any]) -> list[ShareRecord]:
    """``sshare --json`` (data_parser v0.0.40+) -> records in the order Slurm prints them."""
    data = load_json(source, "sshare JSON")
    check_errors(data, "sshare JSON")
    block = data.get("shares")
    rows = block.get("shares") if isinstance(block, Mapping) else None
    if not isinstance(rows, list):
        raise ParseError(f"sshare JSON: no shares.shares list (keys: {sorted(data)[:10]})")
    out: list[ShareRecord] = []
    for i, s in enumerate(rows):
        where = f"sshare JSON shares[{i}]"
        if not isinstance(s, Mapping):
            raise ParseError(f"{where}: expected an object")
        with field_errors(where):
            out.append(_json_share(s, where))
    return out


_NUMBERS = ("shares", "shares_normalized", "usage", "usage_normalized", "effective_usage")


def _json_share(s: Mapping[str, Any], where: str) -> ShareRecord:
    name = json_str(s.get("name"), f"{where} name")
    if name is None:
        raise ParseError(f"{where}: no name")
    kinds = s.get("type")
    kind = str(kinds[0] if isinstance(kinds, list) and kinds else kinds or "").lower()
    if kind not in ("user", "association", ""):
        raise ParseError(f"{where} ({name}): type {snippet(str(kinds))} is not USER/ASSOCIATION")
    nulls = [k for k in _NUMBERS if k in s and s[k] is None]
    if nulls:  # Slurm writes a number or {"set": false} there, never null
        raise ParseError(f"{where} ({name}): null where a number belongs: {nulls}")
    fs = s.get("fairshare") if isinstance(s.get("fairshare"), Mapping) else {}
    assert isinstance(fs, Mapping)
    tres = s.get("tres") if isinstance(s.get("tres"), Mapping) else {}
    assert isinstance(tres, Mapping)
    return ShareRecord(
        name=name,
        kind=kind,
        parent=json_str(s.get("parent"), f"{where} parent"),
        cluster=json_str(s.get("cluster"), f"{where} cluster"),
        partition=json_str(s.get("partition"), f"{where} partition"),
        shares=json_int(s.get("shares"), f"{where} shares"),
        shares_normalized=_fraction(s.get("shares_normalized"), f"{where} shares_normalized"),
        usage=json_int(s.get("usage"), f"{where} usage"),
        usage_normalized=_fraction(s.get("usage_normalized"), f"{where} usage_normalized"),
        effective_usage=_fraction(s.get("effective_usage"), f"{where} effective_usage"),
        fairshare_factor=_fraction(fs.get("factor"), f"{where} fairshare.factor"),
        fairshare_level=_level(fs.get("level"), f"{where} fairshare.level"),
        grp_cpu_minutes=_json_tres(tres.get("group_minutes"), "cpu", where),
        grp_billing_minutes=_json_tres(tres.get("group_minutes"), "billing", where),
    )


def _json_tres(entries: Any, name: str, where: str) -> int | None:
    """The ``name`` TRES of a JSON TRES list (None when absent or not set)."""
    if not isinstance(entries, list):
        return None
    for e in entries:
        if isinstance(e, Mapping) and e.get("name") == name:
            return json_int(e.get("value"), f"{where} tres.group_minutes {name}")
    return None


def _fraction(value: Any, what: str) -> float | None:
    """A finite JSON number in [0, 1] (a normalized share, usage or a factor: fractions of
    a whole, so ``1e18`` is damage)."""
    n = json_float(value, what)
    if n is not None and not 0 <= n <= 1:
        raise ParseError(f"{what}: {n} is not a fraction in [0, 1]")
    return n


def _level(value: Any, what: str) -> float | None:
    """LevelFS: a non-negative number, infinite (Slurm's ``inf``) for no usage at all."""
    if isinstance(value, float) and value == math.inf:
        return math.inf
    if isinstance(value, Mapping) and value.get("infinite") is True:
        return math.inf
    return _fraction(value, what)


_MISS = object()


def _memo(
    memo: dict[str, object], value: str, where: str, column: str, infinite: bool = False
) -> float | None:
    """:func:`_float`, once per distinct text (fractions repeat across rows)."""
    hit = memo.get(value, _MISS)
    if hit is _MISS:
        hit = _float(value, f"{where} {column}", infinite=infinite)
        if len(memo) < 100_000:
            memo[value] = hit
    return hit  # type: ignore[return-value]


_DOUBLE = re.compile(r"\d+\.\d{6}")
"""sshare prints every fraction with ``%f``: six decimals (``0.750000``); fewer is a cut."""


def _float(value: str, what: str, *, infinite: bool = False) -> float | None:
    """A fraction column (``NormShares``, ``FairShare``...): six decimals as sshare prints
    them, ``inf`` where ``infinite`` (LevelFS of an association without usage)."""
    v = clean(value)
    if v is None:
        return None
    if infinite and v == "inf":
        return math.inf
    if _DOUBLE.fullmatch(v) is None:
        raise ParseError(f"{what}: expected a number like 0.500000, got {snippet(value)}")
    return float(v)


def _count(value: str, what: str) -> int | None:
    """A whole-number column (``RawUsage``, ``RawShares``); empty is None."""
    v = clean(value)
    return None if v is None else whole(v, what)


def _tres(value: str, name: str, what: str) -> int | None:
    """``cpu=6000,billing=9000,mem=...`` and ``cpu`` -> 6000; None when there is no limit."""
    num = parse_tres(value).get(name)  # the whole list checked: a glued line is no limit
    return None if num is None else whole(num, f"{what} {name}")


def parse_sshare_text(text: str, fields: tuple[str, ...] = SSHARE_FIELDS) -> list[ShareRecord]:
    """``sshare --noheader --parsable2 --format=<fields>`` -> records in Slurm's order.

    An account row has an empty ``User``; a user row's ``Account`` is its parent. The
    leading spaces Slurm indents the tree with are dropped. Strict, like the probe's other
    formats: a :class:`ParseError` names the line of a damaged value (``0.7`` for
    ``0.750000``, ``-25000``), a row listed twice, or a last line without its newline (cut).

    Lazily line by line, and each distinct fraction, account and limit is read once: 50 MB
    of rows parse in a few seconds.
    """
    if not isinstance(text, str):
        raise ParseError(f"sshare: expected text output, got {type(text).__name__}")
    index = {f.lower(): i for i, f in enumerate(fields)}
    for need in ("account", "user"):
        if need not in index:
            raise ParseError(f"sshare: the format has no {need.title()} field ({fields})")
    cut = cut_line(text) or (text.count("\n") + 1 if text and text[-1] != "\n" else None)
    if cut is not None:
        raise ParseError(f"sshare line {cut}: output ends without a newline: cut short")
    out: list[ShareRecord] = []
    with gc_paused():
        _sshare_rows(text, fields, out)
    return out


def _sshare_rows(text: str, fields: tuple[str, ...], out: list[ShareRecord]) -> None:
    """The rows of :func:`parse_sshare_text`, appended to ``out``."""
    index = {f.lower(): i for i, f in enumerate(fields)}
    nfields = len(fields)
    # a field the format lacks reads as "" (the column appended to every row below)
    pick = itemgetter(*(index.get(name.lower(), nfields) for name in SSHARE_FIELDS))
    append = out.append
    seen: dict[tuple[str, str | None], int] = {}
    fractions: dict[str, object] = {}
    levels: dict[str, object] = {}
    accounts: dict[str, str] = {}
    limits: dict[str, tuple[int | None, int | None]] = {}
    new = ShareRecord
    for lineno, line in enumerate(iter_lines(text), 1):
        if not line or line.isspace():
            continue
        cols = line.split("|")
        if len(cols) != nfields:
            raise ParseError(
                f"sshare line {lineno}: {len(cols)} fields, expected {nfields} "
                f"({'|'.join(fields)}): {snippet(line)}"
            )
        cols.append("")
        acct, usr, raw_shares, norm_shares, raw_usage, norm_usage, eff_usage, share, level, grp = (
            pick(cols)
        )
        account = accounts.get(acct)
        if account is None:
            account = _row_name(clean(acct), lineno, line, "no account")
            if len(accounts) < 100_000:
                accounts[acct] = account
        user = clean(usr) if usr else None
        if user is not None:
            _row_name(user, lineno, line, None)
        if not raw_usage or raw_usage.isspace():  # sshare prints every row's usage, 0 too
            raise ParseError(f"sshare line {lineno}: RawUsage is empty")
        if (not raw_shares or raw_shares.isspace()) and (user is not None or account != "root"):
            raise ParseError(
                f"sshare line {lineno}: RawShares is empty (only the root account has none)"
            )
        first = seen.setdefault((account, user), lineno)
        if first != lineno:
            raise ParseError(
                f"sshare line {lineno}: {'user ' + user if user else 'account'} of {account} "
                f"is listed twice (first on line {first}): duplicated output"
            )
        # "parent": the association takes its parent's share (fairshare=parent)
        if raw_shares.isdigit() and len(raw_shares) < 19 and raw_shares.isascii():
            shares: int | None = int(raw_shares)
        elif raw_shares.strip() == "parent":
            shares = None
        else:
            shares = _count(raw_shares, f"sshare line {lineno} RawShares")
        shares_norm = fractions.get(norm_shares, _MISS)
        if shares_norm is _MISS:
            shares_norm = _memo(fractions, norm_shares, f"sshare line {lineno}", "NormShares")
        if raw_usage.isdigit() and len(raw_usage) < 19 and raw_usage.isascii():
            usage: int | None = int(raw_usage)
        else:
            usage = _count(raw_usage, f"sshare line {lineno} RawUsage")
        usage_norm = fractions.get(norm_usage, _MISS)
        if usage_norm is _MISS:
            usage_norm = _memo(fractions, norm_usage, f"sshare line {lineno}", "NormUsage")
        effective = fractions.get(eff_usage, _MISS)
        if effective is _MISS:
            effective = _memo(fractions, eff_usage, f"sshare line {lineno}", "EffectvUsage")
        factor = fractions.get(share, _MISS)
        if factor is _MISS:
            factor = _memo(fractions, share, f"sshare line {lineno}", "FairShare")
        lvl = levels.get(level, _MISS)
        if lvl is _MISS:
            lvl = _memo(levels, level, f"sshare line {lineno}", "LevelFS", infinite=True)
        if not grp:
            cpu_limit = billing_limit = None
        elif (hit := limits.get(grp)) is not None:
            cpu_limit, billing_limit = hit
        else:
            cpu_limit = _tres(grp, "cpu", f"sshare line {lineno} GrpTRESMins")
            billing_limit = _tres(grp, "billing", f"sshare line {lineno} GrpTRESMins")
            if len(limits) < 100_000:
                limits[grp] = (cpu_limit, billing_limit)
        append(
            new(
                user or account,
                "user" if user else "association",
                account if user else None,
                None,
                None,
                shares,
                shares_norm,  # type: ignore[arg-type]
                usage,
                usage_norm,  # type: ignore[arg-type]
                effective,  # type: ignore[arg-type]
                factor,  # type: ignore[arg-type]
                lvl,  # type: ignore[arg-type]
                cpu_limit,
                billing_limit,
            )
        )


def _row_name(name: str | None, lineno: int, line: str, missing: str | None) -> str:
    """An account or user name of row ``lineno``: one token (``missing`` says why none)."""
    if name is None:
        raise ParseError(f"sshare line {lineno}: {missing}: {snippet(line)}")
    if not (name.isalnum() and len(name) <= 256) and NAME.fullmatch(name) is None:
        raise ParseError(f"sshare line {lineno}: {snippet(name)} is not an account or user name")
    return name


def allocation_from_shares(
    records: list[ShareRecord],
    account: str | None = None,
    *,
    unit: AllocationUnit | None = None,
    partitions: tuple[str, ...] = (),
) -> AllocationScope | None:
    """The allocation of ``account`` (default: the first account a user row belongs to).

    ``used_units`` is the account's raw usage (Slurm's decayed billing-TRES-seconds) / 3600,
    or the sum of its user rows when sshare showed no account row; ``limit_units`` its
    ``GrpTRESMins`` billing limit / 60, else its cpu limit / 60 when the account counts
    core-hours (or its unit is not known): a cpu limit on a GPU-hour or node-hour account
    is not its allocation. ``fairshare``: the user's fair-share factor in it. Both amounts
    count ``unit``, the charge unit of ``partitions`` (those charged to this account), given
    by the caller who knows the site. None when the account does not appear at all.
    """
    if account is None:
        account = next((r.parent for r in records if r.kind == "user" and r.parent), None)
        if account is None:
            return None
    key = account.lower()  # Slurm stores account names in lowercase
    assoc = next((r for r in records if r.kind != "user" and r.name.lower() == key), None)
    users = [r for r in records if r.kind == "user" and (r.parent or "").lower() == key]
    if assoc is None and not users:
        return None
    if assoc is not None and assoc.usage is not None:
        usage: float | None = float(assoc.usage)
        source = "sshare"
    else:
        known = [u.usage for u in users if u.usage is not None]
        usage = float(sum(known)) if known else None
        source = "sshare (user rows)"
    limit = None
    if assoc is not None:
        limit = assoc.grp_billing_minutes
        if limit is None and unit in (None, "core-hours"):  # CPU-minutes count core-hours
            limit = assoc.grp_cpu_minutes
    factor = next((u.fairshare_factor for u in users if u.fairshare_factor is not None), None)
    if factor is None and assoc is not None:
        factor = assoc.fairshare_factor
    return AllocationScope(
        account=account,
        unit=unit,
        partitions=partitions,
        used_units=None if usage is None else round(usage / 3600.0, 3),
        limit_units=None if limit is None else round(limit / 60.0, 3),
        fairshare=factor,
        source=source,
    )
