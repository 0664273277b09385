"""What one host tells the others about its share of an iteration's rollout: small values, never turns.

Each host keeps the turns it played (tokens, log-probs, texts) and sends a :class:`HostSummary`: its turn
count, its episodes' totals, its groups' scalar graph diagnostics, the groups it dropped or re-ran, and
its stop request. :func:`merge_summaries` combines every host's into the summary one host holding every
turn would make, value for value: counts add up; ``relaxation_rounds`` is the most any host needed (the
groups' graphs are disjoint, so the relaxation over all of them stops when the slowest group's does);
each fraction is rebuilt from the hosts' numerators and denominators, in float32 as
``graph.diagnostics`` divides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from env_bridge.rollout import Episode

# graph.diagnostics' fractions and the count each divides by; every other scalar adds up, but these
FRACTION_OF = {
    "duplicate_edge_fraction": "edges",
    "unreachable_fraction": "nodes",
    "graph_nonzero_advantage_fraction": "rows",
    "step_nonzero_advantage_fraction": "rows",
}
MOST = ("relaxation_rounds",)
COUNTS = (
    "rows",
    "groups",
    "trajectories",
    "all_fail_groups",
    "all_success_groups",
    "nodes",
    "edges",
    "self_loops",
    *(f"{prefix}{name}" for prefix in ("graph_", "step_") for name in ("source_states", "single_edge_sources")),
    "graph_states_shared_by_trajectories",
    "step_states_shared_by_trajectories",
)


class EpisodeTotals(NamedTuple):
    """Sums over a host's episodes, from which the iteration's episode metrics follow exactly."""

    episodes: int = 0
    won: int = 0
    turns: int = 0
    invalid: int = 0


class HostSummary(NamedTuple):
    """One host's iteration without its turns (a NamedTuple: pickled without its field names)."""

    rows: int  # turns played: this host's training rows
    episodes: EpisodeTotals
    diagnostics: dict[str, int | float]  # its groups' scalar graph diagnostics; {} without turns
    dropped: list[dict[str, Any]]  # group, game, reason
    reruns: int
    stop_requested: str  # the signal's name, "" when none arrived


def episode_totals(episodes: Sequence[Episode]) -> EpisodeTotals:
    return EpisodeTotals(
        len(episodes), sum(e.won for e in episodes), sum(e.turns for e in episodes), sum(e.invalid for e in episodes)
    )


def episode_metrics(totals: EpisodeTotals) -> dict[str, float]:
    """Success rate and mean turns per trajectory; invalid actions per turn."""
    return {
        "success_rate": totals.won / max(totals.episodes, 1),
        "mean_turns": totals.turns / max(totals.episodes, 1),
        "invalid_action_rate": totals.invalid / max(totals.turns, 1),
    }


def scalar_diagnostics(diagnostics: Mapping[str, Any]) -> dict[str, int | float]:
    """The estimator's scalar diagnostics as Python numbers (the distance histogram stays home)."""
    return {k: np.asarray(v).item() for k, v in diagnostics.items() if np.ndim(v) == 0}


def merge_diagnostics(per_host: Sequence[Mapping[str, int | float]]) -> dict[str, int | float]:
    """The diagnostics of every host's groups taken together, exactly as one batch of them all gives them.
    Raises ValueError for a diagnostic without a rule here (it may not add up)."""
    names = sorted({k for d in per_host for k in d})
    unknown = [k for k in names if k not in FRACTION_OF and k not in MOST and k not in COUNTS]
    if unknown:
        raise ValueError(f"graph diagnostics {unknown} have no rule for combining hosts (ggtrain.rollout_summary)")
    merged: dict[str, int | float] = {}
    for name in names:
        present = [d for d in per_host if name in d]
        if name in MOST:
            merged[name] = max(d[name] for d in present)
        elif name in COUNTS:
            merged[name] = sum(d[name] for d in present)
        else:
            merged[name] = merged_fraction([(d[name], int(d[FRACTION_OF[name]])) for d in present])
    return merged


def merged_fraction(parts: Sequence[tuple[float, int]]) -> float:
    """``sum(n) / sum(d)`` from each part's float32 fraction ``n / max(d, 1)`` and its ``d``, as
    ``graph.diagnostics`` divides (float32). A part's ``n`` comes back exactly: the fraction times
    ``max(d, 1)`` is within ``n * 2**-24`` of ``n``, under 1/2 for any count below 2**23."""
    numerator = sum(int(np.rint(float(f) * max(d, 1))) for f, d in parts)
    return float(np.float32(numerator) / np.float32(max(sum(d for _, d in parts), 1)))


def merge_summaries(summaries: Sequence[HostSummary]) -> HostSummary:
    """Every host's summary as one (dropped groups in host order, the first stop request)."""
    return HostSummary(
        rows=sum(s.rows for s in summaries),
        episodes=EpisodeTotals(*(sum(values) for values in zip(*(s.episodes for s in summaries), strict=True))),
        diagnostics=merge_diagnostics([s.diagnostics for s in summaries]),
        dropped=[d for s in summaries for d in s.dropped],
        reruns=sum(s.reruns for s in summaries),
        stop_requested=next((s.stop_requested for s in summaries if s.stop_requested), ""),
    )
