"""One site's cluster: its config files, its slurmctld and one slurmd per emulated node."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from federation.localslurm.binaries import program
from federation.localslurm.commands import run_slurm
from federation.localslurm.errors import DaemonStartError, LocalSlurmError
from federation.localslurm.layout import Layout, Ports
from federation.localslurm.process import Daemon, owned_processes, tail
from federation.localslurm.render import render_site
from federation.localslurm.topology import ClusterSpec

logger = logging.getLogger(__name__)

_NOT_READY = {"down", "unknown", "inval", "future", "not_responding", "missing"}


def node_ready(state: str) -> bool:
    """True if a node's slurmd has registered and responds (``idle``, ``mixed``, ``drained``
    ...); False for ``down``, ``unknown``, ``inval`` and any not-responding (``*``) state."""
    s = state.lower()
    return "*" not in s and s.rstrip("~#!%$@^-+") not in _NOT_READY


class SiteCluster:
    """Files and daemons of one site's Slurm cluster."""

    def __init__(self, spec: ClusterSpec, layout: Layout, ports: Ports, user: str) -> None:
        self.spec = spec
        self.layout = layout
        self.ports = ports
        self.user = user

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def slurm_conf(self) -> Path:
        return self.layout.slurm_conf(self.name)

    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.slurm_conf)}

    # files
    def write_configs(self) -> bool:
        """Create the cluster's folders and (re)write its config files; True if any changed."""
        lay, site = self.layout, self.name
        for d in (lay.etc_dir(site), lay.state_dir(site), lay.log_dir(site), lay.pid_dir(site)):
            d.mkdir(parents=True, exist_ok=True)
        for n in self.spec.nodes:
            (lay.spool_dir(site) / n.name).mkdir(parents=True, exist_ok=True)
        self._fake_gpus()
        changed = False
        for fname, text in render_site(self.spec, lay, self.ports, self.user).items():
            path = lay.etc_dir(site) / fname
            if path.exists() and path.read_text() == text:
                continue
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
            changed = True
        return changed

    def _fake_gpus(self) -> None:
        count = max((n.gpus for n in self.spec.nodes), default=0)
        if not count:
            return
        dev = self.layout.dev_dir(self.name)
        dev.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            link = dev / f"nvidia{i}"
            if not link.is_symlink():
                link.unlink(missing_ok=True)
                link.symlink_to("/dev/null")

    # daemons
    def ctld(self) -> Daemon:
        return Daemon(
            name=f"slurmctld[{self.name}]",
            argv=(program("slurmctld"), "-f", str(self.slurm_conf)),
            pid_file=self.layout.ctld_pid(self.name),
            log_file=self.layout.ctld_log(self.name),
            owner=str(self.layout.root),
            env=self.env(),
        )

    def slurmd(self, node: str) -> Daemon:
        return Daemon(
            name=f"slurmd[{node}]",
            argv=(program("slurmd"), "-N", node, "-f", str(self.slurm_conf)),
            pid_file=self.layout.slurmd_pid(self.name, node),
            log_file=self.layout.slurmd_log(self.name, node),
            owner=str(self.layout.root),
            env=self.env(),
        )

    def slurmds(self) -> list[Daemon]:
        return [self.slurmd(n.name) for n in self.spec.nodes]

    def daemons(self) -> list[Daemon]:
        return [self.ctld(), *self.slurmds()]

    # queries
    def ping(self) -> bool:
        """True if ``scontrol ping`` says the controller is UP."""
        try:
            proc = run_slurm(["scontrol", "ping"], self.env(), timeout_s=10)
        except LocalSlurmError:
            return False
        return proc.returncode == 0 and "is UP" in proc.stdout

    def node_states(self) -> dict[str, str]:
        """Node name -> sinfo's long state (``idle``, ``mixed``, ``down*`` ...)."""
        proc = run_slurm(["sinfo", "-N", "-h", "-o", "%N|%T"], self.env(), timeout_s=10)
        if proc.returncode != 0:
            return {}
        states: dict[str, str] = {}
        for line in proc.stdout.splitlines():
            name, _, state = line.strip().partition("|")
            if name:
                states[name] = state
        return states

    def unready_nodes(self) -> dict[str, str]:
        states = self.node_states()
        return {
            n.name: states.get(n.name, "missing")
            for n in self.spec.nodes
            if not node_ready(states.get(n.name, "missing"))
        }

    def wait_controller(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        ctld = self.ctld()
        while time.monotonic() < deadline:
            if self.ping():
                return
            if not ctld.running() and ctld.adopt(owned_processes(ctld.owner)) is None:
                raise ctld.failed("exited during start-up")
            time.sleep(0.1)
        raise ctld.failed(f"did not answer `scontrol ping` within {timeout_s:.0f} s")

    def not_ready_error(self, unready: dict[str, str]) -> DaemonStartError:
        node = next(iter(unready))
        log = self.layout.slurmd_log(self.name, node)
        states = ", ".join(f"{n}={s}" for n, s in unready.items())
        reasons = run_slurm(["sinfo", "-R", "-h"], self.env(), timeout_s=10).stdout.strip()
        why = f"nodes did not become ready ({states}); sinfo -R: {reasons or '-'}"
        return DaemonStartError(f"slurmd[{node}]", why, log, tail(log))

    def job_ids(self) -> list[str]:
        proc = run_slurm(["squeue", "-h", "-o", "%i"], self.env(), timeout_s=10)
        return proc.stdout.split() if proc.returncode == 0 else []

    def cancel_jobs(self, timeout_s: float = 10.0) -> int:
        """Cancel every job of the cluster and wait (briefly) for them to end."""
        ids = self.job_ids()
        if not ids:
            return 0
        run_slurm(["scancel", *ids], self.env(), timeout_s=10)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            proc = run_slurm(["squeue", "-h", "-t", "R,CG,S", "-o", "%i"], self.env(), 10)
            if proc.returncode != 0 or not proc.stdout.strip():
                break
            time.sleep(0.2)
        logger.info("%s: cancelled %s job(s)", self.name, len(ids))
        return len(ids)
