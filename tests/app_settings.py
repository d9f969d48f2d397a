"""Shared builders for the app's handler tests: a Run's settings as one value, and a browser session's request."""

from __future__ import annotations

from types import SimpleNamespace

from app import state

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


def run_settings(**kw) -> state.RunSettings:
    """The tiny-random preset's settings, small trees, with `kw` replacing any field."""
    return state.RunSettings(**{**DEFAULTS, **kw})


def req(name: str) -> SimpleNamespace:
    """A request as Gradio gives it: what names the browser session."""
    return SimpleNamespace(session_hash=name)
