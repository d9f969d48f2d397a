"""A round told in words (`poss_core.rounds.explain.explain_round`) for hand-built events, and the bonus_prob field."""

from __future__ import annotations

import math

from poss_core.rounds.events import DraftNode, FeatureDeviation, RoundEvent
from poss_core.rounds.explain import explain_round, say_probability

TEXTS = {10: "The", 11: "A", 12: " cat", 13: " dog", 14: " sat", 50: " mat", 40: "Hello"}


def text(token: int) -> str:
    return TEXTS[token]


def greedy_round(bonus_prob=0.71):
    """5 nodes at depths 1-3 from two specialists: 0 ("The") and 2 (" cat") accepted, then at depth 3 the draft's top
    candidate " dog" (node 3) and " sat" (node 4) lost to the target's " mat"."""
    nodes = [
        DraftNode(10, -1, 1, math.log(0.8), 0.8, 0),
        DraftNode(11, -1, 1, math.log(0.1), 0.1, 0),
        DraftNode(12, 0, 2, math.log(0.48), 0.6, 0),
        DraftNode(13, 2, 3, math.log(0.24), 0.5, 1),
        DraftNode(14, 2, 3, math.log(0.1), 0.2, 1),
    ]
    return RoundEvent(
        round=7,
        nodes=nodes,
        accepted=[0, 2],
        bonus=50,
        target_probs=[0.9, 0.05, 0.7, 0.1, 0.01],
        feature_deviation=[FeatureDeviation(1.0, 0.1), FeatureDeviation(3.0, 0.3)],
        draft_ms=2.0,
        verify_ms=6.0,
        new_tokens=9,
        tokens=[10, 12, 50],
        text="The cat mat",
        wall_ms=10.0,
        bonus_prob=bonus_prob,
    )


def test_a_greedy_round_in_words():
    account = explain_round(greedy_round(), text)
    lines = account.splitlines()
    assert lines[0] == (
        "Round 7: the draft proposed 5 candidate tokens at positions 1–3 (specialist S1 drafted 3 at "
        "positions 1–2; specialist S2 drafted 2 at position 3)."
    )
    assert "checked all 5 in one forward pass (6.0 ms)" in account
    assert 'It kept 2 drafted tokens, in order: "The" (target p 0.90), " cat" (target p 0.70).' in account
    assert (
        'Position 3 was the first rejected: the draft\'s top candidate " dog" (draft p 0.50) (and 1 other '
        'candidate there) lost to the target\'s choice " mat" (target p 0.71); the target gave " dog" only 0.10.'
        in account
    )
    assert 'Bonus: the target added its own token " mat" (p 0.71), so this round emitted 3 tokens' in account
    assert "Time: draft 2.0 ms, verify 6.0 ms, the rest (engine bookkeeping) 2.0 ms, of 10.0 ms in all." in account
    assert "draw" not in account


def test_specialist_labels_and_a_missing_bonus_prob():
    account = explain_round(greedy_round(bonus_prob=None), text, specialist_label=lambda k: f"POSS-{k}")
    assert "specialist POSS-0 drafted 3" in account and "specialist POSS-1 drafted 2" in account
    assert 'the target\'s choice " mat";' in account and "(p " not in account.split("Bonus")[1].split(",")[0]


def test_a_sampled_round_says_it_was_a_draw():
    account = explain_round(greedy_round(), text, sampling=True)
    assert "drawing accept or reject for each candidate" in account
    assert "min(1, p_target/p_draft)" in account
    assert '" dog" (draft p 0.50)' in account and "accepted with probability p_target = 0.10" in account
    assert 'the target drew its own token " mat" (target p 0.71) from what remained' in account


def test_nothing_kept_and_nothing_left_to_reject():
    e = greedy_round()
    e.accepted = []
    account = explain_round(e, text)
    assert "kept none of the drafted tokens" in account and "Position 1 was the first rejected" in account
    assert 'top candidate "The" (draft p 0.80) (and 1 other candidate there)' in account
    e.accepted = [0, 2, 3]
    account = explain_round(e, text)
    assert "Nothing was drafted at position 4" in account and "emitted 4 tokens" in account


def test_prefill_and_plain_rounds():
    pre = RoundEvent.target_only(0, 40, 4.0, 1, tokens=[40], text="Hello", wall_ms=4.0, prefill=True)
    account = explain_round(pre, text)
    assert account.startswith(
        "Round 0 (prefill): the target read the whole prompt in one forward pass and picked "
        'the first token "Hello". Nothing was drafted.'
    )
    plain = RoundEvent.target_only(3, 50, 3.0, 4, tokens=[50], text=" mat", wall_ms=4.0)
    account = explain_round(plain, text)
    assert (
        "Round 3 (plain decoding): nothing was drafted; the target ran one forward pass and picked one token, "
        '" mat".' in account
    )
    assert "verify 3.0 ms" in account
    assert "drew one token" in explain_round(plain, text, sampling=True)


def test_bonus_prob_round_trips_and_old_events_load():
    e = greedy_round()
    assert RoundEvent.from_json(e.to_json()).bonus_prob == 0.71
    old = e.to_json()
    del old["bonus_prob"]
    assert RoundEvent.from_json(old).bonus_prob is None


def test_decoders_record_the_targets_probability_of_its_bonus():
    from poss_core.runtime import compare

    for temperature in (0.0, 0.8):
        comp = compare.start(
            compare.RunSpec(
                "Hello there", ["eagle"], "tiny-random", temperature=temperature, max_new_tokens=6
            ).resolve()
        )
        try:
            while comp.step_round():
                pass
        finally:
            comp.close()
        rounds = [e for e in comp.lanes[0].events if not e.prefill]
        assert rounds and all(e.bonus_prob is not None and 0.0 < e.bonus_prob <= 1.0 + 1e-6 for e in rounds)
        if temperature == 0.0:  # greedy: the bonus is the target's argmax, at least as likely as any candidate there
            for e in rounds:
                parent = e.accepted[-1] if e.accepted else -1
                kids = [i for i, n in enumerate(e.nodes) if n.parent == parent]
                assert all(e.bonus_prob >= e.target_probs[i] - 1e-5 for i in kids)


def test_a_small_probability_is_said_in_words():
    assert say_probability(0.4213) == "0.42"
    assert say_probability(0.00013) == "about 1 in 7,692"
    assert say_probability(0.0) == "0.00"
    assert "e-" not in say_probability(1e-9)
