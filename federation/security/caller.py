"""Who a caller is allowed to be: :class:`CallerPolicy` (sites, partitions, GPU and
node-hour limits, commands, functions), :class:`PolicySet` (policies by caller name, from
``$FEDERATION_HOME/policy.yaml``) and where else a caller's policy may be kept
(:class:`PolicySource`: the token store). The gate that enforces them is
:mod:`federation.security.policy`; the token store (:mod:`federation.security.tokens`)
imports only this module, so neither imports the other.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, Protocol

import yaml
from pydantic import Field, ValidationError, field_validator

from federation.core.errors import FederationError
from federation.core.model import Frozen

LOCAL_CALLER = "local"
"""The in-process caller (Python API, CLI): no limits unless ``callers.local`` is set."""

POLICY_FILE = "policy.yaml"
SHELL_SYNTAX = re.compile(r"[;&|<>`\n\r]|\$\(")
"""Characters that chain or redirect commands; refused when an allowlist is in force."""


class PolicyFileError(FederationError, ValueError):
    """A policy file that cannot be read or does not validate; names the file and field."""


class CallerPolicy(Frozen):
    """What one caller may do. ``None`` means no limit; an empty list allows nothing."""

    allowed_sites: tuple[str, ...] | None = None
    allowed_partitions: tuple[str, ...] | None = None
    """``site:partition`` or a bare partition name (any site)."""
    max_gpus_per_task: int | None = Field(default=None, ge=0)
    """GPUs of one task, all nodes together."""
    max_node_hours_per_task: float | None = Field(default=None, ge=0)
    """Nodes x walltime of the granted shape."""
    max_node_hours_per_day: float | None = Field(default=None, ge=0)
    """Shipped node-hours in the last 24 hours, this task included."""
    allowed_commands: tuple[str, ...] | None = None
    """Shell-style patterns (``fnmatch``) a whole command must match; with an allowlist,
    commands with ``; & | < > ` $(`` or newlines are refused."""
    allowed_functions: tuple[str, ...] | None = None
    """Catalog function names (a Python task's function ``__name__``)."""
    on_exceed: Literal["deny", "hold"] = "deny"
    """A GPU or node-hour limit exceeded: refuse at once, or hold for an operator."""
    require_approval: bool = False
    """Hold every task of this caller for an operator."""
    operator: bool = False
    """May list, approve and reject held tasks (HTTP service)."""

    @field_validator("allowed_sites", "allowed_partitions", "allowed_functions")
    @classmethod
    def _names(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is not None:
            for name in v:
                if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,128}", name):
                    raise ValueError(f"{name!r} is not a site, partition or function name")
        return v


class PolicySet(Frozen):
    """Policies by caller name; ``default`` covers callers not listed (``None``: refuse)."""

    callers: dict[str, CallerPolicy] = Field(default_factory=dict)
    default: CallerPolicy | None = Field(default_factory=CallerPolicy)


class PolicySource(Protocol):
    """Somewhere else a caller's policy may be kept (the token store)."""

    def policy_for(self, caller: str) -> CallerPolicy | None: ...


def load_policies(path: Path | str) -> PolicySet:
    """A :class:`PolicySet` from a YAML or JSON file; :class:`PolicyFileError` if invalid."""
    p = Path(path)
    try:
        text = p.read_text()
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise PolicyFileError(f"{p}: cannot read the policy file: {e}") from e
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise PolicyFileError(f"{p}: expected a mapping with `callers:` and `default:`")
    try:
        return PolicySet.model_validate(dict(data))
    except ValidationError as e:
        errs = "; ".join(
            f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}"
            for err in e.errors(include_url=False)
        )
        raise PolicyFileError(f"{p}: invalid policy: {errs}") from e
