"""Draft checkpoints: the released EAGLE/HASS/POSS layout, our own layout, and refusals."""

import json

import pytest
import torch
from helpers import greedy_reference
from safetensors.torch import save_file

from poss_core.base.errors import CheckpointError
from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import SpeculativeDecoder, encode_prompt
from poss_core.models.checkpoint import load_draft, save_draft, target_fingerprint
from poss_core.models.tiny import tiny_target

H, INTER, HEADS, KV, HEAD_DIM = 64, 128, 4, 2, 16


def released_state(vocab: int, layers: int, bias: bool, seed: int = 0) -> dict[str, torch.Tensor]:
    """A state dict with exactly the key names of released EAGLE/HASS/POSS drafts."""
    g = torch.Generator().manual_seed(seed)

    def w(*shape):
        return torch.randn(*shape, generator=g) * 0.05

    state = {"embed_tokens.weight": w(vocab, H), "fc.weight": w(H, 2 * H)}
    if bias:
        state["fc.bias"] = w(H)
    for i in range(layers):
        p = f"layers.{i}."
        state.update(
            {
                p + "self_attn.q_proj.weight": w(HEADS * HEAD_DIM, H),
                p + "self_attn.k_proj.weight": w(KV * HEAD_DIM, H),
                p + "self_attn.v_proj.weight": w(KV * HEAD_DIM, H),
                p + "self_attn.o_proj.weight": w(H, HEADS * HEAD_DIM),
                p + "mlp.gate_proj.weight": w(INTER, H),
                p + "mlp.up_proj.weight": w(INTER, H),
                p + "mlp.down_proj.weight": w(H, INTER),
                p + "post_attention_layernorm.weight": torch.ones(H),
            }
        )
    return state


def write_released(folder, vocab, layers, llama3: bool, fmt: str, state=None):
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": H,
        "intermediate_size": INTER,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV,
        "vocab_size": vocab,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "rope_theta": 500000.0 if llama3 else 10000.0,
        "num_hidden_layers": 1,
    }
    if llama3:
        config["bias"] = False  # Llama-3 drafts say so; Llama-2 drafts have no key and a bias
    (folder / "config.json").write_text(json.dumps(config))
    state = state if state is not None else released_state(vocab, layers, bias=not llama3)
    if fmt == "bin":
        torch.save(state, folder / "pytorch_model.bin")
    else:
        save_file(state, str(folder / "model.safetensors"))
    return folder


@pytest.mark.parametrize(
    "llama3,fmt,layers,n", [(True, "safetensors", 3, 2), (False, "bin", 1, 1), (False, "safetensors", 2, 3)]
)
def test_released_layout_loads_and_decodes_losslessly(tmp_path, tiny_target, llama3, fmt, layers, n):
    folder = write_released(tmp_path / "draft", tiny_target.vocab_size, layers, llama3, fmt)
    draft = load_draft(folder, tiny_target, positions_per_specialist=n)
    assert draft.num_specialists == layers
    assert draft.spec.bias is (not llama3)
    assert (draft.fc.bias is None) is llama3
    assert draft.spec.positions_per_specialist == n
    assert draft.config.rope_parameters["rope_theta"] == (500000.0 if llama3 else 10000.0)
    # The checkpoint's own embedding is used (released drafts carry it).
    state = released_state(tiny_target.vocab_size, layers, bias=not llama3)
    assert torch.allclose(draft.embed_tokens.weight, state["embed_tokens.weight"])
    ids = encode_prompt(tiny_target.tokenizer, "Check the released layout.")
    out = list(SpeculativeDecoder(tiny_target, draft, DecodeConfig(max_new_tokens=25)).generate(ids))[-1]
    assert out.token_ids == greedy_reference(tiny_target, ids, 25)


def test_a_saved_label_names_the_draft_where_its_layout_cannot(tmp_path, tiny_target, trained_drafts):
    """The hass control has EAGLE's layout: evaluation reports it under the label it was saved with."""
    from poss_core.models.checkpoint import stored_label

    eagle = trained_drafts["eagle"]
    plain = save_draft(eagle, tmp_path / "eagle", tiny_target)
    hass = save_draft(eagle, tmp_path / "hass", tiny_target, extra_meta={"label": "HASS control"})
    assert stored_label(plain) == eagle.spec.label and stored_label(hass) == "HASS control"
    assert stored_label(tmp_path / "nothing-here") is None


def test_our_layout_round_trips_with_metadata(tmp_path, tiny_target, trained_drafts):
    draft = trained_drafts["poss2"]
    folder = save_draft(draft, tmp_path / "ours", tiny_target, dtype=torch.float32, extra_meta={"training": {"x": 1}})
    meta = json.loads((folder / "poss_draft.json").read_text())
    assert meta["method"] == "poss" and meta["positions_per_specialist"] == 2
    assert meta["target_fingerprint"] == target_fingerprint(tiny_target)
    loaded = load_draft(folder, tiny_target)
    for k, v in draft.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    ids = encode_prompt(tiny_target.tokenizer, "Round trip")
    a = list(SpeculativeDecoder(tiny_target, draft, DecodeConfig(max_new_tokens=20)).generate(ids))
    b = list(SpeculativeDecoder(tiny_target, loaded, DecodeConfig(max_new_tokens=20)).generate(ids))
    assert [e.accepted for e in a[:-1]] == [e.accepted for e in b[:-1]]
    assert a[-1].token_ids == b[-1].token_ids


def test_draft_vocabulary_is_saved_and_used(tmp_path, tiny_target):
    from helpers import trained_draft

    from poss_core.models.draft import DraftSpec

    vocab = torch.arange(0, 40)
    draft = trained_draft(tiny_target, DraftSpec("eagle", 1), steps=30, draft_vocab=vocab)
    assert draft.head_weight.shape[0] == 40
    loaded = load_draft(save_draft(draft, tmp_path / "dv", tiny_target), tiny_target)
    assert torch.equal(loaded.draft_vocab.cpu(), vocab)
    ids = encode_prompt(tiny_target.tokenizer, "small vocabulary")
    out = list(SpeculativeDecoder(tiny_target, loaded, DecodeConfig(max_new_tokens=20)).generate(ids))
    assert all(n.token < 40 for e in out[:-1] for n in e.nodes)
    assert out[-1].token_ids == greedy_reference(tiny_target, ids, 20)  # verification still uses the full vocabulary


def test_refuses_another_targets_sizes(tmp_path, tiny_target):
    folder = write_released(tmp_path / "big", tiny_target.vocab_size + 5, 1, True, "safetensors")
    with pytest.raises(
        CheckpointError, match=f"vocabulary of {tiny_target.vocab_size + 5} tokens.*has {tiny_target.vocab_size}"
    ):
        load_draft(folder, tiny_target)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["hidden_size"], cfg["vocab_size"] = 128, tiny_target.vocab_size
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="hidden size 128 but the target .* has 64"):
        load_draft(folder, tiny_target)


def test_refuses_missing_and_unexpected_keys(tmp_path, tiny_target):
    state = released_state(tiny_target.vocab_size, 2, bias=False)
    del state["layers.1.mlp.up_proj.weight"]
    state["lm_head.weight"] = torch.zeros(3)
    folder = write_released(tmp_path / "keys", tiny_target.vocab_size, 2, True, "safetensors", state)
    with pytest.raises(CheckpointError) as err:
        load_draft(folder, tiny_target)
    assert "layers.1.mlp.up_proj.weight" in str(err.value) and "lm_head.weight" in str(err.value)


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_refuses_truncated_or_corrupt_files(tmp_path, tiny_target, fmt):
    folder = write_released(tmp_path / "bad", tiny_target.vocab_size, 1, True, fmt)
    f = folder / ("model.safetensors" if fmt == "safetensors" else "pytorch_model.bin")
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_draft(folder, tiny_target)


def test_bin_files_never_run_pickled_code(tmp_path, tiny_target):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    folder = write_released(tmp_path / "evil", tiny_target.vocab_size, 1, True, "safetensors")
    (folder / "model.safetensors").unlink()
    torch.save({"x": Evil()}, folder / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_draft(folder, tiny_target)


def test_fingerprint_mismatch_is_refused_unless_allowed(tmp_path, tiny_target, trained_drafts):
    folder = save_draft(trained_drafts["eagle"], tmp_path / "fp", tiny_target)
    other = tiny_target_same_sizes()
    with pytest.raises(CheckpointError, match="fingerprint"):
        load_draft(folder, other)
    with pytest.warns(UserWarning, match="fingerprint"):
        load_draft(folder, other, allow_other_target=True)


def tiny_target_same_sizes():
    return tiny_target(seed=42)


def test_missing_folder_and_config(tmp_path, tiny_target):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_draft(tmp_path / "nothing", tiny_target)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no config.json"):
        load_draft(tmp_path / "empty", tiny_target)


# ---------------------------------------------------------------- config.json checked before anything is allocated


def _bad_config_folder(tmp_path, tiny_target, change=None, raw=None, meta=None):
    folder = write_released(tmp_path / "bad", tiny_target.vocab_size, 1, True, "safetensors")
    config = json.loads((folder / "config.json").read_text())
    if change:
        config.update(change)
    (folder / "config.json").write_text(json.dumps(raw if raw is not None else config))
    if meta is not None:
        (folder / "poss_draft.json").write_text(json.dumps(meta))
    return folder


@pytest.mark.parametrize(
    "change,raw,meta,needle",
    [
        ({"intermediate_size": 2_000_000}, None, None, "intermediate_size=2000000 is out of range"),
        ({"intermediate_size": 1e9}, None, None, "intermediate_size=1000000000 is out of range"),
        ({"intermediate_size": 0}, None, None, "intermediate_size=0 is out of range"),
        ({"num_attention_heads": 0}, None, None, "num_attention_heads=0 is out of range"),
        ({"num_attention_heads": 5}, None, None, "num_attention_heads=5 must divide hidden_size=64"),
        ({"num_key_value_heads": 3}, None, None, "num_key_value_heads=3 must divide num_attention_heads=4"),
        ({"num_key_value_heads": 0}, None, None, "num_key_value_heads=0 is out of range"),
        ({"hidden_size": "64"}, None, None, "hidden_size='64' must be an integer"),
        ({"intermediate_size": "128"}, None, None, "intermediate_size='128' must be an integer"),
        ({"head_dim": 1_000_000}, None, None, "head_dim=1000000 is out of range"),
        ({"rms_norm_eps": "x"}, None, None, "rms_norm_eps='x' must be a number"),
        ({"rope_theta": float("inf")}, None, None, "rope_theta=inf must be a number"),
        ({"bias": "yes"}, None, None, "bias='yes' must be true or false"),
        (None, [1, 2, 3], None, "must be a JSON object of settings, not list"),
        (None, None, {"positions_per_specialist": 1e9}, "positions_per_specialist=1000000000 is out of range"),
        (None, None, {"positions_per_specialist": "two"}, "positions_per_specialist='two' must be an integer"),
        (None, None, {"method": "nope"}, "method='nope'"),
        (None, None, {"draft_vocab": [1, 2, 10**9]}, "draft_vocab must be a list"),
        (None, None, [1], "must be a JSON object, not list"),
    ],
)
def test_bad_draft_configs_are_refused_before_any_allocation(
    tmp_path, tiny_target, monkeypatch, change, raw, meta, needle
):
    from poss_core.models import checkpoint

    folder = _bad_config_folder(tmp_path, tiny_target, change, raw, meta)

    def no_allocation(*a, **k):
        raise AssertionError("allocated before the config was checked")

    monkeypatch.setattr(checkpoint, "read_state_dict", no_allocation)
    monkeypatch.setattr(checkpoint, "DraftModel", no_allocation)
    with pytest.raises(CheckpointError) as err:
        load_draft(folder, tiny_target)
    assert needle in str(err.value)
    assert "config.json" in str(err.value) or "poss_draft.json" in str(err.value)  # which file


def test_positions_per_specialist_argument_and_layer_count_are_bounded(tmp_path, tiny_target):
    from poss_core.base.settings import BOUNDS
    from poss_core.models import checkpoint

    assert checkpoint.MAX_POSITIONS_PER_SPECIALIST == BOUNDS["depth"][1]
    folder = write_released(tmp_path / "d", tiny_target.vocab_size, 1, True, "safetensors")
    with pytest.raises(CheckpointError, match="positions_per_specialist=1000000000 is out of range"):
        load_draft(folder, tiny_target, positions_per_specialist=10**9)
    state = released_state(tiny_target.vocab_size, 1, bias=False)
    state["layers.999999.post_attention_layernorm.weight"] = torch.ones(H)
    many = write_released(tmp_path / "many", tiny_target.vocab_size, 1, True, "safetensors", state=state)
    with pytest.raises(CheckpointError, match="1000000 draft layers; a draft has at most 16"):
        load_draft(many, tiny_target)
    assert load_draft(folder, tiny_target).num_specialists == 1  # the good one still loads


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--steps", "0"], "--steps=0 is out of range"),
        (["--steps", "-5"], "--steps=-5 is out of range"),
        (["--lr", "nan"], "--lr=nan is out of range"),
        (["--lr", "inf"], "--lr=inf is out of range"),
        (["--lr", "-1"], "--lr=-1.0 is out of range"),
        (["--depth", "50"], "--depth=50 is out of range"),
        (["--noise", "nan"], "--noise=nan"),
    ],
)
def test_training_cli_checks_its_numbers_before_loading(flags, needle, tmp_path, monkeypatch):
    from helpers import run_main

    from poss_core.models import loading
    from poss_core.training.train import main as train_main

    monkeypatch.setattr(loading, "load_preset_target", lambda *a, **k: pytest.fail("loaded before checking"))
    r = run_main(train_main, ["--preset", "tiny-random", "--data", str(tmp_path), "--out", str(tmp_path / "o"), *flags])
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 2 and len(lines) == 1 and needle in lines[0], r.stderr
