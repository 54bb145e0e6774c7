"""``federation.yaml`` names each site's Globus collection, and move_data goes through Globus
Transfer between those sites: the deployment builds the real ``globus_sdk.TransferClient``
(here with the Transfer service answered by ``globus_sdk.testing`` registered responses),
copies files only between embedded local sites that name none, and refuses to mix the two
with a message that says what to configure."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import globus_sdk
import pytest
import responses
from globus_compute_sdk import Client
from globus_sdk.testing import RegisteredResponse, get_response_set, load_response
from globus_sdk.transport import RetryConfig

from federation.core.errors import ConfigError, TransferError
from federation.deploy.config import Deployment, load_config
from federation.runtime.events import EventBus
from federation.runtime.transfers import TransferManager
from federation.sites.globus_auth import AuthSettings
from federation.transfer import (
    DataRef,
    GlobusTransferBackend,
    LocalCopyBackend,
    TransferRequest,
)

SRC = str(get_response_set("transfer.operation_stat").metadata["endpoint_id"])
DST = str(uuid.UUID(int=0xDE57))
TASK_ID = get_response_set("transfer.submit_transfer").metadata["task_id"]
URL = "https://transfer.api.globus.org/v0.10"
EID = "11111111-1111-1111-1111-111111111111"
CONFIG = f"""
auth:
  mode: user
sites:
  delta:
    backend: globus
    endpoint_id: {EID}
    transfer_collection_id: {SRC}
    collection_path_prefix: /projects/bbka
  vista:
    backend: globus
    endpoint_id: 22222222-2222-2222-2222-222222222222
    transfer_collection_id: {DST}
    collection_path_prefix: /scratch/fed
  anvil:
    backend: globus
    endpoint_id: 33333333-3333-3333-3333-333333333333
  local:
    backend: local
"""


@pytest.fixture
def rsps() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        yield mock


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[tuple[Deployment, list[AuthSettings]]]:
    path = tmp_path / "federation.yaml"
    path.write_text(CONFIG)
    asked: list[AuthSettings] = []

    def transfer_client(auth: AuthSettings) -> globus_sdk.TransferClient:
        asked.append(auth)
        return globus_sdk.TransferClient(
            authorizer=globus_sdk.AccessTokenAuthorizer("not-a-real-token"),
            retry_config=RetryConfig(max_retries=0),
        )

    def compute_client(auth: AuthSettings) -> Client:
        return Client(authorizer=globus_sdk.NullAuthorizer(), do_version_check=False)

    dep = Deployment(
        load_config(path),
        home=tmp_path / "home",
        client_factory=compute_client,
        transfer_client_factory=transfer_client,
    )
    yield dep, asked
    dep.close()


def test_sites_with_collections_move_data_through_globus(
    deployment: tuple[Deployment, list[AuthSettings]], rsps: responses.RequestsMock
) -> None:
    dep, asked = deployment
    backends = dep.transfer_backends()
    assert isinstance(backends["delta"], GlobusTransferBackend)
    assert backends["delta"] is backends["vista"]  # one backend: any two can exchange data
    assert isinstance(backends["local"], LocalCopyBackend)
    assert "anvil" not in backends  # a cloud site without a collection has no data path
    assert len(asked) == 1 and asked[0].mode == "user"  # the same login as Compute
    globus = backends["delta"]
    assert isinstance(globus, GlobusTransferBackend)
    globus.poll_min_s = globus.poll_max_s = 0.001

    rsps.add(
        responses.GET,
        f"{URL}/operation/endpoint/{SRC}/stat",
        json={"DATA_TYPE": "file", "type": "file", "name": "in.bin", "size": 10},
    )
    load_response(globus_sdk.TransferClient.get_submission_id, requests_mock=rsps)
    load_response(globus_sdk.TransferClient.submit_transfer, requests_mock=rsps)
    RegisteredResponse(
        service="transfer",
        path=f"/v0.10/task/{TASK_ID}",
        json={
            "DATA_TYPE": "task",
            "task_id": TASK_ID,
            "type": "TRANSFER",
            "status": "SUCCEEDED",
            "bytes_transferred": 10,
            "files_transferred": 1,
            "files_skipped": 0,
            "fatal_error": None,
        },
    ).add(requests_mock=rsps)
    mgr = TransferManager(backends, None, EventBus())
    try:
        h = mgr.submit(
            TransferRequest(
                source=DataRef(site="delta", path="runs/in.bin"),
                destination=DataRef(site="vista", path="inputs/in.bin"),
            )
        )
        assert h.wait(30) and h.state == "succeeded" and h.backend == "globus"
        [call] = [c for c in rsps.calls if c.request.url.endswith("/transfer")]
        [item] = json.loads(call.request.body)["DATA"]
        assert item["source_path"] == "/projects/bbka/runs/in.bin"
        assert item["destination_path"] == "/scratch/fed/inputs/in.bin"
        assert [e.kind for e in h.events()] == ["transfer.submitted", "transfer.completed"]
        # a Globus site and an embedded local one have no transfer in common: said at once
        with pytest.raises(TransferError, match="Globus collections"):
            mgr.submit(
                TransferRequest(
                    source=DataRef(site="delta", path="runs/in.bin"),
                    destination=DataRef(site="local", path="in.bin"),
                )
            )
    finally:
        globus.close()


def test_a_collection_needs_its_path_prefix(tmp_path: Path) -> None:
    path = tmp_path / "federation.yaml"
    path.write_text(
        f"sites:\n  delta:\n    backend: globus\n    endpoint_id: {EID}\n"
        f"    transfer_collection_id: {SRC}\n"
    )
    with pytest.raises(ConfigError, match="collection_path_prefix go together"):
        load_config(path)


def test_copies_are_refused_where_no_site_can_cancel(tmp_path: Path) -> None:
    """A globus site withdraws a losing copy by claiming its tag first unless its config
    turns that off (job_check_s: null); copies need some site that can."""
    path = tmp_path / "federation.yaml"
    base = f"sites:\n  delta:\n    backend: globus\n    endpoint_id: {EID}\n"
    off = base + "    job_check_s: null\n"
    for policy in ("twin-hedge", "twin-watch"):
        path.write_text(f"placement: {policy}\n{off}")
        with pytest.raises(ConfigError, match="no site here can withdraw a queued task"):
            load_config(path)
        path.write_text(f"placement: {policy}\n{base}")
        assert load_config(path).sites["delta"].job_check_s == 60.0
    path.write_text(f"placement: best-feasible\n{off}")
    assert load_config(path).placement == "best-feasible"
    path.write_text(f"placement: twin-watch\n{off}  local:\n    backend: local\n")
    assert load_config(path).placement == "twin-watch"  # local sites can withdraw copies


def test_each_sites_workspace_is_under_its_collections_path_prefix(
    deployment: tuple[Deployment, list[AuthSettings]],
) -> None:
    """A site's storage root (where its callers' workspaces are, and where tasks run) is
    the collection's path prefix; an embedded site's, its storage folder; a site with no
    collection has none, and its shell tasks are shipped as they are."""
    from pathlib import PurePosixPath

    from federation.core.storage import site_storage
    from federation.core.tasks import ShellTask
    from federation.runtime.results import shipped

    dep, _ = deployment
    assert dep.storage_root("delta") == Path("/projects/bbka")
    assert dep.storage_root("vista") == Path("/scratch/fed")
    assert dep.storage_root("local") == site_storage("local", dep.home)
    assert dep.storage_root("anvil") is None
    ws = PurePosixPath("workspaces/alice/default")
    task = ShellTask(command="./prepare.sh")
    on_delta = shipped(task, "delta", "r", dep.storage_root, 1000, ws)
    assert isinstance(on_delta, ShellTask)
    assert "cd /projects/bbka/workspaces/alice/default" in on_delta.command
    assert shipped(task, "anvil", "r", dep.storage_root, 1000, ws) == task
