"""Statistics from hand-built event lists give the known values."""

import math

import pytest

from poss_core.rounds import metrics
from poss_core.rounds.events import DraftNode, FeatureDeviation, RoundEvent


def ev(round_, accept_len, depth=4, wall_ms=10.0, new_tokens=0, prefill=False, devs=None):
    # A chain of `depth` nodes; the first `accept_len` are accepted.
    nodes = (
        [
            DraftNode(token=10 + d, parent=d - 1, depth=d + 1, score=-0.1 * d, draft_prob=0.9, specialist=0)
            for d in range(depth)
        ]
        if not prefill
        else []
    )
    return RoundEvent(
        round=round_,
        nodes=nodes,
        accepted=list(range(accept_len)),
        bonus=1,
        target_probs=[0.5] * len(nodes),
        feature_deviation=devs if devs is not None else [FeatureDeviation(1.0, 0.1)] * accept_len,
        draft_ms=2.0,
        verify_ms=5.0,
        new_tokens=new_tokens,
        wall_ms=wall_ms,
        prefill=prefill,
    )


def events():
    # accept lengths 0, 1, 2, 2, 4 after a prefill round
    out = [ev(0, 0, prefill=True, new_tokens=1)]
    total = 1
    for i, a in enumerate([0, 1, 2, 2, 4], start=1):
        total += a + 1
        out.append(ev(i, a, new_tokens=total))
    return out


def test_tau_and_histogram():
    e = events()
    assert metrics.tau(e) == (1 + 2 + 3 + 3 + 5) / 5
    assert metrics.accept_hist(e) == [1, 1, 2, 0, 1]
    assert metrics.accept_lengths(e) == [0, 1, 2, 2, 4]


def test_conditional_pos_acc_and_unconditional_rate():
    e = events()
    # P(len >= k): k=0..4 -> 5/5, 4/5, 3/5, 1/5, 1/5
    assert metrics.pos_rate(e) == [4 / 5, 3 / 5, 1 / 5, 1 / 5]
    assert metrics.pos_acc(e) == [4 / 5, 3 / 4, 1 / 3, 1 / 1]
    # The chain rule links them: P(len >= k) is the product of pos-acc up to k.
    prod = 1.0
    for acc, rate in zip(metrics.pos_acc(e), metrics.pos_rate(e)):
        prod *= acc
        assert math.isclose(prod, rate)


def test_positions_never_reached_are_nan():
    e = [ev(1, 0, depth=3), ev(2, 1, depth=3)]
    acc = metrics.pos_acc(e)
    assert acc[0] == 0.5 and acc[1] == 0.0 and math.isnan(acc[2])


def test_positions_deeper_than_the_tree_are_nan_not_zero():
    """A depth-2 tree under a depth-6 setting (what --tree-budget auto may choose) drafts nothing at 3..6."""
    e = [ev(1, 0, depth=2), ev(2, 2, depth=2), ev(3, 1, depth=2)]
    s = metrics.summarize(e, depth=6)
    assert s["accept_hist"] == [1, 1, 1, 0, 0, 0, 0]
    assert s["pos_acc"][:2] == [2 / 3, 1 / 2] and all(math.isnan(v) for v in s["pos_acc"][2:])
    assert s["pos_rate"][:2] == [2 / 3, 1 / 3] and all(math.isnan(v) for v in s["pos_rate"][2:])
    assert metrics.pos_acc(e, depth=6)[1] == 1 / 2 and math.isnan(metrics.pos_rate(e, depth=6)[2])


def test_a_round_that_stopped_drafting_is_not_a_rejection_after_it():
    """A depth stop or the node budget ends a round's tree at d: if all d tokens were accepted, the round says nothing
    about position d+1, so pos-acc there rests on the rounds that drafted it."""
    # Three rounds drafted 4 positions (accepting 1, 4, 2); two stopped at depth 2 with both tokens accepted.
    e = [ev(1, 1, depth=4), ev(2, 4, depth=4), ev(3, 2, depth=4), ev(4, 2, depth=2), ev(5, 2, depth=2)]
    joint = metrics.accept_by_drafted(e, depth=4)
    assert joint[2][2] == 2 and joint[4] == [0, 1, 1, 0, 1] and sum(map(sum, joint)) == 5
    acc = metrics.pos_acc(e, depth=4)
    # k=1, 2: every round drafted them; k=3: only the three deep rounds, of which two had accepted 2 (ids 2, 3).
    assert acc[:2] == [5 / 5, 4 / 5] and acc[2] == pytest.approx(1 / 2) and acc[3] == 1.0
    # The histogram alone (every round taken to have drafted the whole depth, as a summary without by_drafted reads)
    # would have counted the two stopped rounds as rejections at k=3: 1 / 4.
    from_hist = metrics.AcceptanceStats(metrics.accept_hist(e, 4), drafted_depth=4)
    assert from_hist.rates(conditional=True)[2] == pytest.approx(1 / 4)
    rate = metrics.pos_rate(e, depth=4)
    assert rate == pytest.approx([1.0, 4 / 5, 1 / 3, 1 / 3])
    stats = metrics.acceptance_stats(e, depth=4)
    assert stats.drafted_share() == pytest.approx([1.0, 1.0, 3 / 5, 3 / 5])
    assert stats.counts(True) == ([5, 4, 1, 1], [5, 5, 2, 1])


def test_pooled_stats_add_up_like_one_run():
    a = [ev(1, 1, depth=4), ev(2, 4, depth=4)]
    b = [ev(3, 2, depth=4), ev(4, 2, depth=2), ev(5, 2, depth=2)]
    together = metrics.acceptance_stats(a + b, depth=4)
    pooled = metrics.pooled([metrics.acceptance_stats(a, depth=4), metrics.acceptance_stats(b, depth=4)])
    assert pooled.hist == together.hist and pooled.joint() == together.joint()
    assert pooled.rates(True) == pytest.approx(together.rates(True), nan_ok=True)
    assert pooled.deviation_of("accepted")["count"] == together.deviation_of("accepted")["count"]
    assert pooled.deviation_of("accepted")["l2"] == pytest.approx(together.deviation_of("accepted")["l2"])


def test_feature_deviation_and_speed():
    e = events()
    e[5].feature_deviation = [
        FeatureDeviation(1.0, 0.1),
        FeatureDeviation(2.0, 0.2),
        FeatureDeviation(3.0, 0.3),
        FeatureDeviation(5.0, 0.5),
    ]
    dev = metrics.feature_deviation_by_position(e)
    assert dev["count"] == [4, 3, 1, 1]
    assert math.isclose(dev["l2"][1], (1.0 + 1.0 + 2.0) / 3)
    assert math.isclose(dev["cosine"][3], 0.5)
    assert metrics.total_new_tokens(e) == 1 + 1 + 2 + 3 + 3 + 5
    assert math.isclose(metrics.tokens_per_s(e), 15 / 0.06)
    split = metrics.time_split(e)
    assert split["draft_ms"] == 2.0 and split["verify_ms"] == 5.0 and split["overhead_ms"] == 3.0
    assert metrics.speedup(30.0, 15.0) == 2.0


def test_summary_of_plain_decoding():
    e = [ev(0, 0, prefill=True, new_tokens=1)] + [ev(i, 0, depth=0, new_tokens=i + 1) for i in range(1, 5)]
    s = metrics.summarize(e, depth=0)
    assert s["tau"] == 1.0 and s["accept_hist"] == [4] and s["pos_acc"] == [] and s["rounds"] == 4


def test_event_json_round_trip():
    e = events()[3]
    assert RoundEvent.from_json(e.to_json()) == e


def test_tau_totals_add_up_to_the_pooled_tau():
    a = [ev(0, 0, prefill=True), ev(1, 2), ev(2, 0)]  # the prefill round counts for nothing
    b = [ev(0, 3)]
    (sa, ra), (sb, rb) = metrics.tau_totals(a), metrics.tau_totals(b)
    assert (sa, ra, sb, rb) == (4, 2, 4, 1)
    assert (sa + sb) / (ra + rb) == metrics.tau(a + b)


def test_bootstrap_of_a_tau_change():
    # One question per dataset: every resample is the data itself, so the interval collapses onto the change.
    # Dataset x: method τ 3 (6/2) vs base 2 (4/2); dataset y: 2 (2/1) vs 2 (6/3).
    one_each = [[((6, 2), (4, 2))], [((2, 1), (6, 3))]]
    out = metrics.bootstrap_tau_change(one_each, resamples=50)
    pooled = (8 / 3) / (10 / 5) - 1
    by_set = (3 + 2) / (2 + 2) - 1
    assert out["pooled"] == (pytest.approx(pooled), pytest.approx(pooled), pytest.approx(pooled))
    assert out["mean_of_datasets"][0] == pytest.approx(by_set)
    assert out["mean_of_datasets"][1] == pytest.approx(by_set) == out["mean_of_datasets"][2]

    # A draft equal to its base question by question: the interval is exactly 0 to 0.
    same = [[((5, 2), (5, 2)), ((9, 3), (9, 3)), ((4, 4), (4, 4))]]
    assert metrics.bootstrap_tau_change(same, resamples=200)["pooled"] == (0.0, 0.0, 0.0)

    # Better on some questions and worse on others: the interval spans 0 and contains the point estimate;
    # better on every question: the whole interval is above 0.
    mixed = [[((9, 3), (6, 3)), ((3, 3), (6, 3)), ((8, 4), (8, 4)), ((10, 5), (9, 5))]]
    change, lo, hi = metrics.bootstrap_tau_change(mixed, resamples=500)["pooled"]
    assert lo < 0 < hi and lo <= change <= hi
    better = [[((7, 3), (6, 3)), ((5, 3), (4, 3)), ((9, 4), (8, 4)), ((11, 5), (9, 5))]]
    assert metrics.bootstrap_tau_change(better, resamples=500)["pooled"][1] > 0


# ---------------------------------------------------------------- the vectorised bootstrap against the pure one


def _pure_bootstrap(datasets, statistic, resamples, level=0.95, seed=0):
    """The percentile bootstrap as plain Python (one `random` draw per resampled question): the reference the
    vectorised `metrics` bootstrap is held to."""
    import random

    rng = random.Random(seed)
    draws = [
        statistic([[rows[rng.randrange(len(rows))] for _ in rows] for rows in datasets if rows])
        for _ in range(resamples)
    ]
    out = []
    for i in range(2):
        vals = sorted(d[i] for d in draws if not math.isnan(d[i]))
        out.append((vals[int((1 - level) / 2 * (len(vals) - 1))], vals[int((1 + level) / 2 * (len(vals) - 1))]))
    return out


def _pure_tau(picked):
    per_set = [(sum(s for s, _ in rows), sum(n for _, n in rows)) for rows in picked]
    means = [s / n for s, n in per_set if n]
    return sum(s for s, _ in per_set) / sum(n for _, n in per_set), sum(means) / len(means)


def _pure_change(picked):
    per_set = [
        tuple((sum(r[side][0] for r in rows), sum(r[side][1] for r in rows)) for side in (0, 1)) for rows in picked
    ]
    (sm, rm), (sb, rb) = [(sum(p[side][0] for p in per_set), sum(p[side][1] for p in per_set)) for side in (0, 1)]
    means = [(m[0] / m[1], b[0] / b[1]) for m, b in per_set]
    return (sm / rm) / (sb / rb) - 1.0, sum(m for m, _ in means) / sum(b for _, b in means) - 1.0


def _questions(rng, count):
    def one():
        rounds = rng.randint(1, 30)
        return rounds + sum(rng.randint(0, 4) for _ in range(rounds)), rounds

    return [one() for _ in range(count)]


def test_vectorised_bootstrap_agrees_with_the_pure_python_one():
    # Three datasets of uneven size: point estimates are the same numbers, and each interval end lies within a small
    # share of the interval's width of the pure bootstrap's (both are Monte Carlo estimates of the same percentiles).
    import random

    rng = random.Random(7)
    taus = [_questions(rng, n) for n in (12, 40, 90)]
    pairs = [list(zip(_questions(rng, n), _questions(rng, n))) for n in (12, 40, 90)]
    for data, vectorised, pure in (
        (taus, metrics.bootstrap_tau, _pure_tau),
        (pairs, metrics.bootstrap_tau_change, _pure_change),
    ):
        got = vectorised(data, resamples=4000)
        want = _pure_bootstrap(data, pure, 4000)
        for i, name in enumerate(metrics.STATISTICS):
            value, lo, hi = got[name]
            assert value == pytest.approx(pure(data)[i], abs=1e-12)
            width = want[i][1] - want[i][0]
            assert width > 0 and lo < value < hi
            assert lo == pytest.approx(want[i][0], abs=0.08 * width)
            assert hi == pytest.approx(want[i][1], abs=0.08 * width)


def test_bootstrap_skips_empty_datasets_and_rounds_that_never_happened():
    # An empty dataset is left out (as the pure version's `if rows`); a question without rounds adds nothing.
    out = metrics.bootstrap_tau([[(6, 3), (0, 0)], [], [(4, 4)]], resamples=300)
    assert out["pooled"][0] == pytest.approx(10 / 7) and out["mean_of_datasets"][0] == pytest.approx(1.5)
    assert all(math.isnan(v) for v in metrics.bootstrap_tau([[(0, 0)]], resamples=50)["pooled"])
    assert all(math.isnan(v) for v in metrics.bootstrap_tau_change([[], []], resamples=50)["mean_of_datasets"])
