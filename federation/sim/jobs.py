"""The simulated queue's job and request models: what is asked, what happened, what went wrong.

:class:`SimJob` is a request plus its true run time, :class:`SimJobStatus` where one job stands,
and :class:`SimRequestError` / :class:`UnknownSimJobError` what the simulated site refuses. The
internal records the queue keeps (a queued job ``_Q``, a running ``_Run``, a finished ``_Done``,
a what-if ``_Ghost`` and the head's EASY reservation ``_Resv``) and the microsecond rounding of
job ends (:func:`_tick`) live here too, so that every part of the queue shares them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, NamedTuple

from federation.core.errors import FederationError

__all__ = [
    "DEFAULT_EPOCH",
    "SimJob",
    "SimJobState",
    "SimJobStatus",
    "SimRequestError",
    "UnknownSimJobError",
]

DEFAULT_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
"""Wall-clock time of simulated t = 0 in snapshots (override per site)."""

SimJobState = Literal["future", "pending", "running", "completed", "timeout", "cancelled"]
_INF = math.inf


class SimRequestError(FederationError, ValueError):
    """A job the simulated site cannot take (too big for the partition, bad time, ...)."""


class UnknownSimJobError(FederationError, KeyError):
    """A job id the simulated site never issued."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


@dataclass(frozen=True, slots=True)
class SimJob:
    """A job request plus its true run time (which schedulers and predictors cannot see)."""

    partition: str
    walltime_s: float
    """Requested time limit; the job is killed when it is reached."""
    run_s: float
    """True run time of the payload."""
    nodes: int = 1
    cpus_per_node: int = 1
    mem_mb_per_node: int = 0
    gpus_per_node: int = 0
    submit_s: float | None = None
    """Arrival time; ``None`` means "now" at :meth:`SimSite.submit`. Later times queue up."""
    priority: int = 0
    """Higher runs first; ties go by submit time, then submission order."""
    name: str | None = None
    user: str | None = None


@dataclass(frozen=True, slots=True)
class SimJobStatus:
    """Where one job stands. ``end_s`` is the true end, known once the job has started."""

    job_id: str
    partition: str
    state: SimJobState
    submit_s: float
    start_s: float | None = None
    end_s: float | None = None
    limit_end_s: float | None = None
    """start + time limit: the end Slurm shows for a running job."""

    @property
    def wait_s(self) -> float | None:
        return None if self.start_s is None else self.start_s - self.submit_s


class _Q(NamedTuple):
    """A queued job; tuples order by priority key, and ``seq`` makes the key unique."""

    prio: float
    submit_s: float
    seq: int
    job_id: str
    job: SimJob
    shape: tuple[int, int, int, int]
    """(nodes, cpus, mem_mb, gpus per node), kept here for the hot loops."""


class _Run(NamedTuple):
    q: _Q
    start_s: float
    end_s: float
    limit_end_s: float
    nodes: tuple[int, ...]


class _Done(NamedTuple):
    q: _Q
    state: SimJobState
    start_s: float | None
    end_s: float


def _make_q(prio: int, submit_s: float, seq: int, job_id: str, job: SimJob) -> _Q:
    shape = (job.nodes, job.cpus_per_node, job.mem_mb_per_node, job.gpus_per_node)
    return _Q(-float(prio), submit_s, seq, job_id, job, shape)


@dataclass(slots=True)
class _Ghost:
    """A what-if candidate riding along a forward pass without taking anything."""

    q: _Q
    start: float | None = None
    left_s: float | None = None
    """When it left the shared pass: started, or reached the head and was forked off."""


@dataclass(slots=True)
class _Resv:
    """The head job's EASY reservation: shadow time and what it leaves on its nodes."""

    job_id: str
    shadow: float
    extra: dict[int, list[int]] = field(default_factory=dict)
    """Reserved node -> [cpus, mem_mb, gpus] a long backfill job may still take there."""
    blocked: set[int] = field(default_factory=set)
    """Reserved nodes a long backfill job cannot use at all (the head takes every CPU)."""


def _tick(t: float) -> float:
    """Job ends on the microsecond grid of snapshot timestamps, so that a twin rebuilt from a
    snapshot sees the same simultaneous ends as the site (float sums differ by ~1e-11 s)."""
    return round(t, 6)
