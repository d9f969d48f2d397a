"""Every statistic the app and the benchmark show, computed from `RoundEvent`s in one place (reference section 2)."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from typing import Any

from .events import RoundEvent


def draft_rounds(events: Iterable[RoundEvent]) -> list[RoundEvent]:
    """Rounds that verified a draft (the prefill round drafts nothing and is left out of acceptance statistics)."""
    return [e for e in events if not e.prefill]


def accept_lengths(events: Iterable[RoundEvent]) -> list[int]:
    return [e.accept_len for e in draft_rounds(events)]


TauTotals = tuple[int, int]  # (sum of accept_len + 1, rounds): what τ divides; adds up exactly across questions


def tau_totals(events: Iterable[RoundEvent]) -> TauTotals:
    lens = accept_lengths(events)
    return sum(n + 1 for n in lens), len(lens)


def tau(events: Iterable[RoundEvent]) -> float:
    """Mean acceptance length: mean over rounds of (accept_len + 1), tokens per target forward. NaN without rounds."""
    total, rounds = tau_totals(events)
    return total / rounds if rounds else math.nan


def _tau_change(picked: Sequence[Sequence[tuple[TauTotals, TauTotals]]]) -> tuple[float, float]:
    """τ(method) / τ(base) − 1, pooled over every round and as the ratio of the datasets' mean τ."""
    def summed(rows, side: int) -> TauTotals:
        return sum(r[side][0] for r in rows), sum(r[side][1] for r in rows)

    per_set = [(summed(rows, 0), summed(rows, 1)) for rows in picked]
    (sm, rm), (sb, rb) = summed(per_set, 0), summed(per_set, 1)
    pooled = (sm / rm) / (sb / rb) - 1.0 if rm and rb else math.nan
    means = [(m[0] / m[1], b[0] / b[1]) for m, b in per_set if m[1] and b[1]]
    by_set = sum(m for m, _ in means) / sum(b for _, b in means) - 1.0 if means else math.nan
    return pooled, by_set


def bootstrap_tau_change(datasets: Sequence[Sequence[tuple[TauTotals, TauTotals]]], resamples: int = 2000,
                         level: float = 0.95, seed: int = 0) -> dict[str, tuple[float, float, float]]:
    """How sure a τ difference between two drafts on the same questions is: a paired bootstrap over questions.
    `datasets` holds, per dataset, one ((sum, rounds) of the method, (sum, rounds) of the base) pair per question
    (`tau_totals`). Each resample draws every dataset's questions again with replacement (so the mix of datasets
    stays fixed) and keeps the pairing. Returns {"pooled": (change, low, high), "mean_of_datasets": (...)}, the
    change as a fraction and the percentile interval at `level`."""
    point = _tau_change(datasets)
    rng = random.Random(seed)
    draws: list[tuple[float, float]] = []
    for _ in range(resamples):
        picked = [[rows[rng.randrange(len(rows))] for _ in rows] for rows in datasets if rows]
        draws.append(_tau_change(picked))
    out = {}
    for i, name in enumerate(("pooled", "mean_of_datasets")):
        vals = sorted(d[i] for d in draws if not math.isnan(d[i]))
        if not vals:
            out[name] = (point[i], math.nan, math.nan)
            continue
        lo = vals[int((1 - level) / 2 * (len(vals) - 1))]
        hi = vals[int((1 + level) / 2 * (len(vals) - 1))]
        out[name] = (point[i], lo, hi)
    return out


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


def _at_least(hist: Sequence[int]) -> list[int]:
    """at_least[k] = rounds with accept_len >= k."""
    out, total = [0] * len(hist), 0
    for k in range(len(hist) - 1, -1, -1):
        total += hist[k]
        out[k] = total
    return out


def pos_rate_from_hist(hist: Sequence[int]) -> list[float]:
    """Unconditional per-position rate P(accept_len >= k), k = 1..depth (vLLM's accepted-per-position / drafts)."""
    ge = _at_least(hist)
    rounds = ge[0] if ge else 0
    return [ge[k] / rounds if rounds else math.nan for k in range(1, len(hist))]


def pos_acc_from_hist(hist: Sequence[int]) -> list[float]:
    """Conditional position-wise acceptance (POSS pos-acc): P(accept_len >= k) / P(accept_len >= k-1), k = 1..depth.
    NaN where no round reached position k-1."""
    ge = _at_least(hist)
    return [ge[k] / ge[k - 1] if ge[k - 1] else math.nan for k in range(1, len(hist))]


def only_drafted(values: Sequence[float], events: Iterable[RoundEvent]) -> list[float]:
    """NaN at positions deeper than any drafted node (a depth-2 tree under a depth-6 setting, or plain decoding):
    nothing was proposed there, so a rate of 0 would be a claim the data cannot make."""
    deepest = max_depth(events)
    return [v if k <= deepest else math.nan for k, v in enumerate(values, 1)]


def pos_rate(events: Iterable[RoundEvent], depth: int | None = None) -> list[float]:
    events = list(events)
    return only_drafted(pos_rate_from_hist(accept_hist(events, depth)), events)


def pos_acc(events: Iterable[RoundEvent], depth: int | None = None) -> list[float]:
    events = list(events)
    return only_drafted(pos_acc_from_hist(accept_hist(events, depth)), events)


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
    return {
        "tau": tau(events),
        "pos_acc": only_drafted(pos_acc_from_hist(hist), events),
        "pos_rate": only_drafted(pos_rate_from_hist(hist), events),
        "accept_hist": hist,
        "tokens_per_s": tokens_per_s(events),
        "new_tokens": total_new_tokens(events),
        "rounds": len(draft_rounds(events)),
        "feature_deviation": feature_deviation_by_position(events),
        **time_split(events),
    }
