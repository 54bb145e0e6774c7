"""The Globus Compute service's request rate limit: 20 requests per 10 s from each client.

Globus Compute docs, "Limits", "Task-Rate Limiting" (``globus/globus-compute``
``docs/limits.rst``; funcx.readthedocs.io/en/latest/limits.html): "Currently, Globus
Compute limits the number of requests submitted from a client to **20 requests per 10
seconds**." Every route counts. A request over the limit is answered HTTP 429 with a
``Retry-After`` header (whole seconds), which the SDK's transport honours: it retries a 429
after that many seconds (``globus_sdk`` ``RetryConfig``: up to 5 retries, at most 10 s
apart).

A client is told apart by its credentials: :func:`identity_of` hashes the bearer token of
the request's ``Authorization`` header (``"anonymous"`` without one), and the window is
kept per identity: one client's burst does not slow another's.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ANONYMOUS", "RateLimit", "RateLimiter", "identity_of", "retry_after_header"]

ANONYMOUS = "anonymous"
"""The identity of a request without credentials (the stand-in's default ``Client``)."""

_IDLE_IDENTITIES = 64
"""Past this many identities, those silent for a whole window are forgotten."""


@dataclass(frozen=True)
class RateLimit:
    """At most ``requests`` admitted in any ``window_s`` seconds (a sliding window)."""

    requests: int = 20
    window_s: float = 10.0


def identity_of(authorization: str | bytes | None) -> str:
    """Who sent a request: a hash of its bearer token, ``"anonymous"`` without one."""
    if isinstance(authorization, bytes):
        authorization = authorization.decode("latin-1")
    if not authorization or not authorization.strip():
        return ANONYMOUS
    scheme, _, token = authorization.strip().partition(" ")
    secret = token.strip() if scheme.lower() == "bearer" and token.strip() else authorization
    return hashlib.sha256(secret.encode()).hexdigest()[:32]


def retry_after_header(wait_s: float) -> str:
    """``Retry-After`` in whole seconds (rounded up, at least 1), as HTTP has it."""
    return str(max(1, math.ceil(wait_s)))


class RateLimiter:
    """A sliding window per identity: the times of the requests it admitted.

    Only admitted requests count (a refused one takes no slot), so a client that waits the
    ``Retry-After`` it was told finds a free slot.
    """

    def __init__(
        self, limit: RateLimit | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit or RateLimit()
        if self.limit.requests < 1 or self.limit.window_s <= 0:
            raise ValueError(f"not a rate limit: {self.limit}")
        self._clock = clock
        self._admitted: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def admit(self, identity: str) -> float | None:
        """None if ``identity`` may make a request now (and it is counted); else the
        seconds until its oldest request in the window leaves it."""
        now = self._clock()
        start = now - self.limit.window_s
        with self._lock:
            times = self._admitted.setdefault(identity, deque())
            while times and times[0] <= start:
                times.popleft()
            if len(times) >= self.limit.requests:
                return times[0] - start
            times.append(now)
            if len(self._admitted) > _IDLE_IDENTITIES:
                for who in [w for w, ts in self._admitted.items() if ts[-1] <= start]:
                    del self._admitted[who]
        return None

    def refusal(self, wait_s: float) -> tuple[int, dict[str, Any], dict[str, str]]:
        """The answer to a request over the limit: (429, the service's error body,
        ``Retry-After``)."""
        message = (
            f"Rate limit exceeded: at most {self.limit.requests} requests per "
            f"{self.limit.window_s:g} s from a client; retry after {wait_s:.1f} s"
        )
        body = {"code": "TOO_MANY_REQUESTS", "message": message, "http_status": 429}
        return 429, body, {"Retry-After": retry_after_header(wait_s)}
