"""Results over the Globus Compute payload limit go to site storage, referenced by path."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from globus_compute_sdk.serialize import ComputeSerializer

from federation.core.envelope import ResourceEnvelope
from federation.core.errors import TaskFailedError
from federation.core.storage import site_storage
from federation.core.tasks import PythonTask
from federation.deploy.local import LocalSites
from federation.runtime.coordinator import Coordinator
from federation.runtime.results import DEFAULT_INLINE_LIMIT_BYTES, ResultRef, ResultTooLargeError
from functions.results import make_bytes as blob

ENV = ResourceEnvelope(sites=("local",), cpus_min=1, mem_gb_min=1, walltime_s=300)
BIG = 12 * 1024 * 1024  # bytes: over Globus Compute's 10 MiB result limit


def test_a_reference_is_checked_before_its_value_is_trusted(tmp_path: Path) -> None:
    data = ComputeSerializer().serialize({"rows": list(range(1000))}).encode()
    p = tmp_path / "r.result"
    p.write_bytes(data)
    ref = ResultRef(
        site="local", path=str(p), size_bytes=len(data), sha256=hashlib.sha256(data).hexdigest()
    )
    assert ref.load() == {"rows": list(range(1000))}
    p.write_bytes(data[:-10])
    with pytest.raises(ResultTooLargeError, match="does not match its manifest"):
        ref.load()
    p.unlink()
    with pytest.raises(ResultTooLargeError, match="cannot be read"):
        ref.load()


@pytest.fixture(scope="module")
def spilling(local_federation: Any) -> Iterator[tuple[LocalSites, Coordinator]]:
    local = LocalSites(home=local_federation.home)
    local.up()
    coord = local.connect(telemetry=False, probe_timeout_s=60)
    try:
        yield local, coord
    finally:
        coord.close()
        if local.service is not None:
            local.service.close()


@pytest.mark.slurm
def test_large_result_is_written_to_site_storage_and_loaded_back(
    spilling: tuple[LocalSites, Coordinator],
) -> None:
    local, coord = spilling
    expected = blob(BIG)
    h = coord.submit_task(PythonTask(blob, (BIG,)), ENV)
    r = coord.get_result(h, timeout_s=240)
    assert r.status == "completed", (r.error, r.remote_traceback[-2000:])
    ref = r.value_ref
    assert ref is not None and ref.site == "local"
    assert ref.size_bytes > DEFAULT_INLINE_LIMIT_BYTES
    path = Path(ref.path)
    assert path.is_relative_to(site_storage("local", local.home))
    data = path.read_bytes()
    assert len(data) == ref.size_bytes and hashlib.sha256(data).hexdigest() == ref.sha256
    assert r.value == expected
    assert coord.result_value(h) == expected
    # a small result still comes back inline
    s = coord.submit_task(PythonTask(blob, (1000,)), ENV)
    small = coord.get_result(s, timeout_s=240)
    assert small.value_ref is None and small.value == blob(1000)


@pytest.mark.slurm
def test_without_site_storage_the_engine_refuses_the_same_result(local_federation: Any) -> None:
    local = LocalSites(home=local_federation.home)
    coord = local.connect(telemetry=False, probe_timeout_s=60, result_storage=None)
    try:
        h = coord.submit_task(PythonTask(blob, (BIG,)), ENV)
        with pytest.raises(TaskFailedError) as info:
            coord.result_value(h, timeout_s=240)
        assert "MaxResultSizeExceeded" in str(info.value) + info.value.remote_traceback
    finally:
        coord.close()
        if local.service is not None:
            local.service.close()
