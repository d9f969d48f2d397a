"""The oracle: a draft that is the target's own continuation. Its output is plain decoding's, every round but the last
accepts the whole depth, and the benchmark divides every method's speed by it."""

import json

import pytest
import torch
from helpers import greedy_reference
from test_bench import events, known_records, rec

from poss_core.bench import cli, overhead, runner, tables
from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import encode_prompt
from poss_core.decoding.oracle import OracleDecoder, oracle_tree
from poss_core.decoding.verify import verify_greedy
from poss_core.models.presets import get_preset
from poss_core.results import analysis
from poss_core.rounds.events import DecodeSummary
from poss_core.runtime import compare, methods

PROMPTS = ["Hi there, how are you?", "Write a poem about the sea.", "2 + 2 = ?"]


def run(decoder, ids):
    items = list(decoder.generate(ids))
    assert isinstance(items[-1], DecodeSummary)
    return items[:-1], items[-1]


@pytest.mark.parametrize("depth,budget", [(6, 7), (6, 24), (3, 16), (1, 2), (4, 60)])
def test_oracle_output_is_plain_decoding_and_accepts_the_whole_depth(tiny_target, depth, budget):
    for prompt in PROMPTS:
        ids = encode_prompt(tiny_target.tokenizer, prompt)
        dec = OracleDecoder(tiny_target, DecodeConfig(depth=depth, top_k=4, tree_budget=budget, max_new_tokens=40))
        evs, summary = run(dec, ids)
        assert summary.token_ids == greedy_reference(tiny_target, ids, 40)
        rounds = [e for e in evs if not e.prefill]
        assert rounds, "a 40-token decode has rounds after the prefill"
        for e in rounds[:-1]:  # every round but the last accepts the whole depth: τ = depth + 1
            assert e.accept_len == depth and len(e.tokens) == depth + 1
            assert len(e.nodes) == budget - 1  # the chain padded to the budget: the verify pass of a real tree
        assert rounds[-1].accept_len <= depth
        # τ stops at the answer's end: the tokens after the prefill's over the rounds
        assert summary.stats["tau"] == pytest.approx((len(summary.token_ids) - 1) / len(rounds))
        assert sum(e.accept_len + 1 for e in rounds[:-1]) == (depth + 1) * (len(rounds) - 1)


def test_the_continuation_is_computed_once_per_prompt(tiny_target, monkeypatch):
    dec = OracleDecoder(tiny_target, DecodeConfig(depth=4, tree_budget=5, max_new_tokens=20))
    ids = encode_prompt(tiny_target.tokenizer, PROMPTS[0])
    calls = []
    plain_generate = runner.methods.PlainDecoder.generate

    def counted(self, *a, **k):
        calls.append(1)
        return plain_generate(self, *a, **k)

    monkeypatch.setattr(runner.methods.PlainDecoder, "generate", counted)
    first = dec.prepare(ids)
    _, again = run(dec, ids)
    _, third = run(dec, ids)
    assert len(calls) == 1 and first == again.token_ids == third.token_ids


def test_oracle_tree_is_the_chain_then_filler_that_verification_rejects():
    tree = oracle_tree([11, 12, 13], size=9, depth=3, vocab_size=50, hidden_size=4)
    assert tree.tokens[:3].tolist() == [11, 12, 13] and tree.parents[:3].tolist() == [-1, 0, 1]
    assert tree.size == 9 and int(tree.depths.max()) <= 3
    for t, p, d in zip(tree.tokens[3:].tolist(), tree.parents[3:].tolist(), tree.depths[3:].tolist()):
        assert t != [11, 12, 13][d - 1] and p == d - 2  # a sibling of the chain's node at that depth
    logits = torch.full((10, 50), -1.0)
    for slot, nxt in enumerate([11, 12, 13, 40]):  # the target continues the chain, then says 40
        logits[slot, nxt] = 5.0
    assert verify_greedy(tree, logits) == ([0, 1, 2], 40)


def test_the_registry_offers_the_oracle_as_a_lane_not_as_a_preset_draft(tiny_target):
    preset = get_preset("tiny-random")
    oracle = methods.get_method(preset, "oracle")
    assert oracle.label == "Oracle (the target's own continuation)" and oracle.oracle and not oracle.plain
    assert "oracle" not in methods.preset_methods(preset) and "oracle" in methods.lane_methods(preset)
    assert not methods.is_plain("oracle")
    assert isinstance(methods.build_decoder(oracle, tiny_target, DecodeConfig()), OracleDecoder)
    assert methods.oracle_config(DecodeConfig(depth=5, tree_budget=40)).tree_budget == 6


def test_a_comparison_runs_an_oracle_lane_beside_plain_decoding():
    spec = compare.RunSpec(
        "Write a poem about the sea.",
        ["plain", "oracle"],
        "tiny-random",
        depth=4,
        top_k=4,
        tree_budget=12,
        max_new_tokens=16,
    )
    comp = compare.run_to_end(compare.start(spec.resolve()))
    plain, oracle = comp.lanes
    assert oracle.label == "Oracle (the target's own continuation)" and oracle.error is None
    assert oracle.token_ids == plain.token_ids
    assert all(e.accept_len == 4 for e in oracle.events[1:-1])


def test_the_report_gives_each_methods_share_of_the_oracles_speed_up():
    recs = known_records()
    # The oracle: τ 4 on d1 in 0.25 s, on d2 in 0.2 s, both runs.
    recs += [
        rec(run, "oracle", d, events(lens, wall))
        for run in (0, 1)
        for d, lens, wall in (("d1", [3, 3, 3, 3], 0.25), ("d2", [3], 0.2))
    ]
    agg = analysis.aggregate(recs, depth=3)
    assert agg["oracle"] == "oracle" and "oracle" not in agg["vs_eagle"]
    t = agg["table"]
    for m in ("plain", "eagle", "poss2", "oracle"):
        for s in ("d1", "d2", "overall"):
            want = [a / b for a, b in zip(t[m][s]["tokens_per_s_runs"], t["oracle"][s]["tokens_per_s_runs"])]
            assert t[m][s]["oracle_fraction_runs"] == pytest.approx(want)
            assert t[m][s]["oracle_fraction"] == pytest.approx(sum(want) / 2)
    assert t["oracle"]["overall"]["oracle_fraction"] == pytest.approx(1.0)
    # poss2 on d1: 17 tokens in 0.5 s and 1.0 s, the oracle's 17 in 0.25 s: 0.5 and 0.25 of its speed
    assert t["poss2"]["d1"]["oracle_fraction"] == pytest.approx(0.375)
    md = tables.markdown_report(agg, analysis.identity_check(recs), {"labels": {}})
    assert "of the oracle's speed-up (pooled)" in md and "## Speed-up as a fraction of the oracle's per dataset" in md
    lines = md.splitlines()
    at = next(i for i, line in enumerate(lines) if "of the oracle's speed-up" in line)
    header = lines[at]
    row = next(line for line in lines[at:] if line.startswith("| poss2"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    column = [c.strip() for c in header.strip("|").split("|")].index("of the oracle's speed-up (pooled)")
    assert cells[column].startswith(f"{t['poss2']['overall']['oracle_fraction']:.2f}")
    # Without an oracle, no fraction column.
    plain_md = tables.markdown_report(
        analysis.aggregate(known_records(), depth=3), analysis.identity_check(known_records()), {"labels": {}}
    )
    assert "oracle" not in plain_md.lower()


def test_overhead_measures_the_oracles_round(tiny_target):
    r = overhead.measure_overhead(
        tiny_target, None, DecodeConfig(depth=4, top_k=4, tree_budget=16), rounds=5, warmup_rounds=1
    )
    assert r["rounds"] == 5 and r["nodes"] == pytest.approx(15) and r["tau"] == pytest.approx(5)
    assert r["draft_ms"] < r["verify_ms"] and 0 < r["engine_ms"] < r["wall_ms"]


@pytest.mark.slow  # the benchmark CLI end to end
def test_bench_cli_runs_the_oracle_and_prints_its_fraction(eval_files, tmp_path, capsys):
    out = tmp_path / "res"
    rc = cli.main(
        [
            "--preset",
            "tiny-random",
            "--methods",
            "plain,eagle,oracle",
            "--data",
            str(eval_files / "qa.jsonl"),
            "--limit",
            "1",
            "--max-new-tokens",
            "12",
            "--runs",
            "1",
            "--tree-budget",
            "8",
            "--depth",
            "3",
            "--no-progress",
            "--no-hf-generate",
            "--plotlyjs",
            "cdn",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["oracle"] == "oracle" and not summary["identity"]["mismatches"]
    assert summary["table"]["oracle"]["overall"]["tau_pooled"] > summary["table"]["eagle"]["overall"]["tau_pooled"]
    assert "of oracle" in capsys.readouterr().out


def test_after_a_divergence_the_oracle_continues_from_a_plain_run_untimed(tiny_target):
    """In low precision a batched verify pass can round a near-tie differently from the plain run: the decode then
    leaves the known continuation. Simulated here by a wrong token in it: the output is still plain decoding's, the
    rounds after the divergence accept the whole depth again, and the re-derivation is reported as untimed."""
    depth = 4
    ids = encode_prompt(tiny_target.tokenizer, PROMPTS[1])
    dec = OracleDecoder(tiny_target, DecodeConfig(depth=depth, top_k=4, tree_budget=8, max_new_tokens=40))
    want = dec.prepare(ids)
    wrong = list(want)
    wrong[9] = (wrong[9] + 1) % tiny_target.vocab_size
    dec._continuations[tuple(ids)] = wrong
    evs, summary = run(dec, ids)
    assert summary.token_ids == want == greedy_reference(tiny_target, ids, 40)
    rounds = [e for e in evs if not e.prefill]
    short = [i for i, e in enumerate(rounds) if e.accept_len < depth]
    assert short and short[0] < len(rounds) - 1  # the wrong token cut one round short ...
    assert all(e.accept_len == depth for e in rounds[short[0] + 1 : -1])  # ... and the rounds after it are whole
    assert dec.untimed_s > 0 and dec._continuations[tuple(ids)] == want  # kept for the next run
    _, again = run(dec, ids)
    assert again.token_ids == want and dec.untimed_s == 0
