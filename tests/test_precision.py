"""Every precision of a target: the draft fingerprint is the same in float32, bfloat16 and float16, `auto` picks
bf16 or fp16 by the card's capability, and fp16 has a near-tie tolerance like bf16's."""

import json
from pathlib import Path

import pytest
import torch

from poss_core.models import hardware
from poss_core.models.checkpoint import META_FILE, load_draft, save_draft, target_fingerprint
from poss_core.models.loading import default_dtype
from poss_core.models.numerics import NEAR_TIE, classify_divergence, identity_divergence, target_numerics
from poss_core.models.tiny import tiny_target

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "drafts" / "smollm2-135m"
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def test_the_fingerprint_is_the_same_in_every_precision_and_differs_between_targets():
    prints = {dt: target_fingerprint(tiny_target(seed=0, dtype=dt)) for dt in DTYPES}
    assert len(set(prints.values())) == 1, prints
    assert target_fingerprint(tiny_target(seed=1)) != prints[torch.float32]
    # The same weights with one sampled sign flipped: a fine-tune that moved the embedding is told apart too.
    moved = tiny_target(seed=0)
    with torch.no_grad():
        moved.input_embedding_weight()[0, 0].neg_()
    assert target_fingerprint(moved) != prints[torch.float32]


def test_the_fingerprint_of_a_checkpoint_loaded_in_each_precision_is_the_same(tmp_path):
    from poss_core.models.loading import load_target

    source = tiny_target(seed=0)
    source.model.save_pretrained(tmp_path / "t")
    source.tokenizer.save_pretrained(tmp_path / "t")
    prints = {target_fingerprint(load_target(str(tmp_path / "t"), device="cpu", dtype=dt)) for dt in DTYPES}
    assert prints == {target_fingerprint(source)}


def test_a_draft_saved_from_float32_loads_on_a_bf16_and_fp16_target(tmp_path, tiny_target, trained_drafts):
    folder = save_draft(trained_drafts["poss2"], tmp_path / "d", tiny_target)
    for dt in (torch.bfloat16, torch.float16):
        other = tiny_target_in(dt)
        draft = load_draft(folder, other)
        assert next(draft.parameters()).dtype == dt


def tiny_target_in(dtype: torch.dtype):
    return tiny_target(seed=0, dtype=dtype)


def test_the_bundled_drafts_carry_the_default_targets_fingerprint():
    """Every bundled draft names the same target (its fingerprint, computed from the default target: 68d17...), so
    it loads in every precision."""
    prints = {d.name: json.loads((d / META_FILE).read_text()).get("target_fingerprint") for d in ASSETS.iterdir()}
    assert set(prints.values()) == {"68d174438d0d3a13"}, prints


@pytest.mark.slow
@pytest.mark.usefixtures("real_model_threads")
def test_the_bundled_draft_loads_on_the_default_target_in_every_precision():
    from poss_core.models.loading import load_draft_by_name, load_preset_target

    for dt in DTYPES:
        target = load_preset_target("builtin:smollm2-135m", quantization="none", dtype=dt)
        assert target_fingerprint(target) == "68d174438d0d3a13"
        load_draft_by_name(str(ASSETS / "poss2"), target)


@pytest.mark.parametrize(
    ("capability", "want"),
    [((7, 5), torch.float16), ((7, 0), torch.float16), ((6, 0), torch.float16), ((8, 0), torch.bfloat16),
     ((9, 0), torch.bfloat16)],
)  # fmt: skip
def test_auto_picks_bf16_on_cards_with_bf16_units_and_fp16_on_the_others(monkeypatch, capability, want):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert hardware.cuda_bf16_units(torch.device("cuda")) == (want == torch.bfloat16)
    assert default_dtype(torch.device("cuda")) == want
    assert default_dtype(torch.device("cpu")) == torch.float32


def test_no_cuda_means_no_bf16_units(monkeypatch):
    def broken(device=None):
        raise RuntimeError("no CUDA GPUs are available")

    monkeypatch.setattr(torch.cuda, "get_device_capability", broken)
    assert not hardware.cuda_bf16_units(0)


def test_fp16_has_a_near_tie_tolerance_like_bf16():
    fp16, bf16 = target_numerics("cpu", torch.float16), target_numerics("cuda", torch.bfloat16)
    assert not fp16.exact and not bf16.exact
    assert 0 < fp16.tolerance <= bf16.tolerance and "float16" in fp16.why
    assert classify_divergence(3, fp16.tolerance / 2, fp16).kind == NEAR_TIE
    assert classify_divergence(3, fp16.tolerance * 4, fp16).kind != NEAR_TIE


def test_identity_divergence_names_where_a_lane_parts_from_plain():
    target = tiny_target_in(torch.float16)
    ids = target.tokenizer.encode("hello")
    assert identity_divergence(target, ids, [5, 6, 7], [5, 6, 7]) is None
    div = identity_divergence(target, ids, [5, 9, 7], [5, 6, 7])
    assert div is not None and div.index == 1 and div.margin is not None
    short = identity_divergence(target, ids, [5, 6], [5, 6, 7])
    assert short is not None and short.index == 2


def test_generate_checks_identity_at_the_precisions_tolerance(capsys):
    from helpers import run_main

    from poss_core import generate
    from poss_core.rounds.events import DecodeSummary

    argv = ["--preset", "tiny-random", "--draft", "poss2", "--prompt", "hello", "--max-new-tokens", "12"]
    r = run_main(generate.main, [*argv, "--dtype", "float16", "--check-identity"])
    assert r.returncode == 0 and "[spec] Identity check PASSED" in r.stderr and "float16 on cpu" in r.stderr
    assert "Identity check" not in run_main(generate.main, argv).stderr  # only when asked
    # A lane that parts from plain where plain's margin is beyond float32's tolerance is a real mismatch: exit 1.
    args = generate.build_parser().parse_args([*argv, "--check-identity"])
    target = tiny_target_in(torch.float32)
    ids = target.tokenizer.encode("hello")
    plain = generate.methods.build_decoder(
        generate.methods.PLAIN_METHODS["plain"], target, generate._decode_config(args, None)
    )
    want = next(x for x in plain.generate(ids) if isinstance(x, DecodeSummary)).token_ids
    wrong = DecodeSummary("", [*want[:3], (want[3] + 1) % target.vocab_size, *want[4:]], "max_new_tokens", {})
    assert generate.identity_check(args, target, ids, wrong) == 1
    assert "Identity check FAILED" in capsys.readouterr().err
