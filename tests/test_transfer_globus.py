"""The Globus Transfer backend through the real ``globus_sdk.TransferClient``, with the
Transfer service answered by ``globus_sdk.testing`` registered responses (``responses``
at the transport seam): success, FAILED with Globus's reason, 401/403, 429, an offline
collection, a missing source, path traversal, and recovery by recorded task id."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import globus_sdk
import pytest
import responses
from globus_sdk.testing import RegisteredResponse, get_response_set, load_response
from globus_sdk.transport import RetryConfig

from federation.core.errors import (
    DataNotFoundError,
    TransferAuthError,
    TransferPathError,
    TransferUnavailableError,
    UnknownSiteError,
)
from federation.runtime.events import EventBus
from federation.runtime.store import Store
from federation.runtime.transfers import TransferManager
from federation.transfer import (
    DataRef,
    GlobusCollection,
    GlobusTransferBackend,
    TransferRequest,
)

SRC = str(get_response_set("transfer.operation_stat").metadata["endpoint_id"])
DST = str(uuid.UUID(int=0xDE57))
TASK_ID = get_response_set("transfer.submit_transfer").metadata["task_id"]
SUBMISSION_ID = get_response_set("transfer.submit_transfer").metadata["submission_id"]
COLLECTIONS = {
    "alpha": GlobusCollection(collection_id=uuid.UUID(SRC), path_prefix="/projects/alpha"),
    "beta": GlobusCollection(collection_id=uuid.UUID(DST), path_prefix="/scratch/fed"),
}
URL = "https://transfer.api.globus.org/v0.10"


@pytest.fixture
def rsps() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        yield mock


def _client(max_retries: int = 0) -> globus_sdk.TransferClient:
    return globus_sdk.TransferClient(
        authorizer=globus_sdk.AccessTokenAuthorizer("not-a-real-token"),
        retry_config=RetryConfig(max_retries=max_retries, backoff=lambda ctx: 0.0),
    )


@pytest.fixture
def backends(rsps: responses.RequestsMock) -> Iterator[list[GlobusTransferBackend]]:
    """Backends made in a test; their monitor threads stop before the mock does."""
    made: list[GlobusTransferBackend] = []
    yield made
    for b in made:
        b.close()


def _backend(made: list[GlobusTransferBackend], **kw: Any) -> GlobusTransferBackend:
    kw.setdefault("poll_min_s", 0.001)
    kw.setdefault("poll_max_s", 0.01)
    client = kw.pop("client", None) or _client()
    b = GlobusTransferBackend(client, COLLECTIONS, **kw)
    made.append(b)
    return b


def _req(src: str = "runs/in.bin", dst: str = "inputs/in.bin", **kw: Any) -> TransferRequest:
    return TransferRequest(
        source=DataRef(site="alpha", path=src), destination=DataRef(site="beta", path=dst), **kw
    )


def _stat(rsps: responses.RequestsMock, kind: str = "file", case: str | None = None) -> None:
    if case is not None:
        load_response(globus_sdk.TransferClient.operation_stat, case=case, requests_mock=rsps)
        return
    rsps.add(
        responses.GET,
        f"{URL}/operation/endpoint/{SRC}/stat",
        json={"DATA_TYPE": kind, "type": kind, "name": "in.bin", "size": 1000},
    )


def _accept(rsps: responses.RequestsMock) -> None:
    load_response(globus_sdk.TransferClient.get_submission_id, requests_mock=rsps)
    load_response(globus_sdk.TransferClient.submit_transfer, requests_mock=rsps)


def _task(rsps: responses.RequestsMock, status: str, **fields: Any) -> None:
    doc = {
        "DATA_TYPE": "task",
        "task_id": TASK_ID,
        "type": "TRANSFER",
        "status": status,
        "bytes_transferred": 0,
        "files_transferred": 0,
        "files_skipped": 0,
        "nice_status": "OK" if status == "ACTIVE" else None,
        "fatal_error": None,
        **fields,
    }
    RegisteredResponse(service="transfer", path=f"/v0.10/task/{TASK_ID}", json=doc).add(
        requests_mock=rsps
    )


def _events_list(rsps: responses.RequestsMock, events: list[dict[str, Any]]) -> None:
    RegisteredResponse(
        service="transfer",
        path=f"/v0.10/task/{TASK_ID}/event_list",
        json={"DATA_TYPE": "event_list", "DATA": events, "offset": 0, "limit": 10, "total": 1},
    ).add(requests_mock=rsps)


def _calls(rsps: responses.RequestsMock, suffix: str) -> list[Any]:
    return [c for c in rsps.calls if c.request.url.split("?")[0].endswith(suffix)]


def test_transfer_succeeds_and_is_followed_to_the_end(
    rsps: responses.RequestsMock, backends: list[GlobusTransferBackend], tmp_path: Path
) -> None:
    _stat(rsps)
    _accept(rsps)
    _task(rsps, "ACTIVE", bytes_transferred=100)
    _task(rsps, "ACTIVE", bytes_transferred=100)  # unchanged: no event for it
    _task(rsps, "ACTIVE", bytes_transferred=600)
    _task(rsps, "SUCCEEDED", bytes_transferred=1000, files_transferred=1)
    store = Store(tmp_path / "c.db")
    backend = _backend(backends)
    mgr = TransferManager(backend, store, EventBus(store))
    h = mgr.submit(_req(label="stage inputs", deadline_s=3600))
    assert h.globus_task_id == TASK_ID and h.backend == "globus"
    assert store.transfers(transfer_id=h.id)[0]["globus_task_id"] == TASK_ID
    assert store.transfers(transfer_id=h.id)[0]["submission_id"] == SUBMISSION_ID

    doc = json.loads(_calls(rsps, "/transfer")[0].request.body)
    assert doc["source_endpoint"] == SRC and doc["destination_endpoint"] == DST
    assert doc["sync_level"] == 3 and doc["verify_checksum"] is True
    assert doc["label"] == "stage inputs" and doc["submission_id"] == SUBMISSION_ID
    assert doc["deadline"]  # an ISO timestamp an hour ahead
    [item] = doc["DATA"]
    assert item["source_path"] == "/projects/alpha/runs/in.bin"
    assert item["destination_path"] == "/scratch/fed/inputs/in.bin"
    assert item["recursive"] is False

    assert h.wait(30) and h.state == "succeeded"
    assert (h.bytes_transferred, h.files, h.checksum_verified) == (1000, 1, True)
    kinds = [(e.kind, e.detail.get("bytes_transferred")) for e in h.events()]
    assert kinds == [
        ("transfer.submitted", None),
        ("transfer.progress", 100),
        ("transfer.progress", 600),
        ("transfer.completed", 1000),
    ]
    assert backend.polls == 4 and backend.watching == 0  # one get_task per check, then stop
    assert h.events()[0].detail["globus_task_id"] == TASK_ID


def test_directory_source_is_submitted_recursive(
    rsps: responses.RequestsMock, backends: list[GlobusTransferBackend]
) -> None:
    _stat(rsps, kind="dir")
    _accept(rsps)
    _task(rsps, "SUCCEEDED", bytes_transferred=10, files_transferred=3)
    h = TransferManager(_backend(backends), None, EventBus()).submit(
        _req("ds", "ds", sync_level="mtime", verify_checksum=False)
    )
    doc = json.loads(_calls(rsps, "/transfer")[0].request.body)
    assert doc["DATA"][0]["recursive"] is True and doc["sync_level"] == 2
    assert doc["verify_checksum"] is False
    assert h.wait(30) and h.files == 3 and h.checksum_verified is False


def test_failed_task_reports_globus_reason(
    rsps: responses.RequestsMock, backends: list[GlobusTransferBackend]
) -> None:
    _stat(rsps)
    _accept(rsps)
    _task(rsps, "ACTIVE", bytes_transferred=10)
    _task(
        rsps,
        "FAILED",
        bytes_transferred=10,
        nice_status="PERMISSION_DENIED",
        nice_status_short_description="permission denied",
        fatal_error={"code": "PERMISSION_DENIED", "description": "permission denied"},
    )
    _events_list(
        rsps,
        [
            {
                "DATA_TYPE": "event",
                "code": "PERMISSION_DENIED",
                "description": "permission denied",
                "details": "Error (transfer) ... 550 /scratch/fed/inputs: Permission denied",
                "is_error": True,
                "time": "2026-01-01T00:00:00+00:00",
            }
        ],
    )
    h = TransferManager(_backend(backends), None, EventBus()).submit(_req())
    assert h.wait(30) and h.state == "failed"
    failed = h.events()[-1]
    assert failed.kind == "transfer.failed"
    assert "Permission denied" in failed.detail["error"]  # the event list's details
    assert "PERMISSION_DENIED" in failed.detail["error"] and TASK_ID in failed.detail["error"]
    assert failed.detail["globus_task_id"] == TASK_ID


@pytest.mark.parametrize(
    ("status", "code", "match"),
    [
        (401, "AuthenticationFailed", "log in"),
        (403, "PermissionDenied", "consent"),
    ],
)
def test_submit_refused_401_403_is_a_clear_auth_error(
    rsps: responses.RequestsMock,
    backends: list[GlobusTransferBackend],
    tmp_path: Path,
    status: int,
    code: str,
    match: str,
) -> None:
    _stat(rsps)
    load_response(globus_sdk.TransferClient.get_submission_id, requests_mock=rsps)
    rsps.add(
        responses.POST,
        f"{URL}/transfer",
        status=status,
        json={"code": code, "message": "No thanks", "request_id": "r1"},
    )
    store = Store(tmp_path / "c.db")
    mgr = TransferManager(_backend(backends), store, EventBus(store))
    with pytest.raises(TransferAuthError, match=match) as err:
        mgr.submit(_req())
    assert f"{status} {code}" in str(err.value) and "request id r1" in str(err.value)
    [row] = store.transfers()
    assert row["state"] == "failed" and match in row["error"]  # recorded, not lost
    assert [e.kind for e in mgr.bus.history()] == ["transfer.failed"]


def test_permission_denied_on_the_source_collection(
    rsps: responses.RequestsMock, backends: list[GlobusTransferBackend]
) -> None:
    _stat(rsps, case="permission_denied")
    load_response(globus_sdk.TransferClient.get_submission_id, requests_mock=rsps)
    with pytest.raises(TransferAuthError, match="EndpointPermissionDenied"):
        TransferManager(_backend(backends), None, EventBus()).submit(_req())
    assert _calls(rsps, "/transfer") == []  # nothing submitted


def test_rate_limit_is_retried_by_the_sdk(
    rsps: responses.RequestsMock, backends: list[GlobusTransferBackend]
) -> None:
    _stat(rsps)
    load_response(globus_sdk.TransferClient.get_submission_id, requests_mock=rsps)
    rsps.add(
        responses.POST,
        f"{URL}/transfer",
        status=429,
        headers={"Retry-After": "0"},
        json={"code": "RateLimited", "message": "slow down", "request_id": "r2"},
    )
    load_response(globus_sdk.TransferClient.submit_transfer, requests_mock=rsps)
    _task(rsps, "SUCCEEDED", bytes_transferred=5, files_transferred=1)
    b = _backend(backends, client=_client(max_retries=2))
    h = TransferManager(b, None, EventBus()).submit(_req())
    assert len(_calls(rsps, "/transfer")) == 2 and h.globus_task_id == TASK_ID
    assert h.wait(30) and h.state == "succeeded"


def test_rate_limit_after_retries_is_a_clear_error(
    rsps: responses.RequestsMock, backends: list[GlobusTransferBackend]
) -> None:
    _stat(rsps)
    load_response(globus_sdk.TransferClient.get_submission_id, requests_mock=rsps)
    rsps.add(
        responses.POST,
        f"{URL}/transfer",
        status=429,
        json={"code": "RateLimited", "message": "slow down", "request_id": "r3"},
    )
    with pytest.raises(TransferUnavailableError, match="rate-limited"):
        TransferManager(_backend(backends, client=_client(1)), None, EventBus()).submit(_req())
    assert len(_calls(rsps, "/transfer")) == 2  # the SDK tried twice, then gave up


def test_offline_collection_is_reported_without_retrying(
    rsps: responses.RequestsMock, backends: list[GlobusTransferBackend]
) -> None:
    rsps.add(
        responses.GET,
        f"{URL}/operation/endpoint/{SRC}/stat",
        status=502,
        json={
            "code": "ExternalError.DirListingFailed.GCDisconnected",
            "message": "The Globus Connect Personal endpoint is not currently connected",
            "request_id": "r4",
        },
    )
    load_response(globus_sdk.TransferClient.get_submission_id, requests_mock=rsps)
    b = _backend(backends, client=_client(max_retries=3))
    with pytest.raises(TransferUnavailableError, match="unreachable") as err:
        TransferManager(b, None, EventBus()).submit(_req())
    assert "GCDisconnected" in str(err.value)
    assert len(_calls(rsps, "/stat")) == 1  # Transfer's own rule: ExternalError not retried


def test_disconnected_collection_during_a_task_shows_in_progress(
    rsps: responses.RequestsMock, backends: list[GlobusTransferBackend]
) -> None:
    _stat(rsps)
    _accept(rsps)
    _task(
        rsps,
        "ACTIVE",
        nice_status="GC_NOT_CONNECTED",
        nice_status_short_description="endpoint not connected",
    )
    _task(rsps, "FAILED", nice_status=None, fatal_error={"code": "DEADLINE", "description": "x"})
    _events_list(rsps, [])
    h = TransferManager(_backend(backends), None, EventBus()).submit(_req())
    assert h.wait(30) and h.state == "failed"
    notes = [e.detail.get("note") for e in h.events() if e.kind == "transfer.progress"]
    assert notes == ["GC_NOT_CONNECTED (endpoint not connected)"]
    assert "DEADLINE" in (h.error or "")


def test_missing_source_and_bad_paths_refused_before_submitting(
    rsps: responses.RequestsMock, backends: list[GlobusTransferBackend]
) -> None:
    mgr = TransferManager(_backend(backends), None, EventBus())
    for bad, err in (
        (_req("../../etc/passwd"), TransferPathError),
        (_req(dst="/etc/cron.d/x"), TransferPathError),
    ):
        with pytest.raises(err):
            mgr.submit(bad)
    with pytest.raises(UnknownSiteError, match="alpha, beta"):
        mgr.submit(
            TransferRequest(
                source=DataRef(site="alpha", path="x"), destination=DataRef(site="gamma", path="x")
            )
        )
    assert len(rsps.calls) == 0 and mgr.bus.history() == []
    _stat(rsps, case="not_found")
    load_response(globus_sdk.TransferClient.get_submission_id, requests_mock=rsps)
    with pytest.raises(DataNotFoundError, match="does not exist"):
        mgr.submit(_req())
    assert _calls(rsps, "/transfer") == []


def test_monitor_failures_give_up_after_a_bound(
    rsps: responses.RequestsMock, backends: list[GlobusTransferBackend]
) -> None:
    _stat(rsps)
    _accept(rsps)
    rsps.add(
        responses.GET,
        f"{URL}/task/{TASK_ID}",
        status=500,
        json={"code": "ServiceUnavailable", "message": "down", "request_id": "r5"},
    )
    h = TransferManager(_backend(backends, max_poll_errors=3), None, EventBus()).submit(_req())
    assert h.wait(30) and h.state == "failed"
    assert "gave up after 3 checks" in (h.error or "") and TASK_ID in (h.error or "")
    assert len(_calls(rsps, f"/task/{TASK_ID}")) == 3


def test_recover_remonitors_by_recorded_task_id(
    rsps: responses.RequestsMock, backends: list[GlobusTransferBackend], tmp_path: Path
) -> None:
    _stat(rsps)
    _accept(rsps)
    store = Store(tmp_path / "c.db")
    first = _backend(backends, poll_min_s=3600)  # killed before its first check
    h = TransferManager(first, store, EventBus(store)).submit(_req())
    first.close()
    _task(rsps, "SUCCEEDED", bytes_transferred=1000, files_transferred=1)

    bus = EventBus(store)
    mgr = TransferManager(_backend(backends), store, bus)
    [back] = mgr.recover()
    assert back.id == h.id and back.globus_task_id == TASK_ID
    assert back.wait(30) and back.state == "succeeded"
    assert len(_calls(rsps, "/transfer")) == 1  # followed, not submitted again
    assert back.history[0]["how"] == f"re-monitoring Globus task {TASK_ID}"
    kinds = [e.kind for e in bus.history(h.id)]
    assert kinds == ["transfer.submitted", "transfer.progress", "transfer.completed"]


def test_recover_resubmits_with_the_recorded_submission_id(
    rsps: responses.RequestsMock, backends: list[GlobusTransferBackend], tmp_path: Path
) -> None:
    store = Store(tmp_path / "c.db")
    # a coordinator that died after getting a submission id, before Globus answered
    store.insert_transfer(
        {
            "id": "t-1",
            "request": _req().model_dump_json(),
            "backend": "globus",
            "state": "queued",
            "submitted_at": "2026-01-01T00:00:00+00:00",
            "submission_id": SUBMISSION_ID,
        }
    )
    _stat(rsps)
    load_response(globus_sdk.TransferClient.submit_transfer, requests_mock=rsps)
    _task(rsps, "SUCCEEDED", bytes_transferred=1, files_transferred=1)
    [back] = TransferManager(_backend(backends), store, EventBus(store)).recover()
    assert back.wait(30) and back.state == "succeeded"
    assert _calls(rsps, "/submission_id") == []  # reused, so Globus de-duplicates
    assert json.loads(_calls(rsps, "/transfer")[0].request.body)["submission_id"] == SUBMISSION_ID
    assert back.history[0]["how"].startswith("re-submitting with the recorded submission id")
