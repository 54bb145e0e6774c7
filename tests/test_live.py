"""Live smoke tests against the real Globus cloud (marked ``globus_live``).

They run only when credentials are provided, and are skipped with the reason otherwise:

* ``FEDERATION_LIVE_CONFIG``: a federation.yaml with at least one ``backend: globus`` site
  (its ``auth:`` block says how to authenticate: stored user tokens from
  ``federation login``, or ``client_credentials`` with the secret in the environment
  variable named by ``client_secret_env``, default ``FEDERATION_GLOBUS_CLIENT_SECRET``).
* ``FEDERATION_LIVE_SITE`` (optional): which globus site to use (default: the first).

Run: ``FEDERATION_LIVE_CONFIG=~/federation.yaml .venv/bin/pytest -m globus_live tests/test_live.py``
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from federation.core.tasks import ShellTask
from federation.deploy.config import Deployment, FederationConfig, load_config
from federation.parsing.snapshot_builder import build_site_snapshot
from federation.sites.cloud import CloudSite

pytestmark = pytest.mark.globus_live


def _config() -> FederationConfig:
    path = os.environ.get("FEDERATION_LIVE_CONFIG")
    if not path:
        pytest.skip(
            "globus_live: set FEDERATION_LIVE_CONFIG to a federation.yaml with a globus "
            "site (and its credentials: `federation login`, or the client secret env var)"
        )
    cfg = load_config(path)
    if not cfg.by_backend("globus"):
        pytest.skip(f"globus_live: {path} has no backend: globus site")
    auth = cfg.auth
    if auth.mode == "client_credentials" and not os.environ.get(auth.client_secret_env):
        pytest.skip(f"globus_live: ${auth.client_secret_env} is not set")
    return cfg


@pytest.fixture(scope="module")
def cloud_site() -> Iterator[CloudSite]:
    cfg = _config()
    name = os.environ.get("FEDERATION_LIVE_SITE") or cfg.by_backend("globus")[0]
    only = cfg.model_copy(update={"sites": {name: cfg.sites[name]}})
    dep = Deployment(only)
    (site,) = dep.backends(uuid.uuid4())
    assert isinstance(site, CloudSite)
    try:
        yield site
    finally:
        site.close()
        dep.close()


def test_endpoint_is_online_and_reports_python(cloud_site: CloudSite) -> None:
    info = cloud_site.endpoint_info(refresh=True)
    assert info.status == "online"


def test_probe_returns_a_snapshot(cloud_site: CloudSite) -> None:
    raw = cloud_site.probe().result(timeout=300)
    snap = build_site_snapshot(cloud_site.name, raw)
    assert snap.health.reachable and snap.partitions


def test_shell_task_runs_in_a_slurm_allocation(cloud_site: CloudSite) -> None:
    spec = cloud_site.spec
    part = spec.partitions[0]
    from federation.core.envelope import Shape

    shape = Shape(
        site=spec.name,
        partition=part.name,
        nodes=1,
        cpus=1,
        mem_gb=1,
        gpus=0,
        walltime_s=300,
        account=cloud_site.account,
    )
    res = cloud_site.submit(ShellTask(command="echo $SLURM_JOB_ID"), shape).result(timeout=1800)
    assert res.returncode == 0 and res.stdout.strip().isdigit()
