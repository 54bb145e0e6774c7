"""The SDK's own throttle is expected here: its delay is logged at INFO, not as a warning."""

from __future__ import annotations

import logging

import pytest

import federation.sites.compute  # noqa: F401  (installs the filter)

SDK = "globus_compute_sdk.sdk.executor"


def test_the_sdks_throttle_delay_is_info_and_other_warnings_stay(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger(SDK)
    with caplog.at_level(logging.WARNING, logger=SDK):
        log.warning("%r (tid:%s): API rate-limit delay of %.2fs", "ex", 1, 4.2)
        log.warning("Task submission failed")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "Task submission failed")
    ]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=SDK):
        log.warning("%r (tid:%s): API rate-limit delay of %.2fs", "ex", 1, 4.2)
    assert [r.levelname for r in caplog.records] == ["INFO"]
    assert "API rate-limit delay of 4.20s" in caplog.records[0].getMessage()
