"""The Run settings' controls, one per setting the app offers, made from its declaration in the settings table and
laid out in rows, and how the controls' values reach a handler (one RunSettings and one View)."""

from __future__ import annotations

import inspect
from typing import Any

import gradio as gr

from app.server import limits
from app.sessions import user_settings
from app.sessions.user_settings import RunSettings, View
from app.views.control_defaults import precision_hint, precision_note, quantization_hint, quantization_note
from poss_core.base import settings
from poss_core.base.settings import BOUNDS, PRECISIONS

# How the app's settings (user_settings.APP_SETTINGS) are laid out, row by row; a setting no row names gets a row of its
# own after these (control_rows), so a new setting shows up without a change here.
CONTROL_ROWS = (
    ("temperature", "top_p"),
    ("depth", "top_k", "tree_budget"),
    ("auto_budget",),
    ("max_new_tokens", "seed"),
    ("precision",),
    ("quantization",),
)
AUTO_BUDGET_INFO = (
    "off (default): every draft lane drafts the same tree, the sliders' depth and budget, to the full "
    "depth, so the lanes compare like for like; on: fitted once per machine and draft (tens of seconds "
    "on a CPU, then cached), and each lane's header states its budget and depth stop"
)
# A control's help in the Settings panel is one short line; SETTINGS_EXPLAINED (the About tab) has the long story.
AUTO_BUDGET_HINT = "off: every lane drafts the same tree; on: each lane's own, fitted to this machine"
TEMPERATURE_HINT = "0 = greedy: every lane must match plain decoding"


def run_controls(start: dict[str, Any], gpu: bool, precision: str) -> dict[str, gr.components.Component]:
    """One control per setting the app offers, made from its declaration (settings.SETTINGS: label, bounds, step,
    choices, help), laid out in CONTROL_ROWS; `start` holds the preset's tree defaults (control_defaults.ui_defaults),
    `gpu` and `precision` what this machine offers and starts with."""
    bound = int(BOUNDS["max_new_tokens"][1])  # the setting's own upper bound
    top_tokens = min(bound, limits.LIMITS.max_new_tokens or bound)  # and this server's cap (--max-new-tokens)
    # What differs from the declaration here: this machine's words and offers, and this server's cap.
    special: dict[str, dict[str, Any]] = {
        "max_new_tokens": {"maximum": top_tokens, "value": min(start["max_new_tokens"], top_tokens), "info": None},
        "precision": {
            "choices": [p for p in PRECISIONS if gpu or p != "float16" or p == precision],
            "value": precision,
            "info": precision_hint(gpu),
        },
        "quantization": {"info": quantization_hint(gpu)},
        "auto_budget": {"info": AUTO_BUDGET_HINT},
        "temperature": {"info": TEMPERATURE_HINT},
    }
    controls = {}
    for row in control_rows():
        with gr.Row():
            for name in row:
                controls[name] = setting_control(
                    settings.SETTINGS[name], **{"value": start.get(name), **special.get(name, {})}
                )
    return controls


def control_rows() -> list[tuple[str, ...]]:
    """CONTROL_ROWS with the settings the app offers (and only those), then a row for each one they leave out."""
    placed = [tuple(n for n in row if n in user_settings.APP_SETTINGS) for row in CONTROL_ROWS]
    named = {n for row in placed for n in row}
    return [row for row in placed if row] + [(n,) for n in user_settings.APP_SETTINGS if n not in named]


def setting_control(s: settings.Setting, value: Any = None, **kwargs: Any) -> gr.components.Component:
    """A setting's Gradio control: a radio for choices, a checkbox for a switch, a slider for a range a slider can
    span, else a number box; its label from the declaration, and its help as the info of a radio or checkbox (a
    slider's label says enough), unless `kwargs` says otherwise."""
    common = {
        "label": s.label,
        "info": s.help if s.choices or s.kind is bool else None,
        "elem_id": "poss-" + s.name.replace("_", "-"),
        "value": s.default if value is None else value,
    }
    common.update(kwargs)
    if s.choices:
        return gr.Radio(list(common.pop("choices", s.choices)), **common)
    if s.kind is bool:
        return gr.Checkbox(**common)
    lo, hi = s.bounds
    if hi - lo > 100_000:  # the seed: a slider could not pick one value
        return gr.Number(precision=0, **{**common, "info": f"any whole number from {lo:,} to {hi:,}"})
    low = lo + s.step if s.open_low else lo  # top-p's slider starts one step above 0
    return gr.Slider(common.pop("minimum", low), common.pop("maximum", hi), step=s.step, **common)


# The controls a handler reads, by name (the page gives Gradio the components of these names, in this order): the Run
# settings (RunSettings.from_named) and the view toggles (View.from_named).
RUN_INPUTS = ("prompt", "multi_turn", "preset", "methods", *user_settings.APP_SETTINGS)
VIEW_INPUTS = user_settings.VIEW_INPUTS


def gathered(handler, settings: bool = False, leading: tuple[str, ...] = ()):
    """`handler` as Gradio calls it: the request first (Gradio passes it by its type hint), then one value per input
    control, named by the wrapper's `inputs` (the page's components of those names, in that order). The controls
    named in `leading` pass as they are; the Run settings (with `settings`) become one RunSettings and the view
    toggles one View, so the handler takes `(*leading, [settings,] view, request=...)`."""
    names = (*leading, *(RUN_INPUTS if settings else ()), *VIEW_INPUTS)

    def values(controls: tuple) -> list:
        by = dict(zip(names, controls))
        run = [RunSettings.from_named(by)] if settings else []
        return [by[n] for n in leading] + run + [View.from_named(by)]

    if inspect.isgeneratorfunction(handler):

        def streamed(request: gr.Request, *controls):
            yield from handler(*values(controls), request=request)

        streamed.inputs = names  # type: ignore[attr-defined]
        return streamed

    def answered(request: gr.Request, *controls):
        return handler(*values(controls), request=request)

    answered.inputs = names  # type: ignore[attr-defined]
    return answered


def settings_explained(gpu: bool) -> str:
    """The About tab's account of every setting the Settings panel offers: each one's label and its full help (the
    panel shows one short line), with what precision, quantization and the fitted tree mean on this machine."""
    long = {
        "precision": precision_note(gpu),
        "quantization": quantization_note(gpu),
        "auto_budget": AUTO_BUDGET_INFO,
    }
    rows = []
    for row in control_rows():
        for name in row:
            s = settings.SETTINGS[name]
            rows.append(f"* **{s.label}**: {long.get(name, s.help)}.")
    return "### The settings\n" + "\n".join(rows)
