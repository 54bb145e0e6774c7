"""NERSC Perlmutter without Slurm: its site folder (``federation/sites_data/perlmutter``), a
live snapshot of it built as its probe would report one, and a coordinator over it whose
sites run tasks on threads (:mod:`inprocess`) and whose probe answers that snapshot."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

from inprocess import ThreadSite
from typer.testing import CliRunner

from federation.core.snapshot import (
    FederationSnapshot,
    JobRecord,
    NodeRecord,
    SiteHealth,
    SiteSnapshot,
)
from federation.core.spec import PACKAGE_SITES, SiteSpec, load_site_folder
from federation.interfaces.cli.main import app as cli_app
from federation.parsing.scontrol import PartitionInfo
from federation.parsing.snapshot_builder import partition_snapshot
from federation.runtime.coordinator import Coordinator
from federation.runtime.telemetry import Telemetry

FIXTURE = PACKAGE_SITES / "perlmutter"
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
GPU40 = ("gpu", "a100", "hbm40g")
GPU80 = ("gpu", "a100", "hbm80g")
CPU = ("cpu",)


def _node(name: str, partition: str, features: tuple[str, ...], busy: bool = False) -> NodeRecord:
    gpu = "gpu" in features
    return NodeRecord(
        name=name,
        partition=partition,
        state="allocated" if busy else "idle",
        cpus_total=64 if gpu else 128,
        cpus_alloc=(64 if gpu else 128) if busy else 0,
        mem_mb_total=(256 if gpu else 512) * 1024,
        mem_mb_alloc=((256 if gpu else 512) * 1024) if busy else 0,
        gpus_total_by_type={"a100": 4} if gpu else {},
        gpus_alloc_by_type={"a100": 4 if busy else 0} if gpu else {},
        features=features,
    )


def snapshot(
    nodes: tuple[tuple[str, str, tuple[str, ...]], ...] = (
        ("nid001", "gpu_ss11", GPU40),
        ("nid002", "gpu_ss11", GPU40),
        ("nid003", "gpu_ss11", GPU80),
        ("nid004", "regular_milan_ss11", CPU),
        ("nid005", "regular_milan_ss11", CPU),
    ),
    busy: frozenset[str] = frozenset(),
) -> FederationSnapshot:
    """Perlmutter as its probe would see it: live partitions named unlike any class (the
    classes are matched by features), ``busy`` nodes held by a job ending in an hour."""
    recs = [_node(n, p, f, n in busy) for n, p, f in nodes]
    jobs = [
        JobRecord(
            job_id=f"j{r.name}",
            partition=r.partition,
            state="running",
            cpus=r.cpus_total,
            gpus=sum(r.gpus_total_by_type.values()),
            gpu_type="a100" if r.gpus_total_by_type else None,
            time_limit_s=3600,
            start_time=NOW,
            end_time=NOW + timedelta(hours=1),
            node_names=(r.name,),
        )
        for r in recs
        if r.name in busy
    ]
    parts = tuple(
        partition_snapshot(
            "perlmutter",
            p,
            [r for r in recs if r.partition == p],
            [j for j in jobs if j.partition == p],
            PartitionInfo(name=p, state="up", max_time_s=172800),
        )
        for p in sorted({r.partition for r in recs})
    )
    site = SiteSnapshot(
        site="perlmutter",
        taken_at=NOW,
        health=SiteHealth(reachable=True, probe_age_s=1.0),
        partitions=parts,
        nodes=tuple(recs),
        jobs=tuple(jobs),
    )
    return FederationSnapshot(taken_at=NOW, sites=(site,))


def perlmutter(folder: Path = FIXTURE, name: str = "perlmutter") -> SiteSpec:
    return load_site_folder(folder, name)


class SceneCoordinator(Coordinator):
    """A coordinator whose probe answers :func:`snapshot` (under each site's own name)."""

    def _probe(self, names: list[str]) -> FederationSnapshot:
        snap = snapshot()
        sites = tuple(snap.sites[0].model_copy(update={"site": name}) for name in self.backends)
        self._last_snapshot = snap.model_copy(update={"sites": sites})
        return self._last_snapshot


def scene_coordinator(*specs: SiteSpec) -> SceneCoordinator:
    backends = [ThreadSite(s) for s in specs or (perlmutter(),)]
    coord = SceneCoordinator(backends, telemetry=Telemetry(":memory:"))
    for b in backends:
        b.coord = coord
    return coord


def renamed_copy(
    root: Path, name: str, account: str | None = None, also: tuple[str, ...] = ()
) -> tuple[Path, Path]:
    """The Perlmutter folder copied to ``root/sites/<name>`` under that name (and default
    account), its endpoint files generated, and ``root/federation.yaml`` naming it and the
    sites ``also``: a new site with no code change. Returns (folder, config)."""
    folder = root / "sites" / name
    shutil.copytree(FIXTURE, folder)
    text = (folder / "site.yaml").read_text().replace("name: perlmutter", f"name: {name}")
    if account is not None:
        text = text.replace("m1234", account)
    (folder / "site.yaml").write_text(text)
    r = CliRunner().invoke(cli_app, ["sites", "generate-configs", "--root", str(root / "sites")])
    assert r.exit_code == 0, r.output
    config = root / "federation.yaml"
    named = "".join(f"  {s}: {{}}\n" for s in (name, *also))
    config.write_text(f"sites_dir: sites\nsites:\n{named}")
    return folder, config
