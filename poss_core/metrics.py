"""Every statistic the app and the benchmark show, computed from `RoundEvent`s in one place (reference section 2)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .decoding.events import RoundEvent


def draft_rounds(events: Iterable[RoundEvent]) -> list[RoundEvent]:
    """Rounds that verified a draft (the prefill round drafts nothing and is left out of acceptance statistics)."""
    return [e for e in events if not e.prefill]


def accept_lengths(events: Iterable[RoundEvent]) -> list[int]:
    return [e.accept_len for e in draft_rounds(events)]


def tau(events: Iterable[RoundEvent]) -> float:
    """Mean acceptance length: mean over rounds of (accept_len + 1), tokens per target forward. NaN without rounds."""
    lens = accept_lengths(events)
    return sum(n + 1 for n in lens) / len(lens) if lens else math.nan


def max_depth(events: Iterable[RoundEvent]) -> int:
    depths = [n.depth for e in events for n in e.nodes]
    return max(depths, default=0)


def accept_hist(events: Iterable[RoundEvent], depth: int | None = None) -> list[int]:
    """hist[k] = number of rounds that accepted exactly k draft tokens, k = 0..depth."""
    events = list(events)
    lens = accept_lengths(events)
    d = max(depth if depth is not None else max_depth(events), max(lens, default=0))
    hist = [0] * (d + 1)
    for n in lens:
        hist[n] += 1
    return hist


def round_depth(event: RoundEvent) -> int | None:
    """How deep the round's verified tree reaches (None for an event that records no nodes: no limit is known)."""
    return max((n.depth for n in event.nodes), default=0) if event.nodes else None


@dataclass
class PositionCounts:
    """Per draft position k = 1..depth (list index k-1), over draft rounds:
    `hits` accepted at least k tokens; `tried` accepted k-1 and had a node at depth k to try;
    `drafted` had a node at depth k at all. A round whose tree stopped short of k (a dynamic depth stop, the context
    limit, pruning) neither passes nor fails position k."""

    hits: list[int]
    tried: list[int]
    drafted: list[int]

    def conditional(self) -> list[float]:
        """POSS pos-acc: P(accept k | accepted k-1 and position k was drafted). NaN where nothing was tried."""
        return [h / t if t else math.nan for h, t in zip(self.hits, self.tried)]

    def unconditional(self) -> list[float]:
        """P(accept_len >= k) over the rounds that drafted position k (vLLM's accepted-per-position / drafts)."""
        return [h / d if d else math.nan for h, d in zip(self.hits, self.drafted)]


def position_counts(events: Iterable[RoundEvent], depth: int | None = None) -> PositionCounts:
    events = draft_rounds(events)
    n = len(accept_hist(events, depth)) - 1
    hits, tried, drafted = [0] * n, [0] * n, [0] * n
    for e in events:
        reach = round_depth(e)
        reach = n if reach is None else max(reach, e.accept_len)
        for k in range(1, min(n, reach) + 1):
            drafted[k - 1] += 1
            tried[k - 1] += e.accept_len >= k - 1
            hits[k - 1] += e.accept_len >= k
    return PositionCounts(hits, tried, drafted)


def only_drafted(values: Sequence[float], events: Iterable[RoundEvent]) -> list[float]:
    """NaN at positions deeper than any drafted node (a depth-2 tree under a depth-6 setting, or plain decoding):
    nothing was proposed there, so a rate of 0 would be a claim the data cannot make."""
    deepest = max_depth(events)
    return [v if k <= deepest else math.nan for k, v in enumerate(values, 1)]


def pos_rate(events: Iterable[RoundEvent], depth: int | None = None) -> list[float]:
    events = list(events)
    return only_drafted(position_counts(events, depth).unconditional(), events)


def pos_acc(events: Iterable[RoundEvent], depth: int | None = None) -> list[float]:
    events = list(events)
    return only_drafted(position_counts(events, depth).conditional(), events)


def feature_deviation_by_position(events: Iterable[RoundEvent]) -> dict[str, list[float]]:
    """Mean L2 and cosine deviation at each accepted position (1-based index k -> list index k-1), with counts."""
    sums_l2: list[float] = []
    sums_cos: list[float] = []
    counts: list[int] = []
    for e in draft_rounds(events):
        for k, dev in enumerate(e.feature_deviation):
            while len(counts) <= k:
                sums_l2.append(0.0)
                sums_cos.append(0.0)
                counts.append(0)
            sums_l2[k] += dev.l2
            sums_cos[k] += dev.cosine
            counts[k] += 1
    return {
        "l2": [s / c for s, c in zip(sums_l2, counts)],
        "cosine": [s / c for s, c in zip(sums_cos, counts)],
        "count": counts,
    }


def total_new_tokens(events: Sequence[RoundEvent]) -> int:
    return events[-1].new_tokens if events else 0


def wall_seconds(events: Iterable[RoundEvent]) -> float:
    return sum(e.wall_ms for e in events) / 1000.0


def tokens_per_s(events: Sequence[RoundEvent]) -> float:
    """New tokens over the decode's own wall time (prefill included): what a user waits for."""
    seconds = wall_seconds(events)
    return total_new_tokens(events) / seconds if seconds > 0 else math.nan


def tokens_per_s_series(events: Sequence[RoundEvent]) -> list[tuple[float, float]]:
    """(elapsed seconds, cumulative tokens/s) after each round."""
    series, elapsed = [], 0.0
    for e in events:
        elapsed += e.wall_ms / 1000.0
        if elapsed > 0:
            series.append((elapsed, e.new_tokens / elapsed))
    return series


def time_split(events: Iterable[RoundEvent]) -> dict[str, float]:
    """Mean milliseconds per draft round spent drafting, verifying and in the engine's own overhead."""
    rounds = draft_rounds(events)
    if not rounds:
        return {"draft_ms": math.nan, "verify_ms": math.nan, "overhead_ms": math.nan, "round_ms": math.nan}
    n = len(rounds)
    return {
        "draft_ms": sum(e.draft_ms for e in rounds) / n,
        "verify_ms": sum(e.verify_ms for e in rounds) / n,
        "overhead_ms": sum(e.overhead_ms for e in rounds) / n,
        "round_ms": sum(e.wall_ms for e in rounds) / n,
    }


def speedup(method_tokens_per_s: float, baseline_tokens_per_s: float) -> float:
    if not baseline_tokens_per_s or math.isnan(baseline_tokens_per_s):
        return math.nan
    return method_tokens_per_s / baseline_tokens_per_s


def summarize(events: Sequence[RoundEvent], depth: int | None = None) -> dict[str, Any]:
    """The summary every view shows: tau, pos_acc, pos_rate, accept_hist, tokens_per_s, new_tokens, rounds."""
    events = list(events)
    hist = accept_hist(events, depth)
    counts = position_counts(events, depth)
    return {
        "tau": tau(events),
        "pos_acc": only_drafted(counts.conditional(), events),
        "pos_rate": only_drafted(counts.unconditional(), events),
        "accept_hist": hist,
        "tokens_per_s": tokens_per_s(events),
        "new_tokens": total_new_tokens(events),
        "rounds": len(draft_rounds(events)),
        "feature_deviation": feature_deviation_by_position(events),
        **time_split(events),
    }
