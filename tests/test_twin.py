"""The paper-scale twin: Llama-3-8B-Instruct's configuration without its weights, its drafts in the released layouts,
and the shrunken twin the CPU runs end to end (decoding, the app's /compare, scripts/twin_check.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import run_main, trained_draft

from poss_core.base.errors import ConfigError, ModelLoadError
from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import encode_prompt
from poss_core.models.checkpoint import load_draft, save_draft
from poss_core.models.draft import DraftSpec
from poss_core.models.loading import load_preset_target
from poss_core.models.presets import get_preset
from poss_core.models.quantization import estimate_target_bytes
from poss_core.models.twin import FULL, TINY, twin_config, twin_tokenizer
from poss_core.rounds.events import DecodeSummary
from poss_core.runtime import methods

ROOT = Path(__file__).resolve().parents[1]
LAYOUTS = {"eagle": 1, "poss1": 7, "poss2": 4, "poss3": 4}  # released Llama-3 drafts: layers (forward_num_total / n)


@pytest.fixture(scope="module")
def tiny_twin():
    return load_preset_target(get_preset(TINY).target, quantization="none")


def _tokens(decoder, ids) -> list[int]:
    return next(x for x in decoder.generate(ids) if isinstance(x, DecodeSummary)).token_ids


def test_the_8b_twin_has_llama3_8b_instructs_configuration_and_is_never_built_on_a_cpu():
    c = twin_config(FULL)
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads) == (4096, 32, 32, 8)
    assert (c.intermediate_size, c.vocab_size, c.max_position_embeddings) == (14336, 128256, 8192)
    assert c.rope_parameters["rope_theta"] == 500000.0 and c.rms_norm_eps == 1e-5 and not c.tie_word_embeddings
    assert (c.bos_token_id, c.eos_token_id) == (128000, [128001, 128009])
    assert 8.0e9 < estimate_target_bytes(c, 1.0) < 8.1e9  # parameters: Llama-3-8B's 8.03B
    with pytest.raises(ModelLoadError, match="CUDA GPU"):
        load_preset_target(get_preset(FULL).target, device="cpu", dtype=torch.bfloat16)


def test_the_twin_tokenizer_covers_the_whole_vocabulary_with_llama3s_special_ids():
    tok = twin_tokenizer(128256)
    assert len(tok) == 128256 and tok.bos_token_id == 128000 and tok.eos_token_id == 128009
    assert tok.convert_tokens_to_ids(["<|start_header_id|>", "<|end_header_id|>"]) == [128006, 128007]
    assert all(tok.decode([i]) for i in (100, 5000, 127999))  # every id has a text, so random output shows
    ids = encode_prompt(tok, "Hi\n\nthere")
    assert ids[:2] == [128000, 128006] and tok.decode(ids).endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert "Hi\n\nthere" in tok.decode(ids)


def test_the_tiny_twin_loads_its_drafts_in_both_released_layouts(tiny_twin):
    preset = get_preset(TINY)
    assert tiny_twin.config.num_key_value_heads * 4 == tiny_twin.config.num_attention_heads  # GQA as 32:8
    for name, layers in LAYOUTS.items():
        method = methods.get_method(preset, name)
        assert not method.trained  # random weights: the app and bench say "untrained"
        draft = methods.load_draft(method, tiny_twin, preset.depth)
        assert len(draft.layers) == layers and draft.fc.bias is None  # Llama-3 drafts: "bias": false


@pytest.mark.parametrize("spec", [DraftSpec("eagle", 1, bias=False), DraftSpec("poss", 4, 2, bias=False)])
def test_a_draft_in_a_released_layout_round_trips_and_decodes_as_plain(tmp_path, tiny_twin, spec):
    """A draft trained on the tiny twin (so rounds accept tokens), saved with its embedding as the released
    checkpoints are, loads through the checkpoint path and decodes token for token as plain decoding."""
    draft = trained_draft(tiny_twin, spec, steps=40, positions=6 if spec.method == "poss" else 1)
    folder = save_draft(draft, tmp_path / spec.method, tiny_twin, dtype=torch.float32, include_embedding=True)
    assert json.loads((folder / "config.json").read_text())["bias"] is False
    loaded = load_draft(folder, tiny_twin, positions_per_specialist=spec.positions_per_specialist)
    assert len(loaded.layers) == spec.num_layers
    ids = encode_prompt(tiny_twin.tokenizer, "Tell me about the sea.")
    cfg = DecodeConfig(max_new_tokens=24, depth=6, top_k=4, tree_budget=16)
    plain = _tokens(methods.build_decoder(methods.PLAIN_METHODS["plain"], tiny_twin, cfg), ids)
    method = methods.draft_method(spec.method, methods.get_method(get_preset(TINY), "eagle").draft)
    spec_out = list(methods.build_decoder(method, tiny_twin, cfg, loaded).generate(ids))[-1]
    assert spec_out.token_ids == plain
    assert spec_out.stats["tau"] > 1.0  # the trained draft's tokens were accepted: the tree paths ran


def test_a_4bit_tiny_twin_decodes_as_its_plain_decoding():
    target = load_preset_target(get_preset(TINY).target, quantization="4bit")
    assert target.quantization == "4bit" and type(target.model.model.layers[0].mlp.up_proj).__name__ == "Linear4bit"
    assert target.lm_head.weight.dtype == torch.float32  # the LM head stays in the compute dtype
    ids = encode_prompt(target.tokenizer, "Hello")
    cfg = DecodeConfig(max_new_tokens=12, depth=4, top_k=4, tree_budget=12)
    preset = get_preset(TINY)
    plain = _tokens(methods.build_decoder(methods.PLAIN_METHODS["plain"], target, cfg), ids)
    method = methods.get_method(preset, "poss2")
    draft = methods.load_draft(method, target, cfg.depth)
    assert _tokens(methods.build_decoder(method, target, cfg, draft), ids) == plain
    with pytest.raises(ConfigError, match="none or 4bit"):
        load_preset_target(preset.target, quantization="8bit")


def test_the_tiny_twin_runs_through_the_apps_compare_api():
    from app.actions import api

    out = api.compare_api(
        "Hello there", ["plain", "eagle", "poss2"], preset=TINY, max_new_tokens=8, depth=4, top_k=4, tree_budget=16
    )
    assert out["preset"] == TINY and [lane["method"] for lane in out["lanes"]] == ["plain", "eagle", "poss2"]
    for lane in out["lanes"][1:]:
        assert lane["identical_to_plain"] is True, lane
        assert lane["summary"]["new_tokens"] == out["lanes"][0]["summary"]["new_tokens"] == 8


def test_twin_check_writes_its_report_on_the_tiny_twin(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    import twin_check

    quick = ["--tokens", "3", "--budgets", "8", "--repeats", "1", "--no-progress"]
    r = run_main(twin_check.main, ["--preset", TINY, "--out", str(tmp_path), *quick])
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "twin_check.json").read_text())
    (none, four) = report["modes"]
    assert (none["quantization"], four["quantization"]) == ("none", "4bit")
    assert set(none["verify_ms_by_tree_size"]) == {"1", "8", "60"}  # plain's one row, the asked size, the preset's
    assert all(v["total_ms"] >= v["forward_ms"] > 0 for v in none["verify_ms_by_tree_size"].values())
    assert all(len(d["draft_ms_by_depth"]) == 6 for d in none["drafts"].values())
    assert {d["layers"] for d in none["drafts"].values()} == {1, 7, 4}
    assert none["identity"]["identical"] == none["identity"]["checked"] == 4  # float32 on a CPU: exact
    assert [row["method"] for row in none["projection"]] == ["EAGLE-2", "HASS", "POSS-1", "POSS-3"]
    assert abs(none["projection"][1]["published_tau"] - 4.18) < 0.01  # HASS: 1 + Σ Π pos-acc
    md = (tmp_path / "twin_check.md").read_text()
    assert "(projected)" in md and "Projection (not a measurement)" in md


def test_twin_check_on_the_8b_twin_without_cuda_exits_2_saying_why(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the 8B twin would be built")
    r = subprocess.run(
        [sys.executable, "scripts/twin_check.py", "--preset", FULL, "--out", str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and "CUDA GPU" in r.stderr and "Nothing was run" in r.stderr
    assert not (tmp_path / "out").exists()
