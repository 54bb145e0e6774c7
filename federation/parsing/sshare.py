"""``sshare --json`` -> fair-share records (association tree with usage and factors)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from federation.errors import ParseError
from federation.parsing.common import json_int, json_number, json_str, load_json


@dataclass(frozen=True)
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


def parse_sshare_json(source: str | bytes | Mapping[str, Any]) -> list[ShareRecord]:
    """``sshare --json`` (data_parser v0.0.40+) -> records in the order Slurm prints them."""
    data = load_json(source, "sshare JSON")
    block = data.get("shares")
    rows = block.get("shares") if isinstance(block, Mapping) else None
    if not isinstance(rows, list):
        raise ParseError(f"sshare JSON: no shares.shares list (keys: {sorted(data)[:10]})")
    out: list[ShareRecord] = []
    for i, s in enumerate(rows):
        if not isinstance(s, Mapping):
            raise ParseError(f"sshare JSON shares[{i}]: expected an object")
        name = json_str(s.get("name"))
        if name is None:
            raise ParseError(f"sshare JSON shares[{i}]: no name")
        kinds = s.get("type")
        kind = (kinds[0] if isinstance(kinds, list) and kinds else str(kinds or "")).lower()
        fs = s.get("fairshare") if isinstance(s.get("fairshare"), Mapping) else {}
        assert isinstance(fs, Mapping)
        out.append(
            ShareRecord(
                name=name,
                kind=kind,
                parent=json_str(s.get("parent")),
                cluster=json_str(s.get("cluster")),
                partition=json_str(s.get("partition")),
                shares=json_int(s.get("shares")),
                shares_normalized=json_number(s.get("shares_normalized")),
                usage=json_int(s.get("usage")),
                usage_normalized=json_number(s.get("usage_normalized")),
                effective_usage=json_number(s.get("effective_usage")),
                fairshare_factor=json_number(fs.get("factor")),
                fairshare_level=json_number(fs.get("level")),
            )
        )
    return out
