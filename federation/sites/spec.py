"""Static site facts, loaded from ``endpoint_configs/<site>/site.yaml``.

One source of truth: the local Slurm cluster, each endpoint template's schema bounds and the
placement feasibility checks all derive from these models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, model_validator

from federation._model import Frozen
from federation.errors import UnknownSiteError

REPO_ROOT = Path(__file__).resolve().parents[2]
ENDPOINT_CONFIGS = REPO_ROOT / "endpoint_configs"


class PartitionSpec(Frozen):
    """One Slurm partition of a site, as the site describes it."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    nodes_real: int = Field(gt=0, description="node count of the production partition")
    nodes_local: int = Field(gt=0, le=8, description="emulated nodes in the local cluster")
    cpus_per_node: int = Field(gt=0)
    mem_gb_per_node: int = Field(gt=0)
    gpus_per_node: int = Field(default=0, ge=0)
    gpu_type: str | None = Field(default=None, pattern=r"^[a-z0-9]+$")
    gpu_mem_gb: int | None = Field(default=None, gt=0)
    max_walltime_s: int = Field(gt=0)
    features: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _gpu_fields_agree(self) -> PartitionSpec:
        if (self.gpus_per_node > 0) != (self.gpu_type is not None):
            raise ValueError(f"partition {self.name}: gpus_per_node and gpu_type go together")
        return self


class SiteSpec(Frozen):
    """A site: one Slurm cluster served by one Globus Compute endpoint."""

    name: str = Field(pattern=r"^[a-z][a-z0-9]*$")
    institution: str
    arch: Literal["x86_64", "aarch64"]
    access: Literal["multi-user", "login-node"]
    default_account: str
    partitions: tuple[PartitionSpec, ...] = Field(min_length=1)

    def partition(self, name: str) -> PartitionSpec:
        for p in self.partitions:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.partitions)
        raise KeyError(f"site {self.name} has no partition {name!r} (has: {known})")

    @property
    def config_dir(self) -> Path:
        return ENDPOINT_CONFIGS / self.name

    @property
    def gpu_types(self) -> set[str]:
        return {p.gpu_type for p in self.partitions if p.gpu_type}


def load_site(name: str, root: Path = ENDPOINT_CONFIGS) -> SiteSpec:
    """Load one site's ``site.yaml``; raise :class:`UnknownSiteError` if absent."""
    path = root / name / "site.yaml"
    if not path.is_file():
        raise UnknownSiteError(name, site_names(root))
    return SiteSpec.model_validate(yaml.safe_load(path.read_text()))


def site_names(root: Path = ENDPOINT_CONFIGS) -> list[str]:
    return sorted(p.parent.name for p in root.glob("*/site.yaml"))


def load_sites(names: list[str] | None = None, root: Path = ENDPOINT_CONFIGS) -> list[SiteSpec]:
    """Load the named sites (default: every site under ``endpoint_configs/``)."""
    return [load_site(n, root) for n in (names or site_names(root))]
