"""/compare's parameters (app/actions/api.py): made from the settings table, 0 meaning the app's default for the
preset wherever the app sets one per preset, and the fitted budget asked for by its own switch, `auto_budget`."""

from __future__ import annotations

import inspect

import gradio as gr
import pytest

from app.actions import api
from app.views.control_defaults import ui_defaults
from poss_core.models.presets import get_preset

TINY_DEFAULTS = ui_defaults(get_preset("tiny-random"))


def test_the_parameters_keep_their_places_and_auto_budget_comes_last():
    params = api.api_signature().parameters
    names = list(params)
    assert names[:4] == ["prompt", "methods", "preset", "max_new_tokens"]
    # A positional client's values keep their places: precision is the 11th, the new switch the last setting.
    assert names[10] == "precision" and names[-2:] == ["auto_budget", "request"]
    assert params["tree_budget"].default == 0 and params["tree_budget"].annotation is int
    assert params["auto_budget"].default is False and params["auto_budget"].annotation is bool
    assert params["request"].default is None
    assert set(inspect.signature(api.compare_endpoint("tiny-random")).parameters) == set(names)


def test_tree_budget_0_is_the_presets_default_as_for_the_other_tree_settings():
    spec = api.api_run("Hi", ["plain", "eagle"], "tiny-random").spec
    for name in ("depth", "top_k", "tree_budget", "max_new_tokens"):
        assert getattr(spec, name) == TINY_DEFAULTS[name], name
    assert spec.auto_budget is False


def test_tree_budget_counts_nodes_and_auto_budget_asks_for_the_fitted_tree():
    assert api.api_run("Hi", ["plain", "eagle"], "tiny-random", tree_budget=12).spec.tree_budget == 12
    fitted = api.api_run("Hi", ["plain", "eagle"], "tiny-random", auto_budget=True).spec
    assert fitted.auto_budget is True and fitted.tree_budget == TINY_DEFAULTS["tree_budget"]


@pytest.mark.parametrize(
    "values,needle",
    [
        (dict(auto_budget="yes"), "auto_budget='yes': use true or false"),
        (dict(tree_budget=1), "tree_budget=1 is out of range"),
        (dict(tree_bugdet=8), "'tree_bugdet' is not a /compare parameter"),
    ],
)
def test_a_bad_parameter_is_refused_naming_it(values, needle):
    with pytest.raises(gr.Error, match=needle):
        api.api_run("Hi", ["plain", "eagle"], "tiny-random", quiet_refusals=True, **values)
