"""The Gradio Blocks layout and its wiring to the handlers; `build_demo()` is what app.py launches."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import gradio as gr

from poss_core import compare, methods, saved_runs, settings
from poss_core.decoding.config import MAX_PROMPT_CHARS
from poss_core.models.hardware import cuda_available
from poss_core.models.presets import DEFAULT_PRESET, get_preset, presets
from poss_core.settings import LIMITS, PRECISIONS
from poss_core.views import figures

from . import (
    about,
    client_share,
    control_defaults,
    disk_budget,
    evidence_view,
    handlers,
    live_queue,
    recordings,
    saved_files,
    state,
    user_settings,
    view_handlers,
)
from .api import compare_endpoint
from .control_defaults import method_choices, precision_note, quantization_note, ui_defaults
from .render import OUTPUT_NAMES, conversation_html, draft_note
from .state import DEFAULT_METHODS
from .token_html import TOKEN_CLICK_JS, legend_html, status_html
from .user_settings import RunSettings, View

# Gradio's cache (uploaded runs, downloads it serves) is swept every CACHE_SWEEP_S seconds: files older than the
# cache age (`python app.py --cache-minutes`, 10 by default) are deleted, so the temp folder does not grow.
CACHE_SWEEP_S = 60
LOAD_CONCURRENCY = 2  # saved runs parsed at once (each is checked in full: up to a few seconds of CPU for a large one)
# Replays (the examples' recordings, ↻ Replay) at once: no model work, only drawing, so a whole class replays together
# without waiting behind the live runs (which take turns in live_queue.LIVE, not in this group).
REPLAY_CONCURRENCY = 64
CLASS_REFRESH_S = 5.0  # how often a tab showing "everyone on this server" checks the class pool for new runs
THREADS = 160  # Gradio's worker threads: a waiting live run and a replay each hold one while they sleep

TIMING_NOTE = (
    "Lanes run **in turns, one round each**, in one thread: each lane's tokens/s counts only its own "
    "rounds' compute time, i.e. the speed it would get alone on this machine."
)

ASSETS = recordings.ASSETS
EXAMPLES = recordings.EXAMPLES
CSS = (ASSETS / "app.css").read_text(encoding="utf-8")

# ---------------------------------------------------------------- layout


def _gpu(fn, duration: int = 120):
    """ZeroGPU's decorator where the `spaces` package is installed (it does nothing off a ZeroGPU Space)."""
    try:
        import spaces  # type: ignore
    except ImportError:
        return fn
    return spaces.GPU(duration=duration)(fn)


HEADER = """# POSS vs EAGLE: speculative decoding, live
A small draft guesses several tokens, the big model checks them in one pass and keeps what it agrees with.
**POSS** gives each draft position its own specialist layer; **EAGLE** uses one layer for all. Watch them side by
side against plain decoding: coloured tokens came from the draft, underlined ones from the target."""


def build_demo(
    preset: str = DEFAULT_PRESET,
    concurrency: int = 2,
    precision: str = "auto",
    call_limit_s: float | None = None,
    results_dir: str | None = None,
    call_fits: bool = True,
    cache_age_s: float = 600.0,
) -> gr.Blocks:
    """The whole app. `concurrency` caps how many live comparisons (runs, steps, API calls) decode at once, the
    slots of live_queue.LIVE (the others wait in line, their status saying where and for how long); `precision`
    is the Precision setting's initial value (`python app.py --dtype`); `call_limit_s` the most seconds one call
    decodes (state.CALL_LIMIT_S; `python app.py --max-call-seconds`); `results_dir` a folder the Evidence tab may
    read results from besides results/ (`python app.py --results-dir`); `call_fits` False offers only the tree-budget
    fits cached at start-up or on disk (state.CALL_FITS; `python app.py --no-call-fits`); `cache_age_s` how old a file
    in Gradio's cache may get before it is deleted (`python app.py --cache-minutes`)."""
    if call_limit_s is not None:
        state.CALL_LIMIT_S = float(call_limit_s)
    state.CALL_FITS = bool(call_fits)
    if results_dir:
        evidence_view.RESULTS_DIR = Path(results_dir)
    state.SESSIONS.start_reaper()  # paused Step sessions idle past SESSIONS.idle_s free their decoders
    live_queue.LIVE.slots = max(1, int(concurrency))
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

    age = max(1, round(cache_age_s))
    with gr.Blocks(
        title="POSS vs EAGLE: speculative decoding",
        fill_width=True,
        analytics_enabled=False,
        delete_cache=(min(CACHE_SWEEP_S, age), age),
    ) as demo:
        gr.Markdown(HEADER)
        with gr.Tabs():
            with gr.Tab("Demo", id="demo"):
                with gr.Row(equal_height=False):
                    with gr.Column(scale=3):
                        prompt = gr.Textbox(
                            label="Prompt",
                            lines=3,
                            max_lines=12,
                            elem_id="poss-prompt",
                            max_length=MAX_PROMPT_CHARS,
                            placeholder="Ask something, or pick an example below.",
                        )
                        with gr.Row():
                            run_btn = gr.Button("▶ Run", variant="primary", elem_id="poss-run")
                            step_btn = gr.Button("Step one round", elem_id="poss-step")
                            stop_btn = gr.Button("■ Stop", variant="stop", elem_id="poss-stop")
                            replay_btn = gr.Button("↻ Replay", elem_id="poss-replay")
                        with gr.Row():
                            multi_turn = gr.Checkbox(
                                label="Multi-turn: continue the conversation", value=False, scale=3
                            )
                            new_conv = gr.Button("New conversation", size="sm", scale=1)
                        conversation = gr.HTML(conversation_html([]))
                        examples = gr.Examples(
                            examples=[[e["prompt"]] for e in EXAMPLES],
                            inputs=[prompt],
                            example_labels=[f"{e['family']}: {e['prompt'][:48]}…" for e in EXAMPLES],
                            label="Examples: a click replays a recorded run at once; ▶ Run runs it live",
                        )
                    with gr.Column(scale=2):
                        with gr.Accordion("Settings", open=True):
                            preset_dd = gr.Dropdown(preset_choices, value=preset, label="Model (preset)")
                            method_boxes = gr.CheckboxGroup(
                                method_choices(first),
                                value=methods0,
                                label=f"Methods to compare (lanes, at most {compare.MAX_LANES})",
                                elem_id="poss-methods",
                            )
                            note = gr.HTML(draft_note(first))
                            controls = run_controls(d, gpu, precision)
                status = gr.HTML(
                    status_html("Type a prompt (or pick an example) and press Run."), elem_id="poss-status"
                )
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
                legend = gr.HTML(legend_html("position"), elem_id="poss-legend")
                gr.Markdown(TIMING_NOTE)
                lane_parts: list[list[Any]] = []
                with gr.Row(equal_height=False):
                    for i in range(compare.MAX_LANES):
                        with gr.Column(visible=i < len(methods0), min_width=320, elem_classes="poss-lane") as col:
                            head = gr.HTML(elem_classes="poss-lane-head-box")
                            toks = gr.HTML(
                                '<div class="poss-lane-tokens"></div>',
                                elem_id=f"poss-lane{i}-tokens",
                                js_on_load=TOKEN_CLICK_JS,
                            )
                            with gr.Accordion("Plain text (copy)", open=False):
                                text = gr.Textbox(
                                    show_label=False, lines=5, max_lines=20, buttons=["copy"], interactive=False
                                )
                            tree = gr.Plot(show_label=False, elem_id=f"poss-lane{i}-tree")
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
                    pos_acc_plot = gr.Plot(show_label=False, elem_id="poss-chart-pos-acc")
                    dev_plot = gr.Plot(show_label=False, elem_id="poss-chart-deviation")
                with gr.Row():
                    hist_plot = gr.Plot(show_label=False, elem_id="poss-chart-hist")
                    tps_plot = gr.Plot(show_label=False, elem_id="poss-chart-tps")
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
            with gr.Tab("Evidence", id="evidence"):
                evidence_view.build_tab(demo, preset, preset_choices)
            with gr.Tab("About", id="about"):
                gr.Markdown(about.INTRO)
                gr.HTML(about.DIAGRAM)
                gr.Markdown(about.METRICS)
                hardware = gr.Markdown(about.hardware_markdown(None))

        outputs = (
            [status, legend, conversation]
            + [c for parts in lane_parts for c in parts]
            + [pos_acc_plot, dev_plot, hist_plot, tps_plot, hardware]
        )
        assert len(outputs) == len(OUTPUT_NAMES)
        # The Run settings (RunSettings.from_controls): prompt, Multi-turn, preset, methods, then one control per
        # setting the app offers, in the table's order; then the view toggles (View.from_controls).
        settings = [prompt, multi_turn, preset_dd, method_boxes] + [controls[n] for n in user_settings.APP_SETTINGS]
        view = [color_by, show_rejected, pos_acc_mode, charts_from]
        run = gathered(handlers.run_handler, settings=True)
        step = gathered(handlers.step_handler, settings=True)

        run_btn.click(_gpu(run), settings + view, outputs, api_name="run", **live, show_progress="minimal")
        prompt.submit(
            _gpu(run), settings + view, outputs, api_visibility="undocumented", **live, show_progress="minimal"
        )
        step_btn.click(_gpu(step), settings + view, outputs, api_name="step", **decode, show_progress="minimal")
        stop_btn.click(gathered(handlers.stop_handler), view, outputs, api_name="stop", **light)
        replay_btn.click(
            gathered(handlers.replay_handler), view, outputs, api_name="replay", **replays, show_progress="minimal"
        )
        examples.load_input_event.then(
            gathered(handlers.example_handler, leading=2),
            [prompt, preset_dd] + view,
            outputs,
            api_name="example",
            **replays,
            show_progress="minimal",
        )
        for control in view:
            control.change(gathered(view_handlers.view_handler), view, outputs, api_visibility="private", **light)
        charts_from.change(
            lambda source: gr.Timer(active=source == user_settings.CLASS_VIEW),
            charts_from,
            class_timer,
            api_visibility="private",
            **light,
        )
        class_timer.tick(
            gathered(view_handlers.class_tick_handler),
            view,
            [pos_acc_plot, dev_plot, hist_plot, tps_plot],
            api_visibility="private",
            **light,
        )
        class_reset_btn.click(
            gathered(view_handlers.class_reset_handler, leading=1),
            [class_key] + view,
            [class_key] + outputs,
            api_name="class_reset",
            **light,
        )
        forget_btn.click(gathered(view_handlers.forget_handler), view, outputs, api_visibility="private", **light)
        for i, parts in enumerate(lane_parts):
            for trigger in (parts[5].input, parts[5].release):  # dragging, and the number box
                trigger(
                    view_handlers.tree_for(i),
                    parts[5],
                    [parts[4], parts[6]],
                    api_visibility="private",
                    trigger_mode="always_last",
                    **light,
                )
            # A clicked token picks its round: the slider, tree and account move there.
            parts[2].click(
                view_handlers.round_pick_for(i),
                None,
                [parts[5], parts[4], parts[6]],
                api_visibility="private",
                trigger_mode="always_last",
                **light,
            )
        preset_dd.change(
            view_handlers.preset_handler,
            preset_dd,
            [method_boxes] + [controls[n] for n in control_defaults.PRESET_SETTINGS] + [note, status],
            api_visibility="private",
            **light,
        )
        new_conv.click(view_handlers.new_conversation_handler, None, conversation, api_visibility="private", **light)
        save_btn.click(saved_files.save_handler, None, saved, api_name="save_run", **light)
        upload.upload(
            gathered(saved_files.load_handler, leading=1),
            [upload] + view,
            outputs,
            api_name="load_run",
            concurrency_id="load",
            concurrency_limit=LOAD_CONCURRENCY,
            show_progress="hidden",
        )
        # Also /view: the outputs for a view (the load tool reads the class charts through it).
        demo.load(
            gathered(view_handlers.view_handler), view, outputs, api_name="view", api_visibility="undocumented", **light
        )
        demo.unload(view_handlers.drop_session)
        gr.api(compare_endpoint(preset, wrap=_gpu), api_name="compare", **live)
    return demo


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


def run_controls(start: dict[str, Any], gpu: bool, precision: str) -> dict[str, gr.components.Component]:
    """One control per setting the app offers, made from its declaration (settings.SETTINGS: label, bounds, step,
    choices, help), laid out in CONTROL_ROWS; `start` holds the preset's tree defaults (control_defaults.ui_defaults),
    `gpu` and `precision` what this machine offers and starts with."""
    top_tokens = min(LIMITS["max_new_tokens"][1], user_settings.MAX_NEW_TOKENS or LIMITS["max_new_tokens"][1])
    # What differs from the declaration here: this machine's words and offers, and this server's cap.
    special: dict[str, dict[str, Any]] = {
        "max_new_tokens": {"maximum": top_tokens, "value": min(start["max_new_tokens"], top_tokens), "info": None},
        "precision": {
            "choices": [p for p in PRECISIONS if gpu or p != "float16" or p == precision],
            "value": precision,
            "info": precision_note(gpu),
        },
        "quantization": {"info": quantization_note(gpu)},
        "auto_budget": {"info": AUTO_BUDGET_INFO},
        "temperature": {"info": "0 = greedy: every lane must match plain decoding"},
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
        return gr.Number(precision=0, **{**common, "info": f"{lo:g} to {hi:g}"})
    low = lo + s.step if s.open_low else lo  # top-p's slider starts one step above 0
    return gr.Slider(common.pop("minimum", low), common.pop("maximum", hi), step=s.step, **common)


def gathered(handler, settings: bool = False, leading: int = 0):
    """`handler` as Gradio calls it: the request first (Gradio passes it by its type hint), then one value per input
    control. The first `leading` values pass as they are; the Run settings' controls (with `settings`) become one
    RunSettings and the view toggles one View, so the handler takes `(*leading, [settings,] view, request=...)`."""
    n = 4 + len(user_settings.APP_SETTINGS) if settings else 0

    def values(controls: tuple) -> list:
        lead, rest = list(controls[:leading]), controls[leading:]
        return lead + ([RunSettings.from_controls(*rest[:n])] if settings else []) + [View.from_controls(*rest[n:])]

    if inspect.isgeneratorfunction(handler):

        def streamed(request: gr.Request, *controls):
            yield from handler(*values(controls), request=request)

        return streamed

    def answered(request: gr.Request, *controls):
        return handler(*values(controls), request=request)

    return answered


def theme() -> gr.themes.Base:
    """Gradio's default look with system fonts: nothing is fetched from a font CDN, so the page works offline."""
    return gr.themes.Default(
        font=["ui-sans-serif", "system-ui", "Segoe UI", "Roboto", "sans-serif"],
        font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"],
    )


def decoding_events(demo: gr.Blocks) -> set[int]:
    """The events each client's queue share counts (app/client_share.py): the ones that decode (Run, its Enter key,
    Step, /compare) and Replay."""
    return {i for i, fn in demo.fns.items() if fn.concurrency_id in ("decode", "live") or fn.api_name == "replay"}


def launch_kwargs(demo: gr.Blocks | None = None) -> dict[str, Any]:
    """What `launch()` needs besides host and port: CSS and theme (Gradio 6 takes them at launch), the largest
    upload (a saved run; Gradio refuses bigger files before they reach a handler) and, given the demo, the middleware
    that gives each client its share of the queue and the one that limits uploads (`disk_budget`)."""
    kwargs: dict[str, Any] = {
        "css": CSS,
        "theme": theme(),
        "max_file_size": saved_runs.MAX_RUN_BYTES,
        "max_threads": THREADS,
    }
    if demo is not None:
        from starlette.middleware import Middleware

        kwargs["app_kwargs"] = {
            "middleware": [
                Middleware(client_share.QueueShareMiddleware, fn_indexes=decoding_events(demo)),
                # uploads are sized, rated per address and fitted under the disk cap before Gradio writes them
                Middleware(disk_budget.UploadLimitMiddleware, max_bytes=saved_runs.MAX_RUN_BYTES + 2**20),
            ]
        }
    return kwargs
