"""Which shapes this coordinator's own tasks keep warm, and each site's cold start.

The placement step (:mod:`federation.placement.coldstart`) charges a cold block's start-up
where no block of the shape is warm. What is warm is read here from the coordinator's own
task events: ``task.queued`` (a task shipped to its shape, and to each hedge copy's),
``task.copy_added``, ``task.started`` (a block of the shape is up; the first task of a cold
shape measures the site's cold start, kept in the coordinator's telemetry, from which the
next coordinator starts) and ``task.completed`` / ``task.failed`` (the block
idles once its last task of ours ended, and is released after the endpoint's idle time).

Only sites that run a shape's tasks on blocks (:func:`runs_blocks`: Globus Compute
endpoints) are charged. Blocks belong to the identity that shipped the task: a caller
acting with an identity of their own (:mod:`federation.runtime.callers`) has user endpoint
processes and blocks of their own, so their tasks are left out here (their candidates are
charged as cold).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import weakref
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from federation.placement.candidates import Candidate
from federation.placement.coldstart import (
    DEFAULT_BLOCK_IDLE_S,
    ColdStart,
    ColdStarts,
    WarmBlocks,
)
from federation.runtime.events import Event

if TYPE_CHECKING:
    from federation.runtime.callers import CallerSites
    from federation.runtime.events import EventBus
    from federation.runtime.handles import TaskHandle
    from federation.runtime.telemetry import Telemetry
    from federation.sites.backend import SiteBackend

__all__ = ["Warmth", "runs_blocks", "warmth_of"]

logger = logging.getLogger(__name__)

KEEP_MEASURED_DAYS = 7
"""A coordinator starts from the cold starts its telemetry measured in this many days."""


class Host(Protocol):
    """What a :class:`Warmth` reads of the coordinator it serves."""

    backends: dict[str, SiteBackend]
    events: EventBus
    caller_sites: CallerSites | None
    telemetry: Telemetry | None
    _handles: dict[str, TaskHandle]


_MADE: weakref.WeakKeyDictionary[Host, Warmth] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def warmth_of(host: Host) -> Warmth:
    """``host``'s :class:`Warmth`, made (and subscribed to its events) on first use: the
    coordinator's placer asks for it before its first task is shipped."""
    with _LOCK:
        made = _MADE.get(host)
        if made is None:
            blocks = frozenset(n for n, b in host.backends.items() if runs_blocks(b))
            made = Warmth(host.events, host._handles, host.caller_sites, blocks, host.telemetry)
            _MADE[host] = made
        return made


def runs_blocks(backend: SiteBackend) -> bool:
    """Whether the site runs a shape's tasks on blocks it starts for them: one config per
    shape (``shape_config``: a Globus Compute endpoint, ``ComputeSite`` and ``CloudSite``).
    A site that starts nothing per shape (a test's thread pool) is never charged."""
    return callable(getattr(backend, "shape_config", None))


class Warmth:
    """A coordinator's warm shapes and cold-start figures, from its task events.

    Holds nothing of the coordinator but its event bus (subscribed to), its live handles
    (read by task id) and its callers' own identities.
    """

    def __init__(
        self,
        events: EventBus,
        handles: dict[str, TaskHandle],
        caller_sites: CallerSites | None = None,
        block_sites: frozenset[str] | None = None,
        telemetry: Telemetry | None = None,
        idle_s: float = DEFAULT_BLOCK_IDLE_S,
    ) -> None:
        self.handles = handles
        self.caller_sites = caller_sites
        self.telemetry = telemetry
        """Where measured cold starts are kept, and read back by the next coordinator."""
        self.blocks = WarmBlocks(idle_s)
        self.starts = ColdStarts()
        if telemetry is not None:  # the deployment's own latest measurements
            since = datetime.now(UTC) - timedelta(days=KEEP_MEASURED_DAYS)
            for site, seen in telemetry.cold_starts(self.starts.keep, since).items():
                for secs in seen:
                    self.starts.observe(site, secs)
        self.step = ColdStart(self.blocks, self.starts, block_sites)
        """What the coordinator's placer is given (``Policy.cold_start``)."""
        events.subscribe(self._on_event)

    def _on_event(self, ev: Event) -> None:
        if ev.kind in ("task.completed", "task.failed"):
            self.blocks.closed(ev.task_id, ev.at)
            return
        if ev.kind not in ("task.queued", "task.copy_added", "task.started"):
            return
        h = self.handles.get(ev.task_id)
        if h is None or self._own_identity(h.caller):
            return
        if ev.kind == "task.started":
            secs = None if ev.site is None else self.blocks.started(h.id, ev.site, ev.at)
            if ev.site is not None and secs is not None:
                self._measured(ev.site, secs, ev)
            return
        if ev.kind == "task.copy_added":
            if h.copies:
                self._opened(h.id, h.copies[-1].candidate, ev)
            return
        for c in (h.decision.chosen, *h.decision.hedges):
            self._opened(h.id, c, ev)

    def _measured(self, site: str, secs: float, ev: Event) -> None:
        self.starts.observe(site, secs)
        if self.telemetry is not None:
            try:
                self.telemetry.record_cold_start(site, secs, ev.at)
            except sqlite3.Error as e:  # closed with its coordinator meanwhile: not kept
                logger.debug("cold start at %s not kept: %s", site, e)

    def _opened(self, key: str, c: Candidate, ev: Event) -> None:
        self.blocks.opened(
            key,
            c.shape,
            ev.at,
            ready_in_s=c.predicted_start_s,
            cold=c.cold_start_s > 0,
            wait_s=c.stage_in_s + c.predicted_wait_s - c.cold_start_s,
        )

    def _own_identity(self, caller: str) -> bool:
        sites = self.caller_sites
        if sites is None:
            return False
        try:
            return sites.sites_for(caller) is not None
        except Exception:  # their identity cannot be read now: not the shared one's blocks
            return True
