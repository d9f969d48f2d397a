"""Shared builders for the app's handler tests: a Run's settings as one value, and a browser session's request."""

from __future__ import annotations

from types import SimpleNamespace

from app.sessions import user_settings

DEFAULTS = dict(
    prompt="Hello there",
    multi_turn=False,
    preset="tiny-random",
    methods=["plain", "eagle"],
    temperature=0.0,
    top_p=1.0,
    depth=4,
    top_k=4,
    tree_budget=16,
    max_new_tokens=6,
    seed=0,
    quantization="auto",
    auto_budget=False,
    precision="auto",
)


def run_inputs(**kw) -> list:
    """/run's and /step's inputs as a client sends them: prompt, multi-turn, preset, methods, then the app's settings
    in the order of its controls (user_settings.APP_SETTINGS); `kw` replaces any field. The view toggles follow them."""
    s = {**DEFAULTS, **kw}
    return [s["prompt"], s["multi_turn"], s["preset"], list(s["methods"])] + [s[n] for n in user_settings.APP_SETTINGS]


def run_settings(**kw) -> user_settings.RunSettings:
    """The tiny-random preset's settings, small trees, with `kw` replacing any field."""
    return user_settings.RunSettings.from_named({**DEFAULTS, **kw})


def req(name: str) -> SimpleNamespace:
    """A request as Gradio gives it: what names the browser session."""
    return SimpleNamespace(session_hash=name)
