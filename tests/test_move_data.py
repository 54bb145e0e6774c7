"""Coordinator.move_data end to end (local site storage, no Slurm needed), its recovery
through Coordinator.recover(), the same call over the Globus backend, and stage-in time
counted by placement."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path

import globus_sdk
import pytest
import responses
from globus_sdk.testing import RegisteredResponse, get_response_set, load_response
from globus_sdk.transport import RetryConfig
from test_placement import NOW, SPECS, _fed  # the hand-built snapshots placement is tested on

from federation.core.envelope import ResourceEnvelope, StageIn
from federation.core.errors import BadEnvelopeError, TransferPathError, UnknownSiteError
from federation.core.spec import site_names
from federation.placement.candidates import TransferRates, enumerate_candidates
from federation.placement.decide import place
from federation.runtime.coordinator import Coordinator
from federation.runtime.store import Store
from federation.transfer import (
    GlobusCollection,
    GlobusTransferBackend,
    LocalCopyBackend,
    TransferStatus,
)


def _coordinator(home: Path, **kw: object) -> Coordinator:
    return Coordinator([], store=Store(home / "coordinator.db"), **kw)  # type: ignore[arg-type]


def test_move_data_between_local_sites(tmp_path: Path) -> None:
    home = tmp_path / "fed"
    data = os.urandom(200_000)
    src = home / "storage" / "anvil" / "ds" / "in.bin"
    src.parent.mkdir(parents=True)
    src.write_bytes(data)
    coord = _coordinator(home)
    seen: list[str] = []
    h = coord.move_data(
        "anvil",
        "ds/in.bin",
        "delta",
        "inputs/in.bin",
        paths="storage",
        label="inputs",
        on_event=lambda e: seen.append(e.kind),
    )
    assert coord.store is not None and coord.store.transfers(transfer_id=h.id)
    done = coord.events.await_event(0, task_ids={h.id}, kinds={"transfer.completed"}, timeout_s=60)
    assert [e.kind for e in done] == ["transfer.completed"]
    assert h.wait(5)
    # finished, it left the coordinator's memory; get_transfer reads it back from the store
    assert h.id not in {t.id for t in coord.transfers.handles()}
    back = coord.get_transfer(h.id)
    assert back is not h and back.as_dict() == h.as_dict() and back.wait(0)
    out = home / "storage" / "delta" / "inputs" / "in.bin"
    assert hashlib.sha256(out.read_bytes()).digest() == hashlib.sha256(data).digest()
    d = h.as_dict()
    assert json.loads(json.dumps(d)) == d
    assert (d["state"], d["label"], d["backend"], d["checksum_verified"]) == (
        "succeeded",
        "inputs",
        "local",
        True,
    )
    assert d["destination"] == {"site": "delta", "path": "inputs/in.bin"}
    assert seen[0] == "transfer.submitted" and seen[-1] == "transfer.completed"
    coord.close()


def test_move_data_refuses_unknown_sites_and_escapes(tmp_path: Path) -> None:
    coord = _coordinator(tmp_path / "fed")
    with pytest.raises(UnknownSiteError) as err:
        coord.move_data("anvil", "x", "summit", "x", paths="storage")
    for name in site_names():
        assert name in str(err.value)
    with pytest.raises(TransferPathError):
        coord.move_data("anvil", "../../../../etc/passwd", "delta", "x", paths="storage")
    assert coord.store is not None and coord.store.transfers() == []


def test_move_data_without_a_store_uses_federation_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDERATION_HOME", str(tmp_path))
    src = tmp_path / "storage" / "local" / "a.txt"
    src.parent.mkdir(parents=True)
    src.write_text("hello")
    h = Coordinator([]).move_data(
        "local", "a.txt", "vista", "b.txt", sync_level="size", paths="storage"
    )
    assert h.wait(60) and h.state == "succeeded"
    assert (tmp_path / "storage" / "vista" / "b.txt").read_text() == "hello"


class _StoppedBeforeCopying(LocalCopyBackend):
    """A coordinator killed after recording the transfer, before its copy thread ran."""

    def start(self, transfer_id, request, report, resume):  # type: ignore[no-untyped-def]
        self.validate(request)
        return TransferStatus(state="active")


def test_coordinator_recover_finishes_an_interrupted_transfer(tmp_path: Path) -> None:
    home = tmp_path / "fed"
    src = home / "storage" / "anvil" / "ds"
    for i in range(3):
        (src / f"part{i}").parent.mkdir(parents=True, exist_ok=True)
        (src / f"part{i}").write_bytes(os.urandom(4096))
    killed = _coordinator(home, transfer_backends=_StoppedBeforeCopying(site_names(), home))
    h = killed.move_data("anvil", "ds", "delta", "ds", paths="storage")
    assert not h.done

    again = _coordinator(home)  # a new process over the same state database
    assert again.recover() == []  # no compute tasks; the transfer resumes alongside
    back = again.get_transfer(h.id)
    assert back is not h and back.wait(60) and back.state == "succeeded", back.error
    assert back.history[0]["what"] == "recovered"
    for i in range(3):
        assert (home / "storage" / "delta" / "ds" / f"part{i}").read_bytes() == (
            src / f"part{i}"
        ).read_bytes()
    kinds = [e.kind for e in again.events.history(h.id)]
    assert kinds[0] == "transfer.submitted" and kinds[-1] == "transfer.completed"


def test_same_call_over_globus_is_a_configuration_change(tmp_path: Path) -> None:
    """move_data with sites mapped to Globus collections: the real TransferClient, the
    Transfer service answered by registered responses."""
    src_id = get_response_set("transfer.operation_stat").metadata["endpoint_id"]
    task_id = get_response_set("transfer.submit_transfer").metadata["task_id"]
    client = globus_sdk.TransferClient(
        authorizer=globus_sdk.AccessTokenAuthorizer("not-a-real-token"),
        retry_config=RetryConfig(max_retries=0),
    )
    backend = GlobusTransferBackend(
        client,
        {
            "anvil": GlobusCollection(collection_id=uuid.UUID(src_id), path_prefix="/anvil"),
            "delta": GlobusCollection(collection_id=uuid.uuid4(), path_prefix="/delta"),
        },
        poll_min_s=0.001,
        poll_max_s=0.01,
    )
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        load_response(globus_sdk.TransferClient.operation_stat, requests_mock=rsps)
        load_response(globus_sdk.TransferClient.get_submission_id, requests_mock=rsps)
        load_response(globus_sdk.TransferClient.submit_transfer, requests_mock=rsps)
        RegisteredResponse(
            service="transfer",
            path=f"/v0.10/task/{task_id}",
            json={"status": "SUCCEEDED", "bytes_transferred": 4, "files_transferred": 1},
        ).add(requests_mock=rsps)
        coord = _coordinator(tmp_path, transfer_backends=backend)
        h = coord.move_data("anvil", "file1.txt", "delta", "file1.txt", paths="storage")
        assert h.wait(30)
        coord.close()
    assert h.as_dict()["globus_task_id"] == task_id and h.as_dict()["backend"] == "globus"
    assert (h.state, h.bytes_transferred) == ("succeeded", 4)


# --- stage-in counted by placement -----------------------------------------------------------
BIG = StageIn(site="anvil", path="datasets/era5", size_bytes=50 * 10**9)


def test_stage_in_time_is_in_the_trace_and_the_completion() -> None:
    env = ResourceEnvelope(cpus_min=8, mem_gb_min=16, walltime_s=600, stage_in=(BIG,))
    d = place(env, SPECS, _fed(), policy="best-feasible", now=NOW)
    assert d.chosen.site == "anvil"  # the data is there: no transfer needed
    assert d.chosen.stage_in_s == 0 and "already here" in d.chosen.why
    delta = next(c for c in d.candidates if c.site == "delta")
    assert delta.stage_in_s == pytest.approx(500.0)  # 50 GB at the default 100 MB/s
    assert "50.00 GB from anvil at 100 MB/s = 500 s" in delta.why
    assert delta.predicted_completion_s == pytest.approx(
        delta.predicted_wait_s + delta.predicted_runtime_s + 500.0
    )
    assert "stage-in 500 s" in d.explain()

    plain = place(env.model_copy(update={"stage_in": ()}), SPECS, _fed(), "best-feasible", NOW)
    assert plain.chosen.site == "delta"  # without the data it would have gone elsewhere
    assert all(c.stage_in_s == 0 and "stage-in" not in c.why for c in plain.candidates)


def test_stage_in_bandwidth_is_configurable_per_site_pair() -> None:
    env = ResourceEnvelope(cpus_min=8, mem_gb_min=16, walltime_s=600, stage_in=(BIG,))
    rates = TransferRates(default_mb_s=50, pairs_mb_s={"anvil->delta": 1000})
    cands, _ = enumerate_candidates(env, SPECS, _fed(), NOW, rates=rates)
    by_site = {c.site: c.stage_in_s for c in cands}
    assert by_site["delta"] == pytest.approx(50.0) and by_site["vista"] == pytest.approx(1000.0)
    assert by_site["anvil"] == 0


def test_stage_in_is_validated_and_survives_the_store() -> None:
    with pytest.raises(BadEnvelopeError, match="size_bytes"):
        ResourceEnvelope(stage_in=({"site": "anvil", "path": "x", "size_bytes": -1},))
    env = ResourceEnvelope(stage_in=(StageIn(site="nowhere", path="x", size_bytes=1),))
    with pytest.raises(BadEnvelopeError, match="nowhere"):
        place(env, SPECS, _fed(), now=NOW)
    ok = ResourceEnvelope(stage_in=(BIG,))
    assert ResourceEnvelope.model_validate_json(ok.model_dump_json()) == ok
