"""The Demo tab's layout, top to bottom, as functions that each make one part and return its components by name:
the prompt with its buttons and status, the examples and the closed panels beside it, the lanes (named
`lane{i}_{part}`, render.OUTPUT_NAMES), the view toggles, the charts, the class reset and Save/Load. On a projector
(1280x720) the prompt, Run and the lanes' streaming text share one screen; the settings sit in a closed accordion
beside the prompt, the views and charts below the lanes."""

from __future__ import annotations

from typing import Any

import gradio as gr

from app.sessions import recordings, user_settings
from app.sessions.state import default_lanes
from app.views import about, chart_fit, controls
from app.views.chart_view import CHART_NAMES
from app.views.control_defaults import method_choices, ui_defaults
from app.views.render import LANE_PARTS, conversation_html, draft_note, empty_tree, idle_head_html, race_html
from app.views.token_html import TOKEN_CLICK_JS, legend_html, status_html
from poss_core.decoding.config import MAX_PROMPT_CHARS
from poss_core.models.presets import Preset
from poss_core.runtime.run_spec import MAX_LANES
from poss_core.views import figures

Components = dict[str, Any]

TIMING_NOTE = (
    "Lanes **race in time**, one round at a time in one thread: the lane that has spent the least of its own "
    "compute time goes next, and each lane's tokens/s counts only its own rounds, i.e. the speed it would get alone "
    "on this machine."
)
SETTINGS_LABEL = "⚙ Settings: lanes, model, tree, length, precision"
SETTINGS_MORE = "What each setting does, and what it costs on this machine: the About tab."
EXAMPLES_LABEL = "Examples: a click replays a recorded run at once; ▶ Run runs it live here"
CHARTS_NOTE = (
    f"Conditional: {figures.POS_ACC_FORMULA}; unconditional: {figures.POS_RATE_FORMULA}. "
    "A round whose tree stopped before position k counts at neither. Feature deviation: "
    "the draft's predicted feature vs the target's true one for the same token, with the "
    "draft rolled forward over the text the target went on to write (measured once a lane "
    "finishes, outside its timing; until then the chart shows accepted positions only, "
    "which is conditional on acceptance). The strip under the acceptance chart shows which "
    "specialist drafts each position and in what share of the rounds."
)
CHARTS_FROM_INFO = (
    "all my runs: every round of every run in this tab on this preset, per method; everyone on this server: every "
    "finished live run of every visitor, pooled per method (numbers only, never prompts or text). Replays and loaded "
    "runs are never added"
)
CLASS_REFRESH_S = 5.0  # how often a tab showing "everyone on this server" checks the class pool for new runs


def demo_tab(preset: Preset, choices: list[tuple[str, str]], gpu: bool, precision: str, charts0: Components):
    """The whole Demo tab (inside a gr.Tab), its components by name."""
    c: Components = {}
    with gr.Row(equal_height=False, elem_id="poss-top"):
        with gr.Column(scale=3, min_width=300):
            c |= prompt_column()
        with gr.Column(scale=2, min_width=280, elem_id="poss-side"):
            c |= side_column(preset, choices, gpu, precision)
    c["legend"] = gr.HTML(legend_html("position"), elem_id="poss-legend")
    c |= lanes(preset)
    c |= view_controls()
    gr.Markdown(f"{TIMING_NOTE} {about.SPEED_STORY}", elem_id="poss-speed-story")
    c |= charts(charts0)
    c |= class_reset()
    c |= save_and_load()
    return c


def prompt_column() -> Components:
    """The prompt, Run / Stop / Step / Replay, the status line and the race's clock."""
    c: Components = {}
    c["prompt"] = gr.Textbox(
        label="Prompt",
        lines=2,
        max_lines=12,
        elem_id="poss-prompt",
        max_length=MAX_PROMPT_CHARS,
        placeholder="Ask something, or pick an example.",
    )
    with gr.Row(elem_id="poss-buttons"):
        c["run_btn"] = gr.Button("▶ Run", variant="primary", elem_id="poss-run", min_width=80)
        c["stop_btn"] = gr.Button("■ Stop", variant="stop", elem_id="poss-stop", min_width=80)
        c["step_btn"] = gr.Button("Step a round", elem_id="poss-step", min_width=80)
        c["replay_btn"] = gr.Button("↻ Replay", elem_id="poss-replay", min_width=80)
    c["status"] = gr.HTML(status_html("Type a prompt (or pick an example) and press Run."), elem_id="poss-status")
    # The race's clock under the status, beside the examples: above the lanes, at no cost in height on a projector
    c["race"] = gr.HTML(race_html(None), elem_id="poss-race")
    return c


def side_column(preset: Preset, choices: list[tuple[str, str]], gpu: bool, precision: str) -> Components:
    """The examples, then the closed Settings and Multi-turn panels."""
    c: Components = {}
    with gr.Column(elem_id="poss-examples"):
        gr.HTML(f'<div class="poss-examples-label">{EXAMPLES_LABEL}</div>')
        with gr.Row(elem_id="poss-example-buttons"):
            c["example_btns"] = [
                gr.Button(recordings.example_label(e), size="sm", scale=0, min_width=40, elem_classes="poss-example")
                for e in recordings.EXAMPLES
            ]
    with gr.Accordion(SETTINGS_LABEL, open=False, elem_id="poss-settings"):
        c["preset"] = gr.Dropdown(choices, value=preset.name, label="Model (preset)")
        c["methods"] = gr.CheckboxGroup(
            method_choices(preset),
            value=default_lanes(preset),
            label=f"Methods to compare (lanes, at most {MAX_LANES})",
            elem_id="poss-methods",
        )
        c["draft_note"] = gr.HTML(draft_note(preset))
        c |= controls.run_controls(ui_defaults(preset), gpu, precision)
        gr.Markdown(SETTINGS_MORE, elem_classes="poss-note")
    with gr.Accordion("Multi-turn conversation", open=False, elem_id="poss-multi-turn"):
        with gr.Row():
            c["multi_turn"] = gr.Checkbox(label="Multi-turn: continue the conversation", value=False, scale=3)
            c["new_conv"] = gr.Button("New conversation", size="sm", scale=1)
        c["conversation"] = gr.HTML(conversation_html([]))
    return c


def lanes(preset: Preset) -> Components:
    """MAX_LANES lane columns, the first ones named after the preset's default methods; each part named
    `lane{i}_{part}` (render.LANE_PARTS)."""
    first = default_lanes(preset)
    c: Components = {}
    with gr.Row(equal_height=False, elem_id="poss-lanes"):
        for i in range(MAX_LANES):
            with gr.Column(visible=i < len(first), min_width=280, elem_classes="poss-lane") as col:
                parts = lane(i, idle_head_html(first[i], preset) if i < len(first) else "")
            c |= {f"lane{i}_{name}": part for name, part in zip(LANE_PARTS, (col, *parts))}
    return c


def lane(i: int, head: str) -> tuple[Any, ...]:
    """One lane's parts after its column: header, tokens, plain text, tree, round slider, round account."""
    head_box = gr.HTML(head, elem_classes="poss-lane-head-box", elem_id=f"poss-lane{i}-head")
    tokens = gr.HTML('<div class="poss-lane-tokens"></div>', elem_id=f"poss-lane{i}-tokens", js_on_load=TOKEN_CLICK_JS)
    with gr.Accordion("Plain text (copy)", open=False):
        text = gr.Textbox(show_label=False, lines=5, max_lines=20, buttons=["copy"], interactive=False)
    tree = gr.Plot(chart_fit.fit(empty_tree()), show_label=False, elem_id=f"poss-lane{i}-tree")
    slider = gr.Slider(
        0,
        1,
        value=0,
        step=1,
        interactive=False,
        label="Round (scrub the tree back, or click a token)",
        elem_id=f"poss-lane{i}-round",
    )
    explain = gr.HTML(elem_id=f"poss-lane{i}-explain")
    return head_box, tokens, text, tree, slider, explain


def view_controls() -> Components:
    """How accepted draft tokens are coloured, and whether rejected drafts show inline."""
    c: Components = {}
    with gr.Row():
        c["color_by"] = gr.Radio(
            ["draft position", "specialist"], value="draft position", label="Colour accepted draft tokens by", scale=2
        )
        c["show_rejected"] = gr.Checkbox(
            value=False,
            scale=1,
            label="Show rejected drafts inline (struck through; always in the tooltip of the target's token)",
        )
    return c


def charts(charts0: Components) -> Components:
    """The acceptance mode and the charts' source, then the four charts (drawn first with `charts0`)."""
    c: Components = {}
    gr.Markdown("### Charts (POSS and EAGLE on the same axes; each states its sample size)")
    with gr.Row(equal_height=False):
        c["pos_acc_mode"] = gr.Radio(
            ["conditional (POSS pos-acc)", "unconditional (share of rounds that drafted k)"],
            value="conditional (POSS pos-acc)",
            label="Position-wise acceptance",
            scale=2,
        )
        c["charts_from"] = gr.Radio(
            ["this run", user_settings.POOLED_VIEW, user_settings.CLASS_VIEW],
            value="this run",
            label="Charts show",
            info=CHARTS_FROM_INFO,
            elem_id="poss-charts-from",
            scale=2,
        )
        c["forget_btn"] = gr.Button("Forget my runs", size="sm", scale=1, elem_id="poss-forget")
    c["class_timer"] = gr.Timer(CLASS_REFRESH_S, active=False)
    ids = dict(zip(CHART_NAMES, ("pos-acc", "deviation", "hist", "tps")))
    for row in (CHART_NAMES[:2], CHART_NAMES[2:]):
        with gr.Row():
            for name in row:
                c[name] = gr.Plot(charts0[name], show_label=False, elem_id=f"poss-chart-{ids[name]}")
    gr.Markdown(CHARTS_NOTE)
    return c


def class_reset() -> Components:
    """The key box and button that reset the class's pooled charts."""
    c: Components = {}
    with gr.Accordion("Reset the class's pooled charts (the key the app was started with)", open=False):
        with gr.Row():
            c["class_key"] = gr.Textbox(
                type="password",
                show_label=False,
                scale=3,
                max_length=200,
                placeholder="python app.py --class-reset-key KEY",
                elem_id="poss-class-key",
            )
            c["class_reset_btn"] = gr.Button(
                "Reset everyone's pooled runs", size="sm", scale=1, elem_id="poss-class-reset"
            )
    return c


def save_and_load() -> Components:
    """Save this run as a file, or load a saved one."""
    c: Components = {}
    with gr.Accordion("Save or load a run (replay without a model)", open=False):
        with gr.Row():
            c["save_btn"] = gr.Button("Save this run (JSONL)")
            c["saved"] = gr.File(label="Saved run", interactive=False)
            c["upload"] = gr.File(label="Load a saved run (.jsonl)", file_types=[".jsonl"], type="filepath")
    return c


def about_tab(gpu: bool) -> Components:
    """The About tab: the method, the metrics, every setting, and this machine (`hardware`, redrawn by runs)."""
    gr.Markdown(about.INTRO)
    gr.HTML(about.DIAGRAM)
    gr.Markdown(about.METRICS)
    gr.Markdown(controls.settings_explained(gpu), elem_id="poss-settings-explained")
    return {"hardware": gr.Markdown(about.hardware_markdown(None))}
