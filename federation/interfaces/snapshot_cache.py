"""The federation snapshot kept fresh in the background for agents: answers at once.

:class:`SnapshotKeeper` probes (through an operations' ``inspect``) on a worker thread as
soon as it starts, keeps the freshest snapshot, and answers :meth:`SnapshotKeeper.view` at
once with it and its age. A snapshot older than ``max_age_s`` is answered as it is while a
refresh runs in the background; before the first probe is in, ``view`` waits at most
``first_wait_s`` and then says that probing is in progress, rather than block for a whole
probe round.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal

from pydantic import Field

from federation.core.model import Frozen
from federation.core.snapshot import FederationSnapshot
from federation.interfaces.service.models import SiteSummary, summarize

logger = logging.getLogger(__name__)

DEFAULT_MAX_AGE_S = 15.0
DEFAULT_FIRST_WAIT_S = 0.5
RETRY_AFTER_ERROR_S = 5.0

Probe = Callable[[bool], FederationSnapshot]
"""``probe(refresh)``: the last snapshot the operations hold, or (``refresh=True``) a new one."""


class FederationView(Frozen):
    """What ``inspect_federation`` answers: the freshest snapshot, compacted, and its age."""

    status: Literal["ready", "probing", "unavailable"] = Field(
        description="ready: `sites` holds the last probe; probing: the first probe has not "
        "come back yet (ask again in a few seconds); unavailable: it failed (see message)"
    )
    taken_at: datetime | None = Field(default=None, description="when the probes ran")
    age_s: float | None = Field(default=None, description="seconds since the probes ran")
    refreshing: bool = Field(
        default=False, description="a newer probe is running in the background"
    )
    message: str = ""
    sites: tuple[SiteSummary, ...] = ()

    def for_caller(self, caller: str) -> FederationView:
        """This view as ``caller`` sees it: each site with their workspace."""
        return self.model_copy(update={"sites": tuple(s.for_caller(caller) for s in self.sites)})


class SnapshotKeeper:
    """Keeps the freshest snapshot ``probe`` gives, refreshing it on a worker thread.

    ``probe`` may block (the first probe of every site takes seconds); it is only ever called
    on the keeper's thread, one call at a time.
    """

    def __init__(
        self,
        probe: Probe,
        *,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        first_wait_s: float = DEFAULT_FIRST_WAIT_S,
        start: bool = True,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._probe = probe
        self.max_age_s = max_age_s
        self.first_wait_s = first_wait_s
        self._clock = clock
        self._snap: FederationSnapshot | None = None
        self._error: BaseException | None = None
        self._error_at = 0.0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._closed = False
        if start:
            self.refresh_in_background()

    # --- state ----------------------------------------------------------------------------------
    @property
    def snapshot(self) -> FederationSnapshot | None:
        return self._snap

    @property
    def refreshing(self) -> bool:
        t = self._thread
        return t is not None and t.is_alive()

    def age_s(self) -> float | None:
        snap = self._snap
        return None if snap is None else max(0.0, (self._clock() - snap.taken_at).total_seconds())

    def put(self, snap: FederationSnapshot) -> None:
        """Keep ``snap`` if it is newer than the one kept."""
        with self._changed:
            if self._snap is None or snap.taken_at >= self._snap.taken_at:
                self._snap = snap
            self._error = None
            self._changed.notify_all()

    # --- refreshing -----------------------------------------------------------------------------
    def refresh_in_background(self) -> bool:
        """Start a refresh unless one is running; whether one was started."""
        with self._lock:
            if self._closed or (self._thread is not None and self._thread.is_alive()):
                return False
            self._thread = threading.Thread(
                target=self._refresh, name="federation-snapshot-keeper", daemon=True
            )
            self._thread.start()
            return True

    def _refresh(self) -> None:
        try:
            snap = self._probe(False)  # the operations' own cache: cheap once it has one
            self.put(snap)
            age = self.age_s()
            if age is not None and age > self.max_age_s and not self._closed:
                self.put(self._probe(True))  # its cache is stale too: probe now
        except Exception as e:
            logger.warning("probing the federation failed: %s", e)
            with self._changed:
                self._error = e
                self._error_at = time.monotonic()
                self._changed.notify_all()

    def refresh_now(self) -> FederationSnapshot:
        """Probe every site now (seconds), keep and return the result."""
        snap = self._probe(True)
        self.put(snap)
        return snap

    def wait(self, timeout_s: float) -> FederationSnapshot | None:
        """The snapshot, waiting up to ``timeout_s`` for the first one (or a failure)."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._changed:
            while self._snap is None and self._error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            return self._snap

    # --- answering ------------------------------------------------------------------------------
    def view(self) -> FederationView:
        """The freshest snapshot and its age, at once (at most ``first_wait_s`` before the
        first probe is in). Starts a background refresh when the snapshot is stale, or when
        there is none and no probe is running."""
        snap = self.wait(self.first_wait_s)
        if snap is None:
            return self._no_snapshot()
        age = self.age_s() or 0.0
        started = age > self.max_age_s and self.refresh_in_background()
        return FederationView(
            status="ready",
            taken_at=snap.taken_at,
            age_s=round(age, 3),
            refreshing=started or self.refreshing,
            message=(
                f"from the probe {age:.1f} s ago"
                + ("; a fresh probe is running, ask again for it" if age > self.max_age_s else "")
            ),
            sites=summarize(snap).sites,
        )

    def _no_snapshot(self) -> FederationView:
        error = self._error
        if error is not None:
            retry = time.monotonic() - self._error_at >= RETRY_AFTER_ERROR_S
            started = retry and self.refresh_in_background()
            return FederationView(
                status="unavailable",
                refreshing=started or self.refreshing,
                message=f"the first probe failed: {type(error).__name__}: {error}. "
                + (
                    "Probing again now; ask again in a few seconds."
                    if started or self.refreshing
                    else "Check `federation sites status`, or call with refresh=true."
                ),
            )
        if not self.refreshing:
            self.refresh_in_background()
        return FederationView(
            status="probing",
            refreshing=True,
            message="probing the sites is in progress (the first probe takes a few "
            "seconds); ask again shortly",
        )

    def close(self) -> None:
        """Start no more refreshes (one running finishes on its own thread)."""
        with self._lock:
            self._closed = True
