"""Fault injection on the local federation: kill one site's daemons, then restore them.

For tests and demonstrations of what the coordinator does when a site breaks: the site's
``slurmctld`` killed (the controller is gone, running jobs keep running), one node's
``slurmd`` killed together with the job steps it runs (the node crashed), and the
restoration of each. Only processes this federation started are signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from federation.localslurm.cluster import SiteCluster, node_ready
from federation.localslurm.commands import run_slurm
from federation.localslurm.federation import LocalFederation
from federation.localslurm.process import _cmdline, owned_processes, pid_running


def _kill(pid: int, timeout_s: float = 10.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while pid_running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _environ(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


class SiteFaults:
    """Kill and restore the Slurm daemons of one site of ``fed``."""

    def __init__(self, fed: LocalFederation, site: str) -> None:
        self.fed = fed
        self.site = site
        self.cluster: SiteCluster = fed._cluster(site)

    # --- the controller -------------------------------------------------------------------
    def kill_controller(self) -> int:
        """SIGKILL the site's slurmctld (no clean shutdown); returns the pid killed."""
        pid = self.cluster.ctld().pid()
        if pid is None:
            raise RuntimeError(f"slurmctld of {self.site} is not running")
        _kill(pid)
        return pid

    def controller_up(self) -> bool:
        return self.cluster.ping()

    def restore_controller(self, timeout_s: float = 60.0) -> None:
        """Start slurmctld again (it recovers its state files) and wait for every node."""
        ctld = self.cluster.ctld()
        if not ctld.running():
            ctld.start(timeout_s=30)
        self.cluster.wait_controller(timeout_s)
        self.wait_nodes_ready(timeout_s)

    # --- one node -----------------------------------------------------------------------
    def node_state(self, node: str) -> str:
        return self.cluster.node_states().get(node, "missing")

    def jobs_on(self, node: str) -> list[str]:
        proc = run_slurm(["squeue", "-h", "-w", node, "-o", "%i"], self.cluster.env(), 10)
        return proc.stdout.split() if proc.returncode == 0 else []

    def crash_node(self, node: str) -> list[int]:
        """SIGKILL the node's slurmd and every job step it started (a crashed node).

        Returns the pids killed. slurmctld notices after ``SlurmdTimeout`` and marks the
        node down, failing (or requeueing) its jobs with ``NODE_FAIL``.
        """
        jobs = set(self.jobs_on(node))
        slurmd = self.cluster.slurmd(node)
        killed: list[int] = []
        if (pid := slurmd.pid()) is not None:
            _kill(pid)
            killed.append(pid)
        conf = f"SLURM_CONF={self.cluster.slurm_conf}".encode()
        for argv, pids in owned_processes(slurmd.owner).items():
            step = argv[0] if argv else ""
            if not step.startswith("slurmstepd: ["):
                continue
            job = step.removeprefix("slurmstepd: [").split(".", 1)[0].rstrip("]")
            for p in pids:
                if job in jobs and conf in _environ(p):
                    killed.extend(self._kill_tree(p))
        return killed

    def _kill_tree(self, root: int) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    ppid = int(Path(entry, "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry.name))
        tree, todo = [], [root]
        while todo:
            p = todo.pop()
            tree.append(p)
            todo.extend(children.get(p, []))
        for p in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        return tree

    def restore_node(self, node: str, timeout_s: float = 60.0) -> None:
        """Start the node's slurmd again and return the node to service."""
        slurmd = self.cluster.slurmd(node)
        if not slurmd.running():
            slurmd.start(timeout_s=30)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.node_state(node)
            if node_ready(state) and not state.startswith("drain"):
                return
            if state.startswith(("down", "drain")) and "*" not in state:
                run_slurm(
                    ["scontrol", "update", f"nodename={node}", "state=resume"],
                    self.cluster.env(),
                    10,
                )
            time.sleep(0.5)
        raise TimeoutError(f"{node} not back in service after {timeout_s:.0f} s")

    def wait_nodes_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.cluster.unready_nodes():
            if time.monotonic() > deadline:
                raise self.cluster.not_ready_error(self.cluster.unready_nodes())
            time.sleep(0.2)


def running_step_pids(fed: LocalFederation, site: str) -> list[int]:
    """Pids of the site's live ``slurmstepd`` processes (for orphan checks)."""
    cluster = fed._cluster(site)
    conf = f"SLURM_CONF={cluster.slurm_conf}".encode()
    owner = str(fed.layout.root)
    return [
        p
        for argv, pids in owned_processes(owner).items()
        if argv and argv[0].startswith("slurmstepd:")
        for p in pids
        if conf in _environ(p) and _cmdline(p)
    ]
