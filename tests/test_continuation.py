"""Feature deviation without survivor bias: along the target's own continuation (the draft's chain equals the
trainer's decoding unroll and the tree's own features where the tree drafted the same tokens), and on every
drafted node, on and off the accepted path."""

import pytest
import torch

from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.continuation import chain_mask, continuation_deviation, unroll_chains
from poss_core.decoding.decoder import SpeculativeDecoder, encode_prompt
from poss_core.decoding.oracle import OracleDecoder
from poss_core.rounds.events import RoundEvent
from poss_core.training.trainer import TrainSequence, decoding_mask, decoding_unroll, make_batch


def sequence(target, text: str) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor(encode_prompt(target.tokenizer, text, use_chat_template=False))
    with torch.inference_mode():
        hidden = target.model(ids[None], output_hidden_states=True).hidden_states[-1][0]
    return ids, hidden


def test_chain_mask_is_the_training_mask_restricted_to_the_anchors():
    rows, steps = 7, 3
    anchors = torch.tensor([0, 2, 5])
    full = decoding_mask(steps, rows)
    mine = chain_mask(rows, anchors, steps)
    # Context block: identical. Chain block i row of anchor a is full row (i-1)*rows + a + i - 1.
    assert torch.equal(mine[:rows, :rows], full[:rows, :rows])
    for i in range(2, steps + 1):
        for ai, a in enumerate(anchors.tolist()):
            if a + i - 1 >= rows:  # the chain ran off the end: nothing reads that row
                continue
            q_full = (i - 1) * rows + a + i - 1
            q_mine = rows + (i - 2) * len(anchors) + ai
            assert torch.equal(mine[q_mine, :rows], full[q_full, :rows])
            for j in range(2, steps + 1):
                if a + j - 1 >= rows:
                    continue
                k_mine = rows + (j - 2) * len(anchors) + ai
                assert bool(mine[q_mine, k_mine]) == bool(full[q_full, (j - 1) * rows + a + j - 1])


@pytest.mark.parametrize("name", ["eagle", "poss2"])
def test_chains_equal_the_trainers_decoding_unroll(tiny_target, trained_drafts, name):
    """The hand-checked reference: the training code's decoding unroll over every anchor, read at the anchors."""
    draft = trained_drafts[name]
    ids, hidden = sequence(tiny_target, "the quick brown fox jumps over the lazy dog, then naps in the sun")
    steps = 4
    batch = make_batch([TrainSequence(ids, hidden, torch.ones(len(ids)))])
    with torch.inference_mode():
        reference = decoding_unroll(draft, batch, steps)
    anchors = torch.tensor([0, 3, 8, 20])
    rows = int(batch.tokens.shape[1])
    chains = unroll_chains(draft, ids, hidden[:rows], anchors, steps)
    for k in range(1, steps + 1):
        want = reference[k - 1][1][0, anchors + k - 1]
        assert torch.allclose(chains[k - 1], want, atol=1e-5), f"step {k}"


def test_continuation_deviation_compares_each_position_with_the_targets_feature(tiny_target, trained_drafts):
    draft = trained_drafts["poss2"]
    ids, hidden = sequence(tiny_target, "a short sentence for the draft to follow along")
    n = len(ids)
    roots = [1, 5, n - 3, n - 1, n + 4]
    found = continuation_deviation(draft, ids, hidden, roots, steps=6)
    assert [len(d) for d in found] == [6, 6, 3, 1, 0]  # a root near the end reaches only the features there
    chains = unroll_chains(draft, ids, hidden[: n - 1], torch.tensor([4]), 6)
    for k, dev in enumerate(found[1], start=1):  # root 5: anchor row 4, position k compares feature 5 + k - 1
        want = float((chains[k - 1][0].float() - hidden[5 + k - 1].float()).norm())
        assert dev.l2 == pytest.approx(want, rel=1e-5)
        assert 0.0 <= dev.cosine <= 2.0


def test_decoder_fills_continuation_and_tree_deviation_where_the_tree_agrees(tiny_target, trained_drafts):
    cfg = DecodeConfig(max_new_tokens=40, depth=5, top_k=4, tree_budget=24)
    decoder = SpeculativeDecoder(tiny_target, trained_drafts["poss2"], cfg)
    ids = encode_prompt(tiny_target.tokenizer, "count with me: one two three")
    events = [e for e in decoder.generate(ids) if isinstance(e, RoundEvent)]
    drafted = [e for e in events if e.nodes]
    assert drafted and all(e.continuation_deviation for e in drafted[:-2])
    # Most rounds reach the full depth: the committed text goes on past them.
    assert sum(len(e.continuation_deviation) == cfg.depth for e in drafted) >= len(drafted) - cfg.depth
    for e in drafted:
        # Position 1 reads the same true context in the tree and along the continuation: the same feature.
        on1 = next(d for d in e.tree_deviation if d.k == 1 and d.on_path)
        assert on1.n == 1 and e.continuation_deviation[0].l2 == pytest.approx(on1.l2, rel=1e-4, abs=1e-5)
        # Along the accepted path the chain drafted the committed tokens: the tree's features are the chain's.
        for k, acc in enumerate(e.feature_deviation, start=1):
            if k <= len(e.continuation_deviation):
                assert e.continuation_deviation[k - 1].l2 == pytest.approx(acc.l2, rel=1e-4, abs=1e-5)
        on = [d.k for d in e.tree_deviation if d.on_path]
        assert on == list(range(1, len(on) + 1)) and len(on) == min(e.accept_len + 1, cfg.depth)
        off = [d for d in e.tree_deviation if not d.on_path]
        # Slots with a feature: the root and kept nodes that were expanded (never the last depth's).
        assert len(on) + sum(d.n for d in off) <= 1 + sum(1 for n in e.nodes if n.depth < cfg.depth)
        assert all(2 <= d.k <= cfg.depth and d.n >= 1 for d in off)
    assert decoder.untimed_s > 0.0  # measured apart: the benchmark takes it off the decode's wall time
    back = RoundEvent.from_json(drafted[0].to_json())
    assert back.tree_deviation == drafted[0].tree_deviation
    assert back.continuation_deviation == drafted[0].continuation_deviation


def test_no_continuation_for_the_oracle_or_a_stopped_decode(tiny_target, trained_drafts):
    cfg = DecodeConfig(max_new_tokens=12, depth=4, top_k=4, tree_budget=12)
    ids = encode_prompt(tiny_target.tokenizer, "hello there")
    oracle = [e for e in OracleDecoder(tiny_target, cfg).generate(ids) if isinstance(e, RoundEvent)]
    assert all(not e.continuation_deviation and not e.tree_deviation for e in oracle)
    import threading

    cancel = threading.Event()
    out = []
    for item in SpeculativeDecoder(tiny_target, trained_drafts["eagle"], cfg).generate(ids, cancel=cancel):
        out.append(item)
        if isinstance(item, RoundEvent) and item.nodes:
            cancel.set()
    assert all(not e.continuation_deviation for e in out if isinstance(e, RoundEvent))


def test_deviation_kinds_pool_by_position_with_their_slot_counts(tiny_target, trained_drafts):
    from poss_core.results.records import TurnRecord
    from poss_core.rounds import metrics

    cfg = DecodeConfig(max_new_tokens=30, depth=4, top_k=4, tree_budget=16)
    ids = encode_prompt(tiny_target.tokenizer, "one two three four")
    items = list(SpeculativeDecoder(tiny_target, trained_drafts["eagle"], cfg).generate(ids))
    events = [e for e in items if isinstance(e, RoundEvent)]
    drafted = [e for e in events if e.nodes]
    cont = metrics.feature_deviation_by_position(events, "continuation")
    assert cont["count"][0] == len(drafted)  # every drafting round counts at position 1, accepted or not
    accepted = metrics.feature_deviation_by_position(events)
    assert accepted["count"][0] == sum(1 for e in drafted if e.accept_len >= 1)
    on = metrics.feature_deviation_by_position(events, "tree_on_path")
    assert on["count"][0] == len(drafted)
    off = metrics.feature_deviation_by_position(events, "tree_off_path")
    assert all(c >= 0 for c in off["count"]) and len(off["count"]) <= cfg.depth
    assert items[-1].stats["deviation"]["continuation"]["count"] == cont["count"]
    with pytest.raises(ValueError, match="deviation kind"):
        metrics.feature_deviation_by_position(events, "nowhere")
    # The benchmark's columnar records keep both.
    rec = TurnRecord(
        run=0,
        method="eagle",
        dataset="d",
        question_id=1,
        category="",
        turn=0,
        token_ids=[],
        text="",
        stop_reason="eos",
        wall_time=0.0,
        events=events,
        prompt_ids=list(ids),
    )
    back = TurnRecord.from_json(rec.to_json())
    assert [e.continuation_deviation for e in back.events] == [e.continuation_deviation for e in events]
    assert [e.tree_deviation for e in back.events] == [e.tree_deviation for e in events]


def test_every_position_starts_a_chain_at_each_committed_token(tiny_target, trained_drafts):
    """Every position of the continuation is a start: n at k=1 is the number of generated tokens with a known
    feature after them, each round's mean covers its root and accepted tokens, and its root's chain is the
    round-root measure."""
    from poss_core.decoding.continuation import ANCHORS_PER_PASS, start_deviations
    from poss_core.rounds import metrics

    cfg = DecodeConfig(max_new_tokens=40, depth=5, top_k=4, tree_budget=24)
    ids = encode_prompt(tiny_target.tokenizer, "count with me: one two three")
    items = list(SpeculativeDecoder(tiny_target, trained_drafts["poss2"], cfg).generate(ids))
    events = [e for e in items if isinstance(e, RoundEvent)]
    drafted = [e for e in events if e.nodes]
    every = metrics.feature_deviation_by_position(events, "every_position")
    roots = metrics.feature_deviation_by_position(events, "continuation")
    generated = events[-1].new_tokens
    # Starts run from the first round's root to the last token with a feature after it (the final bonus has none).
    assert generated - 2 <= every["count"][0] <= generated
    assert every["count"][0] > roots["count"][0] == len(drafted)
    for e in drafted:
        assert e.every_position_deviation[0].n == e.accept_len + 1 or e is drafted[-1]
        assert [d.k for d in e.every_position_deviation] == list(range(1, len(e.every_position_deviation) + 1))
    # A round that accepted nothing covers its root alone: the mean is the round-root chain itself.
    lone = [e for e in drafted[:-1] if e.accept_len == 0]
    for e in lone:
        assert e.every_position_deviation[0].l2 == pytest.approx(e.continuation_deviation[0].l2, rel=1e-5)
    assert items[-1].stats["deviation"]["every_position"]["count"] == every["count"]
    back = RoundEvent.from_json(drafted[0].to_json())
    assert back.every_position_deviation == drafted[0].every_position_deviation

    # Slicing the starts into passes gives the same chains as one pass.
    draft = trained_drafts["eagle"]
    seq, hidden = sequence(tiny_target, "a sentence long enough for the chains to be cut into several passes")
    starts = list(range(1, len(seq)))
    one = start_deviations(draft, seq, hidden, starts, 4)
    import poss_core.decoding.continuation as continuation

    old = continuation.ANCHORS_PER_PASS
    continuation.ANCHORS_PER_PASS = 3
    try:
        sliced = start_deviations(draft, seq, hidden, starts, 4)
    finally:
        continuation.ANCHORS_PER_PASS = old
    assert ANCHORS_PER_PASS == old and sliced.keys() == one.keys()
    for p in one:
        assert [d.l2 for d in sliced[p]] == pytest.approx([d.l2 for d in one[p]], rel=1e-4, abs=1e-5)


def test_the_benchmarks_light_events_keep_both_continuation_deviations(tiny_target, trained_drafts):
    """Filled in when a decode ends, after the benchmark copied each round: the copies must get them too."""
    from poss_core.bench.runner import BenchLane, decode_turn

    cfg = DecodeConfig(max_new_tokens=24, depth=4, top_k=4, tree_budget=16)
    lane = BenchLane("eagle", "EAGLE", SpeculativeDecoder(tiny_target, trained_drafts["eagle"], cfg))
    *_, events = decode_turn(lane, encode_prompt(tiny_target.tokenizer, "one two three four"))
    drafted = [e for e in events if e.nodes]
    assert drafted and all(e.every_position_deviation for e in drafted)
    assert all(e.continuation_deviation for e in drafted[:-1])
