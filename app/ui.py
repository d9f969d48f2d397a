"""The Gradio Blocks layout and its wiring to the handlers; `build_demo()` is what app.py launches."""

from __future__ import annotations

import json
from typing import Any

import gradio as gr

from poss_core import methods
from poss_core.decoding.config import MAX_PROMPT_CHARS
from poss_core.models.hardware import cuda_available
from poss_core.models.presets import DEFAULT_PRESET, get_preset, presets
from poss_core.run_spec import MAX_LANES
from poss_core.views import figures

from . import (
    about,
    chart_fit,
    control_defaults,
    controls,
    evidence_view,
    handlers,
    limits,
    recordings,
    saved_files,
    state,
    user_settings,
    view_handlers,
)
from .api import compare_endpoint
from .chart_view import CHART_NAMES, chart_outputs
from .control_defaults import method_choices, ui_defaults
from .render import (
    LANE_PARTS,
    OUTPUT_NAMES,
    by_component,
    conversation_html,
    draft_note,
    empty_tree,
    idle_head_html,
)
from .state import DEFAULT_METHODS
from .token_html import TOKEN_CLICK_JS, legend_html, status_html

# Gradio's cache (uploaded runs, downloads it serves) is swept every CACHE_SWEEP_S seconds: files older than the
# cache age (`python app.py --cache-minutes`, 10 by default) are deleted, so the temp folder does not grow.
CACHE_SWEEP_S = 60
LOAD_CONCURRENCY = 2  # saved runs parsed at once (each is checked in full: up to a few seconds of CPU for a large one)
# Replays (the examples' recordings, ↻ Replay) at once: no model work, only drawing, so a whole class replays together
# without waiting behind the live runs (which take turns in live_queue.LIVE, not in this group).
REPLAY_CONCURRENCY = 64
CLASS_REFRESH_S = 5.0  # how often a tab showing "everyone on this server" checks the class pool for new runs

TIMING_NOTE = (
    "Lanes run **in turns, one round each**, in one thread: each lane's tokens/s counts only its own "
    "rounds' compute time, i.e. the speed it would get alone on this machine."
)
SPEED_STORY = about.SPEED_STORY

ASSETS = recordings.ASSETS
EXAMPLES = recordings.EXAMPLES

# ---------------------------------------------------------------- layout


def _gpu(fn, duration: int = 120):
    """ZeroGPU's decorator where the `spaces` package is installed (it does nothing off a ZeroGPU Space)."""
    try:
        import spaces  # type: ignore
    except ImportError:
        return fn
    return spaces.GPU(duration=duration)(fn)


HEADER = """# POSS vs EAGLE: speculative decoding, live
A small draft guesses the next tokens and the model checks them all in one pass. **POSS** gives each draft position
its own specialist layer, **EAGLE** one layer for all: shaded tokens came from the draft, underlined ones from the
model."""
SETTINGS_LABEL = "⚙ Settings: lanes, model, tree, length, precision"
SETTINGS_MORE = "What each setting does, and what it costs on this machine: the About tab."
EXAMPLES_LABEL = "Examples: a click replays a recorded run at once; ▶ Run runs it live here"


def build_demo(
    preset: str = DEFAULT_PRESET, precision: str = "auto", server: limits.ServerLimits | None = None
) -> gr.Blocks:
    """The whole app, serving `preset` first, with `precision` the Precision setting's initial value
    (`python app.py --dtype`) and `server` the limits it holds visitors to (installed here; default
    `ServerLimits()`): among them how many live comparisons decode at once (the others wait in live_queue.LIVE,
    their status saying where and for how long) and how old a file in Gradio's cache may get."""
    server = server or limits.ServerLimits()
    limits.install(server)
    concurrency = max(1, server.slots)
    cache_age_s = server.cache_age_s
    state.SESSIONS.start_reaper()  # paused Step sessions idle past SESSIONS.idle_s free their decoders
    state.APP_PRESET = preset
    first = get_preset(preset)
    d = ui_defaults(first)
    gpu = cuda_available()
    table = presets()
    preset_choices = [(f"{name}{' (GPU)' if p.device == 'gpu' else ''}", name) for name, p in table.items()]
    methods0 = [m for m in DEFAULT_METHODS if m in methods.preset_methods(first)]
    decode = {"concurrency_id": "decode", "concurrency_limit": concurrency}
    # Live runs wait for their slot in live_queue.LIVE (status: place and estimate), not in Gradio's queue, where a
    # waiting call could not say where it stands; the per-client share and LIVE's own bound keep their number down.
    live = {"concurrency_id": "live", "concurrency_limit": None}
    replays = {"concurrency_id": "replay", "concurrency_limit": REPLAY_CONCURRENCY}
    light = {"concurrency_limit": None, "show_progress": "hidden"}

    # The charts a tab shows before its first run, drawn once here: a page load then sends no figure of its own.
    charts0 = {name: chart_fit.fit(fig) for name, fig in chart_outputs(state.Session(), user_settings.View()).items()}
    age = max(1, round(cache_age_s))
    with gr.Blocks(
        title="POSS vs EAGLE: speculative decoding",
        fill_width=True,
        analytics_enabled=False,
        delete_cache=(min(CACHE_SWEEP_S, age), age),
    ) as demo:
        gr.Markdown(HEADER, elem_id="poss-header")
        with gr.Tabs():
            with gr.Tab("Demo", id="demo"):
                # On a projector (1280x720) the prompt, Run and the lanes' streaming text share one screen: the
                # settings sit in a closed accordion beside the prompt, the views and charts below the lanes.
                with gr.Row(equal_height=False, elem_id="poss-top"):
                    with gr.Column(scale=3, min_width=300):
                        prompt = gr.Textbox(
                            label="Prompt",
                            lines=2,
                            max_lines=12,
                            elem_id="poss-prompt",
                            max_length=MAX_PROMPT_CHARS,
                            placeholder="Ask something, or pick an example.",
                        )
                        with gr.Row(elem_id="poss-buttons"):
                            run_btn = gr.Button("▶ Run", variant="primary", elem_id="poss-run", min_width=80)
                            stop_btn = gr.Button("■ Stop", variant="stop", elem_id="poss-stop", min_width=80)
                            step_btn = gr.Button("Step a round", elem_id="poss-step", min_width=80)
                            replay_btn = gr.Button("↻ Replay", elem_id="poss-replay", min_width=80)
                        status = gr.HTML(
                            status_html("Type a prompt (or pick an example) and press Run."), elem_id="poss-status"
                        )
                    with gr.Column(scale=2, min_width=280, elem_id="poss-side"):
                        with gr.Column(elem_id="poss-examples"):
                            gr.HTML(f'<div class="poss-examples-label">{EXAMPLES_LABEL}</div>')
                            with gr.Row(elem_id="poss-example-buttons"):
                                example_btns = [
                                    gr.Button(
                                        recordings.example_label(e),
                                        size="sm",
                                        scale=0,
                                        min_width=40,
                                        elem_classes="poss-example",
                                    )
                                    for e in EXAMPLES
                                ]
                        with gr.Accordion(SETTINGS_LABEL, open=False, elem_id="poss-settings"):
                            preset_dd = gr.Dropdown(preset_choices, value=preset, label="Model (preset)")
                            method_boxes = gr.CheckboxGroup(
                                method_choices(first),
                                value=methods0,
                                label=f"Methods to compare (lanes, at most {MAX_LANES})",
                                elem_id="poss-methods",
                            )
                            note = gr.HTML(draft_note(first))
                            by_setting = controls.run_controls(d, gpu, precision)
                            gr.Markdown(SETTINGS_MORE, elem_classes="poss-note")
                        with gr.Accordion("Multi-turn conversation", open=False, elem_id="poss-multi-turn"):
                            with gr.Row():
                                multi_turn = gr.Checkbox(
                                    label="Multi-turn: continue the conversation", value=False, scale=3
                                )
                                new_conv = gr.Button("New conversation", size="sm", scale=1)
                            conversation = gr.HTML(conversation_html([]))
                legend = gr.HTML(legend_html("position"), elem_id="poss-legend")
                lane_parts: list[list[Any]] = []
                with gr.Row(equal_height=False, elem_id="poss-lanes"):
                    for i in range(MAX_LANES):
                        with gr.Column(visible=i < len(methods0), min_width=280, elem_classes="poss-lane") as col:
                            head = gr.HTML(
                                idle_head_html(methods0[i], first) if i < len(methods0) else "",
                                elem_classes="poss-lane-head-box",
                                elem_id=f"poss-lane{i}-head",
                            )
                            toks = gr.HTML(
                                '<div class="poss-lane-tokens"></div>',
                                elem_id=f"poss-lane{i}-tokens",
                                js_on_load=TOKEN_CLICK_JS,
                            )
                            with gr.Accordion("Plain text (copy)", open=False):
                                text = gr.Textbox(
                                    show_label=False, lines=5, max_lines=20, buttons=["copy"], interactive=False
                                )
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
                        lane_parts.append([col, head, toks, text, tree, slider, explain])
                with gr.Row():
                    color_by = gr.Radio(
                        ["draft position", "specialist"],
                        value="draft position",
                        label="Colour accepted draft tokens by",
                        scale=2,
                    )
                    show_rejected = gr.Checkbox(
                        value=False,
                        scale=1,
                        label="Show rejected drafts inline (struck through; always in the "
                        "tooltip of the target's token)",
                    )
                gr.Markdown(f"{TIMING_NOTE} {SPEED_STORY}", elem_id="poss-speed-story")
                gr.Markdown("### Charts (POSS and EAGLE on the same axes; each states its sample size)")
                with gr.Row(equal_height=False):
                    pos_acc_mode = gr.Radio(
                        ["conditional (POSS pos-acc)", "unconditional (share of rounds that drafted k)"],
                        value="conditional (POSS pos-acc)",
                        label="Position-wise acceptance",
                        scale=2,
                    )
                    charts_from = gr.Radio(
                        ["this run", user_settings.POOLED_VIEW, user_settings.CLASS_VIEW],
                        value="this run",
                        label="Charts show",
                        info="all my runs: every round of every run in this tab on this preset, "
                        "per method; everyone on this server: every finished live run of "
                        "every visitor, pooled per method (numbers only, never prompts or "
                        "text). Replays and loaded runs are never added",
                        elem_id="poss-charts-from",
                        scale=2,
                    )
                    forget_btn = gr.Button("Forget my runs", size="sm", scale=1, elem_id="poss-forget")
                class_timer = gr.Timer(CLASS_REFRESH_S, active=False)
                with gr.Row():
                    pos_acc_plot = gr.Plot(charts0["pos_acc"], show_label=False, elem_id="poss-chart-pos-acc")
                    dev_plot = gr.Plot(charts0["feature_deviation"], show_label=False, elem_id="poss-chart-deviation")
                with gr.Row():
                    hist_plot = gr.Plot(charts0["accept_hist"], show_label=False, elem_id="poss-chart-hist")
                    tps_plot = gr.Plot(charts0["tokens_per_s"], show_label=False, elem_id="poss-chart-tps")
                gr.Markdown(
                    f"Conditional: {figures.POS_ACC_FORMULA}; unconditional: {figures.POS_RATE_FORMULA}. "
                    "A round whose tree stopped before position k counts at neither. Feature deviation: "
                    "the draft's predicted feature vs the target's true one for the same token, with the "
                    "draft rolled forward over the text the target went on to write (measured once a lane "
                    "finishes, outside its timing; until then the chart shows accepted positions only, "
                    "which is conditional on acceptance). The strip under the acceptance chart shows which "
                    "specialist drafts each position and in what share of the rounds."
                )
                with gr.Accordion("Reset the class's pooled charts (the key the app was started with)", open=False):
                    with gr.Row():
                        class_key = gr.Textbox(
                            type="password",
                            show_label=False,
                            scale=3,
                            max_length=200,
                            placeholder="python app.py --class-reset-key KEY",
                            elem_id="poss-class-key",
                        )
                        class_reset_btn = gr.Button(
                            "Reset everyone's pooled runs", size="sm", scale=1, elem_id="poss-class-reset"
                        )
                with gr.Accordion("Save or load a run (replay without a model)", open=False):
                    with gr.Row():
                        save_btn = gr.Button("Save this run (JSONL)")
                        saved = gr.File(label="Saved run", interactive=False)
                        upload = gr.File(label="Load a saved run (.jsonl)", file_types=[".jsonl"], type="filepath")
            with gr.Tab("Evidence", id="evidence") as evidence_tab:
                evidence_view.build_tab(evidence_tab, preset, preset_choices)
            with gr.Tab("About", id="about"):
                gr.Markdown(about.INTRO)
                gr.HTML(about.DIAGRAM)
                gr.Markdown(about.METRICS)
                gr.Markdown(controls.settings_explained(gpu), elem_id="poss-settings-explained")
                hardware = gr.Markdown(about.hardware_markdown(None))

        # The Demo's outputs by name (render.OUTPUT_NAMES), and every other component a Demo handler changes: each
        # handler returns what it changes keyed by these names (render.by_component keys them for Gradio).
        shown = {"status": status, "legend": legend, "conversation": conversation}
        shown |= {f"lane{i}_{part}": c for i, parts in enumerate(lane_parts) for part, c in zip(LANE_PARTS, parts)}
        shown |= dict(zip(CHART_NAMES, (pos_acc_plot, dev_plot, hist_plot, tps_plot))) | {"hardware": hardware}
        assert tuple(shown) == OUTPUT_NAMES
        named = shown | {"class_key": class_key, "methods": method_boxes, "draft_note": note} | by_setting
        outputs = list(shown.values())

        def keyed(handler):
            return by_component(handler, named)

        # The Run settings (RunSettings.from_controls): prompt, Multi-turn, preset, methods, then one control per
        # setting the app offers, in the table's order; then the view toggles (View.from_controls).
        settings = [prompt, multi_turn, preset_dd, method_boxes] + [by_setting[n] for n in user_settings.APP_SETTINGS]
        view = [color_by, show_rejected, pos_acc_mode, charts_from]
        run = keyed(_gpu(controls.gathered(handlers.run_handler, settings=True)))
        step = keyed(_gpu(controls.gathered(handlers.step_handler, settings=True)))

        run_btn.click(run, settings + view, outputs, api_name="run", **live, show_progress="minimal")
        prompt.submit(run, settings + view, outputs, api_visibility="undocumented", **live, show_progress="minimal")
        step_btn.click(step, settings + view, outputs, api_name="step", **decode, show_progress="minimal")
        stop_btn.click(keyed(controls.gathered(handlers.stop_handler)), view, outputs, api_name="stop", **light)
        replay_btn.click(
            keyed(controls.gathered(handlers.replay_handler)),
            view,
            outputs,
            api_name="replay",
            **replays,
            show_progress="minimal",
        )
        # An example: its prompt goes into the box in the browser (no round trip), then its recording replays.
        for i, (button, example) in enumerate(zip(example_btns, EXAMPLES)):
            button.click(None, None, prompt, js=f"() => {json.dumps(example['prompt'])}", queue=False).then(
                keyed(controls.gathered(handlers.example_handler, leading=2)),
                [prompt, preset_dd] + view,
                outputs,
                api_name="example" if i == 0 else None,
                api_visibility="public" if i == 0 else "private",
                **replays,
                show_progress="minimal",
            )
        for control in view:
            control.change(
                keyed(controls.gathered(view_handlers.view_handler)), view, outputs, api_visibility="private", **light
            )
        charts_from.change(
            lambda source: gr.Timer(active=source == user_settings.CLASS_VIEW),
            charts_from,
            class_timer,
            api_visibility="private",
            **light,
        )
        class_timer.tick(
            keyed(controls.gathered(view_handlers.class_tick_handler)),
            view,
            [pos_acc_plot, dev_plot, hist_plot, tps_plot],
            api_visibility="private",
            **light,
        )
        class_reset_btn.click(
            keyed(controls.gathered(view_handlers.class_reset_handler, leading=1)),
            [class_key] + view,
            [class_key] + outputs,
            api_name="class_reset",
            **light,
        )
        forget_btn.click(
            keyed(controls.gathered(view_handlers.forget_handler)), view, outputs, api_visibility="private", **light
        )
        for i, parts in enumerate(lane_parts):
            for trigger in (parts[5].input, parts[5].release):  # dragging, and the number box
                trigger(
                    keyed(view_handlers.tree_for(i)),
                    parts[5],
                    [parts[4], parts[6]],
                    api_visibility="private",
                    trigger_mode="always_last",
                    **light,
                )
            # A clicked token picks its round: the slider, tree and account move there.
            parts[2].click(
                keyed(view_handlers.round_pick_for(i)),
                None,
                [parts[5], parts[4], parts[6]],
                api_visibility="private",
                trigger_mode="always_last",
                **light,
            )
        preset_dd.change(
            keyed(view_handlers.preset_handler),
            preset_dd,
            [method_boxes] + [by_setting[n] for n in control_defaults.PRESET_SETTINGS] + [note, status],
            api_visibility="private",
            **light,
        )
        method_boxes.change(
            keyed(view_handlers.idle_lanes_handler),
            [preset_dd, method_boxes],
            [c for parts in lane_parts for c in parts[:2]],
            api_visibility="private",
            **light,
        )
        new_conv.click(
            keyed(view_handlers.new_conversation_handler), None, conversation, api_visibility="private", **light
        )
        save_btn.click(saved_files.save_handler, None, saved, api_name="save_run", **light)
        upload.upload(
            keyed(controls.gathered(saved_files.load_handler, leading=1)),
            [upload] + view,
            outputs,
            api_name="load_run",
            concurrency_id="load",
            concurrency_limit=LOAD_CONCURRENCY,
            show_progress="hidden",
        )
        # Also /view: the outputs for a view (the load tool reads the class charts through it).
        demo.load(
            keyed(controls.gathered(view_handlers.load_handler)),
            view,
            outputs,
            api_name="view",
            api_visibility="undocumented",
            **light,
        )
        demo.unload(view_handlers.drop_session)
        gr.api(compare_endpoint(preset, wrap=_gpu), api_name="compare", **live)
    return demo
