"""``LocalFederation``: every site as a real Slurm cluster on this machine.

Shared daemons: one munged, one MariaDB, one slurmdbd. Per site: one slurmctld and one
slurmd per emulated node (Debian builds Slurm with multiple-slurmd support).
"""

from __future__ import annotations

import fcntl
import logging
import os
import pwd
import subprocess
import time
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from federation.core.errors import UnknownSiteError
from federation.core.spec import SiteSpec, load_sites
from federation.localslurm import accounts, mariadb, munge, slurmdbd
from federation.localslurm.binaries import which
from federation.localslurm.cluster import SiteCluster
from federation.localslurm.commands import run_slurm
from federation.localslurm.errors import LocalSlurmError
from federation.localslurm.layout import Layout, Ports, check_port_blocks, default_home
from federation.localslurm.process import Daemon, owned_processes, wait_stopped
from federation.localslurm.status import DaemonStatus, SiteStatus
from federation.localslurm.topology import cluster_spec, site_class_qos

logger = logging.getLogger(__name__)

REQUIRED = (
    "munged",
    "mariadbd",
    "mariadb-install-db",
    "slurmdbd",
    "slurmctld",
    "slurmd",
    "scontrol",
    "sinfo",
    "sacctmgr",
)


class _Timer:
    def __init__(self) -> None:
        self.start = self.last = time.monotonic()
        self.steps: dict[str, float] = {}

    def mark(self, step: str) -> None:
        now = time.monotonic()
        self.steps[step] = round(now - self.last, 3)
        self.last = now

    def total(self) -> dict[str, float]:
        return {**self.steps, "total": round(time.monotonic() - self.start, 3)}


def _start_all(daemons: Sequence[Daemon], timeout_s: float) -> list[str]:
    """Start the daemons that are not running, all at once; returns the started names.

    A daemon running with other arguments than wanted (a changed setup) is restarted.
    """
    stale = [d for d in daemons if d.stale()]
    if stale:
        logger.info("restarting with new arguments: %s", ", ".join(d.name for d in stale))
        _stop_all(stale)
    todo = [d for d in daemons if not d.running()]
    if todo:  # a pid file may be lost or stale while the daemon still runs
        procs = owned_processes(todo[0].owner)
        todo = [d for d in todo if d.adopt(procs) is None]
    launched = [(d, d.launch()) for d in todo]
    for d, proc in launched:
        d.settle(proc, timeout_s)
    return [d.name for d in todo]


def _stop_all(daemons: Sequence[Daemon], timeout_s: float = 15.0) -> list[str]:
    lost = [d for d in daemons if not d.running()]
    if lost:  # a pid file may be lost or stale while the daemon still runs
        procs = owned_processes(lost[0].owner)
        for d in lost:
            d.adopt(procs)
    pids = {d.name: pid for d in daemons if (pid := d.signal_stop()) is not None}
    wait_stopped(pids, timeout_s)
    return list(pids)


class LocalFederation:
    """The project's sites as real Slurm clusters on this machine.

    Args:
        home: runtime root; files go to ``home/slurm``. Default ``$FEDERATION_HOME`` or
            ``~/.federation``.
        sites: the package's example sites by name (default: all of them).
        specs: the sites themselves, instead of ``sites`` (a deployment's own folders).
    """

    def __init__(
        self,
        home: Path | None = None,
        sites: list[str] | None = None,
        *,
        specs: list[SiteSpec] | None = None,
    ) -> None:
        self.home = Path(home) if home is not None else default_home()
        self.layout = Layout.for_home(self.home)
        self.ports = Ports.from_env()
        self.user = pwd.getpwuid(os.getuid()).pw_name
        self.specs = specs if specs is not None else load_sites(sites)
        check_port_blocks([s.name for s in self.specs])
        self.clusters = {
            s.name: SiteCluster(cluster_spec(s, self.ports), self.layout, self.ports, self.user)
            for s in self.specs
        }

    # public API
    @property
    def sites(self) -> list[str]:
        return list(self.clusters)

    def slurm_conf(self, site: str) -> Path:
        """Path of ``site``'s slurm.conf."""
        return self._cluster(site).slurm_conf

    def env(self, site: str) -> dict[str, str]:
        """Environment variables (``SLURM_CONF``) to merge over ``os.environ`` for ``site``."""
        return self._cluster(site).env()

    def run(
        self, site: str, argv: list[str], timeout_s: float = 30
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command (``["sinfo", "-N"]``) against ``site``; never raises on status."""
        return run_slurm(argv, self.env(site), timeout_s)

    def up(self, timeout_s: float = 60.0) -> dict[str, float]:
        """Bring everything up (idempotent); returns seconds per step and ``total``."""
        self._check_installed()
        with self._locked():
            timer = _Timer()
            started, rewritten = self._up_shared(timer)
            started += self._up_clusters(timer, timeout_s, rewritten)
            steps = timer.total()
        if started:
            logger.info(
                "local federation up in %.2f s (started %s daemons): %s",
                steps["total"],
                len(started),
                steps,
            )
        else:
            logger.info("local federation already up (verified in %.2f s)", steps["total"])
        return steps

    def down(self) -> list[str]:
        """Cancel all jobs and stop every daemon this federation started (idempotent)."""
        with self._locked():
            for c in self.clusters.values():
                if c.ctld().running():
                    try:
                        c.cancel_jobs()
                    except LocalSlurmError as e:
                        logger.warning("%s: could not cancel jobs: %s", c.name, e)
            stopped = _stop_all([d for c in self.clusters.values() for d in c.slurmds()])
            stopped += _stop_all([c.ctld() for c in self.clusters.values()])
            others = self._other_running_sites()
            if others:
                logger.info("keeping munged, mariadbd and slurmdbd: %s still up", others)
            else:
                for d in self._shared_daemons():
                    stopped += _stop_all([d])
        logger.info("local federation down (stopped %s daemons)", len(stopped))
        return stopped

    def status(self) -> list[SiteStatus]:
        """One :class:`SiteStatus` per site (see :meth:`services` for the shared daemons)."""
        return [self._site_status(c) for c in self.clusters.values()]

    def services(self) -> list[DaemonStatus]:
        """munged, mariadbd and slurmdbd."""
        return [
            DaemonStatus(
                name=d.name, running=(pid := d.pid()) is not None, pid=pid, log_file=d.log_file
            )
            for d in self._shared_daemons()
        ]

    # internals
    def _cluster(self, site: str) -> SiteCluster:
        try:
            return self.clusters[site]
        except KeyError:
            raise UnknownSiteError(site, self.sites) from None

    def _check_installed(self) -> None:
        for program in REQUIRED:
            which(program)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.layout.root.mkdir(parents=True, exist_ok=True)
        with open(self.layout.lock_file, "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _other_running_sites(self) -> list[str]:
        """Sites outside this federation's subset whose slurmctld still runs."""
        others = [s for s in load_sites() if s.name not in self.clusters]
        return [
            s.name
            for s in others
            if SiteCluster(cluster_spec(s, self.ports), self.layout, self.ports, self.user)
            .ctld()
            .running()
        ]

    def _shared_daemons(self) -> list[Daemon]:
        # in stop order: slurmdbd first, munged last
        return [
            slurmdbd.daemon(self.layout),
            mariadb.daemon(self.layout, self.ports, self.user),
            munge.daemon(self.layout),
        ]

    def _up_shared(self, timer: _Timer) -> tuple[list[str], set[str]]:
        """Start munged, mariadbd and slurmdbd and register with slurmdbd; returns the
        started daemons and the clusters whose configs the registration rewrote."""
        lay = self.layout
        munge.prepare(lay)
        mariadb.prepare(lay, self.user)
        db = mariadb.daemon(lay, self.ports, self.user)
        started = _start_all([munge.daemon(lay), db], timeout_s=30)
        if db.name in started:
            mariadb.wait_ready(db, self.ports)
        timer.mark("munged+mariadbd")
        dbd = slurmdbd.daemon(lay)
        if slurmdbd.write_conf(lay, self.ports, self.user) and dbd.running():
            logger.info("slurmdbd.conf changed: restarting slurmdbd")
            _stop_all([dbd])
        if not dbd.running():
            dbd.start(timeout_s=30)
            slurmdbd.wait_ready(dbd, self.ports)
            started.append(dbd.name)
        timer.mark("slurmdbd")
        rewritten = self._register_accounts()
        timer.mark("accounts")
        return started, rewritten

    def _register_accounts(self) -> set[str]:
        """Register with slurmdbd unless the stamp says it is done; returns the clusters
        whose configs were rewritten for it (a running one must still be restarted)."""
        stamp = mariadb.data_dir(self.layout) / "federation-accounts"
        want = "\n".join(
            sorted(f"{s.name} {' '.join(s.accounts)} {self.user}" for s in self.specs)
            + [  # a changed limit is registered again, as a new account would be
                f"qos {q.name} {q.limits}"
                for c in self.clusters.values()
                for q in (*c.spec.partition_qos, *site_class_qos(c.spec.site))
            ]
        )
        if stamp.exists() and stamp.read_text() == want:
            return set()
        first = next(iter(self.clusters.values()))
        # sacctmgr needs a slurm.conf naming the slurmdbd
        rewritten = {first.name} if first.write_configs() else set()
        accounts.register(self.specs, self.user, first.env())
        stamp.write_text(want)
        return rewritten

    def _up_clusters(
        self, timer: _Timer, timeout_s: float, rewritten: Collection[str] = ()
    ) -> list[str]:
        """Write each cluster's configs and start its daemons; a running cluster whose
        configs changed (now, or in ``rewritten`` earlier in this ``up``) is restarted."""
        clusters = list(self.clusters.values())
        for c in clusters:
            changed = c.write_configs() or c.name in rewritten
            if changed and any(d.running() for d in c.daemons()):
                logger.info("%s: configuration changed, restarting the cluster", c.name)
                _stop_all(c.slurmds())
                _stop_all([c.ctld()])
        timer.mark("configs")
        started = _start_all([c.ctld() for c in clusters], timeout_s=30)
        for c in clusters:
            c.wait_controller(timeout_s)
        timer.mark("slurmctld")
        started += _start_all([d for c in clusters for d in c.slurmds()], timeout_s=30)
        timer.mark("slurmd")
        self._wait_nodes(clusters, timeout_s)
        timer.mark("nodes")
        return started

    def _wait_nodes(self, clusters: list[SiteCluster], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        pending = list(clusters)
        while pending:
            unready = {c.name: c.unready_nodes() for c in pending}
            pending = [c for c in pending if unready[c.name]]
            if not pending:
                return
            if time.monotonic() > deadline:
                c = pending[0]
                raise c.not_ready_error(unready[c.name])
            time.sleep(0.1)

    def _site_status(self, c: SiteCluster) -> SiteStatus:
        total = len(c.spec.nodes)
        ctld = c.ctld()
        base = {"site": c.name, "slurm_conf": c.slurm_conf, "nodes_total": total}
        if not ctld.running():
            return SiteStatus(
                **base,
                controller_up=False,
                error="slurmctld is not running: run `federation sites up`",
            )
        try:
            up = c.ping()
            states = c.node_states() if up else {}
        except LocalSlurmError as e:
            return SiteStatus(**base, controller_up=False, error=str(e))
        if not up:
            return SiteStatus(
                **base,
                controller_up=False,
                error=f"slurmctld runs but does not answer; see {ctld.log_file}",
            )
        counts = Counter(states.values())
        missing = total - len(states)
        if missing > 0:
            counts["missing"] = missing
        return SiteStatus(**base, controller_up=True, nodes_by_state=dict(counts))
