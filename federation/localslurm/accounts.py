"""Register clusters, each site's accounts, the current user and the partition QOS with
slurmdbd.

Every account a site charges is registered (``SiteSpec.accounts``: Delta's ``-cpu`` and
``-gpu``, Anvil's ``-gpu`` and ``-ai``) with a user association, so slurm.conf's
``AccountingStorageEnforce=associations`` refuses any other account, as the site does.
Idempotent: three queries read what exists and only the missing pieces are added. The site's
``default_account`` becomes the user's default account on that cluster. Slurm stores account
names in lowercase (``ASC23000`` -> ``asc23000``), so comparisons are case-insensitive.

Writes run one at a time: slurmdbd does not serialize concurrent ``add account`` requests,
and two at once can leave an account's association without its account record (``show
associations`` lists it, ``add user ... account=`` says it does not exist). Such a
half-added account is found (an association whose account ``show accounts`` lacks), deleted
and added again. The reads run in parallel (~0.2 s each on loopback).

Each partition QOS (``topology.site_partition_qos``: the site's per-user job limits, e.g.
``vista-gh`` with ``MaxJobsPerUser=20 MaxSubmitJobsPerUser=40``) is added if missing and
modified if its limits differ, before any slurmctld whose slurm.conf names it starts. A QOS
a partition no longer has is left in slurmdbd, unused. So is each QOS a site's classes name
(``topology.site_class_qos``: Perlmutter's ``regular``, ``debug`` with ``MaxWall=30:00``),
which is also added to the user's associations on that site's cluster (``qos+=``), as
``AccountingStorageEnforce=qos`` refuses a job under a QOS its association lacks.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from federation.core.spec import SiteSpec
from federation.localslurm.binaries import which
from federation.localslurm.commands import check_slurm
from federation.localslurm.errors import SlurmCommandError
from federation.localslurm.topology import PartitionQos, site_class_qos, site_partition_qos

logger = logging.getLogger(__name__)

_ALREADY = ("Nothing new added", "already exists")
"""sacctmgr exits 1 with these when someone else added the same thing first."""


def _clusters(env: Mapping[str, str]) -> set[str]:
    out = check_slurm(["sacctmgr", "-nP", "show", "clusters", "format=cluster"], env).stdout
    return {line.strip() for line in out.splitlines() if line.strip()}


def _user_assocs(env: Mapping[str, str], user: str) -> dict[tuple[str, str], tuple[str, set[str]]]:
    """(cluster, account) -> the user's default account on that cluster and the QOS the
    association may use."""
    out = check_slurm(
        [
            "sacctmgr",
            "-nP",
            "show",
            "users",
            "withassoc",
            "where",
            f"name={user}",
            "format=cluster,account,defaultaccount,qos",
        ],
        env,
    ).stdout
    rows = (line.split("|") for line in out.splitlines() if line.strip())
    return {
        (r[0], r[1].lower()): (r[2].lower(), {q.lower() for q in r[3].split(",") if q})
        for r in rows
        if len(r) >= 4
    }


def _accounts(env: Mapping[str, str]) -> set[tuple[str, str]]:
    out = check_slurm(
        ["sacctmgr", "-nP", "show", "associations", "where", "user=", "format=cluster,account"],
        env,
    ).stdout
    rows = (line.split("|") for line in out.splitlines() if line.strip())
    return {(r[0], r[1].lower()) for r in rows if len(r) >= 2}


def _account_names(env: Mapping[str, str]) -> set[str]:
    """The accounts slurmdbd has a record of (an association alone is not enough)."""
    out = check_slurm(["sacctmgr", "-nP", "show", "accounts", "format=account"], env).stdout
    return {line.strip().lower() for line in out.splitlines() if line.strip()}


Limits = tuple[int | None, int | None, int | None, bool]


def wall_seconds(text: str) -> int | None:
    """Slurm's ``[D-][HH:]MM:SS`` as seconds (None for empty)."""
    if not text.strip():
        return None
    days, _, clock = text.strip().rpartition("-")
    parts = [int(x) for x in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, sec = parts
    return (int(days) if days else 0) * 86400 + h * 3600 + m * 60 + sec


def _qos_limits(env: Mapping[str, str]) -> dict[str, Limits]:
    """QOS name -> its (MaxJobsPerUser, MaxSubmitJobsPerUser, MaxWall s, DenyOnLimit);
    None where unset."""
    out = check_slurm(
        ["sacctmgr", "-nP", "show", "qos", "format=name,maxjobspu,maxsubmitpu,maxwall,flags"],
        env,
    ).stdout
    rows = (line.split("|") for line in out.splitlines() if line.strip())
    return {
        r[0].lower(): (
            int(r[1]) if r[1] else None,
            int(r[2]) if r[2] else None,
            wall_seconds(r[3]),
            "DenyOnLimit" in r[4].split(","),
        )
        for r in rows
        if len(r) >= 5
    }


def _qos_commands(sites: Sequence[SiteSpec], existing: Mapping[str, Limits]) -> list[list[str]]:
    """``add qos`` for each partition or class QOS slurmdbd lacks, ``modify qos`` for one
    whose limits differ from the site's."""
    cmds: list[list[str]] = []
    wanted: dict[str, PartitionQos] = {}
    for s in sites:
        for q in (*site_partition_qos(s), *site_class_qos(s)):
            if q.name in wanted and wanted[q.name] != q:
                raise ValueError(
                    f"QOS {q.name}: site {s.name} gives it other limits than another site "
                    "(QOS are shared by every cluster of one slurmdbd)"
                )
            wanted[q.name] = q
    for name, q in sorted(wanted.items()):
        have = existing.get(name)
        if have is None:
            cmds.append(["add", "qos", name, *q.sacctmgr_limits()])
        elif have != q.limits:
            cmds.append(["modify", "qos", "where", f"name={name}", "set", *q.sacctmgr_limits("-1")])
    return cmds


def _each(commands: list[list[str]], env: Mapping[str, str]) -> None:
    """Run ``sacctmgr -i <args>`` for each command, one after another; raise if any failed."""
    errors = []
    for cmd in commands:
        p = subprocess.run(
            [which("sacctmgr"), "-i", *cmd],
            env=dict(env),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
        if p.returncode != 0 and not any(m in p.stdout for m in _ALREADY):
            errors.append(
                f"`sacctmgr -i {' '.join(cmd)}` (status {p.returncode}): {p.stdout.strip()}"
            )
    if errors:
        raise SlurmCommandError("could not register with slurmdbd: " + "; ".join(errors))


def _modify_user(user: str, cluster: str, setting: str) -> list[str]:
    """``sacctmgr modify user`` of ``user``'s associations on ``cluster``: ``setting``."""
    return ["modify", "user", "where", f"name={user}", f"cluster={cluster}", "set", setting]


def register(sites: Sequence[SiteSpec], user: str, env: Mapping[str, str]) -> list[str]:
    """Make sure every site's cluster, account, user association and partition QOS exist.

    ``env`` must name a slurm.conf whose accounting settings point at the slurmdbd.
    Returns the ``sacctmgr`` commands that were run (empty when everything was there).
    """
    full_env = {**os.environ, **env}
    with ThreadPoolExecutor(5) as pool:  # the queries at once: each waits on the network
        clusters_f = pool.submit(_clusters, full_env)
        accounts_f = pool.submit(_accounts, full_env)
        names_f = pool.submit(_account_names, full_env)
        assocs_f = pool.submit(_user_assocs, full_env, user)
        qos_f = pool.submit(_qos_limits, full_env)
        clusters, accounts, assocs = clusters_f.result(), accounts_f.result(), assocs_f.result()
        names, qos = names_f.result(), qos_f.result()
    steps: list[list[list[str]]] = []
    qos_cmds = _qos_commands(sites, qos)
    if qos_cmds:  # QOS belong to no cluster: nothing else has to exist first
        steps.append(qos_cmds)
    half = sorted((c, a) for c, a in accounts if a not in names and a != "root")
    if half:  # an association left without its account record: delete it, add it again
        steps.append([["delete", "account", a, f"cluster={c}"] for c, a in half])
        accounts -= set(half)
        assocs = {k: v for k, v in assocs.items() if k not in half}
    missing = [s.name for s in sites if s.name not in clusters]
    if missing:
        steps.append([["add", "cluster", ",".join(missing)]])
    add_accounts, add_users, set_defaults, add_qos = [], [], [], []
    for s in sites:
        default = s.default_account.lower()
        wanted = [a.lower() for a in s.accounts]
        for acct in wanted:
            if (s.name, acct) not in accounts:
                add_accounts.append(
                    [
                        "add",
                        "account",
                        acct,
                        f"cluster={s.name}",
                        f"description={s.name} account",
                        f"organization={s.institution.lower()}",
                    ]
                )
        unassociated = [a for a in wanted if (s.name, a) not in assocs]
        if unassociated:  # one command per site: its associations in one go
            add_users.append(
                [
                    "add",
                    "user",
                    user,
                    f"account={','.join(unassociated)}",
                    f"cluster={s.name}",
                    f"defaultaccount={default}",
                ]
            )
        current = {d for (cluster, _), (d, _q) in assocs.items() if cluster == s.name}
        if current - {default}:  # e.g. an account the site no longer charges
            set_defaults.append(_modify_user(user, s.name, f"defaultaccount={default}"))
        lacking = [
            q.name
            for q in site_class_qos(s)
            if any(q.name not in assocs.get((s.name, a), ("", set()))[1] for a in wanted)
        ]
        if lacking:  # after the associations exist (they start with the default QOS only)
            add_qos.append(_modify_user(user, s.name, f"qos+={','.join(lacking)}"))
    # the default's association must exist before it is made the default
    steps += [cmds for cmds in (add_accounts, add_users, set_defaults, add_qos) if cmds]
    for cmds in steps:
        _each(cmds, full_env)
    done = [" ".join(c) for cmds in steps for c in cmds]
    if done:
        logger.info("slurmdbd registrations: %s", "; ".join(done))
    return done
