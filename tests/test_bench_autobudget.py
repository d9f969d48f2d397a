"""`--tree-budget auto`: the forward-time curve, its cache, acceptance profiles by budget, and the choice."""

import json

import pytest

from poss_core import autobudget as ab
from poss_core.autobudget import calibration, timing
from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import SpeculativeDecoder, encode_prompt
from poss_core.models.loading import random_draft
from poss_core.rounds.events import DecodeSummary, DraftNode, RoundEvent


def curve(ms_of):
    sizes = [1, 2, 4, 8, 16, 32, 64, 96]
    return ab.ForwardCurve(key="unit", sizes=sizes, ms=[ms_of(n) for n in sizes], context=256)


def test_curve_interpolates_and_extrapolates():
    c = ab.ForwardCurve(key="k", sizes=[1, 8, 16], ms=[10.0, 24.0, 40.0], context=64)
    assert c.at(1) == 10.0 and c.at(0) == 10.0
    assert c.at(4) == pytest.approx(10 + 14 * 3 / 7)
    assert c.at(12) == pytest.approx(32.0)
    assert c.at(24) == pytest.approx(56.0)  # the last segment's slope


def test_curve_is_made_non_decreasing_and_adds_post_processing():
    assert ab.non_decreasing([1.0, 3.0, 2.0, 4.0, 3.0, 3.0]) == pytest.approx(
        [1.0, 2.5, 2.5, 3.0 + 1 / 3, 3 + 1 / 3, 3 + 1 / 3]
    )
    assert ab.non_decreasing([5.0, 1.0]) == [3.0, 3.0]
    c = ab.ForwardCurve(key="k", sizes=[1, 9], ms=[10.0, 20.0], context=8, post_ms=[1.0, 5.0])
    assert c.post_at(5) == pytest.approx(3.0)
    assert ab.ForwardCurve.from_json(c.to_json()) == c
    old = ab.ForwardCurve.from_json({"key": "k", "sizes": [1], "ms": [2.0], "context": 8})  # cached before post_ms
    assert old.post_at(4) == 0.0
    prof = ab.AcceptanceProfile(source="unit", max_budget=9, depth=2, ranks=[[0, 1]])
    choice = ab.choose_budget(c, prof, draft_ms=4.0, fixed_ms=1.0, candidates=(2, 9))
    row = {r["budget"]: r for r in choice.table}
    assert row[9]["round_ms"] == pytest.approx(4.0 + 20.0 + 5.0 + 1.0)
    assert choice.plain_tokens_per_s == pytest.approx(1000 / 11.0)


def five_node_round(accepted: list[int]) -> RoundEvent:
    """One round of a five-node tree. Scores: node 0 -0.1, node 1 -0.3, node 2 (child of 0) -0.2, node 3 (child of
    2) -0.9, node 4 (child of 1) -0.4; `accepted` the path taken."""
    nodes = [
        DraftNode(1, -1, 1, -0.1, 0.9, 0),
        DraftNode(2, -1, 1, -0.3, 0.7, 0),
        DraftNode(3, 0, 2, -0.2, 0.9, 1),
        DraftNode(4, 2, 3, -0.9, 0.5, 2),
        DraftNode(5, 1, 2, -0.4, 0.8, 1),
    ]
    return RoundEvent(
        round=1,
        nodes=nodes,
        accepted=accepted,
        bonus=0,
        target_probs=[],
        feature_deviation=[],
        draft_ms=0,
        verify_ms=0,
        new_tokens=len(accepted) + 1,
    )


def test_accepted_ranks_and_accept_len_at_budget():
    e = five_node_round(accepted=[0, 2, 3])
    ranks = ab.accepted_ranks(e)
    assert ranks == [0, 1, 4]
    assert [ab.accept_len_at_budget(ranks, b) for b in (2, 3, 5, 6, 60)] == [1, 2, 2, 3, 3]


def test_head_rows_count_the_slots_with_children_and_a_stopping_leaf():
    # Pruning order: node 0 (-0.1), 2 (-0.2), 1 (-0.3), 4 (-0.4), 3 (-0.9); the accepted path 0 -> 2 -> 3.
    e = five_node_round(accepted=[0, 2, 3])
    # b=2: root + leaf 0; b=3: root, 0 + leaf 2; b=4 adds node 1 under the root; b=5 node 4 under 1; b=6 leaf 3.
    assert [c + leaf for c, leaf in ab.head_reads_by_budget(e, 7)][2:] == [2, 3, 3, 4, 5, 5]
    # Acceptance stopping at node 0, which has children: no extra row.
    stops_inside = five_node_round(accepted=[0])
    assert sum(ab.head_reads_by_budget(stops_inside, 6)[6]) == 4
    assert sum(ab.head_reads_by_budget(e, 6, max_depth=1)[6]) == 2  # only the root has children; leaf 0 stops it
    prof = ab.profile_from_events([e, stops_inside], max_budget=6, depth=3)
    mean_rows = lambda reads: sum(c + leaf for c, leaf in reads) / len(reads)  # noqa: E731
    assert mean_rows(prof.reads_at(6)) == 4.5 and mean_rows(prof.reads_at(60)) == 4.5
    # No rounds: every slot is costed, an upper bound.
    assert ab.default_profile(depth=6).reads_at(16) == []
    flat = ab.ForwardCurve(key="k", sizes=[1, 64], ms=[20.0, 30.0], context=64, post_ms=[3.0, 9.3])
    row = ab.choose_budget(flat, ab.default_profile(depth=6), 2.0, 0.5, candidates=[16], depth=6).table[0]
    assert row["head_ms"] == pytest.approx(flat.post_at(16))
    assert ab.head_reads_by_budget(e, 6)[6] == (4, 1) and ab.head_reads_by_budget(stops_inside, 6)[6] == (4, 0)
    assert prof.reads_at(6) == [(4, 1), (4, 0)]


def test_the_lm_head_is_read_the_cheaper_way_for_the_tree():
    reads, slots = [(3, 1), (4, 0)], [6, 6]  # two rounds of a 6-slot tree; the first stops at a leaf
    # Weight-bound (bf16 on a CPU): a call costs ~3 ms whatever the rows, so one call over every slot is cheaper
    # than a second one-row call in half the rounds.
    flat = ab.ForwardCurve(key="k", sizes=[1, 64], ms=[20.0, 30.0], context=64, post_ms=[3.0, 3.0 + 63 * 0.02])
    ms, how = ab.head_ms(flat, reads, slots)
    assert how == "all" and ms == pytest.approx(flat.post_at(6))
    # Row-bound (fp32 arithmetic): every extra row costs, and the lazy leaf wins.
    steep = ab.ForwardCurve(key="k", sizes=[1, 64], ms=[20.0, 30.0], context=64, post_ms=[1.0, 64.0])
    ms, how = ab.head_ms(steep, reads, slots)
    assert how == "read" and ms == pytest.approx((steep.post_at(3) + steep.post_at(1) + steep.post_at(4)) / 2)
    prof = ab.AcceptanceProfile(
        source="unit",
        max_budget=6,
        depth=3,
        ranks=[[0, 1], [0]],
        head_reads={3: [[(0, 1)] * 2 + [(3, 1)] * 5, [(0, 1)] * 2 + [(4, 0)] * 5]},
    )
    for curve_, how in ((flat, "all"), (steep, "read")):
        choice = ab.choose_budget(curve_, prof, 2.0, 0.5, candidates=[6], depth=3)
        assert choice.head_rows == how and {r["head_rows"] for r in choice.table} == {how}


def test_the_decoders_lm_head_rows_are_what_the_profile_counts(tiny_target, trained_drafts, monkeypatch):
    rows_per_call: list[int] = []
    real = tiny_target.logits

    def counting(hidden):
        rows_per_call.append(int(hidden.shape[0]))
        return real(hidden)

    monkeypatch.setattr(tiny_target, "logits", counting)
    cfg = DecodeConfig(depth=4, top_k=3, tree_budget=12, max_new_tokens=24)
    ids = encode_prompt(tiny_target.tokenizer, "Tell me about the sea.")
    events, per_round = [], []
    for item in SpeculativeDecoder(tiny_target, trained_drafts["poss2"], cfg).generate(ids):
        if isinstance(item, RoundEvent) and not item.prefill:
            events.append(item)
            per_round.append(sum(rows_per_call))
        rows_per_call.clear()
    assert any(e.accepted for e in events)
    assert per_round == [sum(ab.head_reads_by_budget(e, 12)[12]) for e in events]
    assert max(per_round) < 12  # fewer rows than slots


def test_calibrated_profile_reads_smaller_budgets_off_one_run():
    prof = ab.AcceptanceProfile(source="unit", max_budget=60, depth=3, ranks=[[0, 1, 4], [], [0, 20]])
    assert prof.expected_tau(2) == pytest.approx((2 + 1 + 2) / 3)
    assert prof.expected_tau(6) == pytest.approx((4 + 1 + 2) / 3)
    assert prof.expected_tau(60) == pytest.approx((4 + 1 + 3) / 3)
    assert prof.expected_tau(500) == prof.expected_tau(60)  # nothing is known beyond the calibration budget


def test_default_profile_grows_with_budget_towards_the_published_chain():
    prof = ab.default_profile(depth=6)
    taus = [prof.expected_tau(b) for b in (2, 8, 16, 60, 96)]
    assert taus == sorted(taus) and taus[0] > 1.0
    chain = 1.0
    reach = 1.0
    for a in list(ab.DEFAULT_POS_ACC) + [ab.DEFAULT_TAIL] * 2:
        reach *= a
        chain += reach
    assert taus[-1] < chain and taus[-1] == pytest.approx(chain, rel=0.01)


def test_choice_follows_the_hardware():
    prof = ab.AcceptanceProfile(source="unit", max_budget=96, depth=6, ranks=[[0, 3, 9, 25, 50]] * 3 + [[0, 12]])
    flat = ab.choose_budget(curve(lambda n: 20.0), prof, draft_ms=2.0, fixed_ms=0.5)  # a GPU: flat curve
    steep = ab.choose_budget(curve(lambda n: 10.0 + 5.0 * n), prof, draft_ms=2.0, fixed_ms=0.5)  # a slow CPU
    assert flat.budget >= 60
    assert steep.budget <= 4
    best = max(steep.table, key=lambda r: r["tokens_per_s"])
    assert steep.expected_tokens_per_s == pytest.approx(best["tokens_per_s"]) and steep.budget == best["budget"]
    assert flat.plain_tokens_per_s == pytest.approx(50.0)
    # depth and top_k cap the budget at what EAGLE-2 can draft: 1 + 2 + 2 * 4 = 11 with depth 3, top-k 2.
    capped = ab.choose_budget(curve(lambda n: 20.0), prof, 2.0, 0.5, depth=3, top_k=2)
    assert capped.budget <= 11 and all(r["budget"] <= 11 for r in capped.table)


def test_curve_is_measured_once_then_cached(tiny_target, tmp_path, monkeypatch):
    path = tmp_path / "curves.json"
    c = ab.load_or_measure_curve(tiny_target, path=path, sizes=(1, 4, 16), repeats=2, context=32, log=lambda m: None)
    assert c.sizes == [1, 4, 16] and all(ms > 0 for ms in c.ms) and c.key == ab.curve_key(tiny_target)
    assert c.ms == sorted(c.ms) and c.post_ms == sorted(c.post_ms) and len(c.post_ms) == 3
    stored = json.loads(path.read_text())
    assert list(stored) == [c.key]

    def no_measuring(*a, **k):
        raise AssertionError("the cached curve should be used")

    monkeypatch.setattr(timing, "measure_forward_curve", no_measuring)
    again = ab.load_or_measure_curve(tiny_target, path=path, log=lambda m: None)
    assert again == c


def test_a_curve_measured_on_a_busy_machine_is_measured_again_once_it_is_quiet(tiny_target, tmp_path, monkeypatch):
    path, said = tmp_path / "curves.json", []
    kw = dict(path=path, sizes=(1, 4), repeats=1, context=16, log=said.append)
    monkeypatch.setattr(timing, "machine_busy", lambda device=None: 2.3)  # e.g. a training job on both cores
    busy = ab.load_or_measure_curve(tiny_target, **kw)
    assert busy.busy_load == 2.3 and any("busy" in m for m in said)
    assert ab.load_or_measure_curve(tiny_target, **kw) == busy  # still busy: the cached curve serves
    monkeypatch.setattr(timing, "machine_busy", lambda device=None: 0.0)
    quiet = ab.load_or_measure_curve(tiny_target, **kw)
    assert quiet.busy_load == 0.0 and quiet.measured != busy.measured
    assert ab.load_or_measure_curve(tiny_target, **kw) == quiet
    assert ab.ForwardCurve.from_json(json.loads(path.read_text())[quiet.key]) == quiet


def test_a_cached_budget_is_fitted_again_when_its_curve_is_measured_again(tiny_target, tmp_path, monkeypatch):
    calls = []
    real = ab.auto_tree_budget
    monkeypatch.setattr(calibration, "auto_tree_budget", lambda *a, **k: calls.append(1) or real(*a, **k))
    path = tmp_path / "choices.json"
    cfg = DecodeConfig(depth=3, top_k=4, tree_budget=60, max_new_tokens=8)
    eagle = random_draft(tiny_target, "eagle", depth=3)
    old = ab.ForwardCurve(key="unit", sizes=[1, 16], ms=[5.0, 9.0], context=64, measured="2026-01-01T00:00:00.000")
    new = ab.ForwardCurve(key="unit", sizes=[1, 16], ms=[5.0, 30.0], context=64, measured="2026-02-01T00:00:00.000")
    first = ab.cached_budget_choice(tiny_target, eagle, cfg, path=path, calibration_tokens=6, curve=old, max_budget=16)
    assert first.curve_measured == old.measured
    assert ab.cached_budget_choice(tiny_target, eagle, cfg, path=path, curve=old) == first and len(calls) == 1
    again = ab.cached_budget_choice(tiny_target, eagle, cfg, path=path, calibration_tokens=6, curve=new, max_budget=16)
    assert len(calls) == 2 and again.curve_measured == new.measured
    # Without a curve given (the app), the cached curve decides: none cached here, so the choice is not "known".
    monkeypatch.setenv("POSS_CACHE_DIR", str(tmp_path / "empty"))
    assert ab.known_budget_choice(tiny_target, eagle, cfg, path) is None


def test_auto_tree_budget_calibrates_on_a_real_decode(tiny_target):
    draft = random_draft(tiny_target, "poss2", depth=4)
    cfg = DecodeConfig(depth=4, top_k=4, tree_budget=60, max_new_tokens=16)
    c = curve(lambda n: 1.0 + 0.01 * n)
    choice = ab.auto_tree_budget(tiny_target, draft, cfg, curve=c, calibration_tokens=10, max_budget=16)
    assert 2 <= choice.budget <= 16 and "calibration" in choice.profile_source
    assert choice.draft_ms > 0 and choice.table[0]["budget"] == 2
    default = ab.auto_tree_budget(
        tiny_target, draft, cfg, curve=c, calibration_tokens=6, max_budget=16, profile="default"
    )
    assert "default" in default.profile_source
    # The chosen budget decodes losslessly like any other.
    ids = encode_prompt(tiny_target.tokenizer, "Hello there")
    out = [
        i
        for i in SpeculativeDecoder(
            tiny_target, draft, DecodeConfig(depth=4, top_k=4, tree_budget=choice.budget, max_new_tokens=8)
        ).generate(ids)
    ]
    assert isinstance(out[-1], DecodeSummary)


def test_shallower_trees_are_read_off_the_same_rounds_and_chosen_when_cheaper():
    # One round: 3 depth-1 nodes (scores -0.1,-1,-2), 2 depth-2 children of node 0 (-0.3, -0.5) and one depth-3 node.
    nodes = [
        DraftNode(i, p, d, s, 0.5, 0)
        for i, (p, d, s) in enumerate(
            [(-1, 1, -0.1), (-1, 1, -1.0), (-1, 1, -2.0), (0, 2, -0.3), (0, 2, -0.5), (3, 3, -0.6)]
        )
    ]
    ev = RoundEvent(
        round=1,
        nodes=nodes,
        accepted=[0, 3, 5],
        bonus=0,
        target_probs=[],
        feature_deviation=[],
        draft_ms=1,
        verify_ms=1,
        new_tokens=4,
    )
    assert ab.accepted_ranks(ev) == [0, 1, 3]
    assert ab.accepted_ranks(ev, max_depth=2) == [0, 1]
    prof = ab.profile_from_events([ev] * 4, max_budget=16, depth=3)
    assert prof.expected_tau(16, depth=1) == 2 and prof.expected_tau(16, depth=2) == 3 and prof.expected_tau(16) == 4
    assert prof.expected_tau(5) == 4 and prof.expected_tau(4) == 3  # rank 3 needs 3 + 1 drafted slots + the root
    # Drafting dominates the round (15 ms per depth): depth 1 pays, depth 3 does not.
    costly = ab.choose_budget(curve(lambda n: 10.0), prof, draft_ms=45.0, fixed_ms=0.0, choose_depth=True)
    assert costly.depth == 1 and costly.expected_tokens_per_s == pytest.approx(1000 * 2 / 25)
    cheap = ab.choose_budget(curve(lambda n: 10.0), prof, draft_ms=0.3, fixed_ms=0.0, choose_depth=True)
    assert cheap.depth == 3 and cheap.budget == 5
    fixed = ab.choose_budget(curve(lambda n: 10.0), prof, draft_ms=45.0, fixed_ms=0.0)
    assert fixed.depth is None and {r["depth"] for r in fixed.table} == {3}


def test_a_dynamic_depth_stop_is_costed_per_round_and_chosen_when_unsure_rounds_waste_drafting():
    # Two kinds of rounds, one chain each: confident (depth-1..3 scores -0.01, -0.02, -0.03, all accepted) and
    # unsure (-2, -2.5, -3, nothing accepted). Drafting costs 10 ms per depth, verifying 10 ms whatever the size.
    def chain(scores, accepted):
        nodes = [DraftNode(i, i - 1, i + 1, sc, 0.5, 0) for i, sc in enumerate(scores)]
        return RoundEvent(
            round=1,
            nodes=nodes,
            accepted=accepted,
            bonus=0,
            target_probs=[],
            feature_deviation=[],
            draft_ms=30,
            verify_ms=10,
            new_tokens=1,
        )

    rounds = [chain([-0.01, -0.02, -0.03], [0, 1, 2]), chain([-2.0, -2.5, -3.0], [])]
    prof = ab.profile_from_events(rounds, max_budget=16, depth=3)
    assert prof.best_scores == [[-0.01, -0.02, -0.03], [-2.0, -2.5, -3.0]]
    # log 0.1 = -2.30: the unsure round passes depth 1 (-2) and stops after depth 2 (-2.5); log 0.15 = -1.90: at 1.
    assert [prof.stop_depth(r, 3, 0.1) for r in (0, 1)] == [3, 2]
    assert [prof.stopped_rounds(4, 3, 0.15)[r][:2] for r in (0, 1)] == [(3, 3), (1, 0)]
    draft_ms = {1: 10.0, 2: 20.0, 3: 30.0}
    without = ab.choose_budget(curve(lambda n: 10.0), prof, draft_ms, fixed_ms=0.0, choose_depth=True)
    # Without a stop depth 1 wins: (2 + 1) tokens in 2 x 20 ms = 75/s against depth 3's (4 + 1) in 2 x 40 ms.
    assert without.depth == 1 and without.depth_stop == 0.0 and without.expected_tokens_per_s == pytest.approx(75)
    chosen = ab.choose_budget(
        curve(lambda n: 10.0), prof, draft_ms, fixed_ms=0.0, choose_depth=True, depth_stops=ab.DEPTH_STOPS
    )
    # With one: the confident round drafts 3 deep (40 ms, 4 tokens), the unsure one 1 deep (20 ms, 1 token).
    assert (chosen.depth, chosen.depth_stop, chosen.budget) == (3, 0.15, 4)
    assert chosen.expected_tokens_per_s == pytest.approx(1000 * 5 / 60) and chosen.draft_ms == pytest.approx(20)
    assert "stop below p 0.15" in chosen.describe()
    # A profile without rounds (the default one) cannot cost a stop: none is offered.
    dflt = ab.choose_budget(curve(lambda n: 10.0), ab.default_profile(3), 30.0, 0.0, depth_stops=ab.DEPTH_STOPS)
    assert {r["depth_stop"] for r in dflt.table} == {0.0}


def test_draft_cost_per_depth_is_measured_not_scaled(tiny_target):
    # Same profile as above; drafting costs 40 ms at depth 1 and 2.5 ms per further depth (the context rows and the
    # fixed work land on depth 1). Scaled by depth from 45 ms at depth 3, depth 1 would look three times cheaper.
    nodes = [
        DraftNode(i, p, d, s, 0.5, 0)
        for i, (p, d, s) in enumerate(
            [(-1, 1, -0.1), (-1, 1, -1.0), (-1, 1, -2.0), (0, 2, -0.3), (0, 2, -0.5), (3, 3, -0.6)]
        )
    ]
    marks = [40.0, 42.5, 45.0]
    ev = RoundEvent(
        round=1,
        nodes=nodes,
        accepted=[0, 3, 5],
        bonus=0,
        target_probs=[],
        feature_deviation=[],
        draft_ms=45.0,
        verify_ms=1,
        new_tokens=4,
        draft_ms_by_depth=marks,
    )
    assert RoundEvent.from_json(ev.to_json()).draft_ms_by_depth == marks
    short = RoundEvent(**{**ev.__dict__, "draft_ms_by_depth": [30.0]})  # a round cut short by the context limit
    assert ab.draft_ms_by_depth([ev, ev, short]) == {1: pytest.approx(110 / 3), 2: 42.5, 3: 45.0}
    prof = ab.profile_from_events([ev] * 4, max_budget=16, depth=3)
    scaled = ab.choose_budget(curve(lambda n: 10.0), prof, draft_ms=45.0, fixed_ms=0.0, choose_depth=True)
    measured = ab.choose_budget(
        curve(lambda n: 10.0), prof, draft_ms={1: 40.0, 2: 42.5, 3: 45.0}, fixed_ms=0.0, choose_depth=True
    )
    assert scaled.depth == 1 and measured.depth == 3
    assert measured.expected_tokens_per_s == pytest.approx(1000 * 4 / 55) and measured.draft_ms == 45.0
    # A real decode records one mark per drafted depth, rising, within the round's drafting time.
    draft = random_draft(tiny_target, "poss2", depth=4)
    ids = encode_prompt(tiny_target.tokenizer, "Hello there")
    cfg = DecodeConfig(depth=4, top_k=3, tree_budget=10, max_new_tokens=6)
    rounds = [
        e
        for e in SpeculativeDecoder(tiny_target, draft, cfg).generate(ids)
        if isinstance(e, RoundEvent) and not e.prefill
    ]
    assert rounds and all(len(e.draft_ms_by_depth) == 4 for e in rounds)
    assert all(e.draft_ms_by_depth == sorted(e.draft_ms_by_depth) for e in rounds)
    assert all(0 < e.draft_ms_by_depth[-1] <= e.draft_ms + 1e-6 for e in rounds)


def test_the_apps_budget_choice_is_calibrated_once_per_draft_and_cached(tiny_target, tmp_path, monkeypatch):
    calls = []
    real = ab.auto_tree_budget

    def counting(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(calibration, "auto_tree_budget", counting)
    path, c = tmp_path / "choices.json", curve(lambda n: 5.0 + 0.5 * n)
    cfg = DecodeConfig(depth=4, top_k=4, tree_budget=60, max_new_tokens=16)
    eagle, poss = random_draft(tiny_target, "eagle", depth=4), random_draft(tiny_target, "poss2", depth=4)
    first = ab.cached_budget_choice(tiny_target, eagle, cfg, path=path, calibration_tokens=8, curve=c, max_budget=16)
    assert len(calls) == 1 and calls[0]["choose_depth"] is False  # the app keeps the depth the user chose
    assert first.depth is None and 2 <= first.budget <= 16
    again = ab.cached_budget_choice(tiny_target, eagle, cfg, path=path, curve=c)
    assert again == first and len(calls) == 1
    ab.cached_budget_choice(tiny_target, poss, cfg, path=path, calibration_tokens=8, curve=c, max_budget=16)
    ab.cached_budget_choice(
        tiny_target, eagle, DecodeConfig(depth=3, top_k=4), path=path, calibration_tokens=8, curve=c, max_budget=16
    )
    assert len(calls) == 3  # another draft, another depth: each calibrated once
    assert len(json.loads(path.read_text())) == 3


def test_machine_busy_reads_the_load_against_the_cores(monkeypatch):
    import torch

    monkeypatch.setattr(timing.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(timing.os, "getloadavg", lambda: (2.1, 1.0, 0.5))
    assert timing.machine_busy() == 2.1 and timing.machine_busy(torch.device("cpu")) == 2.1
    assert timing.machine_busy(torch.device("meta")) == 0.0  # only a CPU's timings depend on the CPU load
    monkeypatch.setattr(timing.os, "getloadavg", lambda: (1.0, 1.0, 1.0))  # the app's own one-thread decoding
    assert timing.machine_busy() == 0.0
