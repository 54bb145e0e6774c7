"""The main job's round (``scripts/demo``) through the strict stand-in of the Globus service."""

from __future__ import annotations

from typing import Any

import pytest
from slurm_scene import wait_until_quiet

from federation.interfaces.demo import run_demo

pytestmark = pytest.mark.slurm


def test_the_demo_round_passes_on_the_cloud_path(local: Any) -> None:
    """Every check of the round (placement, shapes seen inside the jobs, the expected
    failure with its traceback, three systems used) on the path real endpoints offer."""
    # the round's placement checks assume the queues it loads itself, not earlier tests'
    wait_until_quiet(local.slurm, tuple(s.name for s in local.specs), timeout_s=180)
    assert run_demo(path="cloud") == 0
