"""Every setting is declared once (poss_core/base/settings.py): each surface that offers it (the app's controls, the two
command lines, /compare, saved runs, DecodeConfig) is made from the table, so none can drift from it."""

from __future__ import annotations

import dataclasses
import math

import gradio as gr
import pytest

from poss_core import generate
from poss_core.base import settings
from poss_core.base.errors import ConfigError
from poss_core.bench import cli as bench_cli
from poss_core.decoding.config import DecodeConfig
from poss_core.runtime import compare, run_spec, saved_runs


def parser_settings(parser) -> set[str]:
    return {a.dest for a in parser._actions} & set(settings.SETTINGS)


def test_decode_config_has_the_tables_decoding_settings_and_defaults():
    fields = {f.name: f.default for f in dataclasses.fields(DecodeConfig)}
    assert fields == {name: settings.SETTINGS[name].default for name in settings.DECODE}


def test_every_surface_offers_what_the_table_says():
    assert parser_settings(generate.build_parser()) == set(settings.offered_on(settings.GENERATE))
    assert parser_settings(bench_cli.build_parser()) == set(settings.offered_on(settings.BENCH))
    from app.actions import api

    params = list(api.api_signature().parameters)
    assert params[:3] == ["prompt", "methods", "preset"] and params[-1] == "request"
    assert set(params[3:-1]) == set(settings.offered_on(settings.API))
    assert set(saved_runs._Settings.model_fields) - {"prompt", "methods", "preset"} == set(settings.RUN)
    spec = compare.RunSpec("hi", ["plain"], "tiny-random")
    assert set(spec.to_json()) - {"prompt", "methods", "preset"} == set(settings.RUN)


def test_the_apps_controls_are_made_from_the_table():
    from app.page.ui import build_demo
    from app.sessions import user_settings

    demo = build_demo("tiny-random")
    by_id = {c.elem_id: c for c in demo.blocks.values() if getattr(c, "elem_id", None)}
    for name in user_settings.APP_SETTINGS:
        s = settings.SETTINGS[name]
        control = by_id["poss-" + name.replace("_", "-")]
        assert control.label == s.label
        if isinstance(control, gr.Slider):
            assert control.minimum >= s.bounds[0] and control.maximum <= s.bounds[1] and control.step == s.step
        elif isinstance(control, gr.Radio):
            assert {v for _, v in control.choices} <= set(s.choices)


def test_a_setting_the_layout_does_not_name_gets_its_own_row(monkeypatch):
    from app.sessions import user_settings
    from app.views import controls

    monkeypatch.setattr(user_settings, "APP_SETTINGS", user_settings.APP_SETTINGS + ("depth_stop",))
    rows = controls.control_rows()
    assert rows[-1] == ("depth_stop",) and sorted(n for row in rows for n in row) == sorted(user_settings.APP_SETTINGS)


def test_a_setting_added_to_the_table_reaches_the_command_lines(monkeypatch):
    extra = settings.Setting(
        "draft_temperature",
        float,
        1.0,
        "Draft temperature",
        "a made-up setting",
        bounds=(0.1, 3.0),
        decode=False,
        offered=settings.COMMAND_LINES,
    )
    monkeypatch.setattr(settings, "_ALL", settings._ALL + (extra,))
    monkeypatch.setitem(settings.SETTINGS, extra.name, extra)
    args = generate.build_parser().parse_args(["--prompt", "x", "--draft-temperature", "0.5"])
    assert args.draft_temperature == 0.5
    assert "--draft-temperature" in bench_cli.build_parser().format_help()
    with pytest.raises(ConfigError, match=r"draft_temperature=5.0 is out of range: use a number from 0.1 to 3"):
        settings.checked({"draft_temperature": 5.0})


@pytest.mark.parametrize(
    "name,value,typed",
    [("depth", 4.0, 4), ("temperature", 1, 1.0), ("auto_budget", True, True), ("precision", "bfloat16", "bfloat16")],
)
def test_checked_types_a_loose_value_as_the_decoder_takes_it(name, value, typed):
    got = settings.checked({name: value})[name]
    assert got == typed and type(got) is type(typed)


@pytest.mark.parametrize(
    "name,value,needle",
    [
        ("depth", 4.5, "depth=4.5 must be an integer"),
        ("depth", True, "depth=True must be an integer"),
        ("depth", 11, "depth=11 is out of range: use an integer from 1 to 10"),
        ("top_p", 0.0, "top_p=0.0 is out of range: use a number above 0 and at most 1"),
        ("temperature", math.nan, "temperature=nan is not a finite number"),
        ("quantization", "3bit", "quantization='3bit': use one of auto, none, 8bit, 4bit"),
        ("auto_budget", "yes", "auto_budget='yes': use true or false"),
        ("nonsense", 1, "'nonsense' is not a setting"),
    ],
)
def test_checked_names_the_field_and_what_is_valid(name, value, needle):
    with pytest.raises(ConfigError) as err:
        settings.checked({name: value})
    assert needle in str(err.value)


def test_a_run_spec_is_checked_once_into_typed_values():
    spec = compare.RunSpec(
        "hi", ["plain", "eagle"], "tiny-random", depth=4.0, top_k=4.0, tree_budget=16.0, temperature=0
    )
    run = spec.resolve()
    assert (run.spec.depth, run.spec.top_k, run.spec.tree_budget) == (4, 4, 16) and isinstance(
        run.spec.temperature, float
    )
    assert run.config == DecodeConfig(depth=4, top_k=4, tree_budget=16)
    assert compare.RunSpec.from_json(run.spec.to_json()) == run.spec
    assert spec.depth == 4.0  # what was asked stays as it was: the typed spec is the run's


def test_a_run_spec_has_the_tables_run_settings_and_defaults():
    fields = [(f.name, f.default) for f in dataclasses.fields(run_spec.RunSpec)]
    assert [n for n, _ in fields[:3]] == ["prompt", "methods", "preset"]
    assert fields[3:] == [(name, settings.SETTINGS[name].default) for name in settings.RUN]


def test_a_runs_config_has_its_decoding_settings():
    asked = dict(temperature=0.5, top_p=0.9, depth=3, top_k=5, tree_budget=12, max_new_tokens=7, seed=3)
    assert set(asked) == set(settings.RUN) & set(settings.DECODE)
    config = compare.RunSpec("hi", ["plain"], "tiny-random", **asked).resolve().config
    assert {name: getattr(config, name) for name in asked} == asked


def test_a_run_checks_each_value_once_then_its_config_checks_its_own(monkeypatch):
    seen = []
    real = settings.Setting.check
    monkeypatch.setattr(
        settings.Setting,
        "check",
        lambda self, value, capped=True: seen.append((self.name, capped)) or real(self, value, capped),
    )
    run = compare.RunSpec("hi", ["plain", "eagle"], "tiny-random", depth=4, top_k=4, tree_budget=16).resolve()
    assert sorted(n for n, capped in seen if capped) == sorted(settings.RUN) and run.config.depth == 4
    assert sorted(n for n, capped in seen if not capped) == sorted(settings.DECODE)  # what the engine can run
    seen.clear()
    assert run.config.changed(tree_budget=20, depth_stop=0.1).tree_budget == 20  # a fitted budget
    assert {capped for _, capped in seen} == {False}


def test_the_server_cap_and_the_preset_order_are_part_of_the_one_check():
    spec = compare.RunSpec("hi", ["eagle", "plain"], "tiny-random", max_new_tokens=40)
    assert spec.resolve().spec.methods == ["eagle", "plain"]
    assert spec.resolve(preset_order=True).spec.methods == ["plain", "eagle"]
    assert spec.resolve(most_new_tokens=40).spec.max_new_tokens == 40
    with pytest.raises(ConfigError, match=r"max_new_tokens=40 is more than this server gives one run \(39"):
        spec.resolve(most_new_tokens=39)


@pytest.mark.parametrize(
    "values,needle",
    [
        (dict(depth=0), "depth=0 is out of range"),
        (dict(depth=4.0), "depth=4.0 must be an integer"),
        (dict(top_p=1.5), "top_p=1.5 is out of range"),
        (dict(head_rows="some"), "head_rows='some': use one of read, all"),
    ],
)
def test_a_config_built_from_a_callers_own_values_is_checked(values, needle):
    with pytest.raises(ConfigError, match=needle):
        DecodeConfig(**values)
    with pytest.raises(ConfigError, match=needle):
        DecodeConfig().changed(**values)


def test_what_a_user_asks_for_is_capped_and_the_engines_own_config_is_not():
    assert DecodeConfig(max_new_tokens=10**6).max_new_tokens == 10**6  # the engine's own open-ended decode
    with pytest.raises(ConfigError, match="max_new_tokens=1000000 is out of range"):
        DecodeConfig.of(max_new_tokens=10**6)  # what a user asks for is capped
    with pytest.raises(ConfigError, match="'precision' is not a decoding setting"):
        DecodeConfig.of(precision="float32")
    assert DecodeConfig.of(depth=4.0).depth == 4
