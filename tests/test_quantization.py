"""Quantized targets: `auto` picks sensibly, and verification stays lossless w.r.t. the quantized target."""

import pytest
import torch

from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import PlainDecoder, SpeculativeDecoder, encode_prompt
from poss_core.errors import ConfigError
from poss_core.models.loading import load_preset_target, random_draft
from poss_core.models.quantization import GiB, choose_quantization, estimate_target_bytes
from poss_core.models.tiny import tiny_config


def test_auto_picks_by_memory_budget():
    need = 16 * GiB
    assert choose_quantization("auto", "cuda", need, 80 * GiB).mode == "none"
    assert choose_quantization("auto", "cuda", need, 12 * GiB).mode == "8bit"
    assert choose_quantization("auto", "cuda", need, 6 * GiB).mode == "4bit"
    with pytest.raises(ConfigError, match="does not fit"):
        choose_quantization("auto", "cuda", need, 2 * GiB)
    assert choose_quantization("auto", "cpu", need, None).mode == "none"
    assert choose_quantization("4bit", "cpu", need, None).mode == "4bit"
    with pytest.raises(ConfigError, match="quantization='3bit'"):
        choose_quantization("3bit", "cuda", need, None)


def test_footprint_estimate_of_an_8b_llama():
    from transformers import LlamaConfig

    cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8)
    assert 14.8 * GiB < estimate_target_bytes(cfg) < 15.2 * GiB  # Llama-3-8B: ~8.03B params in bf16
    assert estimate_target_bytes(tiny_config()) > 0


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory, tiny_target):
    folder = tmp_path_factory.mktemp("tiny_model")
    tiny_target.model.save_pretrained(folder)
    tiny_target.tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.mark.parametrize("mode", ["8bit", "4bit"])
def test_quantized_target_greedy_equivalence_on_cpu(saved_tiny, mode):
    target = load_preset_target(saved_tiny, quantization=mode, device="cpu")
    assert target.quantization == mode
    layer = target.model.model.layers[0].self_attn.q_proj
    assert type(layer).__name__ in ("Linear8bitLt", "Linear4bit")
    draft = random_draft(target, "poss2")
    assert draft.fc.weight.dtype == torch.float32  # the draft stays unquantized
    for prompt in ["Quantized targets keep verification lossless.", "Another prompt"]:
        ids = encode_prompt(target.tokenizer, prompt)
        cfg = DecodeConfig(max_new_tokens=20, depth=4, top_k=4, tree_budget=16)
        spec = list(SpeculativeDecoder(target, draft, cfg).generate(ids))[-1]
        plain = list(PlainDecoder(target, cfg).generate(ids))[-1]
        assert spec.token_ids == plain.token_ids
