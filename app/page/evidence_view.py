"""The Evidence tab: the benchmark's figures over many prompts for a preset's bundled drafts (assets/evidence/
<preset>.json), or for an evidence summary or results folder a user loads, drawn with the Demo tab's chart code."""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import gradio as gr

from app.server import limits
from app.views import about, render
from app.views.evidence_html import header_html, machine_of, message_html, table_html
from poss_core.base.errors import PossError
from poss_core.base.paths import assets_dir
from poss_core.models.presets import get_preset, presets
from poss_core.results import loading
from poss_core.results.analysis import OVERALL
from poss_core.results.evidence import Evidence, load_evidence
from poss_core.runtime import methods
from poss_core.views import figures

OUTPUT_NAMES = (
    "message",
    "header",
    "table",
    "tau",
    "speedup",
    "speedup_demo",
    "pos_acc",
    "pos_rate",
    "deviation",
    "heldout",
    "scope",
    "shown",
)
ALL_DATASETS = "all datasets"  # the scope picker's label for the pooled scope (OVERALL)
SCOPED = ("speedup", "pos_acc", "pos_rate", "deviation")  # the charts the scope picker redraws
# The preset box's least width: a preset's name and the box's arrow side by side (narrower, on a phone, the arrow
# covered the name); a narrower row puts the status line under it.
PRESET_MIN_PX = 240
DEMO_SUFFIX = "-demo"  # assets/evidence/<preset>-demo.json: the same drafts with the Demo tab's default tree, bf16
# The deviation picker: where the deviation is measured (metrics.DEVIATION_KINDS), the unbiased measure first.
DEVIATION_CHOICES = [
    ("along the continuation, from every position", "every_position"),
    ("along the continuation, from round roots only", "continuation"),
    ("tree nodes off the accepted path", "tree_off_path"),
    ("tree nodes on the accepted path", "tree_on_path"),
    ("accepted positions only (conditional)", "accepted"),
]

SPEED_WORDS = (
    about.SPEED_STORY
    + """

**Why the paper's tree is slower than plain decoding here.** Every round the target verifies the whole
tree (60 drafted tokens) in one forward pass. On a GPU that pass costs about as much as a one-token step, since a
GPU decoding one token is waiting on memory, not arithmetic; on a 2-core CPU a 61-token forward in float32 costs
several one-token steps, and the draft's six levels cost more on top. A τ of about 3 does not pay for that. The Demo's
default tree (32 nodes, depth 6) in bfloat16 keeps the verification near two one-token steps, and the same drafts
run faster than plain decoding: the second chart. How much faster depends on the CPU (×1.17–1.22 on a 2-core AMD
EPYC, ×1.47–1.58 on an Intel Xeon whose AMX multiplies bf16 in hardware). Acceptance (τ, pos-acc) does not depend on
the machine; speed does."""
)
# Uploads and typed folders loaded at once, in their own queue ("evidence"), apart from the decoding one: a build is
# Python work bounded by evidence.MAX_ROUNDS (seconds of one core), and one at a time leaves the other cores to the
# live runs however many loads wait. Each runs in a worker process (`loading.load_apart`), so its Python work never
# holds the interpreter lock the live runs need, and one still running after `loading.LOAD_SECONDS` is ended.
LOAD_CONCURRENCY = 1

INTRO = """### The benchmark's figures for these drafts, over many prompts
The Demo tab shows one prompt. This tab shows what `python -m poss_core.bench` measured over the evaluation sets:
τ per dataset with 95% intervals (bootstrap over questions), with each draft's change over EAGLE (the whole of POSS)
and over the HASS control (one layer trained like POSS: what specialisation adds); the drafts' held-out top-1 by
position from their training; the speed-up over plain decoding with the paper's tree and with the Demo's tree;
position-wise acceptance with Wilson 95% intervals over the rounds that drafted each position; and feature deviation
by position along the target's own continuation. Every chart states the sample it rests on."""

FOLDER_NOTE = (
    "Reads only folders under the project's `results/` (or the folder `python app.py --results-dir DIR` "
    f"or `{loading.RESULTS_ENV}` names): a public app must not read other files on its server. A folder from "
    "`python -m poss_core.bench ... --out results/NAME` is read as `results/NAME`."
)


def evidence_dir() -> Path:
    """Where each preset's evidence summary lives: $POSS_EVIDENCE_DIR, else assets/evidence/."""
    return Path(os.environ.get("POSS_EVIDENCE_DIR") or assets_dir() / "evidence")


def refresh_command(preset: str) -> str:
    """The commands that write a preset's evidence summary."""
    if preset == "smollm2-135m":
        return "python scripts/benchmark.py paper --evidence"
    drafts = ",".join(["plain", *get_preset(preset).drafts])
    return (
        f"python -m poss_core.bench --preset {preset} --methods {drafts} --data ../shared/data/eval/*.jsonl "
        f"--out results/{preset} && python -m poss_core.bench evidence results/{preset} "
        f"--out assets/evidence/{preset}.json"
    )


def load_results_path(text: Any) -> Evidence:
    """The summary of a typed results folder or file, read only from the project's results/ or RESULTS_DIR."""
    extra = limits.LIMITS.results_dir  # `python app.py --results-dir DIR`
    return loading.load_results_path(text, loading.results_roots(Path(extra) if extra else None))


# ---------------------------------------------------------------- charts


def scoped_charts(ev: Evidence, scope: str = OVERALL, kind: str = "every_position") -> dict[str, Any]:
    """The charts the scope picker redraws: speed-up, pos-acc, the unconditional rate and deviation (measured as
    `kind` says) on one dataset (or all of them pooled); each states the rounds it rests on, so a single dataset's
    wider intervals show."""
    colors = ev.colors()
    runs = ev.acceptance(scope)
    speed, tps = ev.speedups(scope)
    note = "" if scope == OVERALL else f"dataset: {scope}"
    m = ev.meta
    tree = f"{m.run_settings.get('tree_budget', '?')}-node tree, depth {ev.depth}, {m.dtype or '?'}; {machine_of(ev)}"
    return {
        "speedup": figures.speedup_figure(
            speed,
            tps,
            colors=colors,
            note="; ".join(x for x in (tree, note) if x),
            title="Speed-up with this run's tree",
        ),
        "pos_acc": figures.pos_acc_figure(
            runs, conditional=True, specialist_bands=specialist_rows(runs), colors=colors, note=note
        ),
        "pos_rate": figures.pos_acc_figure(runs, conditional=False, specialist_bands=None, colors=colors, note=note),
        "deviation": figures.feature_deviation_figure(runs, colors=colors, note=note, kind=kind),
    }


def specialist_rows(runs: dict[str, Any]) -> dict[str, list[int]]:
    """The specialist strip's rows under the pos-acc chart: the drafts with more than one specialist (POSS), each
    position's specialist; a one-layer draft's row would read S1 everywhere, and six rows leave no room to read."""
    return {label: list(st.specialists) for label, st in runs.items() if len(set(st.specialists or [])) > 1}


def scope_choices(ev: Evidence) -> list[tuple[str, str]]:
    return [(ALL_DATASETS, OVERALL)] + [(d, d) for d in ev.datasets]


def demo_speed_chart(demo: Evidence | None) -> Any:
    """The speed-up with the Demo tab's default tree, from the preset's second bundled summary."""
    title = "Speed-up with the Demo's tree"
    if demo is None:
        return figures.empty_figure("Bundled for the preset's own drafts only.", 340, title)
    speed, tps = demo.speedups(OVERALL)
    m = demo.meta
    note = (
        f"{m.run_settings.get('tree_budget', '?')}-node tree, depth {demo.depth}, {m.dtype or '?'}; {machine_of(demo)}"
    )
    return figures.speedup_figure(speed, tps, colors=demo.colors(), note=note, title=title)


def heldout_chart(preset: str | None, ev: Evidence | None) -> Any:
    """The drafts' held-out top-1 by position from their model cards (the preset's bundled drafts)."""
    top1: dict[str, list[float]] = {}
    colors = ev.colors() if ev else {}
    if preset in presets():
        for name, ref in get_preset(preset).drafts.items():
            card = Path(ref.source) / "model_card.json"
            if ref.trained and card.is_file():
                try:
                    values = json.loads(card.read_text()).get("heldout_top1_by_position_decoding") or []
                except (OSError, ValueError):
                    continue
                top1[methods.short_of(name)] = [float(v) for v in values][:16]
    return figures.heldout_top1_figure(
        top1,
        colors=colors,
        sizes="sequences held out of every draft's training data, decoding unroll (model_card.json)",
    )


def evidence_outputs(
    ev: Evidence, source: str, message: str = "", preset: str | None = None, demo: Evidence | None = None
) -> dict[str, Any]:
    """Every output of the tab for one summary, by name (OUTPUT_NAMES; the scope picker back on all datasets).
    `preset` and `demo` add what is bundled beside a preset's summary: its drafts' held-out figures and the
    speed-up with the Demo tab's tree."""
    sizes = "questions: " + ", ".join(f"{d} {n}" for d, n in ev.questions().items())
    out = {
        "message": message_html(message or f"Showing {source}.", "info"),
        "header": header_html(ev, source),
        "table": table_html(ev),
        "tau": figures.tau_figure(*ev.taus(), colors=ev.colors(), sizes=sizes),
        **scoped_charts(ev),
        "speedup_demo": demo_speed_chart(demo),
        "heldout": heldout_chart(preset, ev),
        "scope": gr.update(choices=scope_choices(ev), value=OVERALL, interactive=True),
        "shown": ev,
    }
    return {name: out[name] for name in OUTPUT_NAMES}


def empty_outputs(message: str, kind: str = "info") -> dict[str, Any]:
    """The tab with nothing to show: the message says why and what to run."""
    blank = figures.empty_figure("No evidence summary loaded.", 300)
    out = {
        "message": message_html(message, kind),
        "header": "",
        "table": "",
        "scope": gr.update(choices=[(ALL_DATASETS, OVERALL)], value=OVERALL, interactive=False),
        "shown": None,
    }
    return {name: out.get(name, blank) for name in OUTPUT_NAMES}


# ---------------------------------------------------------------- handlers
# Each returns the outputs it changes, by name (OUTPUT_NAMES); an output it leaves out keeps what it shows.
# `build_tab` keys them by component for Gradio (`render.by_component`).


def _guarded(load, source: str, preset: str | None = None, demo: Evidence | None = None) -> dict[str, Any]:
    """Outputs for `load()`'s summary; a bad file changes nothing else and says what to do (never a traceback)."""
    try:
        return evidence_outputs(load(), source, preset=preset, demo=demo)
    except PossError as err:
        return {"message": message_html(f"Could not load {source}: {err}", "error")}
    except Exception as err:  # noqa: BLE001 - a hostile file must never take the app down
        traceback.print_exc(file=sys.stderr)
        return {
            "message": message_html(f"Could not load {source}: {type(err).__name__} (see the server log).", "error")
        }


def bundled_handler(preset: str) -> dict[str, Any]:
    """The preset's committed evidence summary, or a message with the command that writes one."""
    if not isinstance(preset, str) or preset not in presets():
        return empty_outputs(f"preset={preset!r}: pick one of {', '.join(presets())}.", "error")
    path = evidence_dir() / f"{preset}.json"
    if not path.is_file():
        return empty_outputs(
            f"No benchmark summary is bundled for {preset} yet. To make one, run: {refresh_command(preset)}"
        )
    demo_path = evidence_dir() / f"{preset}{DEMO_SUFFIX}.json"
    try:
        demo = load_evidence(demo_path) if demo_path.is_file() else None
    except PossError as err:
        print(f"[poss] {demo_path.name} was not shown: {err}", file=sys.stderr)
        demo = None
    return _guarded(lambda: load_evidence(path), f"the bundled summary for {preset} ({path.name})", preset, demo)


def first_open_handler(preset: str, shown: Evidence | None) -> dict[str, Any]:
    """The tab opened: the bundled summary the first time (a summary on show stays as it is)."""
    return {} if shown is not None else bundled_handler(preset)


def upload_handler(file: Any) -> dict[str, Any]:
    """An uploaded evidence .json or records.jsonl."""
    if not file:
        return {}
    path = Path(file if isinstance(file, str) else getattr(file, "name", ""))
    if path.suffix not in (".json", ".jsonl"):
        return {"message": message_html(f"{path.name}: load an evidence summary (.json) or a records.jsonl.", "error")}
    return _guarded(lambda: loading.load_apart(path), f"the uploaded {path.name}")


def scope_handler(ev: Evidence | None, scope: Any, kind: Any = "every_position") -> dict[str, Any]:
    """The scoped charts for the dataset and deviation kind picked (the summary shown is kept in the session's
    state)."""
    if (
        not isinstance(ev, Evidence)
        or scope not in (OVERALL, *ev.datasets)
        or kind not in {v for _, v in DEVIATION_CHOICES}
    ):
        return {}
    return scoped_charts(ev, scope, kind)


def folder_handler(text: Any) -> dict[str, Any]:
    """A results folder (or summary file) typed into the path box, inside the folders it may read."""
    return _guarded(lambda: load_results_path(text), f"{str(text).strip()[:200]!r}")


# ---------------------------------------------------------------- layout


def build_tab(tab: gr.Tab, preset: str, preset_choices: list) -> None:
    """The tab's controls and charts, and their wiring (called inside `with gr.Tab("Evidence") as tab`). The bundled
    summary is drawn when the tab is first opened, not with every page load: a visitor who never opens it costs the
    server no figure, and a page opened while a live run holds the CPU answers its first click sooner."""
    c = _layout(preset, preset_choices)
    _wire(tab, c)


def _layout(preset: str, preset_choices: list) -> dict[str, Any]:
    """The tab's components by name: the preset, the message and table, the charts, the dataset and deviation
    pickers, and the loaders of another summary."""
    c: dict[str, Any] = {}
    gr.Markdown(INTRO)
    with gr.Row():
        c["preset"] = gr.Dropdown(
            preset_choices,
            value=preset,
            label="Preset (its bundled drafts' summary)",
            scale=1,
            min_width=PRESET_MIN_PX,
            elem_id="poss-evidence-preset",
        )
        c["message"] = gr.HTML(elem_id="poss-evidence-message")
    c["header"] = gr.HTML(elem_id="poss-evidence-header")
    c["table"] = gr.HTML(elem_id="poss-evidence-table")
    for row in (("tau", "heldout"), ("speedup", "speedup_demo")):
        with gr.Row():
            for name in row:
                c[name] = gr.Plot(show_label=False, elem_id=f"poss-evidence-{name.replace('_', '-')}")
    gr.Markdown(SPEED_WORDS, elem_id="poss-evidence-speed-words")
    with gr.Row():
        for name in ("pos_acc", "pos_rate"):
            c[name] = gr.Plot(show_label=False, elem_id=f"poss-evidence-{name.replace('_', '-')}")
    with gr.Row():
        c["deviation"] = gr.Plot(show_label=False, elem_id="poss-evidence-deviation", scale=3)
        with gr.Column(scale=1):
            c["scope"] = gr.Dropdown(
                [(ALL_DATASETS, OVERALL)],
                value=OVERALL,
                label="Dataset (speed-up, acceptance and deviation charts)",
                interactive=False,
                elem_id="poss-evidence-scope",
            )
            c["dev_kind"] = gr.Radio(
                DEVIATION_CHOICES,
                value="every_position",
                label="Deviation measured",
                info="from every position: chains start at each token of the target's continuation (a sample of "
                "the text); round roots: only where the last draft failed; accepted only: conditional on acceptance",
                elem_id="poss-evidence-dev-kind",
            )
    c["shown"] = gr.State(None)  # the summary on screen, for the dataset picker
    with gr.Accordion("Load another summary or results folder (e.g. your own GPU run)", open=False):
        with gr.Row():
            c["upload"] = gr.File(
                label="Evidence summary (.json) or records.jsonl", file_types=[".json", ".jsonl"], type="filepath"
            )
            with gr.Column():
                c["folder"] = gr.Textbox(
                    label="Results folder on this server",
                    placeholder="results/paper",
                    max_length=1000,
                    elem_id="poss-evidence-folder",
                )
                c["folder_btn"] = gr.Button("Load folder", elem_id="poss-evidence-load")
        gr.Markdown(FOLDER_NOTE)
    return c


def _wire(tab: gr.Tab, c: dict[str, Any]) -> None:
    """Each control to its handler, outputs keyed by name (OUTPUT_NAMES)."""
    named = {name: c[name] for name in OUTPUT_NAMES}
    outputs, scoped = list(named.values()), [named[name] for name in SCOPED]
    bundled, uploaded, typed = (
        render.by_component(h, named) for h in (bundled_handler, upload_handler, folder_handler)
    )
    rescoped = render.by_component(scope_handler, named)
    light = {"api_visibility": "private", "show_progress": "hidden"}
    loads = {"concurrency_id": "evidence", "concurrency_limit": LOAD_CONCURRENCY, "show_progress": "minimal"}
    c["preset"].change(bundled, c["preset"], outputs, **light)
    tab.select(render.by_component(first_open_handler, named), [c["preset"], c["shown"]], outputs, **light)
    c["upload"].upload(uploaded, c["upload"], outputs, api_name="load_evidence", **loads)
    c["folder_btn"].click(typed, c["folder"], outputs, api_visibility="private", **loads)
    c["folder"].submit(typed, c["folder"], outputs, api_visibility="private", **loads)
    pickers = [c["shown"], c["scope"], c["dev_kind"]]
    c["scope"].input(rescoped, pickers, scoped, **light)
    c["dev_kind"].input(rescoped, pickers, scoped, **light)
