"""Templated Globus Compute endpoint configuration per site, generated from ``site.yaml``.

For each site, its folder (:attr:`SiteSpec.config_dir`, beside its ``site.yaml``) holds
what a site admin deploys with ``globus-compute-endpoint configure <name> --core-config
config.yaml --template-config user_config_template.yaml.j2 --schema-config
user_config_schema.json``:

- ``config.yaml``: the parent (templated, no ``engine:``) endpoint config, a
  ``CoreEndpointConfig``;
- ``user_config_template.yaml.j2``: the per-user endpoint config, selected by ``profile``
  (``probe``: LocalProvider on the login node; ``task``: SlurmProvider shaped by the user
  variables);
- ``user_config_schema.json``: bounds every user variable to what the site allows.

Generator approach: the schema and ``config.yaml`` are data, so they are built as Python
dicts and dumped (no JSON/YAML templating to get wrong). The user template is itself a
Jinja template, so instead of rendering a Jinja template with Jinja it is ONE hand-written
body (``federation/templates/endpoint/user_config_template.yaml.j2``) shared by every site,
prefixed with a generated ``{% set _site = ... %}`` header holding the site facts it needs.

Rendering and loading go through the endpoint's own loader
(``globus_compute_endpoint.endpoint.config.utils``), so what is tested here is what the
endpoint runs. ``site.yaml`` stays the one source of truth: a test asserts that the
committed files equal freshly generated ones (``federation sites generate-configs``
regenerates them, ``--check`` only compares).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2
import jsonschema
import yaml

from federation.core.envelope import format_walltime
from federation.core.errors import FederationError, TemplateVariableError
from federation.core.spec import PartitionSpec, SiteSpec
from federation.sites.endpoint_messages import missing_variable, schema_violation

TEMPLATES = Path(__file__).resolve().parents[1] / "templates" / "endpoint"
TEMPLATE_BODY = TEMPLATES / "user_config_template.yaml.j2"

CONFIG_FILE = "config.yaml"
TEMPLATE_FILE = "user_config_template.yaml.j2"
SCHEMA_FILE = "user_config_schema.json"
GENERATED_FILES = (CONFIG_FILE, TEMPLATE_FILE, SCHEMA_FILE)

PROFILES = ("task", "probe")
TASK_VARIABLES = (
    "partition",
    "account",
    "nodes",
    "cpus",
    "mem_gb",
    "gpus",
    "walltime",
    "worker_init",
    "job_tag",
)
WORKER_INIT_MAX_LEN = 512
DEFAULT_WALLTIME_S = 3600

# Python's ``re`` (which jsonschema uses) lets ``$`` match before a trailing newline;
# ``(?!\n)$`` is a true end of string in Python and ECMA-262 regexes alike. ``[0-9]`` rather
# than ``\d``, which in Python also matches non-ASCII digits.
_END = r"(?!\n)$"
ACCOUNT_PATTERN = rf"^[A-Za-z0-9_.-]{{1,64}}{_END}"  # same charset as ResourceEnvelope.account
WALLTIME_PATTERN = rf"^[0-9]{{1,3}}:[0-5][0-9]:[0-5][0-9]{_END}"
# worker_init ends up verbatim in the batch script: allow one simple command (words of
# letters, digits and ``_./=:,+@%~-``), e.g. ``module load cuda/12.4`` or
# ``source ~/venv/bin/activate``; no quotes, ``$``, backticks, ``;&|<>()``, globs, backslash
# or newline. More setup goes into a script the user sources.
WORKER_INIT_PATTERN = rf"^[A-Za-z0-9_./=:,+@%~ -]*{_END}"
# job_tag names the batch jobs ``fed.<job_tag>`` of one shape (``jobtags.shape_tag``): the
# same for every task of the shape, so it adds no config (and no user endpoint process).
JOB_TAG_PATTERN = rf"^[A-Za-z0-9_.-]{{1,40}}{_END}"
JOB_NAME_PREFIX = "fed."


# --------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------


def _alternation(values: Sequence[str]) -> str:
    return "(?:" + "|".join(values) + ")"


def walltime_max_pattern(max_s: int) -> str:
    """A regex accepting exactly the ``H:MM:SS`` walltimes of at most ``max_s`` seconds.

    Applied together with :data:`WALLTIME_PATTERN` (which bounds the digit count); hours may
    carry leading zeros. Values are enumerated, so the regex is obviously right.
    """
    if max_s <= 0:
        raise ValueError(f"max walltime must be > 0 s, got {max_s}")
    hours, rem = divmod(max_s, 3600)
    minutes, seconds = divmod(rem, 60)
    any_ms = "[0-5][0-9]:[0-5][0-9]"
    branches = []
    if hours > 0:
        branches.append(_alternation([str(h) for h in range(hours)]) + ":" + any_ms)
    last_hour = []
    if minutes > 0:
        last_hour.append(_alternation([f"{m:02d}" for m in range(minutes)]) + ":[0-5][0-9]")
    last_hour.append(f"{minutes:02d}:" + _alternation([f"{s:02d}" for s in range(seconds + 1)]))
    branches.append(f"{hours}:" + _alternation(last_hour))
    return "^0*" + _alternation(branches) + _END


def _partition_bounds(site: SiteSpec, p: PartitionSpec) -> dict[str, Any]:
    where = f"on partition {p.name} of {site.name}"
    opts = site.submit_options(p.name)
    gpus: dict[str, Any] = {"maximum": p.gpus_per_node}
    if p.gpus_per_node:
        gpus["description"] = f"at most {p.gpus_per_node} {p.gpu_type} GPUs per node {where}"
    else:
        gpus["description"] = f"0: partition {p.name} of {site.name} has no GPUs"
    return {
        "if": {"properties": {"partition": {"const": p.name}}, "required": ["partition"]},
        "then": {
            "properties": {
                "nodes": {
                    "maximum": p.nodes_real,
                    "description": f"at most {p.nodes_real} nodes {where}",
                },
                "cpus": {
                    "maximum": p.cpus_per_node,
                    "description": f"at most {p.cpus_per_node} CPUs per node {where}",
                },
                "mem_gb": {
                    "maximum": p.mem_gb_per_node,
                    "description": f"at most {p.mem_gb_per_node} GB per node {where}",
                },
                "gpus": gpus,
                "walltime": {
                    "pattern": walltime_max_pattern(p.max_walltime_s),
                    "description": f"at most {format_walltime(p.max_walltime_s)} {where}",
                },
                "account": {"default": opts.account},
            }
        },
    }


def build_schema(site: SiteSpec) -> dict[str, Any]:
    """JSON Schema (draft 2020-12) bounding every user variable to what ``site`` allows."""
    ps = site.partitions
    max_nodes = max(p.nodes_real for p in ps)
    max_cpus = max(p.cpus_per_node for p in ps)
    max_mem = max(p.mem_gb_per_node for p in ps)
    max_gpus = max(p.gpus_per_node for p in ps)
    names = [p.name for p in ps]
    probe_only = {
        v: {"not": {}, "description": "not used by profile 'probe' (it runs on the login node)"}
        for v in TASK_VARIABLES
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"user_endpoint_config for site {site.name} ({site.institution})",
        "description": (
            "Generated by `federation sites generate-configs` from "
            f"the site.yaml of site {site.name}; do not edit."
        ),
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "profile": {
                "enum": list(PROFILES),
                "default": "task",
                "description": "'task' (Slurm job shaped by the other variables, default) "
                "or 'probe' (login-node worker for probe functions)",
            },
            "partition": {
                "type": "string",
                "enum": names,
                "description": "one of: " + ", ".join(names),
            },
            "account": {
                "type": "string",
                "pattern": ACCOUNT_PATTERN,
                "default": site.default_account,
                "description": "Slurm account: 1-64 of A-Z a-z 0-9 _ . -; default: "
                + _account_defaults(site),
            },
            "nodes": {
                "type": "integer",
                "minimum": 1,
                "maximum": max_nodes,
                "default": 1,
                "description": f"1..{max_nodes} nodes (per-partition limits apply)",
            },
            "cpus": {
                "type": "integer",
                "minimum": 1,
                "maximum": max_cpus,
                "default": 1,
                "description": f"1..{max_cpus} CPUs per node (per-partition limits apply)",
            },
            "mem_gb": {
                "type": "integer",
                "minimum": 1,
                "maximum": max_mem,
                "description": f"1..{max_mem} GB per node (per-partition limits apply)",
            },
            "gpus": {
                "type": "integer",
                "minimum": 0,
                "maximum": max_gpus,
                "default": 0,
                "description": f"0..{max_gpus} GPUs per node (per-partition limits apply)",
            },
            "walltime": {
                "type": "string",
                "pattern": WALLTIME_PATTERN,
                "default": _default_walltime(site),
                "description": '"H:MM:SS": hours 0-999, minutes and seconds 00-59, '
                'e.g. "01:30:00" (per-partition maximum applies)',
            },
            "worker_init": {
                "type": "string",
                "maxLength": WORKER_INIT_MAX_LEN,
                "pattern": WORKER_INIT_PATTERN,
                "description": f"one simple shell command of at most {WORKER_INIT_MAX_LEN} "
                "characters from A-Z a-z 0-9 space _ . / = : , + @ % ~ - "
                "(no quotes, $, backticks, ; & | < > ( ), newlines); put "
                "more setup in a script and `source` it",
            },
            "job_tag": {
                "type": "string",
                "pattern": JOB_TAG_PATTERN,
                "description": "optional: names the batch job "
                f"{JOB_NAME_PREFIX}<job_tag> (1-40 of A-Z a-z 0-9 _ . -)",
            },
        },
        "allOf": [
            {  # the task profile (the default) needs a partition; the probe profile none
                "if": {"properties": {"profile": {"const": "probe"}}, "required": ["profile"]},
                "then": {"properties": probe_only},
                "else": {"required": ["partition"]},
            },
            *(_partition_bounds(site, p) for p in ps),
        ],
    }


def _account_defaults(site: SiteSpec) -> str:
    if len(site.accounts) == 1:
        return site.default_account
    return ", ".join(f"{site.account_for(p.name)} on {p.name}" for p in site.partitions)


def _default_walltime(site: SiteSpec) -> str:
    return format_walltime(min([DEFAULT_WALLTIME_S, *(p.max_walltime_s for p in site.partitions)]))


def build_parent_config(site: SiteSpec) -> dict[str, Any]:
    """The parent endpoint config (``CoreEndpointConfig`` keys of globus-compute 4.19)."""
    amqp = {} if site.amqp_port is None else {"amqp_port": site.amqp_port}
    if site.access == "multi-user":
        return {
            "display_name": f"federation-{site.name} ({site.institution}, multi-user)",
            **amqp,
            "public": True,
            "mu_child_ep_grace_period_s": 30.0,
            "pam": {"enable": False, "service_name": "globus-compute-endpoint"},
        }
    return {"display_name": f"federation-{site.name} ({site.institution}, login node)", **amqp}


def _config_header(site: SiteSpec) -> str:
    files = (
        f"--core-config {CONFIG_FILE} --template-config {TEMPLATE_FILE} \\\n"
        f"#     --schema-config {SCHEMA_FILE}"
    )
    lines = [
        f"# Parent (templated) Globus Compute endpoint for {site.name} ({site.institution}).",
        "# Generated by `federation sites generate-configs` from site.yaml; do not edit.",
        "# No `engine:` block: the endpoint renders user_config_template.yaml.j2 per",
        "# user_endpoint_config (validated by user_config_schema.json).",
    ]
    if site.access == "multi-user":
        lines += [
            "# Multi-user: run privileged (root); each Globus identity is mapped to a local",
            "# account. Deploy (4.19 has no `multi_user:` key; the CLI writes",
            "# identity_mapping_config_path, email and public into the deployed config):",
            f"#   globus-compute-endpoint configure federation-{site.name} --multi-user true \\",
            "#     --contact-email ADMIN@SITE --id-mapping-config identity_mapping_config.json \\",
            "#     --user-env-config user_environment.yaml \\",
            f"#     {files}",
            "# The privileged endpoint clears its environment before rendering: put",
            "# FEDERATION_WORKER_INIT etc. into user_environment.yaml. Enable `pam` where",
            "# python-pam and /etc/pam.d/globus-compute-endpoint are installed.",
        ]
    else:
        lines += [
            "# Login node: run by the user under their own account. Deploy:",
            f"#   globus-compute-endpoint configure federation-{site.name} \\",
            f"#     {files}",
            "# Site settings come from the endpoint's environment: FEDERATION_WORKER_INIT,",
            "# FEDERATION_ENGINE_ADDRESS, FEDERATION_STRATEGY_PERIOD_S, FEDERATION_MAX_IDLETIME_S,",
            "# FEDERATION_MAX_BLOCKS, FEDERATION_POLL_PERIOD_MS, FEDERATION_HEARTBEAT_PERIOD_S,",
            "# FEDERATION_HEARTBEAT_THRESHOLD_S.",
        ]
    if site.engine_ifname:
        lines.append(
            f"# Workers reach the engine on interface {site.engine_ifname} unless "
            "FEDERATION_ENGINE_ADDRESS is set."
        )
    else:
        lines.append(
            "# No published worker interface for this site: set FEDERATION_ENGINE_ADDRESS to "
            "the login node's internal address (`ip addr`; the NIC where `ping -I <if> "
            "google.com` fails)."
        )
    return "\n".join(lines) + "\n"


def _submit_facts(
    account: str,
    qos: str | None,
    constraint: str | None,
    gpu_request: str,
    mem_request: str,
    scheduler_options: Sequence[str],
) -> dict[str, Any]:
    """What the template needs to submit a job: account, qos, constraint, how GPUs and
    memory are asked for, and the extra ``#SBATCH`` lines ("" for unset: Jinja has no
    ``null``)."""
    return {
        "account": account,
        "qos": qos or "",
        "constraint": constraint or "",
        "gpu_request": gpu_request,
        "mem_request": mem_request,
        "scheduler_lines": [f"#SBATCH {o}" for o in scheduler_options],
    }


DEFAULT_MAX_BLOCKS = 32
"""Blocks (batch jobs) one shape may hold at once where the site publishes no per-user
limit."""


def max_blocks(p: PartitionSpec | None) -> int:
    """How many blocks one shape's engine may grow to on partition ``p``: its outstanding
    tasks, up to the jobs one user may run there (more would only wait in the queue and
    count against the submit limit), else :data:`DEFAULT_MAX_BLOCKS`."""
    if p is None:
        return DEFAULT_MAX_BLOCKS
    limit = p.max_running_jobs_per_user or p.max_submitted_jobs_per_user
    return limit if limit is not None else DEFAULT_MAX_BLOCKS


def _partition_facts(site: SiteSpec, p: PartitionSpec) -> dict[str, Any]:
    o = site.submit_options(p.name)
    facts = _submit_facts(
        o.account, o.qos, o.constraint, o.gpu_request, o.mem_request, o.scheduler_options
    )
    return {**facts, "partition": o.partition or "", "max_blocks": max_blocks(p)}


def _template_header(site: SiteSpec) -> str:
    facts = {
        "name": site.name,
        "default_walltime": _default_walltime(site),
        "engine_ifname": site.engine_ifname or "",
        "slurm_cmd_timeout_s": site.slurm_cmd_timeout_s,
        "job_name_prefix": JOB_NAME_PREFIX,
        "site_defaults": _submit_facts(
            site.default_account,
            site.qos,
            site.constraint,
            site.gpu_request,
            site.mem_request,
            site.scheduler_options,
        )
        | {"max_blocks": max_blocks(None)},
        "partitions": {p.name: _partition_facts(site, p) for p in site.partitions},
    }
    return (
        f"{{#- Generated by `federation sites generate-configs` from the site.yaml of site "
        f"{site.name}\n"
        "    and federation/templates/endpoint/user_config_template.yaml.j2; do not edit. #}\n"
        f"{{%- set _site = {json.dumps(facts, indent=2)} %}}\n"
    )


def generate_site_files(site: SiteSpec) -> dict[str, str]:
    """File name -> content of the three generated files for ``site``."""
    for account in site.accounts:
        if not re.search(ACCOUNT_PATTERN, account):
            raise FederationError(
                f"site {site.name}: account {account!r} does not match the user schema's "
                f"account pattern {ACCOUNT_PATTERN}; fix site.yaml"
            )
    schema = build_schema(site)
    jsonschema.Draft202012Validator.check_schema(schema)
    config = _config_header(site) + yaml.safe_dump(build_parent_config(site), sort_keys=False)
    return {
        CONFIG_FILE: config,
        TEMPLATE_FILE: _template_header(site) + TEMPLATE_BODY.read_text(),
        SCHEMA_FILE: json.dumps(schema, indent=2) + "\n",
    }


def write_site_configs(site: SiteSpec, out_dir: Path | None = None) -> list[Path]:
    """Write ``site``'s generated files to ``out_dir`` (default: its config dir)."""
    out = out_dir or site.config_dir
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, content in generate_site_files(site).items():
        path = out / name
        path.write_text(content)
        paths.append(path)
    return paths


def stale_files(site: SiteSpec, config_dir: Path | None = None) -> list[Path]:
    """Generated files of ``site`` whose committed content differs from a fresh generation."""
    d = config_dir or site.config_dir
    return [
        d / name
        for name, content in generate_site_files(site).items()
        if not (d / name).is_file() or (d / name).read_text() != content
    ]


# --------------------------------------------------------------------------------------
# Rendering and loading through the endpoint's own loader
# --------------------------------------------------------------------------------------


def load_parent_config(site: SiteSpec, config_dir: Path | None = None) -> Any:
    """The site's parent ``CoreEndpointConfig``, loaded by the endpoint's ``get_config``."""
    from globus_compute_endpoint.endpoint.config import CoreEndpointConfig
    from globus_compute_endpoint.endpoint.config.utils import get_config

    config = get_config(config_dir or site.config_dir)
    if not isinstance(config, CoreEndpointConfig):
        if getattr(config, "engine", None) is not None:
            config.engine.shutdown()
        raise FederationError(
            f"site {site.name}: {CONFIG_FILE} is not a templated endpoint config (it has an "
            "`engine:` block); regenerate it with federation sites generate-configs"
        )
    return config


def offline_mapped_identity() -> Any:
    """The identity the endpoint's ``render-user-config`` command renders with offline."""
    from globus_compute_endpoint.endpoint.identity_mapper import MappedPosixIdentity

    return MappedPosixIdentity(
        local_user_record=pwd.getpwuid(os.getuid()),
        matched_identity=uuid.UUID(int=0),
        globus_identity_candidates=[],
    )


def render_user_config(
    site: SiteSpec,
    user_opts: Mapping[str, Any],
    user_runtime: Mapping[str, Any] | None = None,
    *,
    config_dir: Path | None = None,
) -> str:
    """Render ``site``'s user endpoint config (YAML) for ``user_opts`` as the endpoint does.

    Raises :class:`TemplateVariableError` naming the variable, the bad value and what the
    schema allows when ``user_opts`` violates the site's schema or lacks a variable.
    """
    from globus_compute_endpoint.endpoint.config.utils import (
        load_user_config_schema,
        load_user_config_template,
        render_config_user_template,
    )
    from globus_compute_endpoint.endpoint.endpoint import Endpoint

    d = config_dir or site.config_dir
    parent = load_parent_config(site, d)
    template_path = Endpoint.user_config_template_path(d, parent)
    schema = load_user_config_schema(Endpoint.user_config_schema_path(d, parent))
    opts = dict(user_opts)
    try:
        rendered: str = render_config_user_template(
            parent_config=parent,
            user_config_template=load_user_config_template(template_path),
            user_config_template_path=template_path,
            mapped_identity=offline_mapped_identity(),
            user_config_schema=schema,
            user_opts=opts,
            user_runtime=dict(user_runtime or {}),
        )
    except jsonschema.ValidationError as e:
        raise TemplateVariableError(schema_violation(site, opts, schema or {})) from e
    except jinja2.UndefinedError as e:
        raise TemplateVariableError(missing_variable(site, schema or {}, e)) from e
    except ValueError as e:  # reserved words (_GC, parent_config, ...) in user_opts
        if "reserved word" not in str(e):
            raise
        raise TemplateVariableError(
            f"site {site.name}: {e}; remove it from user_endpoint_config"
        ) from e
    return rendered


def load_user_config(
    site: SiteSpec,
    user_opts: Mapping[str, Any],
    user_runtime: Mapping[str, Any] | None = None,
    *,
    config_dir: Path | None = None,
) -> Any:
    """Render and load ``site``'s ``UserEndpointConfig`` with the endpoint's loader.

    The loader builds (but does not start) the engine: call ``config.engine.shutdown()``
    when done with the returned config.
    """
    from globus_compute_endpoint.endpoint.config import UserEndpointConfig
    from globus_compute_endpoint.endpoint.config.utils import load_config_yaml

    config = load_config_yaml(
        render_user_config(site, user_opts, user_runtime, config_dir=config_dir)
    )
    if not isinstance(config, UserEndpointConfig) or config.engine is None:
        raise FederationError(
            f"site {site.name}: {TEMPLATE_FILE} rendered no engine; regenerate it"
        )
    return config
