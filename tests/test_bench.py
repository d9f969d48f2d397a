"""The benchmark: aggregation from known records, the identity check, the Spec-Bench JSONL layout, the reports."""

import json
import math
from unittest import mock

import pytest
from helpers import run_main

from poss_core.autobudget import CALIBRATION_PROMPTS
from poss_core.base.errors import PossError
from poss_core.bench import cli, overhead, rebuild, report, runner, tables
from poss_core.decoding import decoder as decoder_module
from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import PlainDecoder, SpeculativeDecoder
from poss_core.models.loading import random_draft
from poss_core.models.numerics import plain_margin
from poss_core.results import analysis
from poss_core.results import records as bench_records
from poss_core.rounds.events import DraftNode, FeatureDeviation, RoundEvent
from poss_core.views import pooling

DEPTH = 3


def events(accept_lens, wall_s, depth=DEPTH, spec=True):
    """A prefill event (1 token) then one round per accept length; wall time spread evenly over the events."""
    n = len(accept_lens) + 1
    ms = wall_s * 1000.0 / n
    out = [RoundEvent.target_only(0, 5, ms, 1, tokens=[5], wall_ms=ms, prefill=True)]
    made = 1
    for i, a in enumerate(accept_lens, 1):
        nodes = [DraftNode(7, k - 1, k, -float(k), 0.5, 0) for k in range(depth)] if spec else []
        for k, node in enumerate(nodes):
            node.depth = k + 1
        made += a + 1
        out.append(
            RoundEvent(
                round=i,
                nodes=nodes,
                accepted=list(range(a)),
                bonus=5,
                target_probs=[0.5] * len(nodes),
                feature_deviation=[FeatureDeviation(float(k + 1), 0.1 * (k + 1)) for k in range(a)],
                draft_ms=ms / 2 if spec else 0.0,
                verify_ms=ms / 4 if spec else ms,
                new_tokens=made,
                tokens=[5] * (a + 1),
                wall_ms=ms,
            )
        )
    return out


def rec(run, method, dataset, evs, qid=0, turn=0, tokens=None):
    n = evs[-1].new_tokens
    return bench_records.TurnRecord(
        run=run,
        method=method,
        dataset=dataset,
        question_id=qid,
        category="",
        turn=turn,
        token_ids=tokens if tokens is not None else list(range(n)),
        text="x" * n,
        stop_reason="max_new_tokens",
        wall_time=sum(e.wall_ms for e in evs) / 1000,
        events=evs,
    )


def known_records():
    """d1: plain 10 tok in 1.0 s / 0.5 s; plain-hf 10 tok in 0.8 s / 1.0 s; eagle 11 tok (τ 2.5) in 0.5 s / 1.1 s;
    poss2 17 tok (τ 4) in 0.5 s / 1.0 s.  d2: plain 4 tok in 1 s both runs; plain-hf 4 tok in 2 s; eagle 4 tok
    (τ 1.5) in 0.5 s both runs; poss2 4 tok (τ 3) in 0.25 s both runs."""
    plain9, plain3 = [0] * 9, [0] * 3
    data = [
        ("d1", "plain", plain9, (1.0, 0.5), False),
        ("d1", "plain-hf", plain9, (0.8, 1.0), False),
        ("d1", "eagle", [2, 0, 3, 1], (0.5, 1.1), True),
        ("d1", "poss2", [3, 3, 3, 3], (0.5, 1.0), True),
        ("d2", "plain", plain3, (1.0, 1.0), False),
        ("d2", "plain-hf", plain3, (2.0, 2.0), False),
        ("d2", "eagle", [1, 0], (0.5, 0.5), True),
        ("d2", "poss2", [2], (0.25, 0.25), True),
    ]
    return [rec(run, m, d, events(lens, walls[run], spec=spec)) for run in (0, 1) for d, m, lens, walls, spec in data]


def test_pool_events_keeps_counting_tokens():
    a, b = events([1, 2], 1.0), events([0], 3.0)
    pooled = pooling.pool_events([a, b])
    assert [e.new_tokens for e in pooled] == [1, 3, 6, 7, 8]
    assert [e.round for e in pooled] == list(range(5))
    from poss_core.rounds import metrics

    assert metrics.tokens_per_s(pooled) == pytest.approx(8 / 4.0)
    assert metrics.tau(pooled) == pytest.approx((2 + 3 + 1) / 3)


def test_aggregation_of_known_records_gives_known_tables():
    agg = analysis.aggregate(known_records(), DEPTH)
    t = agg["table"]
    assert agg["methods"] == ["plain", "plain-hf", "eagle", "poss2"] and agg["datasets"] == ["d1", "d2"]

    # Baseline = the faster plain decoder of each run: d1 run 0 plain-hf (12.5 tok/s), run 1 plain (20 tok/s).
    assert agg["baseline"]["d1"]["method"] == ["plain-hf", "plain"]
    assert agg["baseline"]["d1"]["tokens_per_s"] == pytest.approx([12.5, 20.0])
    assert agg["baseline"]["d2"]["tokens_per_s"] == pytest.approx([4.0, 4.0])

    e1 = t["eagle"]["d1"]
    assert e1["tau_pooled"] == pytest.approx(2.5) and e1["tau"] == pytest.approx(2.5) and e1["tau_std"] == 0
    assert e1["tokens_per_s_runs"] == pytest.approx([22.0, 10.0])
    assert e1["tokens_per_s"] == pytest.approx(16.0)
    assert e1["tokens_per_s_std"] == pytest.approx(math.sqrt(72))  # sample std of 22 and 10
    assert e1["speedup_runs"] == pytest.approx([22 / 12.5, 0.5])
    assert e1["speedup"] == pytest.approx((1.76 + 0.5) / 2)
    assert e1["speedup_std"] == pytest.approx(abs(1.76 - 0.5) / math.sqrt(2))
    # accept lengths 2, 0, 3, 1 (twice, once per run): P(accept >= k) = 3/4, 2/4, 1/4.
    assert e1["accept_hist"] == [2, 2, 2, 2]
    assert e1["pos_rate"] == pytest.approx([0.75, 0.5, 0.25])
    assert e1["pos_acc"] == pytest.approx([0.75, 2 / 3, 0.5])
    fd = e1["feature_deviation"]
    assert fd["count"] == [6, 4, 2] and fd["l2"] == pytest.approx([1.0, 2.0, 3.0])

    # Overall pools both datasets per run: eagle run 0 = 15 tokens in 1.0 s,
    # baseline = max(plain 14/2.0, plain-hf 14/2.8).
    eo = t["eagle"]["overall"]
    assert eo["tokens_per_s_runs"] == pytest.approx([15.0, 15 / 1.6])
    assert agg["baseline"]["overall"]["tokens_per_s"] == pytest.approx([7.0, 14 / 1.5])
    assert eo["speedup_runs"] == pytest.approx([15 / 7.0, (15 / 1.6) / (14 / 1.5)])
    assert eo["tau_pooled"] == pytest.approx((3 + 1 + 4 + 2 + 2 + 1) / 6)
    assert agg["mean_speedup_over_datasets"]["eagle"] == pytest.approx(((1.76 + 0.5) / 2 + 2.0) / 2)
    # The paper's mean column weighs each dataset the same (d1 τ 2.5, d2 τ 1.5), unlike the pooled 13/6.
    assert agg["mean_tau_over_datasets"]["eagle"] == pytest.approx((2.5 + 1.5) / 2)

    # Plain decoding: τ = 1, no drafting time.
    assert t["plain"]["d1"]["tau_pooled"] == 1.0 and t["plain"]["d1"]["draft_ms"] == 0.0

    # POSS-2 over EAGLE: τ 4 vs 2.5 (+60%) on d1, 3 vs 1.5 (+100%) on d2; speed 34/22 and 17/10 on d1.
    v = agg["vs_eagle"]["poss2"]
    assert list(agg["vs_eagle"]) == ["poss2"]
    assert v["d1"]["tau"] == pytest.approx(0.6) and v["d2"]["tau"] == pytest.approx(1.0)
    assert v["d1"]["speed"] == pytest.approx((34 / 22 - 1 + 1.7 - 1) / 2)
    assert v["d2"]["speed"] == pytest.approx(1.0) and v["d2"]["speed_std"] == pytest.approx(0.0)
    assert v["mean_over_datasets"]["tau"] == pytest.approx(0.8)

    # Between drafts, both ways on the same questions: POSS-2 over EAGLE is the vs-EAGLE interval, and EAGLE over
    # POSS-2 is the ratio of the datasets' mean τ the other way round ((2.5 + 1.5) / (4 + 3) - 1).
    between = agg["tau_between"]
    assert sorted(between) == ["eagle", "poss2"] and list(between["eagle"]) == ["poss2"]
    assert between["poss2"]["eagle"] == pytest.approx(v["tau_interval"]["mean_of_datasets"])
    assert between["eagle"]["poss2"][0] == pytest.approx((2.5 + 1.5) / (4 + 3) - 1)

    # Time split per draft round (events give draft = wall/2, verify = wall/4).
    assert e1["draft_ms"] == pytest.approx(e1["round_ms"] / 2) and e1["overhead_share"] == pytest.approx(0.25)


def test_markdown_and_summary_show_the_tables(tmp_path):
    records = known_records()
    meta = {"preset": "unit", "command": "python -m poss_core.bench --unit", "labels": {"poss2": "POSS-2"}}
    identity = {"reference": "plain", "checked": 12, "mismatches": []}  # (these made-up answers differ in length)
    paths = report.write_outputs(tmp_path, records, meta, DEPTH, identity, plotlyjs="cdn")
    md = paths["markdown"].read_text()
    assert "Identity check PASSED" in md
    assert "1.13× ± 0.89" in md  # eagle's d1 speed-up, mean ± sample std over the two runs
    assert "| POSS-2 | τ +60.0%" in md
    assert "## τ of each draft (row) over each other (column)" in md
    # EAGLE's overall row: τ pooled 13/6, then τ as the mean of the datasets (2.5 and 1.5)
    assert "| eagle | 2.17 | 2.00 |" in md
    # One question per dataset: the bootstrap interval is the change itself (POSS-2 pooled 19/5 over 13/6; by
    # dataset (4 + 3) / 2 over (2.5 + 1.5) / 2).
    assert "| POSS-2 | +75.4% (+75.4% to +75.4%) | +75.0% (+75.0% to +75.0%) |" in md
    assert "| eagle | 66.7 | 50.0 | 50.0 |" in md  # overall conditional pos-acc: hist 4, 4, 2, 2
    summary = json.loads(paths["summary"].read_text())
    assert summary["table"]["eagle"]["d1"]["tau_pooled"] == pytest.approx(2.5)
    html = paths["html"].read_text()
    assert "<table>" in html and "python -m poss_core.bench --unit" in html
    pytest.importorskip("plotly")
    assert "Conditional pos-acc by position" in html and "plotly" in html.lower()


def test_records_survive_a_round_trip_through_json(tmp_path):
    records = known_records()
    paths = report.write_outputs(tmp_path, records, {"preset": "unit"}, DEPTH, plotlyjs="cdn")
    back = bench_records.read_records(paths["records"])
    assert [r.token_ids for r in back] == [r.token_ids for r in records]
    a, b = analysis.aggregate(records, DEPTH), analysis.aggregate(back, DEPTH)
    for m in a["methods"]:
        for s in a["datasets"] + ["overall"]:
            for key in ("tau_pooled", "tokens_per_s", "speedup", "pos_acc", "accept_hist", "draft_ms"):
                assert b["table"][m][s][key] == pytest.approx(a["table"][m][s][key], rel=1e-4, nan_ok=True), (m, s, key)


def test_light_events_keep_the_accepted_path_and_every_depth():
    nodes = [
        DraftNode(10, -1, 1, -0.1, 0.9, 0),
        DraftNode(11, -1, 1, -0.5, 0.6, 0),
        DraftNode(12, 1, 2, -0.7, 0.8, 1),
        DraftNode(13, 0, 2, -0.2, 0.9, 1),
        DraftNode(14, 3, 3, -0.4, 0.8, 2),
    ]
    e = RoundEvent(
        round=1,
        nodes=nodes,
        accepted=[1],
        bonus=3,
        target_probs=[0.1, 0.2, 0.3, 0.4, 0.5],
        feature_deviation=[FeatureDeviation(1.0, 0.1)],
        draft_ms=1,
        verify_ms=1,
        new_tokens=3,
        wall_ms=3,
    )
    light = pooling.light_event(e)
    assert [n.token for n in light.nodes] == [11, 12, 14]  # the path (node 1), then the first node of depths 2, 3
    assert light.accepted == [0] and light.accept_len == 1 and light.target_probs == [0.2, 0.3, 0.5]
    assert [n.parent for n in light.nodes] == [-1, 0, -1]


def test_identity_check_compares_token_for_token():
    a = rec(0, "plain", "d", events([0, 0], 1.0, spec=False), tokens=[1, 2, 3])
    good = rec(0, "eagle", "d", events([2], 1.0), tokens=[1, 2, 3])
    bad = rec(0, "poss2", "d", events([2], 1.0), tokens=[1, 9, 3])
    short = rec(0, "poss3", "d", events([1], 1.0), tokens=[1, 2])
    result = analysis.identity_check([a, good, bad, short])
    assert result["reference"] == "plain" and result["checked"] == 3
    got = {m["method"]: m for m in result["mismatches"]}
    assert set(got) == {"poss2", "poss3"}
    assert got["poss2"]["index"] == 1 and got["poss2"]["got"] == 9 and got["poss2"]["want"] == 2
    assert got["poss3"]["index"] == 2 and got["poss3"]["got"] is None
    assert "IDENTITY CHECK FAILED" in tables.identity_banner(result)


class BrokenDecoder(SpeculativeDecoder):
    """A deliberately broken speculative decoder: its greedy verification returns the wrong bonus token after a few
    rounds (an off-by-one in the vocabulary), the kind of bug that only shows up as changed output."""

    def generate(self, input_ids, cancel=None):
        real = decoder_module.verify_greedy
        calls = {"n": 0}

        def wrong_bonus(tree, logits):
            path, bonus = real(tree, logits)
            calls["n"] += 1
            return path, (bonus + 1) % self.target.vocab_size if calls["n"] == 3 else bonus

        with mock.patch.object(decoder_module, "verify_greedy", wrong_bonus):
            yield from super().generate(input_ids, cancel)


QUESTIONS = [
    runner.Question("mt", 81, "writing", ["Write a haiku about rain.", "Now make it rhyme."]),
    runner.Question("qa", 1, "qa", ["Who wrote Hamlet?"]),
]


def test_identity_check_catches_a_broken_decoder(tiny_target):
    cfg = DecodeConfig(max_new_tokens=12, tree_budget=8)
    draft = random_draft(tiny_target, "eagle", depth=cfg.depth)
    methods = [
        runner.BenchLane("plain", "plain", PlainDecoder(tiny_target, cfg)),
        runner.BenchLane("eagle", "EAGLE", SpeculativeDecoder(tiny_target, draft, cfg)),
        runner.BenchLane("broken", "broken", BrokenDecoder(tiny_target, draft, cfg)),
    ]
    records, skipped = runner.run_questions(methods, tiny_target, QUESTIONS, 1, progress=False)
    assert not skipped and len(records) == 3 * 3
    result = analysis.identity_check(records)
    assert result["checked"] == 6
    assert {m["method"] for m in result["mismatches"]} == {"broken"}
    assert len(result["mismatches"]) == 3  # every turn of the broken decoder
    first = [m for m in result["mismatches"] if m["turn"] == 0 and m["dataset"] == "mt"][0]
    ref = next(r for r in records if r.method == "plain" and r.dataset == "mt" and r.turn == 0)
    # The broken bonus is the 3rd round's last token; the plain target's choice there is not a near-tie.
    assert first["want"] == ref.token_ids[first["index"]]
    assert first["got"] == (first["want"] + 1) % tiny_target.vocab_size
    assert plain_margin(tiny_target, ref.prompt_ids, ref.token_ids, first["index"]) > 1e-3


def test_cli_reports_a_broken_decoder_loudly(tiny_target, eval_files, tmp_path, monkeypatch, capsys):
    real_make = runner.make_lanes

    def with_broken(args, preset, target, names, base_cfg, *rest):
        methods = real_make(args, preset, target, names, base_cfg, *rest)
        draft = random_draft(target, "eagle", depth=base_cfg.depth)
        return methods + [runner.BenchLane("broken", "broken decoder", BrokenDecoder(target, draft, base_cfg))]

    monkeypatch.setattr(runner, "make_lanes", with_broken)
    out = tmp_path / "res"
    rc = cli.main(
        [
            "--preset",
            "tiny-random",
            "--methods",
            "plain",
            "--data",
            str(eval_files / "qa.jsonl"),
            "--max-new-tokens",
            "16",
            "--runs",
            "1",
            "--tree-budget",
            "8",
            "--no-progress",
            "--no-hf-generate",
            "--out",
            str(out),
        ]
    )
    assert rc == 3
    err = capsys.readouterr().err
    assert "IDENTITY CHECK FAILED" in err and "broken" in err
    md = (out / "report.md").read_text()
    assert md.splitlines()[2].startswith("**!!! IDENTITY CHECK FAILED")
    assert "IDENTITY CHECK FAILED" in (out / "report.html").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["identity"]["mismatches"] and all(m["method"] == "broken" for m in summary["identity"]["mismatches"])


@pytest.mark.slow  # the benchmark CLI end to end
def test_cli_on_tiny_random_writes_spec_bench_jsonl(eval_files, tmp_path):
    out = tmp_path / "res"
    rc = cli.main(
        [
            "--preset",
            "tiny-random",
            "--methods",
            "plain,eagle,poss2",
            "--data",
            str(eval_files / "*.jsonl"),
            "--limit",
            "1",
            "--max-new-tokens",
            "12",
            "--runs",
            "2",
            "--tree-budget",
            "8",
            "--no-progress",
            "--plotlyjs",
            "cdn",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["methods"] == ["plain", "plain-hf", "eagle", "poss2"]
    assert summary["datasets"] == ["mt_bench", "qa"]
    assert summary["identity"]["checked"] == 3 * 2 * (2 + 1) and not summary["identity"]["mismatches"]
    records = bench_records.read_records(out / "records.jsonl")
    for method in summary["methods"]:
        rows = [json.loads(line) for line in (out / f"{method}.jsonl").read_text().splitlines()]
        assert [(r["dataset"], r["question_id"]) for r in rows] == [("mt_bench", 81), ("qa", 1)]
        for row in rows:
            assert set(row) >= {"question_id", "category", "choices", "model_id"}
            assert [c["index"] for c in row["choices"]] == [0, 1]  # one choice per run
            n_turns = 2 if row["dataset"] == "mt_bench" else 1
            for c in row["choices"]:
                assert len(c["turns"]) == len(c["new_tokens"]) == len(c["wall_time"]) == n_turns
                assert all(isinstance(t, str) for t in c["turns"])
                assert all(isinstance(n, int) and 1 <= n <= 12 for n in c["new_tokens"])
                assert all(w > 0 for w in c["wall_time"])
                mine = [
                    r
                    for r in records
                    if r.method == method
                    and r.dataset == row["dataset"]
                    and r.question_id == row["question_id"]
                    and r.run == c["index"]
                ]
                assert c["new_tokens"] == [r.new_tokens for r in sorted(mine, key=lambda r: r.turn)]
                # Spec-Bench's accept_lengths: tokens per draft round (accepted + bonus); plain decoding makes 1.
                assert all(a >= 1 for a in c["accept_lengths"])
                if method.startswith("plain"):
                    assert set(c["accept_lengths"]) == {1}
                assert sum(c["accept_lengths"]) + n_turns >= sum(c["new_tokens"])
        # τ in the tables is the mean of Spec-Bench's accept_lengths over all questions and runs.
        all_lens = [a for row in rows for c in row["choices"] for a in c["accept_lengths"]]
        assert summary["table"][method]["overall"]["tau_pooled"] == pytest.approx(sum(all_lens) / len(all_lens))
    md = (out / "report.md").read_text()
    assert "Identity check PASSED" in md and "| mt_bench | qa | overall |" in md


def test_tree_budget_auto_on_tiny_random(eval_files, tmp_path, monkeypatch):
    monkeypatch.setenv("POSS_CACHE_DIR", str(tmp_path / "cache"))  # tiny-random needs nothing from the cache
    out = tmp_path / "res"
    prompts = tmp_path / "my_prompts.txt"
    prompts.write_text("Name three rivers in Europe.\nWrite a haiku about rain.\n")
    args = [
        "--preset",
        "tiny-random",
        "--methods",
        "plain,poss2",
        "--data",
        str(eval_files / "qa.jsonl"),
        "--max-new-tokens",
        "12",
        "--runs",
        "1",
        "--tree-budget",
        "auto",
        "--calibration-prompts",
        "1",
        "--calibration-data",
        str(prompts),
        "--calibration-tokens",
        "12",
        "--max-tree-budget",
        "24",
        "--no-progress",
        "--no-hf-generate",
        "--plotlyjs",
        "cdn",
        "--out",
        str(out),
    ]
    assert cli.main(args) == 0
    curves = json.loads((tmp_path / "cache" / "forward_curves.json").read_text())
    assert len(curves) == 1
    summary = json.loads((out / "summary.json").read_text())
    choice = summary["meta"]["budget_choices"]["poss2"]
    assert summary["meta"]["budgets"]["poss2"] == choice["budget"] and 2 <= choice["budget"] <= 24
    assert "calibration" in choice["profile_source"]
    assert choice["depth"] >= 1 and {r["depth"] for r in choice["table"]} >= {1}  # shallower trees were considered
    assert "on 1 prompt(s)" in choice["profile_source"]
    row = analysis.chosen_row(choice)
    assert row is not None and row["tokens_per_s"] == pytest.approx(choice["expected_tokens_per_s"])
    report = (out / "report.md").read_text()
    assert (
        f"auto (calibrated on first 1 prompts of {prompts}, 12 new tokens each): poss2 → depth {choice['depth']}, "
        in report
        and f"budget {choice['budget']}: expected" in report
    )


def test_auto_expectation_compares_the_chosen_row_with_what_was_measured():
    table = [
        {"depth": 3, "budget": 12, "depth_stop": 0.0, "tau": 2.5, "round_ms": 30.0, "tokens_per_s": 83.3},
        {"depth": 6, "budget": 12, "depth_stop": 0.2, "tau": 2.4, "round_ms": 28.0, "tokens_per_s": 85.7},
        {"depth": 6, "budget": 16, "depth_stop": 0.2, "tau": 2.6, "round_ms": 32.0, "tokens_per_s": 81.3},
    ]
    choice = {"budget": 12, "depth": 6, "depth_stop": 0.2, "plain_tokens_per_s": 50.0, "table": table}
    assert analysis.chosen_row(choice) is table[1]
    agg = {
        "methods": ["plain", "eagle"],
        "table": {
            "plain": {analysis.OVERALL: {"tau_pooled": 1.0, "round_ms": 22.0, "tokens_per_s": 40.0}},
            "eagle": {analysis.OVERALL: {"tau_pooled": 2.2, "round_ms": 35.0, "tokens_per_s": 55.0}},
        },
    }
    meta = {"budget_choices": {"eagle": choice}, "labels": {"eagle": "EAGLE"}}
    (row,) = analysis.auto_expectations(agg, meta)
    assert row["expected_tau"] == 2.4 and row["tau"] == 2.2 and row["expected_round_ms"] == 28.0
    assert row["rounds_only_tokens_per_s"] == pytest.approx(1000 * 2.2 / 35.0) and row["tokens_per_s"] == 55.0
    md = "\n".join(tables.auto_expectation_section(agg, meta))
    assert "| EAGLE | 2.40 | 2.20 | 28.0 | 35.0 | 85.7 | 62.9 | 55.0 |" in md
    assert "| Plain decoding (target only) | 1.00 | 1.00 | 20.0 | 22.0 | 50.0 | 45.5 | 40.0 |" in md
    assert tables.auto_expectation_section(agg, {}) == []


def test_calibration_prompts_are_never_what_is_measured(eval_files, tmp_path):
    """`auto` calibrates on the built-in prompts or the user's own; eval/ files and the measured files are refused."""
    parser = cli.build_parser()

    def texts(*extra):
        return runner.calibration_texts(parser.parse_args(["--data", str(eval_files / "qa.jsonl"), *extra]))

    assert texts("--calibration-prompts", "2") == list(CALIBRATION_PROMPTS[:2])
    mine = tmp_path / "mine.jsonl"
    mine.write_text(json.dumps({"prompt": "Plan a picnic."}) + "\n" + json.dumps({"prompt": "Sort a list."}) + "\n")
    assert texts("--calibration-data", str(mine)) == ["Plan a picnic.", "Sort a list."]
    with pytest.raises(PossError, match="--data measures"):
        texts("--calibration-data", str(eval_files / "qa.jsonl"))
    (eval_files / "held_back.jsonl").write_text(mine.read_text())  # not measured, but in an eval/ folder
    with pytest.raises(PossError, match="evaluation set"):
        texts("--calibration-data", str(eval_files / "held_back.jsonl"))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    with pytest.raises(PossError, match="holds no prompts"):
        texts("--calibration-data", str(empty))
    with pytest.raises(PossError, match="out of range"):
        texts("--calibration-prompts", "0")


def test_near_ties_are_told_from_real_mismatches():
    """A divergence where the plain target's logits nearly tie is rounding; a later turn of that conversation has
    another context and follows it; a divergence with a clear margin stays a failure."""
    ms = [
        {
            "method": "eagle",
            "run": 0,
            "dataset": "d",
            "question_id": 1,
            "turn": 0,
            "index": 5,
            "got": 7,
            "want": 8,
            "margin": 0.125,
        },
        {"method": "eagle", "run": 0, "dataset": "d", "question_id": 1, "turn": 1, "index": 2, "got": 3, "want": 4},
        {
            "method": "poss2",
            "run": 0,
            "dataset": "d",
            "question_id": 2,
            "turn": 0,
            "index": 9,
            "got": 1,
            "want": 2,
            "margin": 4.0,
        },
    ]
    identity = analysis.classify_mismatches({"reference": "plain", "checked": 6, "mismatches": ms}, 0.5, "bfloat16")
    assert [m["method"] for m in identity["mismatches"]] == ["poss2"]
    assert [m["kind"] for m in identity["near_ties"]] == ["near-tie", "after an earlier turn's divergence"]
    assert "IDENTITY CHECK FAILED" in tables.identity_banner(identity)
    only_ties = analysis.classify_mismatches(
        {"reference": "plain", "checked": 6, "mismatches": ms[:2]}, 0.5, "bfloat16"
    )
    banner = tables.identity_banner(only_ties)
    assert banner.startswith("Identity check PASSED up to rounding: 4 of 6") and "bfloat16" in banner
    strict = analysis.classify_mismatches({"reference": "plain", "checked": 6, "mismatches": ms[:2]}, 0.01, "float32")
    assert len(strict["mismatches"]) == 2 and not strict["near_ties"]


def test_other_precision_plain_is_a_speed_baseline_not_an_identity_reference():
    plain = rec(0, "plain", "d", events([0, 0], 1.0, spec=False), tokens=[1, 2, 3])
    fp32 = rec(0, "plain-float32", "d", events([0, 0], 0.5, spec=False), tokens=[1, 9, 3])
    eagle = rec(0, "eagle", "d", events([2], 1.0), tokens=[1, 2, 3])
    assert analysis.identity_check([plain, fp32, eagle])["mismatches"] == []
    agg = analysis.aggregate([plain, fp32, eagle], DEPTH)
    assert agg["baseline"][analysis.OVERALL]["method"] == [
        "plain-float32"
    ]  # the faster plain decoder sets the speed-up
    assert "plain-float32" not in agg["vs_eagle"]


def test_overhead_measurement_times_the_lm_head_both_ways(tiny_target):
    draft = random_draft(tiny_target, "eagle", depth=4)
    r = overhead.measure_overhead(
        tiny_target, draft, DecodeConfig(depth=4, top_k=4, tree_budget=16), rounds=6, warmup_rounds=1
    )
    assert r["rounds"] == 6 and r["all_rows"] == pytest.approx(r["nodes"] + 1)
    assert 1 <= r["head_rows"] < r["all_rows"] and r["head_ms"] > 0 and r["all_head_ms"] > 0
    assert 0 < r["engine_ms"] < r["wall_ms"] and r["verify_ms"] > 0
    # The draft's split: its layers and head are model time inside the draft's time, the rest is its bookkeeping.
    assert 0 < r["draft_layers_ms"] and 0 < r["draft_head_ms"]
    assert r["draft_layers_ms"] + r["draft_head_ms"] < r["draft_ms"]
    assert "forward" not in tiny_target.__dict__ and "logits" not in tiny_target.__dict__  # the wrappers are gone
    assert "run_specialist" not in draft.__dict__ and "head_logits" not in draft.__dict__


def test_linear_ab_times_both_ways_on_the_drafts_weights(tiny_target):
    """`bench linear`: every decoding weight of the draft at each row count, both ways, with their outputs' gap."""
    draft = random_draft(tiny_target, "poss2", depth=4)
    rows = overhead.linear_ab(draft, rows=(1, 3), reps=3)
    assert [r["weight"] for r in rows[::2]] == ["fc", "q/k/v", "o", "gate/up", "down", "draft head"]
    assert all(r["plain_us"] > 0 and r["packed_us"] > 0 for r in rows)
    assert all(not r["packed"] and r["max_diff"] == 0.0 for r in rows)  # fp32 is not packed: the same F.linear


def test_report_rebuilds_a_smaller_run_from_a_larger_ones_records(tmp_path):
    """`bench report FOLDER --limit N --out OTHER`: the first N questions of each dataset, tables recomputed."""
    records = [
        rec(0, m, d, events(lens, 1.0, spec=m != "plain"), qid=q)
        for d in ("d1", "d2")
        for q in (7, 3, 5)
        for m, lens in (("plain", [0] * 4), ("eagle", [q % 4, 1]))
    ]
    kept = bench_records.first_questions(records, 2)
    assert {(r.dataset, r.question_id) for r in kept} == {("d1", 7), ("d1", 3), ("d2", 7), ("d2", 3)}
    identity = {
        "reference": "plain",
        "checked": 6,
        "near_ties": [],
        "mismatches": [
            {"method": "eagle", "run": 0, "dataset": "d1", "question_id": 5, "turn": 0, "index": 2, "got": 9, "want": 5}
        ],
    }
    report.write_outputs(tmp_path / "big", records, {"preset": "unit"}, DEPTH, identity, plotlyjs="cdn")
    with pytest.raises(PossError, match="--out"):
        rebuild.report_main([str(tmp_path / "big"), "--limit", "2"])
    assert (
        rebuild.report_main(
            [str(tmp_path / "big"), "--limit", "2", "--out", str(tmp_path / "small"), "--plotlyjs", "cdn"]
        )
        == 0
    )
    small = json.loads((tmp_path / "small" / "summary.json").read_text())
    # eagle's accept lengths on questions 7 and 3 of both datasets: [3, 1] and [3, 1] -> τ (4 + 2) / 2 = 3
    assert small["table"]["eagle"]["overall"]["tau_pooled"] == pytest.approx(3.0)
    # question 5's mismatch is not among the kept questions; 4 eagle turns were compared
    assert small["identity"]["mismatches"] == [] and small["identity"]["checked"] == 4
    assert "first 2 questions of each dataset" in (tmp_path / "small" / "report.md").read_text()


@pytest.mark.slow  # a whole benchmark run: the quick tier stays under 90 s
def test_questions_over_the_prompt_cap_are_skipped_not_fatal(tmp_path, monkeypatch, tiny_target, capsys):
    # A 1e6-character first question used to abort the whole benchmark in its warm-up, and the 2,048-token prompt
    # cap (LIMITS) was never applied: each such turn is now skipped with its reason, and the rest is measured.
    from poss_core.decoding import config as config_module
    from poss_core.decoding.decoder import encode_prompt

    short = "Say hi."
    cap = len(encode_prompt(tiny_target.tokenizer, short)) + 5
    monkeypatch.setattr(config_module, "MAX_PROMPT_TOKENS", cap)  # a small cap, so a tiny model's question passes it
    data = tmp_path / "eval"
    data.mkdir()
    rows = [
        {"question_id": 1, "turns": ["x " * 500_000]},
        {"question_id": 2, "turns": ["y" * (cap + 10)]},
        {"question_id": 3, "turns": [short]},
    ]
    (data / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "res"
    rc = cli.main(
        [
            "--preset",
            "tiny-random",
            "--methods",
            "plain,eagle",
            "--data",
            str(data / "qa.jsonl"),
            "--max-new-tokens",
            "4",
            "--tree-budget",
            "8",
            "--no-progress",
            "--no-hf-generate",
            "--plotlyjs",
            "cdn",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 0, err
    records = bench_records.read_records(out / "records.jsonl")
    assert {r.question_id for r in records} == {3} and {r.method for r in records} == {"plain", "eagle"}
    assert "skipped qa/1 turn 0 (plain): prompt has 1000000 characters" in err
    assert "skipped qa/2 turn 0 (plain): the prompt has " in err and f"tokens: the most is {cap}." in err


def test_a_benchmark_with_no_question_under_the_cap_says_so(tmp_path):
    data = tmp_path / "eval"
    data.mkdir()
    (data / "qa.jsonl").write_text(json.dumps({"question_id": 1, "turns": ["x" * 40_000]}) + "\n")
    r = run_main(
        cli.main,
        [
            "--preset",
            "tiny-random",
            "--methods",
            "plain",
            "--data",
            str(data / "qa.jsonl"),
            "--max-new-tokens",
            "4",
            "--no-progress",
            "--no-hf-generate",
            "--out",
            str(tmp_path / "res"),
        ],
    )
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 2 and len(lines) == 1 and "no question of --data fits the prompt cap" in lines[0]
