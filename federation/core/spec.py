"""Static site facts, loaded from a site folder's ``site.yaml``.

A site is a folder: ``site.yaml`` (these models) beside the endpoint files generated from
it. A deployment names its site folders in ``federation.yaml`` (``sites_dir:``, or a
``path:`` per site: :mod:`federation.core.site_folders`); the example sites of the embedded
local federation ship inside the package, in ``federation/sites_data/`` (:data:`PACKAGE_SITES`).

One source of truth: the local Slurm cluster, each endpoint template (its schema bounds and
how it asks Slurm for accounts, GPUs and memory) and the placement feasibility checks all
derive from these models. What each field says about a real site is cited in
``federation/sites_data/README.md``.

A site describes what its users can ask for as *node classes* (:class:`NodeClass`): each
has a name (placement's handle), an optional Slurm ``partition``, an optional ``constraint``
(a feature expression), an optional ``qos``, its account, limits and charge, and the
hardware its nodes have. ``partitions:`` entries in ``site.yaml`` are classes whose
partition is their name (as before); ``classes:`` entries name their partition, if any,
themselves (Perlmutter: none, nodes chosen by ``-C gpu``). Both end up in
:attr:`SiteSpec.partitions` (the name is kept for compatibility; :attr:`SiteSpec.classes`
is the same tuple).

Submission settings may be given per site and overridden per class (``account``, ``qos``,
``gpu_request``, ``mem_request``; a class's ``constraint`` is combined with the site's by
``&``; ``scheduler_options`` add up): :meth:`SiteSpec.submit_options` resolves them.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, PrivateAttr, model_validator

from federation.core.errors import UnknownSiteError
from federation.core.model import Frozen

PACKAGE_SITES = Path(__file__).resolve().parents[1] / "sites_data"
"""The example sites shipped as package data (the embedded local federation's)."""
SITE_FILE = "site.yaml"

ChargeUnit = Literal["core-hours", "gpu-hours", "node-hours"]
GpuRequest = Literal["gpus-per-node", "implied-by-partition"]
"""``gpus-per-node``: ``#SBATCH --gpus-per-node=N`` (never typed ``--gres``);
``implied-by-partition``: the partition brings its GPUs, no GPU option at all (Vista)."""
MemRequest = Literal["allowed", "refused"]
"""``refused``: the site's scheduler rejects ``--mem`` (Vista), so it is never sent."""
AmqpPort = Literal[443, 5671, 5672]
"""The ports Globus Compute supports for AMQP (``BaseConfig.amqp_port``)."""

ACCOUNT_RE = r"^[A-Za-z0-9_.-]{1,64}$"
# Features joined by & (and) or | (or): no brackets, counts or quotes, so the local cluster
# can give its nodes every feature a constraint names.
CONSTRAINT_RE = r"^[A-Za-z0-9_.-]+(?:[&|][A-Za-z0-9_.-]+)*$"
# One sbatch option per entry, e.g. "--gpu-bind=closest"; the template prefixes "#SBATCH ".
SCHEDULER_OPTION_RE = r"^--[a-z][a-z0-9-]*(?:=[A-Za-z0-9_.,:&|=+-]+)?$"


class NodeClass(Frozen):
    """What a site's users can ask for: nodes chosen by partition and/or constraint, under
    a QOS, charged to an account, with their limits, charge and hardware.

    ``partition`` defaults to ``name`` (a ``partitions:`` entry is a class whose partition
    is its name); ``None`` sends no ``--partition`` (the site's default partition, nodes
    chosen by ``constraint``). Placement matches a class to live nodes by partition and
    features (:mod:`federation.placement.classes`), never by its name.

    The per-user job limits are counts of batch jobs (an array task counts as one job) that
    one user may hold in this class at once, as the site's queue table gives them; the
    local cluster enforces them with a partition QOS (``federation.localslurm``).
    """

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    partition: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9_.-]+$", description="Slurm partition (None: none)"
    )
    nodes_real: int = Field(gt=0, description="node count of the production partition")
    nodes_local: int = Field(gt=0, le=8, description="emulated nodes in the local cluster")
    cpus_per_node: int = Field(gt=0)
    mem_gb_per_node: int = Field(gt=0)
    gpus_per_node: int = Field(default=0, ge=0)
    gpu_type: str | None = Field(default=None, pattern=r"^[a-z0-9]+$")
    gpu_mem_gb: int | None = Field(default=None, gt=0)
    max_walltime_s: int = Field(gt=0)
    features: tuple[str, ...] = ()
    account: str | None = Field(
        default=None, pattern=ACCOUNT_RE, description="charged here instead of the site's"
    )
    account_suffix: str = Field(
        default="",
        pattern=r"^[A-Za-z0-9_.-]{0,16}$",
        description="appended to the account (Perlmutter GPU jobs: `_g`)",
    )
    max_nodes_per_job: int | None = Field(
        default=None, gt=0, description="nodes one job may have (None: nodes_real)"
    )
    whole_nodes: bool = Field(
        default=False,
        description="jobs get (and are charged for) whole nodes; default: when charged in "
        "node-hours",
    )
    qos: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    constraint: str | None = Field(default=None, pattern=CONSTRAINT_RE)
    gpu_request: GpuRequest | None = None
    mem_request: MemRequest | None = None
    scheduler_options: tuple[str, ...] = Field(
        default=(), description="sbatch options added after the site's, e.g. --gpu-bind=closest"
    )
    charge_unit: ChargeUnit = Field(
        default="core-hours", description="what the site bills jobs here by"
    )
    charge_su_per_unit: float = Field(
        default=1.0, gt=0, description="service units per charge unit (Vista gg: 0.33)"
    )
    min_charge_hours: float = Field(
        default=0.0, ge=0, description="least hours billed per job (Vista: 0.25)"
    )
    max_running_jobs_per_user: int | None = Field(
        default=None,
        gt=0,
        description="jobs one user may have running here at once; more wait in the queue "
        "(Slurm QOS MaxJobsPerUser; Vista gh: 20); None: the site publishes no limit",
    )
    max_submitted_jobs_per_user: int | None = Field(
        default=None,
        gt=0,
        description="jobs one user may have here at once, running and pending together; "
        "sbatch refuses one more (Slurm QOS MaxSubmitJobsPerUser; Vista gh: 40); None: no "
        "published limit",
    )

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "partition" not in data:
            data["partition"] = data.get("name")
        if "charge_unit" not in data and data.get("gpus_per_node"):
            data["charge_unit"] = "gpu-hours"
        if data.get("whole_nodes") is None:
            data["whole_nodes"] = data.get("charge_unit") == "node-hours"
        return data

    @model_validator(mode="after")
    def _gpu_fields_agree(self) -> NodeClass:
        if (self.gpus_per_node > 0) != (self.gpu_type is not None):
            raise ValueError(f"partition {self.name}: gpus_per_node and gpu_type go together")
        if self.charge_unit == "gpu-hours" and not self.gpus_per_node:
            raise ValueError(f"partition {self.name}: gpu-hours charged but it has no GPUs")
        running, submitted = self.max_running_jobs_per_user, self.max_submitted_jobs_per_user
        if running is not None and submitted is not None and running > submitted:
            raise ValueError(
                f"partition {self.name}: max_running_jobs_per_user ({running}) exceeds "
                f"max_submitted_jobs_per_user ({submitted}), which counts running jobs too"
            )
        for opt in self.scheduler_options:
            if not re.match(SCHEDULER_OPTION_RE, opt):
                raise ValueError(
                    f"partition {self.name}: scheduler option {opt!r} is not one "
                    "`--name[=value]` sbatch option"
                )
        return self

    def charge(
        self, nodes: int, cpus: int, gpus: int, hours: float, mem_gb: float | None = None
    ) -> float:
        """Service units a job of this shape costs, in the site's own unit and rate.

        ``cpus``, ``gpus`` and ``mem_gb`` are per node. ``core-hours``: the larger of the
        CPUs and the memory's share of the node in cores (Delta and Anvil bill ~2 GB per
        core). ``gpu-hours``: the larger of the GPUs and the GPU shares the CPUs or memory
        fill (one share = the node's CPUs and memory / its GPUs: Delta 16 cores, DeltaAI one
        72-core superchip), at most the node. ``node-hours``: whole nodes (Vista). Hours
        below ``min_charge_hours`` are billed as that minimum.
        """
        if nodes < 1 or cpus < 0 or gpus < 0 or hours < 0 or (mem_gb or 0) < 0:
            raise ValueError(f"no such job: {nodes=} {cpus=} {gpus=} {hours=} {mem_gb=}")
        billed_h = max(hours, self.min_charge_hours)
        mem = mem_gb or 0.0
        per_node: float
        if self.whole_nodes:
            per_node = {
                "node-hours": 1.0,
                "gpu-hours": float(self.gpus_per_node),
                "core-hours": float(self.cpus_per_node),
            }[self.charge_unit]
        elif self.charge_unit == "node-hours":
            parts = [cpus / self.cpus_per_node, mem / self.mem_gb_per_node]
            if self.gpus_per_node:
                parts.append(gpus / self.gpus_per_node)
            per_node = min(1.0, max(parts))
        elif self.charge_unit == "gpu-hours":
            share_cpus = self.cpus_per_node / self.gpus_per_node
            share_mem = self.mem_gb_per_node / self.gpus_per_node
            shares = max(gpus, math.ceil(cpus / share_cpus), math.ceil(mem / share_mem), 1)
            per_node = min(shares, self.gpus_per_node)
        else:
            mem_per_core = self.mem_gb_per_node / self.cpus_per_node
            per_node = min(max(cpus, math.ceil(mem / mem_per_core), 1), self.cpus_per_node)
        return nodes * per_node * billed_h * self.charge_su_per_unit

    @property
    def max_nodes(self) -> int:
        """Nodes one job of this class may have."""
        return min(self.max_nodes_per_job or self.nodes_real, self.nodes_real)

    def describe(self) -> str:
        """``class gpu (no partition, constraint gpu, qos regular)``."""
        where = f"partition {self.partition}" if self.partition else "no partition"
        extra = "".join(
            f", {k} {v}" for k, v in (("constraint", self.constraint), ("qos", self.qos)) if v
        )
        return f"class {self.name} ({where}{extra})"


PartitionSpec = NodeClass
"""The former name of :class:`NodeClass` (a partition is a class named after it)."""


def combine_constraints(site: str | None, own: str | None) -> str | None:
    """A site-wide and a class constraint joined by ``&`` (one alone as it is)."""
    if site and own:
        if "|" in site or "|" in own:
            raise ValueError(
                f"cannot combine constraints {site!r} and {own!r}: one has `|` and Slurm "
                "would need brackets; put the whole expression on the class"
            )
        return f"{site}&{own}"
    return site or own


class SubmitOptions(Frozen):
    """How a job of one class is submitted: the site's settings, the class's win (the
    constraints are combined)."""

    partition: str | None
    account: str
    qos: str | None
    constraint: str | None
    gpu_request: GpuRequest
    mem_request: MemRequest
    scheduler_options: tuple[str, ...]


class SiteSpec(Frozen):
    """A site: one Slurm cluster served by one Globus Compute endpoint."""

    name: str = Field(pattern=r"^[a-z][a-z0-9]*$")
    institution: str
    arch: Literal["x86_64", "aarch64"]
    access: Literal["multi-user", "login-node"]
    default_account: str = Field(pattern=ACCOUNT_RE)
    partitions: tuple[NodeClass, ...] = Field(min_length=1)
    """Every class: ``partitions:`` entries, then ``classes:`` entries of site.yaml."""
    qos: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    constraint: str | None = Field(default=None, pattern=CONSTRAINT_RE)
    gpu_request: GpuRequest = "gpus-per-node"
    mem_request: MemRequest = "allowed"
    scheduler_options: tuple[str, ...] = ()
    amqp_port: AmqpPort | None = Field(
        default=443, description="the endpoint's AMQP port (None: the service picks)"
    )
    engine_ifname: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_.:-]{1,15}$",
        description="network interface the workers reach the endpoint on (login node)",
    )
    slurm_cmd_timeout_s: int = Field(
        default=60, gt=0, description="how long the provider waits for sbatch/squeue/sacct"
    )
    _folder: Path | None = PrivateAttr(default=None)
    """The folder this site was loaded from (:func:`load_site_folder`)."""

    @model_validator(mode="before")
    @classmethod
    def _classes_join_partitions(cls, data: Any) -> Any:
        """``classes:`` entries (no partition unless they name one) join ``partitions:``."""
        if not isinstance(data, dict) or "classes" not in data:
            return data
        data = dict(data)
        classes = data.pop("classes") or []
        if not isinstance(classes, list):
            raise ValueError("classes: expected a list of node classes")
        named = [{"partition": None, **c} if isinstance(c, dict) else c for c in classes]
        data["partitions"] = [*(data.get("partitions") or []), *named]
        return data

    @model_validator(mode="after")
    def _site_options_are_sbatch_options(self) -> SiteSpec:
        for opt in self.scheduler_options:
            if not re.match(SCHEDULER_OPTION_RE, opt):
                raise ValueError(f"site {self.name}: scheduler option {opt!r} is not one option")
        names = [p.name for p in self.partitions]
        if dups := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"site {self.name}: class name(s) {dups} given more than once")
        for p in self.partitions:
            combine_constraints(self.constraint, p.constraint)  # raises if they cannot join
        return self

    @property
    def classes(self) -> tuple[NodeClass, ...]:
        """Every node class (the same tuple as :attr:`partitions`)."""
        return self.partitions

    def partition(self, name: str) -> NodeClass:
        """The class named ``name`` (a partition's class is named after it)."""
        for p in self.partitions:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.partitions)
        raise KeyError(f"site {self.name} has no class {name!r} (has: {known})")

    def account_for(self, partition: str) -> str:
        """The account jobs of class ``partition`` are charged to (Delta: ``-cpu`` or
        ``-gpu``; Perlmutter GPU classes: the site's account with ``_g``)."""
        p = self.partition(partition)
        return (p.account or self.default_account) + p.account_suffix

    @property
    def accounts(self) -> tuple[str, ...]:
        """Every account this site charges: the default first, then per-class ones."""
        found = [self.default_account, *(self.account_for(p.name) for p in self.partitions)]
        return tuple(dict.fromkeys(found))

    def submit_options(self, partition: str) -> SubmitOptions:
        """How a job of class ``partition`` is submitted."""
        p = self.partition(partition)
        return SubmitOptions(
            partition=p.partition,
            account=self.account_for(partition),
            qos=p.qos or self.qos,
            constraint=combine_constraints(self.constraint, p.constraint),
            gpu_request=p.gpu_request or self.gpu_request,
            mem_request=p.mem_request or self.mem_request,
            scheduler_options=(*self.scheduler_options, *p.scheduler_options),
        )

    def constraint_features(self, partition: str) -> tuple[str, ...]:
        """Node features the constraint used on ``partition`` names (the local nodes get them)."""
        constraint = self.submit_options(partition).constraint
        return tuple(re.split(r"[&|]", constraint)) if constraint else ()

    @property
    def config_dir(self) -> Path:
        """The site's folder: where it was loaded from, else the package's example of it."""
        return self._folder or PACKAGE_SITES / self.name

    @property
    def gpu_types(self) -> set[str]:
        return {p.gpu_type for p in self.partitions if p.gpu_type}


def load_site_folder(folder: Path, name: str | None = None) -> SiteSpec:
    """Load the site described by ``folder/site.yaml`` (its ``name`` must be ``name``,
    when given); ``ValueError`` saying which file and what is wrong."""
    path = folder / SITE_FILE
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ValueError(
            f"{path}: cannot read ({e.strerror}); a site folder holds site.yaml "
            "(`federation sites new NAME` writes one)"
        ) from e
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid YAML: {e}") from e
    spec = SiteSpec.model_validate(raw)
    if name is not None and spec.name != name:
        raise ValueError(
            f"{path} describes site {spec.name!r}, not {name!r}: make its `name:` and the "
            "name federation.yaml gives it the same"
        )
    spec._folder = folder.resolve()
    return spec


def load_site(name: str, root: Path = PACKAGE_SITES) -> SiteSpec:
    """Load site ``name`` from the folder of site folders ``root`` (default: the package's
    examples); raise :class:`UnknownSiteError` if absent."""
    if not (root / name / SITE_FILE).is_file():
        raise UnknownSiteError(name, site_names(root), str(root))
    return load_site_folder(root / name, name)


def site_names(root: Path = PACKAGE_SITES) -> list[str]:
    """The sites in the folder of site folders ``root`` (default: the package's examples)."""
    return sorted(p.parent.name for p in root.glob(f"*/{SITE_FILE}"))


def load_sites(names: list[str] | None = None, root: Path = PACKAGE_SITES) -> list[SiteSpec]:
    """Load the named sites (default: every site under ``root``)."""
    return [load_site(n, root) for n in (names or site_names(root))]
