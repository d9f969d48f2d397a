"""Quantized targets: `auto` picks sensibly, every bitsandbytes layer gives a row the same result alone or in a
batch, and verification stays lossless w.r.t. the quantized target (identical to its plain decoding at T=0)."""

import pytest
import torch

from poss_core.base.errors import ConfigError
from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import PlainDecoder, SpeculativeDecoder, encode_prompt
from poss_core.models.loading import load_preset_target, random_draft
from poss_core.models.numerics import (
    MISMATCH,
    NEAR_TIE,
    classify_divergence,
    first_difference,
    numerics_of,
    plain_margin,
    target_numerics,
)
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

    cfg = LlamaConfig(
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
    )
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


def bnb_layers(target) -> list[torch.nn.Module]:
    return [m for m in target.model.modules() if type(m).__name__ in ("Linear8bitLt", "Linear4bit")]


@pytest.mark.parametrize("mode", ["8bit", "4bit"])
def test_quantized_layers_keep_rows_apart_and_the_compute_dtype(saved_tiny, mode):
    """What greedy identity rests on: a row's output does not depend on the other rows of a batch of tree rows, and
    carries no rounding coarser than the compute dtype's. LLM.int8's outlier split (outlier columns picked from the
    whole batch) breaks the first; the fused 4-bit CPU kernel (activations rounded to bf16) breaks the second."""
    import bitsandbytes.functional as bnbf

    target = load_preset_target(saved_tiny, quantization=mode, device="cpu")
    layers = bnb_layers(target)
    assert layers
    g = torch.Generator().manual_seed(0)
    for layer in layers:
        x = torch.randn(7, layer.in_features, generator=g)
        x[0, 3] = 40.0  # an outlier feature in one row only (LLM.int8's threshold is 6)
        reference = None
        if mode == "4bit":  # the weights as the layer holds them, multiplied in float32
            w = bnbf.dequantize_4bit(layer.weight.data, layer.weight.quant_state).float()
            reference = x @ w.t()
        with torch.inference_mode():
            batched = layer(x)
            alone = torch.cat([layer(x[i : i + 1]) for i in range(len(x))])
        if mode == "8bit":  # integer arithmetic on rows quantized one by one: the same bits
            assert torch.equal(batched, alone), "a row's result depends on the other rows"
        else:  # float32 accumulation order may differ with the row count, by far less than a bf16 rounding
            scale = reference.abs().max()
            assert (batched - alone).abs().max() <= 1e-5 * scale
            assert (batched - reference).abs().max() <= 1e-5 * scale, "not computed in float32"


def test_numerics_say_what_identity_each_target_allows():
    for quant in ("none", "4bit"):
        n = target_numerics("cpu", torch.float32, quant)
        assert n.exact and "exact" in n.why
    int8 = target_numerics("cpu", torch.float32, "8bit")  # activations rounded to int8: tiny differences grow
    assert (
        not int8.exact
        and int8.tolerance == 2.0
        and "batch dependence" in int8.why
        and int8.tie != "a rounding near-tie"
    )
    low = target_numerics("cpu", torch.bfloat16, "4bit")
    assert not low.exact and low.tolerance == 0.5 and "near-tie" in low.why
    gpu = target_numerics("cuda", torch.bfloat16, "4bit")
    assert not gpu.exact and "NF4 kernel" in gpu.why
    assert numerics_of({"device": "cuda:0 (H200)", "dtype": "bfloat16", "quantization": "4bit"}) == gpu
    assert numerics_of({"device": "cpu (x86_64, 2 threads)", "dtype": "float32"}).exact


def test_divergences_are_classified_by_margin_and_numerics():
    bf16 = target_numerics("cpu", torch.bfloat16, "none")
    fp32 = target_numerics("cpu", torch.float32, "4bit")
    assert classify_divergence(4, 0.2, bf16).kind == NEAR_TIE
    assert classify_divergence(4, -0.2, bf16).kind == NEAR_TIE  # the margin's sign says which token plain preferred
    real = classify_divergence(4, 3.0, bf16)
    assert real.kind == MISMATCH and "not a rounding near-tie" in real.reason
    assert classify_divergence(4, 0.2, fp32).kind == MISMATCH  # fp32 rounds within far less than 0.2
    assert classify_divergence(4, 0.001, fp32).kind == NEAR_TIE
    assert classify_divergence(4, None, bf16).kind == NEAR_TIE  # a replay: the benefit of the doubt, said so
    assert classify_divergence(4, None, fp32).kind == MISMATCH
    int8 = target_numerics("cpu", torch.float32, "8bit")
    noise = classify_divergence(4, 1.2, int8)
    assert noise.kind == NEAR_TIE and noise.tie == "int8 rounding noise" and "batch dependence" in noise.reason
    assert classify_divergence(4, 5.0, int8).kind == MISMATCH


@pytest.mark.slow
@pytest.mark.usefixtures("real_model_threads")
@pytest.mark.parametrize("mode", ["8bit", "4bit"])
def test_quantized_default_model_speculative_equals_plain(mode):
    """The cases that parted from plain decoding before (4-bit: both drafts stopped early after "the City of Light";
    8-bit: "Write a haiku" differed at the first token). 4-bit now equals plain decoding of the same quantized
    target token for token; 8-bit may still part, but only where plain's margin is within int8's rounding noise."""
    from poss_core.models.presets import DEFAULT_PRESET, get_preset
    from poss_core.runtime import methods

    preset = get_preset(DEFAULT_PRESET)
    target = load_preset_target(preset.target, quantization=mode, device="cpu", dtype=torch.float32)
    numerics = target.numerics
    assert target.quantization == mode and numerics.exact == (mode == "4bit")
    cfg = methods.decode_config(preset, max_new_tokens=40)
    for prompt in ["What is the capital of France?", "Write a haiku about the sea."]:
        ids = encode_prompt(target.tokenizer, prompt)
        plain = list(PlainDecoder(target, cfg).generate(ids))[-1]
        for name in ("eagle", "poss2"):
            method = methods.get_method(preset, name)
            draft = methods.load_draft(method, target, cfg.depth)
            spec = list(methods.build_decoder(method, target, cfg, draft).generate(ids))[-1]
            assert spec.stats["tau"] > 1.5  # the drafts, trained on the full-precision target, still get accepted
            if numerics.exact:  # 4-bit: identical, token for token
                assert spec.token_ids == plain.token_ids, f"{mode} {name} on {prompt!r}"
                continue
            i = first_difference(spec.token_ids, plain.token_ids)  # 8-bit: identical, or parted at int8 noise
            if i is not None:
                margin = plain_margin(target, ids, plain.token_ids, i, spec.token_ids[i])
                assert classify_divergence(i, margin, numerics).kind == NEAR_TIE, (mode, name, prompt, i, margin)
