"""The generate CLI: streamed text and the --jsonl protocol."""

import json

from helpers import run_main

from poss_core.generate import main as generate_main

ROUND_KEYS = {
    "round",
    "nodes",
    "accepted",
    "bonus",
    "target_probs",
    "feature_deviation",
    "draft_ms",
    "verify_ms",
    "new_tokens",
}


def run(*args):
    return run_main(generate_main, ["--preset", "tiny-random", *args])


def test_jsonl_rounds_then_summary():
    r = run("--draft", "random:poss2", "--prompt", "Hello there", "--max-new-tokens", "12", "--jsonl")
    assert r.returncode == 0, r.stderr
    objs = [json.loads(line) for line in r.stdout.splitlines()]
    rounds, summary = objs[:-1], objs[-1]["summary"]
    assert rounds and all(ROUND_KEYS <= set(o) for o in rounds)
    node_keys = {"token", "parent", "depth", "score", "draft_prob", "specialist"}
    assert all(node_keys == set(n) for o in rounds for n in o["nodes"])
    assert {"tau", "pos_acc", "pos_rate", "accept_hist", "tokens_per_s", "new_tokens", "text"} <= set(summary)
    assert summary["new_tokens"] == rounds[-1]["new_tokens"] == 12


def test_plain_text_stream_and_summary_line():
    r = run("--method", "plain", "--prompt", "Hello there", "--max-new-tokens", "8")
    assert r.returncode == 0, r.stderr
    assert "[plain] 8 tokens" in r.stderr and "tau 1.00" in r.stderr
    assert len(r.stdout) > 0


def test_prompt_lookup_and_assisted_print_the_same_text_as_plain_decoding():
    prompt = "one two three one two three one two"
    plain = run("--method", "plain", "--prompt", prompt, "--max-new-tokens", "16")
    for method in ("pld", "assisted"):  # tiny-random names a one-layer assistant
        r = run("--method", method, "--prompt", prompt, "--max-new-tokens", "16", "--jsonl")
        assert r.returncode == 0, r.stderr
        summary = json.loads(r.stdout.splitlines()[-1])["summary"]
        assert summary["text"] == plain.stdout and summary["new_tokens"] == 16


def test_assisted_without_an_assistant_is_refused_before_loading():
    r = run_main(generate_main, ["--target", "some/model", "--method", "assisted", "--prompt", "Hi"])
    assert r.returncode != 0 and "needs --preset" in r.stderr
