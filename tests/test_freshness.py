"""The snapshot ``submit_task`` places on (:mod:`federation.runtime.freshness`): the latest
one while it is young enough, refreshed behind the caller; a probe on the caller's path
only when there is none or it is too old."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from test_placement import _fed  # snapshots of the example sites, made by hand

from federation.core.snapshot import FederationSnapshot
from federation.runtime.freshness import Freshness

SITES = _fed().sites


class Rounds:
    """The part of a coordinator :class:`Freshness` reads: its sites, its latest snapshot,
    and ``snapshot()``, which here counts the rounds and can be held back."""

    def __init__(self, age_s: float | None, probe_interval_s: float = 0.0) -> None:
        self.backends: dict[str, Any] = {s.site: None for s in SITES}
        self.probe_interval_s = probe_interval_s
        self.probe_timeout_s = 30.0
        self.closing = False
        self.rounds: list[str] = []  # the thread each round ran on
        self.release = threading.Event()
        self.release.set()
        self._last_snapshot = None if age_s is None else self.snap(age_s)

    @staticmethod
    def snap(age_s: float) -> FederationSnapshot:
        at = datetime.now(UTC) - timedelta(seconds=age_s)
        sites = tuple(s.model_copy(update={"taken_at": at}) for s in SITES)
        return FederationSnapshot(taken_at=at, sites=sites)

    def snapshot(self, sites: Any = ()) -> FederationSnapshot:
        assert self.release.wait(30)
        self.rounds.append(threading.current_thread().name)
        self._last_snapshot = self.snap(0.0)
        return self._last_snapshot


def test_a_young_snapshot_is_used_and_refreshed_behind_the_caller() -> None:
    rt = Rounds(age_s=10.0)
    old = rt._last_snapshot
    fresh = Freshness(rt, max_stale_s=30.0)  # type: ignore[arg-type]
    rt.release.clear()  # the background round is held: the caller must not wait for it
    assert fresh.current() is old
    assert fresh.current() is old  # a round is in flight: no second one
    assert fresh.background_rounds == 1
    rt.release.set()
    fresh.close(10)
    assert rt.rounds == ["probe-behind"]
    assert fresh.current() is not old  # the round's snapshot


def test_within_the_probe_interval_nothing_is_probed() -> None:
    rt = Rounds(age_s=8.0, probe_interval_s=10.0)
    fresh = Freshness(rt, max_stale_s=30.0)  # type: ignore[arg-type]
    assert fresh.current() is rt._last_snapshot
    assert fresh.background_rounds == 0 and rt.rounds == []


def test_a_stale_snapshot_is_probed_on_the_callers_path() -> None:
    rt = Rounds(age_s=45.0)
    fresh = Freshness(rt, max_stale_s=30.0)  # type: ignore[arg-type]
    snap = fresh.current()
    assert rt.rounds == [threading.current_thread().name]
    assert snap is rt._last_snapshot and fresh.background_rounds == 0


def test_the_first_submission_waits_for_the_round_started_at_connect() -> None:
    rt = Rounds(age_s=None)
    fresh = Freshness(rt)  # type: ignore[arg-type]
    rt.release.clear()
    fresh.start()  # connect
    got: list[FederationSnapshot] = []
    caller = threading.Thread(target=lambda: got.append(fresh.current()))
    caller.start()
    rt.release.set()
    caller.join(30)
    assert rt.rounds == ["probe-behind"]  # one round: the caller took the connect's
    assert got == [rt._last_snapshot]


def test_no_round_starts_once_closing() -> None:
    rt = Rounds(age_s=10.0)
    fresh = Freshness(rt)  # type: ignore[arg-type]
    rt.closing = True
    fresh.current()
    assert fresh.background_rounds == 0


def test_a_round_behind_the_callers_builds_the_twins_before_publishing(
    monkeypatch: Any,
) -> None:
    """The round behind the callers previews the smallest task on its snapshot (the twins of
    every partition built) before the callers see it; a probe on a caller's path does not
    (that caller places at once)."""
    from inprocess import ThreadSite, idle_snapshot

    from federation.core.spec import load_sites
    from federation.runtime import freshness
    from federation.runtime.coordinator import Coordinator

    coord = Coordinator([ThreadSite(s) for s in load_sites(["local", "delta"])])
    specs = [b.spec for b in coord.backends.values()]
    fresh = idle_snapshot(specs)
    monkeypatch.setattr(freshness, "probe_sites", lambda backends, timeout_s: list(fresh.sites))
    seen: list[tuple[Any, Any, bool]] = []  # (envelope, snapshot placed on, still unpublished)

    def place(envelope: Any, sites: Any, snap: FederationSnapshot, **kw: Any) -> None:
        seen.append((envelope, snap, coord._last_snapshot is None or coord._last_snapshot != snap))
        assert kw["new_task"] is False  # a preview: no hedge budget earned or spent

    monkeypatch.setattr(freshness, "place", place)
    probing = coord._probing
    try:
        coord._last_snapshot = None
        probing.probe(["local", "delta"])  # on a caller's path: not warmed
        assert seen == []
        coord._last_snapshot = None
        probing._round(["local", "delta"])  # behind the callers (this thread, for the test)
        (env, snap, unpublished) = seen[0] if len(seen) == 1 else (None, None, False)
        assert len(seen) == 1 and env == freshness.WARM_ENVELOPE and unpublished
        assert {s.site for s in snap.sites} == {"local", "delta"}
        assert coord._last_snapshot is not None  # published after
    finally:
        coord.close()
