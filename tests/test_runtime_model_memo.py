"""Learned runtimes stay as cheap to ask as the first (placement.runtime_model): a prediction
is remembered until its workload's next observation, and each workload keeps its latest
observations per hardware only."""

from __future__ import annotations

import pytest

from federation.core.envelope import Shape
from federation.placement.runtime_model import TaskRuntimeModel


def _shape(site: str = "delta", cpus: int = 1) -> Shape:
    return Shape(site=site, partition="cpu", nodes=1, cpus=cpus, mem_gb=4, gpus=0, walltime_s=600)


def test_a_new_observation_changes_what_is_predicted_and_other_workloads_keep_theirs() -> None:
    m = TaskRuntimeModel()
    assert m.predict("a", _shape(), default_s=100.0) == pytest.approx(100.0)
    assert m.predict("b", _shape(), default_s=50.0) == pytest.approx(50.0)
    m.observe("a", _shape(), 10.0)
    assert m.predict("a", _shape(), default_s=100.0) == pytest.approx(10.0)  # not the memo
    assert m.predict("b", _shape(), default_s=50.0) == pytest.approx(50.0)
    m.observe("a", _shape(cpus=2), 5.0)  # a second shape: the slope moves too
    assert m.speedup_per_doubling("a") == pytest.approx(2.0)
    assert m.predict("a", _shape(cpus=4), default_s=100.0) == pytest.approx(2.5)


def test_only_the_latest_observations_per_hardware_are_kept() -> None:
    m = TaskRuntimeModel(max_per_hardware=8)
    for _ in range(100):
        m.observe("a", _shape(), 1000.0)
    for _ in range(8):
        m.observe("a", _shape(), 10.0)  # the workload got faster: the old runs are gone
    m.observe("a", _shape("vista"), 20.0)  # another site's are kept apart
    assert len(m._obs["a"]) == 9
    assert m.predict("a", _shape(), default_s=1.0) == pytest.approx(10.0)
