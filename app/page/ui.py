"""The page: its header and three tabs (Demo, Evidence, About), laid out by app/page/layout.py and
app/page/evidence_view.py and wired by app/page/wiring.py; `build_demo()` is what app.py launches."""

from __future__ import annotations

import gradio as gr

from app.actions.api import compare_endpoint
from app.page import evidence_view, server_state
from app.page import layout as demo_layout
from app.page.wiring import LIVE, Wiring, wire_demo, wire_page
from app.server import limits
from app.sessions import recordings, state, user_settings
from app.views import about, chart_fit
from app.views.chart_view import chart_outputs
from app.views.render import OUTPUT_NAMES
from poss_core.models.hardware import cuda_available
from poss_core.models.presets import DEFAULT_PRESET, get_preset, presets

# Gradio's cache (uploaded runs, downloads it serves) is swept every CACHE_SWEEP_S seconds: files older than the
# cache age (`python app.py --cache-minutes`, 10 by default) are deleted, so the temp folder does not grow.
CACHE_SWEEP_S = 60
SPEED_STORY = about.SPEED_STORY
ASSETS = recordings.ASSETS
EXAMPLES = recordings.EXAMPLES
HEADER = """# POSS vs EAGLE: speculative decoding, live
A small draft guesses the next tokens and the model checks them all in one pass. **POSS** gives each draft position
its own specialist layer, **EAGLE** one layer for all: shaded tokens came from the draft, underlined ones from the
model."""


def _gpu(fn, duration: int = 120):
    """ZeroGPU's decorator where the `spaces` package is installed (it does nothing off a ZeroGPU Space)."""
    try:
        import spaces  # type: ignore
    except ImportError:
        return fn
    return spaces.GPU(duration=duration)(fn)


def preset_choices() -> list[tuple[str, str]]:
    """The presets as the Model dropdown lists them (a GPU preset says so)."""
    return [(f"{name}{' (GPU)' if p.device == 'gpu' else ''}", name) for name, p in presets().items()]


def build_demo(
    preset: str = DEFAULT_PRESET, precision: str = "auto", server: limits.ServerLimits | None = None
) -> gr.Blocks:
    """The whole app, serving `preset` first, with `precision` the Precision setting's initial value
    (`python app.py --dtype`) and `server` the limits it holds visitors to (installed here; default
    `ServerLimits()`): among them how many live comparisons decode at once (the others wait in live_queue.LIVE,
    their status saying where and for how long) and how old a file in Gradio's cache may get."""
    server = server or limits.ServerLimits()
    server_state.install(server)
    state.SESSIONS.start_reaper()  # paused Step sessions idle past SESSIONS.idle_s free their decoders
    state.APP_PRESET = preset
    first, gpu, choices = get_preset(preset), cuda_available(), preset_choices()
    # The charts a tab shows before its first run, drawn once here: a page load then sends no figure of its own.
    charts0 = {name: chart_fit.fit(fig) for name, fig in chart_outputs(state.Session(), user_settings.View()).items()}
    age = max(1, round(server.cache_age_s))
    with gr.Blocks(
        title="POSS vs EAGLE: speculative decoding",
        fill_width=True,
        analytics_enabled=False,
        delete_cache=(min(CACHE_SWEEP_S, age), age),
    ) as demo:
        gr.Markdown(HEADER, elem_id="poss-header")
        with gr.Tabs():
            with gr.Tab("Demo", id="demo"):
                c = demo_layout.demo_tab(first, choices, gpu, precision, charts0)
            with gr.Tab("Evidence", id="evidence") as evidence_tab:
                evidence_view.build_tab(evidence_tab, preset, choices)
            with gr.Tab("About", id="about"):
                c |= demo_layout.about_tab(gpu)
        assert all(name in c for name in OUTPUT_NAMES)
        w = Wiring(c, server.slots, _gpu)
        wire_demo(w)
        wire_page(demo, w)
        gr.api(compare_endpoint(preset, wrap=_gpu), api_name="compare", **LIVE)
    return demo
