"""What the round charts read off their runs: each run's acceptance statistics (from its rounds, or kept by a
summary), the runs that drafted, and which feature-deviation measure a chart draws and how it names it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..rounds import metrics
from ..rounds.events import RoundEvent
from ..rounds.metrics import AcceptanceStats

Runs = Mapping[str, "Sequence[RoundEvent] | AcceptanceStats"]

# What each kind of feature deviation (metrics.DEVIATION_KINDS) is measured on, as a chart says it.
DEVIATION_TITLES = {
    "every_position": "along the target's own continuation, from every position",
    "continuation": "along the target's continuation, from round roots only (where the last draft failed)",
    "accepted": "accepted positions only (conditional on acceptance)",
    "tree_on_path": "tree nodes on the accepted path",
    "tree_off_path": "tree nodes off the accepted path",
}
DEVIATION_UNITS = {
    "every_position": "starting positions",
    "continuation": "rounds",
    "accepted": "accepted tokens",
    "tree_on_path": "nodes",
    "tree_off_path": "nodes",
}
# What a chart draws instead where no run measured a kind (a run saved before it existed); the title says which.
DEVIATION_FALLBACK = {"every_position": "continuation", "continuation": "accepted"}


def acceptance_of(runs: Runs, depth: int | None = None) -> dict[str, AcceptanceStats]:
    """Every run as `AcceptanceStats`: events are summarised here, stats pass through."""
    return {
        label: r if isinstance(r, AcceptanceStats) else metrics.acceptance_stats(r, depth) for label, r in runs.items()
    }


def drafted_runs(stats: Mapping[str, AcceptanceStats]) -> dict[str, AcceptanceStats]:
    """Runs with at least one verified draft round (plain decoding has none and no draft positions)."""
    return {label: s for label, s in stats.items() if s.rounds and s.drafted_depth > 0}


def deviation_kind_shown(stats: Mapping[str, AcceptanceStats], kind: str) -> str:
    """`kind`, or the next measure in DEVIATION_FALLBACK (ending at the accepted-only deviation) where no run
    measured `kind`: the chart then says which one it draws."""
    while kind != "accepted" and not any(any(st.deviation_of(kind)["count"]) for st in stats.values()):
        kind = DEVIATION_FALLBACK.get(kind, "accepted")
    return kind
