"""transformers' own generate as a decoder: prompt lookup (`pld`) and assisted generation (`assisted`) reproduce plain
decoding at temperature 0, their rounds are the streamer's puts, stopping ends the worker thread, and the registry,
benchmark, comparison, saved runs and the round's account in words take them like any method."""

import json
import math
import threading

import pytest
import torch

from poss_core.base.errors import ConfigError
from poss_core.bench import cli, rebuild
from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import PlainDecoder, encode_prompt
from poss_core.decoding.hf_generate import HFGenerateDecoder
from poss_core.models.presets import DEFAULT_PRESET, get_preset
from poss_core.models.tiny import tiny_target as make_tiny
from poss_core.rounds.events import DecodeSummary, RoundEvent
from poss_core.rounds.explain import explain_round
from poss_core.rounds.token_records import round_records
from poss_core.runtime import compare, methods, saved_runs
from poss_core.runtime.run_spec import RunSpec

# The tiny random target falls into a repeating pattern within a few tokens, so n-grams recur and lookups hit.
PROMPT = "abc abc abc abc abc abc"


def run(decoder, ids):
    items = list(decoder.generate(ids))
    assert isinstance(items[-1], DecodeSummary) and all(isinstance(e, RoundEvent) for e in items[:-1])
    return items[:-1], items[-1]


def plain_tokens(target, ids, cfg):
    return run(PlainDecoder(target, cfg), ids)[1].token_ids


@pytest.fixture(scope="module")
def assistant(tiny_target):
    """A smaller model with the target's vocabulary: the target's weights with noise, so it agrees often, not
    always (a rejected candidate must not change the output)."""
    small = make_tiny(seed=0)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in small.model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return small


def generate_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("generate-")]


@pytest.mark.parametrize("max_new", [40, 7])
def test_prompt_lookup_is_plain_decoding_at_temperature_0_and_its_rounds_are_the_streamers_puts(tiny_target, max_new):
    ids = encode_prompt(tiny_target.tokenizer, PROMPT)
    cfg = DecodeConfig(depth=6, max_new_tokens=max_new)
    events, summary = run(HFGenerateDecoder(tiny_target, cfg, "pld"), ids)
    assert summary.token_ids == plain_tokens(tiny_target, ids, cfg)
    assert [t for e in events for t in e.tokens] == summary.token_ids
    assert events[0].prefill and not any(e.prefill for e in events[1:])
    assert all(not e.draft_observed for e in events)
    for e in events:  # the accepted candidates as a chain, their probabilities not observed
        assert [n.parent for n in e.nodes] == list(range(-1, len(e.nodes) - 1)) and e.accepted == list(
            range(len(e.nodes))
        )
        assert all(math.isnan(n.draft_prob) and math.isnan(n.score) for n in e.nodes)
        assert e.accept_len <= cfg.depth and e.wall_ms > 0 and e.draft_ms == 0.0
    if max_new == 40:
        assert max(e.accept_len for e in events) >= 1, "a repeating output gives lookups that hit"
        assert summary.stats["tau"] > 1.0 and summary.stop_reason == "max_new_tokens"
    assert summary.stats["new_tokens"] == len(summary.token_ids) <= max_new


@pytest.mark.parametrize("mode", ["pld", "assisted"])
def test_in_the_calling_thread_the_rounds_are_the_same_and_no_worker_starts(tiny_target, assistant, mode):
    """The benchmark's way: generate runs to the end in the caller's thread, then its rounds are yielded."""
    ids = encode_prompt(tiny_target.tokenizer, PROMPT)
    cfg = DecodeConfig(depth=4, max_new_tokens=30)
    helper = assistant if mode == "assisted" else None
    streamed_events, streamed = run(HFGenerateDecoder(tiny_target, cfg, mode, helper), ids)
    gen = HFGenerateDecoder(tiny_target, cfg, mode, helper, in_caller_thread=True).generate(ids)
    first = next(gen)
    assert generate_threads() == []  # nothing left running: the decode already ended in this thread
    rest = list(gen)
    events, summary = [first] + rest[:-1], rest[-1]
    assert summary.token_ids == streamed.token_ids == plain_tokens(tiny_target, ids, cfg)
    assert [e.tokens for e in events] == [e.tokens for e in streamed_events]


def test_plain_mode_is_one_token_per_round_and_plain_decoding(tiny_target):
    ids = encode_prompt(tiny_target.tokenizer, PROMPT)
    cfg = DecodeConfig(max_new_tokens=12)
    events, summary = run(HFGenerateDecoder(tiny_target, cfg, "plain"), ids)
    assert summary.token_ids == plain_tokens(tiny_target, ids, cfg)
    assert [len(e.tokens) for e in events] == [1] * 12 and all(e.draft_observed and not e.nodes for e in events)


def test_assisted_generation_with_a_tiny_assistant_is_plain_decoding(tiny_target, assistant):
    ids = encode_prompt(tiny_target.tokenizer, "Write a poem about the sea.")
    cfg = DecodeConfig(depth=4, max_new_tokens=30)
    events, summary = run(HFGenerateDecoder(tiny_target, cfg, "assisted", assistant), ids)
    assert summary.token_ids == plain_tokens(tiny_target, ids, cfg)
    assert max(e.accept_len for e in events) >= 1 and all(e.accept_len <= 4 for e in events)
    assert sum(e.draft_ms for e in events) > 0  # the assistant's forward passes, timed by hooks
    assert all(e.verify_ms >= 0 and e.draft_ms <= e.wall_ms + 1e-6 for e in events)


def test_closing_the_generator_midway_stops_the_worker_thread(tiny_target):
    ids = encode_prompt(tiny_target.tokenizer, PROMPT)
    gen = HFGenerateDecoder(tiny_target, DecodeConfig(max_new_tokens=200), "pld").generate(ids)
    next(gen)
    next(gen)
    assert generate_threads() == ["generate-pld"]  # waiting at its put for the next round
    gen.close()
    assert generate_threads() == []


def test_a_cancel_flag_ends_the_decode_with_a_cancelled_summary(tiny_target):
    ids = encode_prompt(tiny_target.tokenizer, PROMPT)
    cancel = threading.Event()
    gen = HFGenerateDecoder(tiny_target, DecodeConfig(max_new_tokens=200), "plain").generate(ids, cancel=cancel)
    next(gen)
    cancel.set()
    rest = list(gen)
    assert isinstance(rest[-1], DecodeSummary) and rest[-1].stop_reason == "cancelled" and len(rest) <= 2
    assert generate_threads() == []


def test_the_registry_offers_prompt_lookup_everywhere_and_assisted_where_a_preset_has_a_smaller_model():
    for name in ("smollm2-135m", "tiny-random", "llama3-8b-instruct", "llama2-13b-chat"):
        preset = get_preset(name)
        offered = methods.lane_methods(preset)
        assert methods.PLD in offered and (methods.ASSISTED in offered) == bool(preset.assistant)
        assert not offered[methods.PLD].plain and offered[methods.PLD].trained
        assert not methods.uses_draft(methods.PLD) and not methods.is_plain(methods.PLD)
    llama3 = methods.get_method(get_preset("llama3-8b-instruct"), "assisted")
    assert llama3.label == "Assisted (smaller model: Llama-3.2-1B-Instruct)" and llama3.color
    assert methods.PLD_METHOD.label == "Prompt lookup (no draft model)"


def test_assisted_on_the_default_preset_says_why_not_and_what_to_use(eval_files, tmp_path):  # noqa: F811
    preset = get_preset(DEFAULT_PRESET)
    with pytest.raises(ConfigError, match="smallest SmolLM2.*Use pld"):
        methods.get_method(preset, "assisted")
    with pytest.raises(ConfigError, match="smallest SmolLM2"):
        RunSpec(prompt="hi", methods=["plain", "assisted"], preset=DEFAULT_PRESET).resolve()
    with pytest.raises(ConfigError, match="smallest SmolLM2"):
        cli.check_methods(["plain", "assisted"], preset)


def test_bench_runs_prompt_lookup_beside_plain_with_its_speedup_and_identity(eval_files, tmp_path):  # noqa: F811
    out = tmp_path / "res"
    rc = cli.main(
        [
            "--preset",
            "tiny-random",
            "--methods",
            "plain,pld",
            "--data",
            str(eval_files / "qa.jsonl"),
            "--limit",
            "1",
            "--max-new-tokens",
            "24",
            "--runs",
            "1",
            "--depth",
            "4",
            "--warmup-tokens",
            "4",
            "--no-progress",
            "--plotlyjs",
            "cdn",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["methods"] == ["plain", "plain-hf", "pld"]
    assert summary["identity"]["checked"] == 2 and summary["identity"]["mismatches"] == []
    cell = summary["table"]["pld"]["overall"]
    assert cell["speedup"] > 0 and cell["tau_pooled"] >= 1.0 and len(cell["pos_rate"]) == 4
    assert len((out / "pld.jsonl").read_text().splitlines()) == 1
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert {r["method"] for r in records} == {"plain", "plain-hf", "pld"}
    md = (out / "report.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| Prompt lookup (no draft model) |"))
    assert "×" in row  # its speed-up in the overall table
    assert "pld: transformers' own speculative `generate`" in md
    assert rebuild.report_main([str(out), "--plotlyjs", "cdn"]) == 0  # records with unobserved nodes read back


def test_a_comparison_runs_pld_and_assisted_lanes_saves_and_replays_them(tmp_path):
    spec = RunSpec(
        prompt=PROMPT, methods=["plain", "pld", "assisted"], preset="tiny-random", max_new_tokens=24, depth=4
    )
    comp = compare.run_to_end(compare.start(spec.resolve(), models=compare.ModelCache()))
    plain, pld, assisted = comp.lanes
    assert plain.token_ids == pld.token_ids == assisted.token_ids and not (pld.error or assisted.error)
    assert assisted.label.startswith("Assisted (smaller model: tiny-random-small)")
    drafted = [r for r in pld.records if r.from_draft]
    assert drafted and all(r.specialist is None and r.draft_prob is None for r in drafted)
    path = tmp_path / "run.jsonl"
    saved_runs.save_run(comp, path)
    loaded = saved_runs.load_run(path)
    assert [e.accept_len for e in loaded.lanes[1].events] == [e.accept_len for e in pld.events]
    assert all(not e.draft_observed for e in loaded.lanes[1].events)


def test_the_round_told_in_words_claims_nothing_it_cannot_know():
    nodes_event = RoundEvent.from_json(
        {
            "round": 3,
            "nodes": [{"token": 7, "parent": -1, "depth": 1, "score": None, "draft_prob": None, "specialist": 0}],
            "accepted": [0],
            "bonus": 9,
            "wall_ms": 4.0,
            "verify_ms": 4.0,
            "draft_observed": False,
            "tokens": [7, 9],
        }
    )
    text = explain_round(nodes_event, lambda t: {7: "ab", 9: "c"}[t])
    assert '"ab"' in text and '"c"' in text and "2 tokens" in text
    assert "not observable" in text.lower() and "first rejected" not in text and "draft p" not in text
    records = round_records(nodes_event, ["ab", "c"], ["ab"])
    assert records[0].source == "draft" and records[1].source == "bonus" and not records[1].rejected
    empty = RoundEvent.target_only(1, 9, 1.0, 2, tokens=[9], wall_ms=1.0, draft_observed=False)
    assert "plain decoding" not in explain_round(empty, str) and "kept no candidate" in explain_round(empty, str)


def test_a_lookup_lane_has_no_specialist_strip(tiny_target):
    """Prompt lookup has no specialists: the pos-acc chart's strip leaves it out instead of showing "S1"."""
    from poss_core.rounds.metrics import acceptance_stats, specialists_by_position

    ids = encode_prompt(tiny_target.tokenizer, PROMPT)
    events, _ = run(HFGenerateDecoder(tiny_target, DecodeConfig(depth=6, max_new_tokens=40), "pld"), ids)
    assert any(e.nodes for e in events) and specialists_by_position(events) == []
    assert acceptance_stats(events).specialists == []
