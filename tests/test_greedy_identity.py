"""Greedy speculative output equals the target's own greedy generate, token for token."""

import math
import time

import pytest
import torch
from helpers import greedy_reference

from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import PlainDecoder, SpeculativeDecoder, encode_prompt
from poss_core.models.loading import random_draft
from poss_core.rounds import metrics
from poss_core.rounds.events import DecodeSummary

PROMPTS = ["Hi there, how are you?", "Write a poem about the sea.", "2 + 2 = ?"]


def run(decoder, ids):
    items = list(decoder.generate(ids))
    assert isinstance(items[-1], DecodeSummary)
    return items[:-1], items[-1]


@pytest.mark.parametrize("kind", ["eagle", "poss1", "poss2", "poss3", "matched"])
def test_random_drafts_match_generate(tiny_target, kind):
    draft = random_draft(tiny_target, kind, depth=6)
    for prompt in PROMPTS[:2]:
        ids = encode_prompt(tiny_target.tokenizer, prompt)
        _, summary = run(SpeculativeDecoder(tiny_target, draft, DecodeConfig(max_new_tokens=30)), ids)
        ref = greedy_reference(tiny_target, ids, 30)
        assert summary.token_ids == ref
        assert summary.stop_reason == ("eos" if ref[-1] in tiny_target.eos_ids else "max_new_tokens")


@pytest.mark.parametrize("depth,top_k,budget", [(6, 10, 60), (3, 4, 8), (8, 2, 16), (5, 1, 6), (1, 3, 2)])
@pytest.mark.parametrize("name", ["eagle", "poss2"])
def test_trained_drafts_match_generate(tiny_target, trained_drafts, name, depth, top_k, budget):
    draft = trained_drafts[name]
    accepted_any = False
    for prompt in PROMPTS:
        ids = encode_prompt(tiny_target.tokenizer, prompt)
        cfg = DecodeConfig(depth=depth, top_k=top_k, tree_budget=budget, max_new_tokens=40)
        events, summary = run(SpeculativeDecoder(tiny_target, draft, cfg), ids)
        assert summary.token_ids == greedy_reference(tiny_target, ids, 40)
        accepted_any |= any(e.accept_len > 0 for e in events)
        for e in events:
            assert len(e.nodes) <= budget - 1
            assert all(n.depth <= depth for n in e.nodes)
            assert len(e.feature_deviation) == e.accept_len
    assert accepted_any, "a trained draft should get some tokens accepted"


@pytest.mark.parametrize("budget", [8, 60])
def test_every_slot_through_the_lm_head_gives_the_same_output(tiny_target, trained_drafts, budget):
    for prompt in PROMPTS:
        ids = encode_prompt(tiny_target.tokenizer, prompt)
        outs = [
            run(
                SpeculativeDecoder(
                    tiny_target,
                    trained_drafts["poss2"],
                    DecodeConfig(depth=5, top_k=4, tree_budget=budget, max_new_tokens=30, head_rows=rows),
                ),
                ids,
            )
            for rows in ("read", "all")
        ]
        assert outs[0][1].token_ids == outs[1][1].token_ids == greedy_reference(tiny_target, ids, 30)
        assert [e.accept_len for e in outs[0][0]] == [e.accept_len for e in outs[1][0]]
        for a, b in zip(outs[0][0], outs[1][0]):  # the views' target probabilities do not depend on it either
            assert torch.allclose(torch.tensor(a.target_probs), torch.tensor(b.target_probs), atol=1e-5)


@pytest.mark.parametrize("name", ["eagle", "poss2"])
def test_a_dynamic_depth_stop_drafts_shallower_where_unsure_and_stays_lossless(tiny_target, trained_drafts, name):
    """depth_stop p: drafting ends after the first depth whose best path has draft probability below p."""
    depth = 5
    # A stop at the median best depth-1 probability of a full-depth decode: some rounds stop, some go on.
    ids = encode_prompt(tiny_target.tokenizer, PROMPTS[0])
    full, _ = run(SpeculativeDecoder(tiny_target, trained_drafts[name], DecodeConfig(depth=depth, top_k=3)), ids)
    firsts = sorted(max(n.score for n in e.nodes if n.depth == 1) for e in full[1:])
    stop = math.exp(firsts[len(firsts) // 2])
    depths_seen = set()
    for prompt in PROMPTS:
        ids = encode_prompt(tiny_target.tokenizer, prompt)
        cfg = DecodeConfig(depth=depth, top_k=3, tree_budget=200, max_new_tokens=40, depth_stop=stop)  # no pruning
        events, summary = run(SpeculativeDecoder(tiny_target, trained_drafts[name], cfg), ids)
        assert summary.token_ids == greedy_reference(tiny_target, ids, 40)
        for e in events[1:]:
            drafted = len(e.draft_ms_by_depth)
            depths_seen.add(drafted)
            assert max(n.depth for n in e.nodes) == drafted
            best = [max(n.score for n in e.nodes if n.depth == d) for d in range(1, drafted + 1)]
            # Every depth it went past was confident enough; the last one, if short of `depth`, was not.
            assert all(b >= math.log(stop) for b in best[:-1])
            assert drafted == depth or best[-1] < math.log(stop)
    assert len(depths_seen) > 1, f"expected rounds of several depths, saw {depths_seen}"


def test_stops_at_eos_inside_an_accepted_path(tiny_target, trained_drafts):
    ids = encode_prompt(tiny_target.tokenizer, PROMPTS[0])
    ref = greedy_reference(tiny_target, ids, 40)
    # Declare a token that the target emits mid-answer to be EOS: decoding must stop right after it.
    eos_tok = ref[12]
    first = ref.index(eos_tok)
    old = set(tiny_target.eos_ids)
    tiny_target.eos_ids = {eos_tok}
    try:
        for dec in (
            SpeculativeDecoder(tiny_target, trained_drafts["eagle"], DecodeConfig(max_new_tokens=40)),
            PlainDecoder(tiny_target, DecodeConfig(max_new_tokens=40)),
        ):
            _, summary = run(dec, ids)
            assert summary.token_ids == ref[: first + 1]
            assert summary.stop_reason == "eos"
    finally:
        tiny_target.eos_ids = old


def test_counts_stop_at_the_answers_end(tiny_target, trained_drafts):
    """Tokens a round accepts past the end (an EOS inside its path, or the token limit) are neither emitted nor
    counted: every round's count is what it emitted, and τ is the answer's tokens over the rounds."""
    ids = encode_prompt(tiny_target.tokenizer, PROMPTS[0])
    ref = greedy_reference(tiny_target, ids, 40)
    old, cut_rounds = set(tiny_target.eos_ids), 0
    try:
        for eos_at, limit in [(None, n) for n in range(18, 30)] + [(i, 40) for i in range(10, 22)]:
            tiny_target.eos_ids = {ref[eos_at]} if eos_at is not None else old
            events, summary = run(
                SpeculativeDecoder(tiny_target, trained_drafts["eagle"], DecodeConfig(max_new_tokens=limit)), ids
            )
            rounds = metrics.draft_rounds(events)
            assert all(e.emitted == len(e.tokens) for e in rounds)
            assert all(len(e.feature_deviation) == e.accept_len for e in rounds)
            assert 1 + sum(e.emitted for e in rounds) == len(summary.token_ids)
            assert metrics.tau(events) == pytest.approx((len(summary.token_ids) - 1) / len(rounds))
            assert all(e.past_end == 0 for e in rounds[:-1])
            cut_rounds += rounds[-1].past_end > 0
    finally:
        tiny_target.eos_ids = old
    assert cut_rounds >= 3, "the settings above should end some answers inside an accepted path"


def test_plain_decoder_matches_generate_and_has_tau_one(tiny_target):
    ids = encode_prompt(tiny_target.tokenizer, PROMPTS[1])
    events, summary = run(PlainDecoder(tiny_target, DecodeConfig(max_new_tokens=25)), ids)
    assert summary.token_ids == greedy_reference(tiny_target, ids, 25)
    assert summary.stats["tau"] == 1.0
    assert all(e.nodes == [] for e in events)
    assert "".join(e.text for e in events) == summary.text


def test_context_limit_stops_cleanly():
    from poss_core.models.tiny import tiny_target as make

    target = make(seed=3, max_positions=40)
    draft = random_draft(target, "poss2")
    ids = encode_prompt(target.tokenizer, "A prompt of some length")
    _, summary = run(SpeculativeDecoder(target, draft, DecodeConfig(max_new_tokens=100)), ids)
    assert summary.stop_reason == "context_limit"
    assert len(ids) + len(summary.token_ids) == 40
    ref = target.model.generate(
        torch.tensor([ids]), max_new_tokens=40 - len(ids), do_sample=False, eos_token_id=None, pad_token_id=0
    )[0, len(ids) :].tolist()
    assert summary.token_ids == ref


@pytest.mark.slow  # timed rounds: the quick tier stays under 90 s
def test_a_leaf_row_read_during_acceptance_counts_as_verify_time_not_overhead(tiny_target, trained_drafts):
    """Every LM-head call over the tree is the target's work: the round's verify time holds all of them (the lazy
    leaf row included), and the engine overhead none."""
    decoder = SpeculativeDecoder(
        tiny_target,
        trained_drafts["eagle"],
        DecodeConfig(depth=3, top_k=2, tree_budget=4, max_new_tokens=40, head_rows="read"),
    )
    calls: list[int] = []
    plain_rows = decoder._target_rows

    def slow_rows(hidden):
        calls.append(int(hidden.shape[0]))
        time.sleep(0.05)
        return plain_rows(hidden)

    decoder._target_rows = slow_rows
    two_calls = 0
    for prompt in PROMPTS:
        gen = decoder.generate(encode_prompt(tiny_target.tokenizer, prompt))
        for item in gen:
            if isinstance(item, DecodeSummary) or item.prefill:
                calls.clear()
                continue
            assert item.verify_ms >= 50.0 * len(calls)
            assert item.overhead_ms < 50.0
            two_calls += len(calls) == 2
            calls.clear()
    assert two_calls > 0, "some round should stop at a leaf and read its row in a second call"
