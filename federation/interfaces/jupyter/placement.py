"""Where a task was placed, as the notebook futures (in-process and remote) report it."""

from __future__ import annotations

from dataclasses import dataclass

from federation.core.envelope import Shape

__all__ = ["Placement"]


@dataclass(frozen=True)
class Placement:
    """Where a task was placed: site, partition and the granted shape."""

    site: str
    partition: str
    shape: Shape
    predicted_wait_s: float

    def __str__(self) -> str:
        return self.shape.describe()
