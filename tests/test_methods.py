"""The method registry: one name per method everywhere, labels without paths, the `trained` flag behind the app's
"untrained" badge, and the one build_decoder every caller uses."""

from __future__ import annotations

import os

import pytest

from app.views import control_defaults, render
from poss_core.base.errors import ConfigError
from poss_core.bench import runner
from poss_core.decoding.decoder import PlainDecoder, SpeculativeDecoder
from poss_core.decoding.hf_generate import HFGenerateDecoder
from poss_core.models.presets import DEFAULT_PRESET, drafts_dir, get_preset, presets
from poss_core.runtime import compare, methods


def test_the_real_default_preset_labels_its_untrained_drafts_without_a_path(tmp_path, monkeypatch):
    """smollm2-135m as shipped bundles every draft it offers; from a drafts folder that lacks one (here POSS-1), that
    draft reads like the others in its checkbox plus "(untrained)", the note names it, and no label shows a folder."""
    preset = get_preset(DEFAULT_PRESET)
    bundled = {name for name in preset.drafts if (drafts_dir() / name / "model.safetensors").is_file()}
    assert bundled == set(preset.drafts)
    for folder, missing in ((None, set()), (tmp_path, {"poss1"})):
        if folder is not None:
            for name in bundled - missing:
                (folder / name).mkdir()
                (folder / name / "model.safetensors").write_bytes(b"")
            monkeypatch.setenv("POSS_DRAFTS_DIR", str(folder))
            preset = get_preset(DEFAULT_PRESET)  # built anew: its drafts are looked up in the folder now named
        offered = methods.preset_methods(preset)
        choices = dict((value, label) for label, value in control_defaults.method_choices(preset))
        assert list(choices) == ["plain", "eagle", "hass", "poss1", "poss2", "poss3", "matched", "pld", "oracle"]
        for name, method in offered.items():
            assert method.trained == (name not in missing)
            assert choices[name] == (method.label if method.trained else f"{method.label} (untrained)")
            assert str(drafts_dir()) not in choices[name] and os.sep not in choices[name]
        assert ("untrained" in render.draft_note(preset)) == bool(missing)
    assert choices["poss1"] == "POSS-1 (6 specialists) (untrained)" and "POSS-1" in render.draft_note(preset)
    for preset_ in presets().values():  # no preset's method label carries a folder either
        for method in methods.preset_methods(preset_).values():
            assert str(drafts_dir()) not in method.label and "untrained:" not in method.label


def test_the_lane_header_badge_follows_the_trained_flag():
    preset = get_preset(DEFAULT_PRESET)
    offered = methods.preset_methods(preset)
    spec = compare.RunSpec("hi", ["plain", "poss1"], DEFAULT_PRESET)
    lanes = [compare.Lane(name, offered[name].label, offered[name].trained) for name in ("plain", "poss1")]
    comp = compare.Comparison(spec, lanes)
    head = render.lane_head_html(lanes[1], comp, running=False)
    assert f"<h3>{offered['poss1'].label}</h3>" in head
    assert ("untrained draft</span>" in head) == (not offered["poss1"].trained)
    assert "untrained" not in render.lane_head_html(lanes[0], comp, running=False)


def test_plain_decoding_has_one_name():
    assert methods.is_plain("plain-bfloat16") and not methods.is_plain("ar") and not methods.is_plain("poss2")
    with pytest.raises(ConfigError, match="'ar' is not available"):  # a new run names plain decoding `plain`
        compare.RunSpec("hi", ["ar", "eagle"], "tiny-random").resolve()
    assert runner.parse_methods("eagle,plain-float32") == ["plain", "plain-hf", "eagle", "plain-float32"]


def test_one_label_short_name_and_colour_per_method():
    preset = get_preset("tiny-random")
    offered = methods.preset_methods(preset)
    assert methods.label_of("plain") == offered["plain"].label == "Plain decoding (target only)"
    assert [offered[n].short for n in ("plain", "eagle", "poss2")] == ["Plain", "EAGLE", "POSS-2"]
    assert methods.color_of("plain") == methods.PLAIN_COLOR
    assert len({offered[n].color for n in offered}) == len(offered)  # every lane its own colour
    assert all(methods.color_of(n) == offered[n].color for n in offered)


def test_build_decoder_for_every_method_of_a_preset(tiny_target):
    preset = get_preset("tiny-random")
    config = methods.decode_config(preset, depth=3, tree_budget=8, max_new_tokens=4)
    assert (config.depth, config.top_k, config.tree_budget) == (3, preset.top_k, 8)
    for name, method in methods.preset_methods(preset).items():
        decoder = methods.build_decoder(method, tiny_target, config)
        assert isinstance(decoder, PlainDecoder if name == "plain" else SpeculativeDecoder)
        assert decoder.config == config
    with pytest.raises(ConfigError, match="not one of preset"):
        methods.get_method(preset, "hass")
    for name in (methods.PLAIN_HF, methods.PLD):  # transformers' generate, the same decoder in two modes
        decoder = methods.build_decoder(methods.get_method(preset, name), tiny_target, config)
        assert isinstance(decoder, HFGenerateDecoder) and decoder.method == name
