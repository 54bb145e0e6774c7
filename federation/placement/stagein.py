"""How long a task's input takes to reach a site (placement's stage-in estimate)."""

from __future__ import annotations

from pydantic import Field

from federation.core.envelope import ResourceEnvelope
from federation.core.errors import BadEnvelopeError
from federation.core.model import Frozen

DEFAULT_BANDWIDTH_MB_S = 100.0
"""Assumed bandwidth between two distinct sites for stage-in estimates (1 MB = 10**6 B)."""


class TransferRates(Frozen):
    """Bandwidth assumed for stage-in between sites (MB/s); 0 s on the data's own site."""

    default_mb_s: float = Field(default=DEFAULT_BANDWIDTH_MB_S, gt=0)
    pairs_mb_s: dict[str, float] = Field(default_factory=dict)
    """Per ordered pair, keyed ``"source->destination"`` (e.g. ``"delta->anvil"``)."""

    def mb_s(self, source: str, dest: str) -> float:
        rate = self.pairs_mb_s.get(f"{source}->{dest}", self.default_mb_s)
        if rate <= 0:
            raise BadEnvelopeError(f"transfer rate {source}->{dest} must be > 0 MB/s")
        return rate


def stage_in_estimate(
    envelope: ResourceEnvelope, site: str, rates: TransferRates | None = None
) -> tuple[float, str]:
    """Seconds to bring the envelope's ``stage_in`` data to ``site`` (one after the other),
    and the reasoning; (0, "") when the task declares none."""
    if not envelope.stage_in:
        return 0.0, ""
    rates = rates or TransferRates()
    total = 0.0
    parts: list[str] = []
    for d in envelope.stage_in:
        if d.site == site:
            parts.append(f"{d.path} already here")
            continue
        rate = rates.mb_s(d.site, site)
        secs = d.size_bytes / (rate * 1e6)
        total += secs
        parts.append(f"{d.size_bytes / 1e9:.2f} GB from {d.site} at {rate:g} MB/s = {secs:.0f} s")
    return total, f"stage-in {total:.0f} s ({'; '.join(parts)})"
