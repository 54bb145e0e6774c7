"""The late board: a new request is charged the lateness of our queued copies no larger."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from federation.core.envelope import ResourceEnvelope, Shape
from federation.placement.lateness import LateAdjusted, LateBoard, QueuedCopy

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def _shape(site: str = "delta", partition: str = "gpuA100x4", gpus: int = 1) -> Shape:
    return Shape(
        site=site,
        partition=partition,
        nodes=1,
        cpus=8 * gpus,
        mem_gb=32 * gpus,
        gpus=gpus,
        gpu_type="a100",
        walltime_s=3600,
    )


def test_a_copy_is_late_by_what_it_waited_past_its_prediction() -> None:
    assert QueuedCopy(_shape(), predicted_wait_s=600.0, queued_s=1000.0).late_s == 400.0
    assert QueuedCopy(_shape(), predicted_wait_s=600.0, queued_s=100.0).late_s == 0.0


def test_only_requests_no_smaller_at_the_same_partition_are_charged() -> None:
    copies = [
        QueuedCopy(_shape(gpus=2), predicted_wait_s=0.0, queued_s=5000.0),  # 5000 s late
        QueuedCopy(_shape(gpus=1), predicted_wait_s=1000.0, queued_s=1300.0),  # 300 s late
        QueuedCopy(_shape(site="anvil", partition="gpu"), 0.0, 9000.0),  # elsewhere
    ]
    board = LateBoard(lambda: copies)
    assert board.charge_s(_shape(gpus=4)) == 5000.0  # needs at least what the 2-GPU one does
    assert board.charge_s(_shape(gpus=2)) == 5000.0
    assert board.charge_s(_shape(gpus=1)) == 300.0  # may fit holes the 2-GPU copy cannot
    assert board.charge_s(_shape(partition="gpuA40x4", gpus=4)) == 0.0  # another partition
    assert board.charge_s(_shape(site="anvil", partition="gpu", gpus=1)) == 9000.0
    assert LateBoard(lambda: copies, weight=0.5).charge_s(_shape(gpus=2)) == 2500.0
    with pytest.raises(ValueError, match="weight"):
        LateBoard(lambda: copies, weight=-1.0)


class _Inner:
    def __init__(self) -> None:
        self.prepared = 0

    def __call__(self, shape: Shape, part: Any, site: Any, now: datetime) -> tuple:
        return 100.0, 250.0, "inner"

    def prepare(self, *args: Any) -> None:
        self.prepared += 1


def test_the_charge_is_added_to_both_waits_and_written_into_the_reason() -> None:
    copies: list[QueuedCopy] = [QueuedCopy(_shape(gpus=1), 0.0, 700.0)]
    inner = _Inner()
    wait = LateAdjusted(inner, LateBoard(lambda: copies))
    wait.prepare(ResourceEnvelope(gpus_min=1), [], None, NOW, True)  # type: ignore[arg-type]
    assert inner.prepared == 1
    mid, high, why = wait(_shape(gpus=2), None, None, NOW)  # type: ignore[arg-type]
    assert (mid, high) == (800.0, 950.0)
    assert why.startswith("inner; +700 s") and "past its predicted wait" in why
    # the board is read once per decision: a copy that starts now counts until the next
    copies.clear()
    assert wait(_shape(gpus=2), None, None, NOW)[0] == 800.0  # type: ignore[arg-type]
    wait.prepare(ResourceEnvelope(gpus_min=1), [], None, NOW, True)  # type: ignore[arg-type]
    assert wait(_shape(gpus=2), None, None, NOW) == (100.0, 250.0, "inner")  # type: ignore[arg-type]
