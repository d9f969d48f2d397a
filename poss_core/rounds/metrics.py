"""Every statistic the app and the benchmark show, computed from `RoundEvent`s in one place (reference section 2)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .events import RoundEvent


def draft_rounds(events: Iterable[RoundEvent]) -> list[RoundEvent]:
    """Rounds that verified a draft (the prefill round drafts nothing and is left out of acceptance statistics)."""
    return [e for e in events if not e.prefill]


def accept_lengths(events: Iterable[RoundEvent]) -> list[int]:
    return [e.accept_len for e in draft_rounds(events)]


TauTotals = tuple[int, int]  # (tokens the rounds emitted, rounds): what τ divides; adds up exactly across questions


def tau_totals(events: Iterable[RoundEvent]) -> TauTotals:
    """Tokens the drafting rounds emitted (accept_len + 1 each, but for a last round that ended inside its accepted
    path: only what it emitted, `RoundEvent.emitted`) and how many rounds they were."""
    rounds = draft_rounds(events)
    return sum(e.emitted for e in rounds), len(rounds)


def tau(events: Iterable[RoundEvent]) -> float:
    """Mean acceptance length: tokens emitted per target forward, mean over rounds of (accept_len + 1), the answer's
    end cutting the last round (`tau_totals`). NaN without rounds."""
    total, rounds = tau_totals(events)
    return total / rounds if rounds else math.nan


def _tau_change(totals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """τ(method) / τ(base) − 1, pooled over every round and as the ratio of the datasets' mean τ, per resample.
    `totals` is (resamples, datasets, 4): the summed (sum, rounds) of the method, then of the base."""
    sm, rm, sb, rb = (totals[..., i] for i in range(4))
    both = (rm.sum(1) > 0) & (rb.sum(1) > 0)
    pooled = np.where(both, _ratio(sm.sum(1), rm.sum(1)) / _ratio(sb.sum(1), rb.sum(1), 1.0) - 1.0, np.nan)
    kept = (rm > 0) & (rb > 0)  # datasets with rounds on both sides
    mine, theirs = np.where(kept, _ratio(sm, rm), 0.0).sum(1), np.where(kept, _ratio(sb, rb), 0.0).sum(1)
    by_set = np.where(kept.any(1), mine / np.where(theirs > 0, theirs, 1.0) - 1.0, np.nan)
    return pooled, by_set


def _tau_pooled_and_by_set(totals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """τ pooled over every round, and the mean of the datasets' τ (the paper's mean column), for each resample.
    `totals` is (resamples, datasets, 2): each dataset's summed (sum, rounds)."""
    s, n = totals[..., 0], totals[..., 1]
    pooled = np.where(n.sum(1) > 0, _ratio(s.sum(1), n.sum(1)), np.nan)
    kept = n > 0
    count = kept.sum(1)
    by_set = np.where(count > 0, np.where(kept, _ratio(s, n), 0.0).sum(1) / np.maximum(count, 1), np.nan)
    return pooled, by_set


def _ratio(a: np.ndarray, b: np.ndarray, empty: float = 0.0) -> np.ndarray:
    """a / b where b > 0, `empty` elsewhere (the callers mask those out): no division warnings."""
    return np.divide(a, b, out=np.full(np.shape(a), empty, dtype=float), where=b > 0)


STATISTICS = ("pooled", "mean_of_datasets")
BOOTSTRAP_CELLS = 1 << 20  # questions drawn at once (per column): bounds a bootstrap's memory to a few MB


def _resampled_totals(datasets: Sequence[np.ndarray], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, datasets, columns): in each resample, every dataset's questions (rows of numbers, e.g. sum and
    rounds) drawn again with replacement, as many as it has, and summed."""
    out = np.zeros((resamples, len(datasets), datasets[0].shape[1]))
    for d, values in enumerate(datasets):
        n = len(values)
        step = max(1, BOOTSTRAP_CELLS // n)
        for start in range(0, resamples, step):
            picks = rng.integers(0, n, size=(min(step, resamples - start), n))
            for c in range(values.shape[1]):
                out[start : start + len(picks), d, c] = values[:, c][picks].sum(axis=1)
    return out


def _stratified_bootstrap(
    datasets: Sequence[Sequence[Any]], statistic, resamples: int, level: float, seed: int
) -> dict[str, tuple[float, float, float]]:
    """A percentile bootstrap over questions, stratified by dataset: each resample draws every dataset's questions
    again with replacement (so the mix of datasets stays fixed). `statistic` maps (resamples, datasets, columns)
    summed rows to the two `STATISTICS`, one value per resample; returns {name: (point estimate, low, high)} at
    `level`. Vectorised with numpy: its cost is resamples x questions array operations, not Python steps."""
    # A question's numbers, nested ((sum, rounds), (sum, rounds)) or flat, as one row; empty datasets left out.
    shaped = [np.asarray(rows, dtype=float).reshape(len(rows), -1) for rows in datasets if len(rows)]
    if not shaped:
        return {name: (math.nan, math.nan, math.nan) for name in STATISTICS}
    point = [float(v[0]) for v in statistic(np.stack([rows.sum(axis=0) for rows in shaped])[None])]
    draws = statistic(_resampled_totals(shaped, resamples, np.random.default_rng(seed)))
    out = {}
    for i, name in enumerate(STATISTICS):
        vals = np.sort(draws[i][~np.isnan(draws[i])])
        if not len(vals):
            out[name] = (point[i], math.nan, math.nan)
            continue
        lo = float(vals[int((1 - level) / 2 * (len(vals) - 1))])
        hi = float(vals[int((1 + level) / 2 * (len(vals) - 1))])
        out[name] = (point[i], lo, hi)
    return out


def bootstrap_tau_change(
    datasets: Sequence[Sequence[tuple[TauTotals, TauTotals]]], resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> dict[str, tuple[float, float, float]]:
    """How sure a τ difference between two drafts on the same questions is: a paired bootstrap over questions.
    `datasets` holds, per dataset, one ((sum, rounds) of the method, (sum, rounds) of the base) pair per question
    (`tau_totals`); a resample keeps the pairing. Returns {"pooled": (change, low, high), "mean_of_datasets": (...)},
    the change as a fraction and the percentile interval at `level`."""
    return _stratified_bootstrap(datasets, _tau_change, resamples, level, seed)


def bootstrap_tau(
    datasets: Sequence[Sequence[TauTotals]], resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> dict[str, tuple[float, float, float]]:
    """τ with a 95% interval from a bootstrap over questions: `datasets` holds, per dataset, one (sum, rounds) per
    question (`tau_totals` of its turns, runs included: at temperature 0 a question's runs repeat its rounds, so a
    question is the unit). Returns {"pooled": (τ, low, high), "mean_of_datasets": (...)}; with one dataset the two
    agree."""
    return _stratified_bootstrap(datasets, _tau_pooled_and_by_set, resamples, level, seed)


@dataclass(frozen=True)
class Estimate:
    """A figure with its interval and the sample it rests on: τ with its bootstrap interval over questions (n: rounds),
    a speed-up with ± one std over runs (n: runs), a rate with its Wilson interval (n: its denominator)."""

    value: float
    low: float
    high: float
    n: int


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval of a proportion successes / n (95% by default): unlike p ± z·SE it stays inside [0, 1]
    and is honest with few rounds or a rate near 0 or 1. (NaN, NaN) when n is 0."""
    if n <= 0:
        return math.nan, math.nan
    p, z2 = successes / n, z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


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


def round_drafted_depth(e: RoundEvent, depth: int) -> int:
    """How many positions a round drafted: its deepest node. A round whose draft is not observed (transformers'
    generate shows only the kept candidates) counts as drafting `depth`, the most it may have proposed."""
    if not e.draft_observed:
        return depth
    return max((n.depth for n in e.nodes), default=0)


def accept_by_drafted(events: Iterable[RoundEvent], depth: int | None = None) -> list[list[int]]:
    """joint[d][a] = rounds that drafted d positions and accepted a of them, d, a = 0..depth. A round that stopped
    drafting at d (a depth stop or the node budget) says nothing about positions after d: pos-acc leaves it out
    there instead of counting it as a rejection."""
    events = list(events)
    hist = accept_hist(events, depth)
    size = len(hist)
    joint = [[0] * size for _ in range(size)]
    for e in draft_rounds(events):
        # A round the answer's end cut says nothing about the positions past the end: as if it drafted no further.
        drafted = e.accept_len if e.past_end else round_drafted_depth(e, size - 1)
        d = max(min(drafted, size - 1), e.accept_len)
        joint[d][e.accept_len] += 1
    return joint


def position_counts(joint: Sequence[Sequence[int]]) -> dict[str, list[int]]:
    """Per position k = 1..depth, from `accept_by_drafted`: `accepted` (rounds that accepted at least k tokens),
    `tried` (rounds that accepted k-1 and drafted k: pos-acc's denominator), `drafted` (rounds that drafted k: the
    unconditional rate's denominator) and `rounds` (every round)."""
    size = len(joint)
    rounds = sum(sum(row) for row in joint)
    accepted, tried, drafted = [], [], []
    for k in range(1, size):
        accepted.append(sum(joint[d][a] for d in range(size) for a in range(k, size)))
        tried.append(sum(joint[d][a] for d in range(k, size) for a in range(k - 1, size)))
        drafted.append(sum(sum(joint[d]) for d in range(k, size)))
    return {"accepted": accepted, "tried": tried, "drafted": drafted, "rounds": [rounds] * (size - 1)}


def pos_rate(events: Iterable[RoundEvent], depth: int | None = None) -> list[float]:
    return acceptance_stats(events, depth).rates(conditional=False)


def pos_acc(events: Iterable[RoundEvent], depth: int | None = None) -> list[float]:
    return acceptance_stats(events, depth).rates(conditional=True)


# Where a deviation is measured (events.py): on accepted positions only (conditional on acceptance, survivor-biased),
# along the target's own continuation from every position of it ("every_position": a sample of the text) or from each
# round's root only ("continuation": the places the last draft failed), or on every drafted tree slot on / off the
# accepted path.
DEVIATION_KINDS = ("accepted", "every_position", "continuation", "tree_on_path", "tree_off_path")


def _deviation_rows(e: RoundEvent, kind: str) -> list[tuple[int, float, float, int]]:
    """(position k, l2, cosine, slots) of one round for a kind of deviation."""
    if kind == "accepted":
        return [(k, d.l2, d.cosine, 1) for k, d in enumerate(e.feature_deviation, start=1)]
    if kind == "continuation":
        return [(k, d.l2, d.cosine, 1) for k, d in enumerate(e.continuation_deviation, start=1)]
    if kind == "every_position":
        return [(d.k, d.l2, d.cosine, d.n) for d in e.every_position_deviation]
    if kind in ("tree_on_path", "tree_off_path"):
        on = kind == "tree_on_path"
        return [(d.k, d.l2, d.cosine, d.n) for d in e.tree_deviation if d.on_path == on]
    raise ValueError(f"deviation kind {kind!r}: use one of {', '.join(DEVIATION_KINDS)}")


def feature_deviation_by_position(events: Iterable[RoundEvent], kind: str = "accepted") -> dict[str, list[float]]:
    """Mean L2 and cosine deviation at each position (1-based index k -> list index k-1), with the slots each mean
    rests on (`count`), for one of DEVIATION_KINDS. A position no round reached has count 0 and NaN means."""
    sums_l2: list[float] = []
    sums_cos: list[float] = []
    counts: list[int] = []
    for e in draft_rounds(events):
        for k, l2, cos, n in _deviation_rows(e, kind):
            while len(counts) < k:
                sums_l2.append(0.0)
                sums_cos.append(0.0)
                counts.append(0)
            sums_l2[k - 1] += l2 * n
            sums_cos[k - 1] += cos * n
            counts[k - 1] += n
    return {
        "l2": [s / c if c else math.nan for s, c in zip(sums_l2, counts)],
        "cosine": [s / c if c else math.nan for s, c in zip(sums_cos, counts)],
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
    stats = acceptance_stats(events, depth)
    return {
        "tau": tau(events),
        "pos_acc": stats.rates(conditional=True),
        "pos_rate": stats.rates(conditional=False),
        "drafted_share": stats.drafted_share(),
        "accept_hist": stats.hist,
        "tokens_per_s": tokens_per_s(events),
        "new_tokens": total_new_tokens(events),
        "rounds": len(draft_rounds(events)),
        "feature_deviation": stats.deviation_of("accepted"),  # accepted positions only: conditional on acceptance
        "deviation": {kind: stats.deviation_of(kind) for kind in DEVIATION_KINDS[1:]},
        **time_split(events),
    }


def specialists_by_position(events: Iterable[RoundEvent]) -> list[int]:
    """Which specialist drafted each position 1..depth, read off the events' tree nodes (-1 where never drafted);
    empty for a method whose draft is not observed (prompt lookup, assisted generation: no specialists)."""
    events = [e for e in events if e.draft_observed]
    out = [-1] * max_depth(events)
    for e in events:
        for n in e.nodes:
            if out[n.depth - 1] < 0:
                out[n.depth - 1] = n.specialist
    return out


def _deviations(events: Sequence[RoundEvent]) -> dict[str, dict[str, list]]:
    return {kind: feature_deviation_by_position(events, kind) for kind in DEVIATION_KINDS}


@dataclass
class AcceptanceStats:
    """What the acceptance and deviation charts draw for one method: the accept-length histogram, how many positions
    each round drafted, which specialist drafted each position, and feature deviation by position of each kind.
    Built from events (`acceptance_stats`: the app's lanes) or read back from a benchmark summary (the Evidence tab),
    so both draw the same charts from the same numbers; `pooled` adds several up (the class-wide charts)."""

    hist: list[int]  # rounds that accepted exactly k draft tokens, k = 0..depth
    drafted_depth: int  # deepest drafted position: deeper positions proposed nothing (NaN, not 0)
    specialists: list[int] = field(default_factory=list)  # specialist per position 1..depth, -1 never drafted
    # DEVIATION_KINDS -> {"l2", "cosine", "count"} by position; a kind no source measured is absent
    deviation: dict[str, dict[str, list]] = field(default_factory=dict)
    # by_drafted[d][a]: rounds that drafted d positions and accepted a (`accept_by_drafted`); None where only the
    # histogram is known, and every round is then taken to have drafted `drafted_depth` positions
    by_drafted: list[list[int]] | None = None

    @property
    def rounds(self) -> int:
        return sum(self.hist)

    @property
    def tau(self) -> float:
        return sum((k + 1) * h for k, h in enumerate(self.hist)) / self.rounds if self.rounds else math.nan

    def joint(self) -> list[list[int]]:
        if self.by_drafted is not None:
            return self.by_drafted
        size = len(self.hist)  # every round drafted `drafted_depth` positions (or accepted more, which is the same)
        joint = [[0] * size for _ in range(size)]
        for a, n in enumerate(self.hist):
            joint[min(max(a, self.drafted_depth), size - 1)][a] += n
        return joint

    def _drafted(self, values: Sequence[float]) -> list[float]:
        return [v if k <= self.drafted_depth else math.nan for k, v in enumerate(values, 1)]

    def counts(self, conditional: bool = True) -> tuple[list[int], list[int]]:
        """(successes, n) behind each rate: rounds that accepted at least k, over rounds that accepted k−1 and
        drafted k (conditional) or over rounds that drafted k (unconditional)."""
        c = position_counts(self.joint())
        return c["accepted"], (c["tried"] if conditional else c["drafted"])

    def rates(self, conditional: bool = True) -> list[float]:
        """Conditional pos-acc (True) or the unconditional rate, k = 1..depth, over the rounds that drafted k."""
        hits, n = self.counts(conditional)
        return self._drafted([h / m if m else math.nan for h, m in zip(hits, n)])

    def intervals(self, conditional: bool = True) -> list[tuple[float, float]]:
        """Wilson 95% interval of each rate (NaN where nothing was drafted or no round reached k−1)."""
        hits, n = self.counts(conditional)
        return [
            wilson_interval(h, m) if k <= self.drafted_depth else (math.nan, math.nan)
            for k, (h, m) in enumerate(zip(hits, n), 1)
        ]

    def drafted_share(self) -> list[float]:
        """The share of rounds that drafted position k, k = 1..depth (1.0 everywhere when every round drafted the
        whole tree; a depth stop or a small budget lowers the deep positions)."""
        c = position_counts(self.joint())
        return [d / r if r else math.nan for d, r in zip(c["drafted"], c["rounds"])]

    def deviation_of(self, kind: str) -> dict[str, list]:
        """Mean L2, cosine distance and count by position for one of DEVIATION_KINDS (empty lists if not measured)."""
        return self.deviation.get(kind) or {"l2": [], "cosine": [], "count": []}


def _padded(rows: Sequence[Sequence[int]], size: int) -> list[list[int]]:
    out = [[0] * size for _ in range(size)]
    for d, row in enumerate(rows):
        for a, n in enumerate(row):
            out[d][a] += n
    return out


def _pool_deviation(parts: Sequence[dict[str, list]]) -> dict[str, list]:
    """Count-weighted means of several deviation-by-position tables."""
    depth = max((len(p.get("count", [])) for p in parts), default=0)
    l2, cos, count = [0.0] * depth, [0.0] * depth, [0] * depth
    for p in parts:
        for k, n in enumerate(p.get("count", [])):
            if n:
                l2[k] += p["l2"][k] * n
                cos[k] += p["cosine"][k] * n
                count[k] += n
    return {
        "l2": [s / n if n else math.nan for s, n in zip(l2, count)],
        "cosine": [s / n if n else math.nan for s, n in zip(cos, count)],
        "count": count,
    }


def pooled(parts: Sequence[AcceptanceStats]) -> AcceptanceStats:
    """Several `AcceptanceStats` of one method added up, as if their rounds were one run: histograms and joint
    tables summed, deviations count-weighted, the specialist map of whichever source drafted each position."""
    size = max((len(p.hist) for p in parts), default=1)
    hist = [0] * size
    joint = [[0] * size for _ in range(size)]
    specialists: list[int] = []
    for p in parts:
        for a, n in enumerate(p.hist):
            hist[a] += n
        pj = _padded(p.joint(), size)
        joint = [[x + y for x, y in zip(r1, r2)] for r1, r2 in zip(joint, pj)]
        for k, s in enumerate(p.specialists):
            if k >= len(specialists):
                specialists.append(-1)
            if specialists[k] < 0:
                specialists[k] = s
    kinds = {kind for p in parts for kind in p.deviation}
    deviation = {
        kind: _pool_deviation([p.deviation[kind] for p in parts if kind in p.deviation])
        for kind in DEVIATION_KINDS
        if kind in kinds
    }
    return AcceptanceStats(
        hist=hist,
        drafted_depth=max((p.drafted_depth for p in parts), default=0),
        specialists=specialists,
        deviation=deviation,
        by_drafted=joint,
    )


def acceptance_stats(events: Iterable[RoundEvent], depth: int | None = None) -> AcceptanceStats:
    """An `AcceptanceStats` of these rounds (`depth`: the histogram's length at least, as `accept_hist`)."""
    events = list(events)
    return AcceptanceStats(
        hist=accept_hist(events, depth),
        drafted_depth=max_depth(events),
        specialists=specialists_by_position(events),
        deviation=_deviations(events),
        by_drafted=accept_by_drafted(events, depth),
    )
