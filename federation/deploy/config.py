"""``federation.yaml``: which sites, which backend serves each, endpoint and collection ids.

Switching a site from the embedded local federation to a real Globus Compute endpoint is
this file, not code::

    auth:
      mode: client_credentials          # or: user (interactive `federation login`)
      client_id: 00000000-0000-0000-0000-000000000000
    service:                            # optional: how `federation serve`'s callers log in
      auth: globus                      # or: tokens (the default)
      client_id: 33333333-3333-3333-3333-333333333333
    sites:
      delta:
        backend: globus
        endpoint_id: 11111111-1111-1111-1111-111111111111
        transfer_collection_id: 22222222-2222-2222-2222-222222222222
        collection_path_prefix: /projects/bbka/
        account: bbka-delta-cpu
        budget: {bbka-delta-cpu: 50000, bbka-delta-gpu: 2000}   # core-hours, GPU-hours
      local:
        backend: local

:func:`load_config` validates it (errors name the file and the field);
:class:`Deployment` builds the coordinator's site backends from it: ``local`` sites through
:class:`~federation.deploy.local.LocalSites` (real Slurm, endpoint daemons, offline service),
``globus`` sites as :class:`~federation.sites.cloud.CloudSite` over the real
``globus_compute_sdk.Client`` authenticated by :mod:`federation.sites.globus_auth`; and the data
path: ``move_data`` goes through Globus Transfer between every site whose entry names a
``transfer_collection_id`` (and its ``collection_path_prefix``), and copies files only
between the embedded ``local`` sites that name none.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from globus_compute_sdk import Client
from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from federation.core.charge import charged_partitions, common_unit
from federation.core.errors import ConfigError
from federation.core.model import Frozen
from federation.core.spec import SiteSpec
from federation.deploy.site_folders import HOW_TO_ADD, SiteFolders, resolve
from federation.security.globus_callers import GlobusCallers, ServiceAuth
from federation.sites.cloud import CloudSite, PythonMismatch
from federation.sites.compute import ComputeSite, ExecutorFactory, cloud_executor
from federation.sites.globus_auth import AuthSettings, auth_errors, build_app

if TYPE_CHECKING:
    import globus_sdk

    from federation.deploy.local import LocalSites
    from federation.runtime.coordinator import Coordinator
    from federation.sites.backend import SiteBackend
    from federation.standin.compute_service import LocalComputeService
    from federation.transfer import GlobusCollection, TransferBackend

CONFIG_ENV = "FEDERATION_CONFIG"
Budget = Annotated[float, Field(gt=0)]
"""One account's budget, in its site's units."""
CONFIG_NAME = "federation.yaml"


def _base(info: ValidationInfo) -> Path | None:
    """The folder of the ``federation.yaml`` being read (:func:`load_config` passes it)."""
    ctx = info.context if isinstance(info.context, dict) else {}
    base = ctx.get("base")
    return base if isinstance(base, Path) else None


class SiteConfig(Frozen):
    """One entry of ``sites:``; the site's hardware comes from its folder's ``site.yaml``
    (``path``, else ``<sites_dir>/<site>/``, else the package's example of that name:
    :mod:`federation.deploy.site_folders`)."""

    backend: Literal["local", "globus"] = "local"
    path: Path | None = None
    """The site's folder (its ``site.yaml`` and endpoint files), anywhere on disk; relative
    to this file's folder."""
    endpoint_id: uuid.UUID | None = None
    """The site's Globus Compute endpoint (``globus-compute-endpoint list`` on the site)."""
    transfer_collection_id: uuid.UUID | None = None
    """The site's Globus Transfer collection, for move_data."""
    collection_path_prefix: str | None = None
    """The collection path under which this federation may read and write (absolute)."""
    account: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")
    """The site's default Slurm account, whose credit the probe reads (default: the site's
    ``default_account``); partitions with an account of their own are charged to it."""
    budget: dict[str, Budget] = Field(default_factory=dict)
    """Allocation budgets in the site's own units, per account (``default``: the default
    account; a plain number is the default account's): each becomes that account's limit
    when the site reports none. Delta ``{bbka-delta-cpu: 50000, bbka-delta-gpu: 2000}``
    counts core-hours and GPU-hours; Vista's one project node-hours
    (:mod:`federation.core.charge`)."""
    budget_core_hours: float | None = Field(default=None, gt=0)
    """Deprecated: the default account's budget in core-hours, as ``budget: {default: N}``;
    refused where the default account does not bill core-hours (write ``budget``)."""
    python_mismatch: PythonMismatch = "error"
    job_check_s: float | None = Field(default=60.0, ge=1.0)
    """A globus site's tasks run as batch jobs named ``fed.<tag>``: while one waits to start,
    ``squeue`` is read this often (seconds) to learn its start, and a losing copy is
    withdrawn by ``scancel``. ``null`` turns this off: nothing at this site can then be
    cancelled, so hedged and watched copies are not placed here."""

    @field_validator("path")
    @classmethod
    def _path_from_the_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else resolve(value, _base(info))

    @field_validator("budget", mode="before")
    @classmethod
    def _one_number_is_the_default(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return {"default": value}
        return value

    @model_validator(mode="after")
    def _one_budget_per_account(self) -> SiteConfig:
        if self.budget_core_hours is not None and "default" in self.budget:
            raise ValueError(
                "budget_core_hours (deprecated) and budget.default both give the default "
                "account's budget: keep only budget"
            )
        return self

    def budgets(self) -> dict[str, float]:
        """The configured budgets by account (``default``: the default account's), in the
        site's units; ``budget_core_hours`` is the default account's."""
        out = dict(self.budget)
        if self.budget_core_hours is not None:
            out["default"] = self.budget_core_hours
        return out

    @field_validator("collection_path_prefix")
    @classmethod
    def _absolute_prefix(cls, value: str | None) -> str | None:
        if value is None:
            return None
        path = PurePosixPath(value)
        if not path.is_absolute() or ".." in path.parts:
            raise ValueError(f"must be an absolute path without '..', got {value!r}")
        return str(path) + ("/" if str(path) != "/" else "")

    @model_validator(mode="after")
    def _collection_with_its_prefix(self) -> SiteConfig:
        if (self.transfer_collection_id is None) != (self.collection_path_prefix is None):
            raise ValueError(
                "transfer_collection_id and collection_path_prefix go together: the site's "
                "Globus collection, and the absolute path in it that the federation may use"
            )
        return self

    @model_validator(mode="after")
    def _globus_needs_endpoint(self) -> SiteConfig:
        if self.backend == "globus" and self.endpoint_id is None:
            raise ValueError(
                "backend globus needs endpoint_id (the id `globus-compute-endpoint "
                "configure` printed on the site, also in `globus-compute-endpoint list`)"
            )
        if self.backend == "local" and self.endpoint_id is not None:
            raise ValueError("endpoint_id is only for backend globus (local sites get their own)")
        return self


class FederationConfig(Frozen):
    """The whole ``federation.yaml``."""

    auth: AuthSettings = AuthSettings()
    service: ServiceAuth = ServiceAuth()
    """How callers of ``federation serve`` authenticate: its own tokens, or each with their
    own Globus identity (:mod:`federation.security.globus_callers`)."""
    home: Path | None = None
    """Runtime root (coordinator.db, telemetry, local clusters); default $FEDERATION_HOME."""
    sites_dir: Path | None = None
    """A folder of site folders (``<sites_dir>/<site>/site.yaml``), e.g.
    ``/etc/federation/sites``; relative to this file's folder. Sites found neither here nor
    by their own ``path`` come from the package's examples."""
    sites: dict[str, SiteConfig] = Field(min_length=1)
    local_path: Literal["embedded", "cloud"] | None = None
    """How the ``local`` sites are reached: ``embedded`` (the offline service's shortcuts) or
    ``cloud`` (the strict stand-in of the Globus Compute service, as real endpoints are);
    default ``$FEDERATION_PATH``, else embedded."""
    placement: str = "auto"
    """The placement policy by name: ``auto`` (the default: the twin policies, learning from
    this deployment, with hedge copies only where they can be withdrawn; see
    :mod:`federation.placement.learned`), or ``twin-hedge``, ``twin-watch``,
    ``best-feasible``, ``earliest-start``, ``fixed:<site>``, ... (see
    :func:`federation.placement.policies.get_policy`)."""

    @field_validator("placement")
    @classmethod
    def _known_policy(cls, name: str) -> str:
        from federation.core.errors import BadEnvelopeError
        from federation.placement.policies import get_policy

        if name == "auto":
            return name
        try:
            get_policy(name)
        except BadEnvelopeError as e:
            raise ValueError(str(e)) from None
        return name

    @field_validator("sites_dir")
    @classmethod
    def _sites_dir_from_the_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if value is None:
            return None
        path = resolve(value, _base(info))
        if not path.is_dir():
            raise ValueError(
                f"{path} is not a folder: sites_dir names a folder of site folders "
                "(`federation sites new NAME --dir DIR` makes DIR/NAME/)"
            )
        return path

    @field_validator("sites")
    @classmethod
    def _known_sites(
        cls, sites: dict[str, SiteConfig], info: ValidationInfo
    ) -> dict[str, SiteConfig]:
        folders = _folders(info.data.get("sites_dir"), sites)
        unknown = sorted(n for n in sites if folders.folder(n) is None)
        if unknown:
            known = ", ".join(s.name for s in folders.known())
            raise ValueError(
                f"unknown site(s) {', '.join(unknown)}; known: {known} (looked in "
                f"{folders.where()}). {HOW_TO_ADD}"
            )
        problems = []
        for name in sites:
            try:
                folders.load(name)
            except ValueError as e:
                problems.append(f"site {name}: {e}")
        if problems:
            raise ValueError("\n  ".join(problems))
        return sites

    def site_folders(self) -> SiteFolders:
        """Where this deployment's sites are described."""
        return _folders(self.sites_dir, self.sites)

    @cached_property
    def specs(self) -> dict[str, SiteSpec]:
        """Each configured site's facts, from its folder, in the order of the file."""
        folders = self.site_folders()
        return {name: folders.load(name) for name in self.sites}

    @model_validator(mode="after")
    def _budgets_in_the_sites_units(self) -> FederationConfig:
        for name, site in self.sites.items():
            if site.budget or site.budget_core_hours is not None:
                check_budgets(name, site, self.specs[name])
        return self

    @model_validator(mode="after")
    def _placement_the_sites_can_honour(self) -> FederationConfig:
        from federation.placement.policies import get_policy

        if self.placement == "auto":  # copies only where they can be withdrawn
            return self
        pol = get_policy(self.placement)
        hedges = pol.hedge_within is not None or pol.hedge_spread_s is not None
        copies = hedges or pol.watch is not None
        cancellable = [
            n for n, s in self.sites.items() if s.backend == "local" or s.job_check_s is not None
        ]
        if copies and not cancellable:
            raise ValueError(
                f"placement {self.placement!r} runs a task as several copies and withdraws "
                "the losers, but no site here can withdraw a queued task (the Globus Compute "
                "service has no task cancel, and every site sets job_check_s: null, which "
                "turns off withdrawal by claiming a task's tag first): every copy would run. "
                "Use best-feasible (one copy, placed where it is predicted to finish first)"
            )
        return self

    def by_backend(self, backend: str) -> list[str]:
        return [name for name, s in self.sites.items() if s.backend == backend]

    def collections(self) -> dict[str, GlobusCollection]:
        """The Globus collection of every site that names one."""
        from federation.transfer import GlobusCollection

        return {
            n: GlobusCollection(
                collection_id=s.transfer_collection_id, path_prefix=s.collection_path_prefix
            )
            for n, s in self.sites.items()
            if s.transfer_collection_id is not None and s.collection_path_prefix
        }


def _folders(sites_dir: Path | None, sites: dict[str, SiteConfig]) -> SiteFolders:
    paths = {n: s.path for n, s in sites.items() if s.path is not None}
    return SiteFolders(sites_dir=sites_dir, paths=paths)


def check_budgets(name: str, site: SiteConfig, spec: SiteSpec) -> None:
    """``ValueError`` unless every budget names an account ``name`` charges, and a
    ``budget_core_hours`` is for a default account billed in core-hours."""
    default = site.account or spec.default_account
    charged = charged_partitions(spec, default)
    known = {a.lower() for a in charged}
    unknown = [a for a in site.budget if a != "default" and a.lower() not in known]
    if unknown:
        raise ValueError(
            f"sites.{name}.budget: {', '.join(unknown)} is not an account {name} charges "
            f"(default, {', '.join(charged)})"
        )
    if "default" in site.budget and default.lower() in {a.lower() for a in site.budget}:
        raise ValueError(f"sites.{name}.budget: default and {default} are the same account")
    unit = common_unit(charged[default])
    if site.budget_core_hours is not None and unit not in (None, "core-hours"):
        raise ValueError(
            f"sites.{name}.budget_core_hours: budgets are in each site's own units now, and "
            f"{name}'s default account {default} bills {unit}, not core-hours; write "
            f"`budget: {{{default}: N}}` with N in {unit}"
        )


def find_config(path: Path | str | None = None) -> Path:
    """``path``, else ``$FEDERATION_CONFIG``, else ``./federation.yaml``, else
    ``$FEDERATION_HOME/federation.yaml``; :class:`ConfigError` listing where it looked."""
    if path is not None:
        candidates = [Path(path)]
    else:
        env = os.environ.get(CONFIG_ENV)
        home = Path(os.environ.get("FEDERATION_HOME", Path.home() / ".federation"))
        candidates = [Path(env)] if env else []
        candidates += [Path.cwd() / CONFIG_NAME, home / CONFIG_NAME]
    for c in candidates:
        if c.expanduser().is_file():
            return c.expanduser()
    raise ConfigError(
        "no federation.yaml found (looked at "
        + ", ".join(str(c) for c in candidates)
        + "). Copy federation.example.yaml and fill in your sites, or pass --config."
    )


def _location(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def load_config(path: Path | str | None = None) -> FederationConfig:
    """Read and validate ``federation.yaml``; :class:`ConfigError` names file and field."""
    file = find_config(path)
    try:
        raw = yaml.safe_load(file.read_text())
    except OSError as e:
        raise ConfigError(f"{file}: cannot read: {e}") from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{file}{where}: not valid YAML: {e}") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: expected a mapping with 'sites:' (got {type(raw).__name__})")
    try:
        return FederationConfig.model_validate(raw, context={"base": file.resolve().parent})
    except ValidationError as e:
        lines = [f"{file}: {e.error_count()} problem(s):"]
        for err in e.errors():
            msg = str(err["msg"]).removeprefix("Value error, ")
            lines.append(f"  - {_location(err['loc'])}: {msg}")
        raise ConfigError("\n".join(lines)) from e


ClientFactory = Callable[[AuthSettings], Client]
TransferClientFactory = Callable[[AuthSettings], "globus_sdk.TransferClient"]


def cloud_client(auth: AuthSettings) -> Client:
    """The real SDK ``Client`` for the Globus Compute cloud, authenticated per ``auth``."""
    app = build_app(auth)
    with auth_errors(auth, what="Globus Compute"):
        return Client(app=app)


def transfer_client(auth: AuthSettings) -> globus_sdk.TransferClient:
    """The real ``globus_sdk.TransferClient``, authenticated per ``auth`` (same login)."""
    import globus_sdk

    app = build_app(auth)
    with auth_errors(auth, what="Globus Transfer"):
        return globus_sdk.TransferClient(app=app)


class Deployment:
    """Site backends for a :class:`FederationConfig`, and a coordinator over them."""

    def __init__(
        self,
        config: FederationConfig,
        *,
        home: Path | None = None,
        client_factory: ClientFactory = cloud_client,
        executor_factory: ExecutorFactory = cloud_executor,
        transfer_client_factory: TransferClientFactory = transfer_client,
    ) -> None:
        from federation.deploy.local import LocalSites, federation_home

        self.config = config
        self.home = home or config.home or federation_home()
        self._client_factory = client_factory
        self._executor_factory = executor_factory
        self._transfer_client_factory = transfer_client_factory
        local_names = config.by_backend("local")
        self.local: LocalSites | None = (
            LocalSites(
                home=self.home,
                path=config.local_path,
                specs=[config.specs[n] for n in local_names],
            )
            if local_names
            else None
        )
        self.client: Client | None = None
        self.service: LocalComputeService | None = None

    def up(self) -> dict[str, float]:
        """Bring the local sites up (cloud endpoints are started by their site admins)."""
        return self.local.up() if self.local is not None else {}

    def backends(self, task_group_id: uuid.UUID) -> list[SiteBackend]:
        """One backend per configured site, in the order of the file."""
        out: dict[str, SiteBackend] = {}
        if self.local is not None:
            for b in self._local_backends(self.local, task_group_id):
                out[b.name] = b
        globus = self.config.by_backend("globus")
        if globus and self.client is None:
            self.client = self._client_factory(self.config.auth)
        for name in globus:
            site = self.config.sites[name]
            assert site.endpoint_id is not None and self.client is not None
            out[name] = CloudSite(
                self.config.specs[name],
                site.endpoint_id,
                self.client,
                auth=self.config.auth,
                executor_factory=self._executor_factory,
                task_group_id=task_group_id,
                account=site.account,
                budgets=site.budgets(),
                python_mismatch=site.python_mismatch,
                job_check_s=site.job_check_s,
                storage_root=site.collection_path_prefix,
            )
        return [out[name] for name in self.config.sites]

    def storage_root(self, site: str) -> Path | None:
        """Where ``site``'s storage is on its own file system: its collection's path prefix
        (a mapped collection over the file system its nodes see), the embedded sites'
        storage folders; None for a site with neither (its tasks run in the endpoint's
        working folder, with no workspace)."""
        entry = self.config.sites.get(site)
        if entry is not None and entry.collection_path_prefix:
            return Path(entry.collection_path_prefix)
        if entry is not None and entry.backend == "local":
            from federation.core.storage import site_storage

            return site_storage(site, self.home)
        return None

    def _local_backends(self, local: LocalSites, task_group_id: uuid.UUID) -> list[ComputeSite]:
        sites = {spec.name: self.config.sites[spec.name] for spec in local.specs}
        backends = local.backends(
            task_group_id,
            accounts={n: s.account for n, s in sites.items()},
            budgets={n: s.budgets() for n, s in sites.items()},
        )
        self.service = local.service
        return backends

    def transfer_backends(self) -> dict[str, TransferBackend]:
        """Who moves each site's data: Globus Transfer for every site that names a
        collection (one backend, so any two of them can exchange data), local copies for
        the embedded sites that name none. A cloud site with no collection has none:
        ``move_data`` to or from it is refused, naming the sites that can."""
        from federation.transfer import GlobusTransferBackend, LocalCopyBackend

        out: dict[str, TransferBackend] = {}
        named = {n: s for n, s in self.config.sites.items() if s.transfer_collection_id}
        if named:
            collections = self.config.collections()
            globus = GlobusTransferBackend(
                self._transfer_client_factory(self.config.auth), collections
            )
            out.update(dict.fromkeys(collections, globus))
        local = [n for n in self.config.by_backend("local") if n not in named]
        if local:
            copier = LocalCopyBackend(local, self.home)
            out.update(dict.fromkeys(local, copier))
        return out

    def connect(
        self,
        *,
        telemetry: bool = True,
        durable: bool = False,
        callers: GlobusCallers | None = None,
        **coordinator_kwargs: Any,
    ) -> Coordinator:
        """A coordinator over every configured site (``durable``: SQLite + re-attach).

        ``callers``: the service's Globus callers (``service.auth: globus``): each caller's
        tasks, copies and transfers then go out with their own tokens
        (:class:`~federation.deploy.callers.CallerSiteSets`); probes stay the service's."""
        from federation.runtime.coordinator import Coordinator
        from federation.runtime.store import Store
        from federation.runtime.telemetry import Telemetry

        store = Store(self.home / "coordinator.db") if durable else None
        task_group = store.task_group_id() if store else uuid.uuid4()
        backends = self.backends(task_group)
        sets = None
        if callers is not None:
            from federation.deploy.callers import CallerSiteSets

            sets = CallerSiteSets(
                self.config, callers, task_group, executor_factory=self._executor_factory
            )
            coordinator_kwargs["caller_sites"] = sets
        tel = Telemetry(self.home / "telemetry.db") if telemetry else None
        coordinator_kwargs.setdefault("policy", self.config.placement)
        coordinator_kwargs.setdefault("transfer_backends", self.transfer_backends())
        coordinator_kwargs.setdefault("result_storage", self.storage_root)
        coord = Coordinator(backends, telemetry=tel, store=store, **coordinator_kwargs)
        coord.own(store, tel)  # closed with the coordinator
        if sets is not None:  # before recovery: re-attached tasks report their starts
            sets.on_started = coord.notify_started
        if self.local is not None:
            self.local.listen_for_starts(backends, coord)
        for b in backends:  # the real cloud sites: starts read from the tasks' claims
            if isinstance(b, CloudSite) and b.name not in (self.config.by_backend("local")):
                b.on_started(coord.notify_started)
        if callers is None:  # the functions every task uses: registered before the first
            # (where callers act as themselves, each one's sites register under their own
            # identity when first used, never under the service's)
            for b in backends:
                if isinstance(b, ComputeSite):
                    b.warm()
        if store is not None:
            coord.recover()
        return coord

    def close(self) -> None:
        if self.service is not None:
            self.service.close()
