"""How fresh a snapshot ``submit_task`` places on, without a probe round on the caller's path.

A probe round ships one function to every site and waits for all of them: seconds at best,
and ten more when the SDK's client-side limit (4 requests per 16 s per executor) holds the
round back. :class:`Freshness` answers with the latest snapshot while it is at most
``max_stale_s`` old and, once it is older than the coordinator's ``probe_interval_s`` (and
:data:`REFRESH_BEHIND_S`), starts one round in the background (never two at once), whose
snapshot the next submission uses.
The coordinator's own placements since the snapshot are laid over it either way
(:mod:`federation.placement.overlay`), so a burst sees itself. Only a snapshot older than
``max_stale_s``, or none (the first submission), is probed on the caller's path.

A round behind the callers also builds the placement's queue twins of its snapshot before
publishing it (:meth:`Freshness.warm`: a preview of the smallest task, which asks about
every partition): the first decision on a new snapshot no longer rebuilds them while the
callers queue behind it (a service's submissions wait their turn: 400-600 ms at each new
snapshot, with 20 callers).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from federation.core.envelope import ResourceEnvelope
from federation.core.snapshot import FederationSnapshot
from federation.placement.decide import place
from federation.placement.learned import LearnedPlacement
from federation.placement.policies import Policy
from federation.runtime.probing import probe_sites
from federation.runtime.telemetry import Telemetry

logger = logging.getLogger(__name__)

PROBE_ROUNDS_PER_WINDOW = (4, 16.0)
"""The SDK's own client-side limit (``Executor.api_burst_limit`` submissions per
``api_burst_window_s``): a probe round is one submission per site, so in a burst of
``submit_task`` calls, once this many rounds ran within the window the latest snapshot is
reused (with the coordinator's own placements laid over it) rather than waiting seconds."""
DEFAULT_MAX_STALE_S = 30.0
"""How old a snapshot ``submit_task`` still places on while a fresh one is probed (the
service's own snapshot cache refreshes every 15 s)."""

REFRESH_BEHIND_S = 5.0
"""A snapshot younger than this starts no round behind a submission: a burst would keep one
running all the time, and each round is one request per site, counted against the same
client request limit as the burst's own submissions."""


class Prober(Protocol):
    """What :class:`Freshness` asks of the coordinator."""

    @property
    def backends(self) -> Mapping[str, Any]: ...

    probe_interval_s: float
    probe_timeout_s: float
    closing: bool
    _last_snapshot: FederationSnapshot | None
    learned: LearnedPlacement | None
    telemetry: Telemetry | None

    def snapshot(
        self, max_age_s: float | None = None, sites: Iterable[str] = ()
    ) -> FederationSnapshot: ...

    def _probe(self, names: list[str]) -> FederationSnapshot: ...

    def _placer(self) -> Policy: ...

    def _own_view(self, snap: FederationSnapshot) -> FederationSnapshot: ...


WARM_ENVELOPE = ResourceEnvelope(cpus_min=1)
"""The task a fresh snapshot is previewed with: the smallest, which every partition takes."""


class Freshness:
    """The coordinator's probe rounds: the snapshot to place on now, refreshed behind the
    callers, and each round's own bookkeeping (the SDK's throttle, telemetry, learning)."""

    def __init__(self, coord: Prober, max_stale_s: float = DEFAULT_MAX_STALE_S) -> None:
        self.coord = coord
        self.max_stale_s = max_stale_s
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._rounds: dict[str, list[float]] = {}
        """When the latest probe rounds of each site began (monotonic; at most the SDK's
        burst, per site's executor)."""
        self.background_rounds = 0
        """Probe rounds started behind a submission (for tests and benchmarks)."""
        self._behind = threading.local()
        """``on`` in the thread of a round behind the callers (its snapshot is warmed)."""

    def current(self, sites: Iterable[str] = ()) -> FederationSnapshot:
        """The latest snapshot of ``sites`` (default: all) if at most ``max_stale_s`` old
        (a fresh round starts behind it once it is older than the probe interval), else one
        probed now."""
        coord = self.coord
        want = [n for n in sites if n in coord.backends] or list(coord.backends)
        last = coord._last_snapshot
        if last is None:  # the round started at connect, if any, is nearer than a new one
            self.close(coord.probe_timeout_s)
            last = coord._last_snapshot
        if last is not None:
            taken = [x.taken_at for x in last.sites if x.site in want]
            if len(taken) == len(want):
                age_s = (datetime.now(UTC) - min(taken)).total_seconds()
                if age_s <= self.max_stale_s:
                    if age_s > max(coord.probe_interval_s, REFRESH_BEHIND_S):
                        self._refresh_behind(want)
                    return last
        return coord.snapshot(sites=want)

    def probe(self, names: list[str]) -> FederationSnapshot:
        """Probe ``names``; the latest snapshot keeps the other sites as they were probed
        (each site's ``taken_at`` is its own; the snapshot's is the oldest)."""
        coord = self.coord
        now = time.monotonic()
        with self._lock:
            for name in names:
                rounds = self._rounds.setdefault(name, [])
                rounds.append(now)
                del rounds[: -PROBE_ROUNDS_PER_WINDOW[0]]
        probed = probe_sites({n: coord.backends[n] for n in names}, coord.probe_timeout_s)
        fresh = FederationSnapshot(taken_at=datetime.now(UTC), sites=tuple(probed))
        last = coord._last_snapshot
        snap = fresh
        if len(names) < len(coord.backends) and last is not None:
            by_name = {x.site: x for x in last.sites} | {x.site: x for x in probed}
            sites = tuple(by_name[n] for n in coord.backends if n in by_name)
            snap = FederationSnapshot(taken_at=min(x.taken_at for x in sites), sites=sites)
        if getattr(self._behind, "on", False):
            self.warm(snap)
        coord._last_snapshot = snap
        if coord.learned is not None:
            coord.learned.look(fresh)
        if coord.telemetry is not None:
            coord.telemetry.record(fresh)
        return snap

    def snapshot(self, max_age_s: float | None, sites: Iterable[str]) -> FederationSnapshot:
        """The last snapshot if ``sites`` (default: all) in it are younger than ``max_age_s``
        (default: the probe interval), else one with those sites probed afresh; in a burst,
        the last one while a round now would wait for the SDK's throttle."""
        coord = self.coord
        age = coord.probe_interval_s if max_age_s is None else max_age_s
        want = [n for n in sites if n in coord.backends] or list(coord.backends)
        last = coord._last_snapshot
        if last is not None:
            now = datetime.now(UTC)
            taken = [x.taken_at for x in last.sites if x.site in want]
            if len(taken) == len(want) and all((now - t).total_seconds() <= age for t in taken):
                return last
        rounds, window_s = PROBE_ROUNDS_PER_WINDOW
        with self._lock:
            recent = [list(self._rounds.get(n, [])) for n in want]
        throttled = any(len(r) >= rounds and time.monotonic() - r[0] < window_s for r in recent)
        if last is not None and max_age_s is None and throttled:
            return last  # a round now would wait for the SDK's throttle: a burst reuses it
        return coord._probe(want)

    def start(self) -> None:
        """Probe every site in the background now (at connect: the first submission then
        waits for this round, if at all, rather than start one)."""
        self._refresh_behind(list(self.coord.backends))

    def _refresh_behind(self, want: list[str]) -> None:
        with self._lock:
            if self.coord.closing or (self._thread is not None and self._thread.is_alive()):
                return
            self.background_rounds += 1
            self._thread = threading.Thread(
                target=self._round, args=(want,), name="probe-behind", daemon=True
            )
            self._thread.start()

    def _round(self, want: list[str]) -> None:
        self._behind.on = True
        try:
            self.coord.snapshot(sites=want)
        except Exception as e:  # the next submission probes itself if this one is stale
            if not self.coord.closing:
                logger.warning("a background probe round failed: %s", e)

    def warm(self, snap: FederationSnapshot) -> None:
        """Build the placement's twins of ``snap`` (with the coordinator's own jobs over it)
        by previewing :data:`WARM_ENVELOPE` on it: no budget earned or spent, nothing
        shipped. A failure only leaves the twins to the first decision."""
        coord = self.coord
        if coord.closing:
            return
        try:
            specs = [b.spec for b in coord.backends.values()]
            view = coord._own_view(snap)
            place(WARM_ENVELOPE, specs, view, policy=coord._placer(), new_task=False)
        except Exception as e:
            logger.debug("warming the placement on a fresh snapshot: %s", e)

    def close(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for a round in flight (closing: it writes telemetry
        and the learned predictors, which close after this)."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
