"""The live experiment against the replay: does the ranking agree, and how far off are waits?

The replay (``bench/replay.py``) writes ``bench/results/replay.json``; the live experiment
on the local Slurm federation ranks the same policies by mean extra completion time over the
best observed in each round. :func:`compare_lines` puts the two rankings side by side (the
policies both ran), with Kendall's tau over the pairs and whether the best policy agrees, and
:func:`wait_miss_lines` how far each policy's predicted wait was from the wait ``sacct``
recorded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from itertools import combinations
from pathlib import Path
from typing import Any


def kendall_tau(a: Sequence[str], b: Sequence[str]) -> tuple[float, int, int]:
    """Kendall's tau between two rankings of the same items (best first), with the
    concordant and discordant pair counts."""
    if set(a) != set(b):
        raise ValueError(f"rankings of different items: {sorted(a)} vs {sorted(b)}")
    ra = {p: i for i, p in enumerate(a)}
    rb = {p: i for i, p in enumerate(b)}
    conc = disc = 0
    for x, y in combinations(a, 2):
        s = (ra[x] - ra[y]) * (rb[x] - rb[y])
        conc += s > 0
        disc += s < 0
    n = conc + disc
    return ((conc - disc) / n if n else 1.0), conc, disc


def replay_means(path: Path, trace: str, regime: str) -> dict[str, float]:
    """Mean extra completion (s) per policy in the replay's (trace, regime) group."""
    data = json.loads(path.read_text())
    for g in data.get("groups", []):
        if g["trace"] == trace and g["regime"] == regime:
            return {p: s["mean_extra_s"] for p, s in g["policies"].items() if p != "oracle"}
    have = [f"{g['trace']}:{g['regime']}" for g in data.get("groups", [])]
    raise KeyError(f"{path} has no group {trace}:{regime} (has: {', '.join(have) or 'none'})")


def compare_lines(
    live: Sequence[Mapping[str, Any]], replay: Mapping[str, float], label: str
) -> list[str]:
    means = {
        r["policy"]: r["mean extra s"]
        for r in live
        if not math.isnan(r["mean extra s"]) and r["policy"] in replay
    }
    if len(means) < 2:
        return [f"Ranking against the replay ({label}): fewer than two policies in common."]
    live_rank = sorted(means, key=lambda p: means[p])
    replay_rank = sorted(means, key=lambda p: replay[p])
    tau, conc, disc = kendall_tau(live_rank, replay_rank)
    return [
        f"Ranking by mean extra completion, live: {' < '.join(live_rank)}",
        f"Ranking in the replay ({label}): {' < '.join(replay_rank)}",
        f"Kendall tau {tau:+.2f} ({conc} pairs agree, {disc} disagree); the best policy "
        f"{'agrees' if live_rank[0] == replay_rank[0] else 'differs'} "
        f"(live {live_rank[0]}, replay {replay_rank[0]}).",
    ]


def wait_miss_lines(rows: Sequence[Any], policies: Sequence[str]) -> list[str]:
    """Per policy: median |predicted - recorded| wait and the share within 1 minute."""
    out = ["| policy | tasks | median wait miss s | wait ±1 min % |", "|---|---|---|---|"]
    for p in policies:
        miss = sorted(
            abs(r.predicted_wait_s - w)
            for r in rows
            if r.policy == p
            and (w := r.slurm_wait_s if r.slurm_wait_s is not None else r.wait_s) is not None
        )
        if not miss:
            out.append(f"| {p} | 0 | - | - |")
            continue
        med = miss[len(miss) // 2] if len(miss) % 2 else sum(miss[len(miss) // 2 - 1 :][:2]) / 2
        within = 100.0 * sum(m <= 60 for m in miss) / len(miss)
        out.append(f"| {p} | {len(miss)} | {med:.0f} | {within:.1f} |")
    return out
