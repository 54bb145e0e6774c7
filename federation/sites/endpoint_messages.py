"""Error messages for user_endpoint_configs a site's schema or template refuses.

Each names the variable, the bad value, what the schema allows and what to change.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import jinja2
import jsonschema

from federation.core.spec import SiteSpec

SCHEMA_FILE = "user_config_schema.json"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(str(value))} chars)"


def _constraint(e: jsonschema.ValidationError) -> str:
    v, vv = e.validator, e.validator_value
    if v == "enum" and isinstance(vv, list):
        return "one of " + ", ".join(map(str, vv))
    if v == "const":
        return f"exactly {vv!r}"
    if v in ("minimum", "maximum"):
        return f"{v} {vv}"
    if v == "maxLength":
        return f"at most {vv} characters"
    if v == "pattern":
        return f"matching {vv}"
    if v == "type":
        return f"of type {vv}"
    return f"{v}: {vv}"


def schema_violation(site: SiteSpec, opts: Mapping[str, Any], schema: Mapping[str, Any]) -> str:
    """One line per offending variable; the loader's ``ValidationError`` names only one."""
    props: Mapping[str, Any] = schema.get("properties", {})
    where = f"see {site.config_dir / SCHEMA_FILE}"
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(dict(opts)))
    errors.sort(key=_error_rank)
    lines: dict[str, str] = {}
    for e in errors:
        if e.validator == "additionalProperties":
            for var in sorted(set(opts) - set(props)):
                lines.setdefault(
                    var,
                    (
                        f"unknown variable {var!r}; allowed variables: {', '.join(props)}. "
                        "Remove or rename it"
                    ),
                )
        elif e.absolute_path:
            var = str(e.absolute_path[0])
            lines.setdefault(var, _violation_line(var, e, props.get(var, {})))
        elif e.validator == "required":
            for var in e.validator_value:
                if var not in opts:
                    allowed = props.get(var, {}).get("description", "see the schema")
                    lines.setdefault(
                        var,
                        f"variable {var!r} is required by profile 'task' (the default) and "
                        f"missing; allowed: {allowed}. Add {var} and resubmit",
                    )
        else:
            lines.setdefault("", e.message)
    if not lines:  # pragma: no cover - the loader raised, so some error exists
        lines[""] = "invalid"
    head = f"site {site.name}: user_endpoint_config is not allowed by the site's schema ({where})"
    return head + ":\n" + "\n".join(f"  - {line}." for line in lines.values())


def _error_rank(e: jsonschema.ValidationError) -> int:
    """Per variable, report a wrong type or format first, then the partition's own bound,
    then the site-wide bound (which a partition bound makes redundant)."""
    if e.relative_schema_path and e.relative_schema_path[0] == "properties":
        return 0 if e.validator in ("type", "enum", "pattern", "maxLength") else 2
    return 1


def _violation_line(var: str, e: jsonschema.ValidationError, prop: Mapping[str, Any]) -> str:
    sub = e.schema if isinstance(e.schema, Mapping) else {}
    why = str(sub.get("description") or _constraint(e))
    if e.validator not in ("not", "pattern", "enum"):
        why = f"{why} (schema: {_constraint(e)})"
    allowed = str(prop.get("description", ""))
    also = f"; allowed: {allowed}" if allowed and allowed not in why else ""
    return (
        f"variable {var!r} = {_short(e.instance)} is not allowed: {why}{also}. "
        f"Change {var} (or pick another partition or site) and resubmit"
    )


def missing_variable(site: SiteSpec, schema: Mapping[str, Any], e: jinja2.UndefinedError) -> str:
    m = re.search(r"'(\w+)' is undefined", str(e))
    var = m.group(1) if m else "?"
    allowed = schema.get("properties", {}).get(var, {}).get("description", "")
    return (
        f"site {site.name}: user_endpoint_config lacks variable {var!r} ({e}), which the "
        f"site's template needs for this profile. Allowed: {allowed or 'see the schema'}. "
        f"Add {var} to user_endpoint_config and resubmit."
    )
