"""The Evidence tab: the benchmark's figures over many prompts for a preset's bundled drafts (assets/evidence/
<preset>.json), or for an evidence summary or results folder a user loads, drawn with the Demo tab's chart code."""

from __future__ import annotations

import atexit
import html
import json
import math
import multiprocessing
import os
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import gradio as gr

from poss_core import methods
from poss_core.errors import ConfigError, PossError
from poss_core.models.presets import get_preset, presets
from poss_core.paths import assets_dir, project_root
from poss_core.results.analysis import OVERALL
from poss_core.results.evidence import Evidence, load_evidence
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
DEMO_SUFFIX = "-demo"  # assets/evidence/<preset>-demo.json: the same drafts with the Demo tab's default tree, bf16
# The deviation picker: where the deviation is measured (metrics.DEVIATION_KINDS), the unbiased measure first.
DEVIATION_CHOICES = [
    ("along the continuation, from every position", "every_position"),
    ("along the continuation, from round roots only", "continuation"),
    ("tree nodes off the accepted path", "tree_off_path"),
    ("tree nodes on the accepted path", "tree_on_path"),
    ("accepted positions only (conditional)", "accepted"),
]

SPEED_WORDS = """**Why the paper's tree is slower than plain decoding here.** Every round the target verifies the whole
tree (60 drafted tokens) in one forward pass. On a GPU that pass costs about as much as a one-token step, since a
GPU decoding one token is waiting on memory, not arithmetic; on a 2-core CPU a 61-token forward in float32 costs
several one-token steps, and the draft's six levels cost more on top. A τ of about 3 does not pay for that. The Demo's
default tree (32 nodes, depth 6) in bfloat16, which this CPU multiplies in hardware (AMX), keeps the verification
cheap and the same drafts run faster than plain decoding: the second chart. Acceptance (τ, pos-acc) does not depend
on the machine; speed does."""
# The folder the path box may read besides the project's results/: `python app.py --results-dir DIR` or this.
RESULTS_ENV = "POSS_RESULTS_DIR"
RESULTS_DIR: Path | None = None  # set by build_demo from --results-dir
# Uploads and typed folders loaded at once, in their own queue ("evidence"), apart from the decoding one: a build is
# Python work bounded by evidence.MAX_ROUNDS (seconds of one core), and one at a time leaves the other cores to the
# live runs however many loads wait. Each runs in a worker process (`load_apart`), so its Python work never holds
# the interpreter lock the live runs need, and one still running after LOAD_SECONDS is ended.
LOAD_CONCURRENCY = 1
LOAD_SECONDS = 60.0

INTRO = """### The benchmark's figures for these drafts, over many prompts
The Demo tab shows one prompt. This tab shows what `python -m poss_core.bench` measured over the evaluation sets:
τ per dataset with 95% intervals (bootstrap over questions), with each draft's change over EAGLE (the whole of POSS)
and over the HASS control (one layer trained like POSS: what specialisation adds); the drafts' held-out top-1 by
position from their training; the speed-up over plain decoding with the paper's tree and with the Demo's tree;
position-wise acceptance with Wilson 95% intervals over the rounds that drafted each position; and feature deviation
by position along the target's own continuation. Every chart states the sample it rests on."""

FOLDER_NOTE = (
    "Reads only folders under the project's `results/` (or the folder `python app.py --results-dir DIR` "
    f"or `{RESULTS_ENV}` names): a public app must not read other files on its server. A folder from "
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


def results_roots() -> list[Path]:
    """The folders the path box may read from."""
    extra = RESULTS_DIR or (Path(os.environ[RESULTS_ENV]) if os.environ.get(RESULTS_ENV) else None)
    return [p.resolve() for p in ([extra] if extra else []) + [project_root() / "results"]]


NAME_MAX = 255  # the longest name one part of a path may have (Linux, macOS): longer is refused before any lookup


def resolve_results_path(text: Any) -> Path:
    """A typed results folder (or summary file) inside one of `results_roots()`, symlinks and `..` resolved first;
    anything else raises ConfigError saying what may be read, naming folders from the project (never the server's
    absolute paths)."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("type a results folder, e.g. results/paper.")
    text = text.strip()
    if len(text) > 1000 or "\x00" in text:
        raise ConfigError("that is not a folder path.")
    given = Path(text)
    if any(len(part.encode("utf-8", "surrogatepass")) > NAME_MAX for part in given.parts):
        raise ConfigError(f"a part of that path is longer than {NAME_MAX} characters: no folder has such a name.")
    roots = results_roots()
    candidates = [given] if given.is_absolute() else [project_root() / given] + [root / given for root in roots]
    try:
        resolved = [(c, c.resolve()) for c in candidates]  # symlinks and `..` resolved before the check
        allowed = [r for _, r in resolved if any(r.is_relative_to(root) for root in roots)]
        found = next((r for r in allowed if r.exists()), None)
        outside = any(c.exists() for c, _ in resolved)
    except (OSError, RuntimeError) as err:  # a link loop (RuntimeError), a name the system refuses
        raise ConfigError(
            f"that path could not be followed ({type(err).__name__}: a link loop or a name the system refuses)."
        ) from None
    if found is not None:
        return found
    if not allowed or outside:
        raise ConfigError(
            f"this app reads only folders under {_roots_text(roots)} (a public app must not read "
            f"other files on its server); copy the folder there, or start the app with --results-dir "
            f"DIR."
        )
    raise ConfigError(f"no such folder under {_roots_text(roots)}.")


def _roots_text(roots: list[Path]) -> str:
    """The allowed folders as a user knows them: relative to the project, else the --results-dir folder's name."""

    def shown(root: Path) -> str:
        if root.is_relative_to(project_root().resolve()):
            return f"{root.relative_to(project_root().resolve())}/"
        return f"the --results-dir folder ({root.name}/)"

    return " or ".join(shown(r) for r in roots)


def load_results_path(text: Any) -> Evidence:
    """The summary of a typed results folder or file: every file it reads is a regular file inside the allowed
    folders (a link in the folder to a file elsewhere is refused too)."""
    return load_apart(resolve_results_path(text), roots=results_roots())


# ---------------------------------------------------------------- rendering


def _fmt(v: float, digits: int = 2) -> str:
    return "–" if v is None or math.isnan(v) else f"{v:.{digits}f}"


def _interval_text(e, digits: int = 2, pct: bool = False) -> str:
    if math.isnan(e.value):
        return "–"
    if pct:
        return f"{e.value * 100:+.1f}% ({e.low * 100:+.1f} to {e.high * 100:+.1f})"
    if math.isnan(e.low) or (e.low == e.value == e.high):
        return _fmt(e.value, digits)
    return f"{e.value:.{digits}f} ({e.low:.{digits}f}–{e.high:.{digits}f})"


def header_html(ev: Evidence, source: str) -> str:
    """Where the figures come from: the command, the hardware, the date, the settings and the sample sizes."""
    m = ev.meta
    questions = ev.questions()
    rounds = ", ".join(
        f"{info.short} {ev.results[info.name].scopes[OVERALL].rounds}"
        for info in ev.draft_methods()
        if OVERALL in ev.results[info.name].scopes
    )
    identity = ev.identity
    check = (
        f"{identity.checked} turns compared with {identity.reference}: {identity.mismatches} mismatches, "
        f"{identity.near_ties} rounding near-ties"
        if identity.reference
        else "not run"
    )
    facts = [
        ("source", source),
        ("command", m.command),
        ("summary written by", m.summary_command if m.summary_command != m.command else ""),
        ("hardware", m.hardware),
        ("software", m.software),
        ("target", m.target),
        ("date", m.date),
        ("commit", m.git_commit or ""),
        ("settings", m.settings),
        ("tree budget", m.budget),
        ("questions", f"{sum(questions.values())} (" + ", ".join(f"{d} {n}" for d, n in questions.items()) + ")"),
        ("draft rounds", rounds),
        ("identity check", check),
    ]
    commands = ("command", "summary written by")
    rows = "".join(
        f"<li><b>{html.escape(k)}</b>: {_code(v) if k in commands else html.escape(v)}</li>" for k, v in facts if v
    )
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in m.notes)
    return (
        f'<div class="poss-evidence-header"><b>{html.escape(ev.preset)}</b>, depth {ev.depth}'
        f"<ul>{rows}{notes}</ul></div>"
    )


def _code(text: str) -> str:
    return f"<code>{html.escape(text)}</code>"


def table_html(ev: Evidence) -> str:
    """One row per method: τ with 95% intervals, τ over EAGLE, speed-up and tokens/s over runs, the sample sizes."""
    head = [
        "method",
        "τ, mean of datasets (95%)",
        "τ pooled (95%)",
        "τ vs EAGLE, mean of datasets (95%)",
        "τ vs HASS control, mean of datasets (95%)",
        "speed-up (± std)",
        "tokens/s (± std)",
        "runs",
        "draft rounds",
        "questions",
    ]
    rows = []
    for info in ev.methods:
        result = ev.results.get(info.name)
        if result is None or OVERALL not in result.scopes:
            continue
        cell = result.scopes[OVERALL]
        speed, tps = cell.speedup.estimate(), cell.tokens_per_s.estimate()
        speed_std, tps_std = speed.high - speed.value, tps.high - tps.value  # 0: a single run, no spread
        vs = result.tau_vs_eagle.estimate() if result.tau_vs_eagle else None
        vs_hass = result.tau_vs_hass.estimate() if result.tau_vs_hass else None
        cells = [
            info.label if info.trained else f"{info.label} (untrained)",
            "1 (plain)" if info.plain else _interval_text(result.tau_mean_of_datasets.estimate()),
            "" if info.plain else _interval_text(cell.tau.estimate()),
            _interval_text(vs, pct=True) if vs else "",
            _interval_text(vs_hass, pct=True) if vs_hass else "",
            f"×{_fmt(speed.value)}" + (f" ± {_fmt(speed_std)}" if speed_std else ""),
            _fmt(tps.value, 1) + (f" ± {_fmt(tps_std, 1)}" if tps_std else ""),
            str(speed.n),
            "" if info.plain else str(cell.rounds),
            str(cell.questions),
        ]
        swatch = f'<span style="color:{info.color}">■</span> '
        rows.append(
            "<tr>"
            + "".join(f"<td>{swatch if i == 0 else ''}{html.escape(c)}</td>" for i, c in enumerate(cells))
            + "</tr>"
        )
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return (
        f'<table class="poss-evidence-table" style="border-collapse:collapse;font-size:0.9em">'
        f"<tr>{th}</tr>{''.join(rows)}</table>"
    )


def scoped_charts(ev: Evidence, scope: str = OVERALL, kind: str = "every_position") -> dict[str, Any]:
    """The charts the scope picker redraws: speed-up, pos-acc, the unconditional rate and deviation (measured as
    `kind` says) on one dataset (or all of them pooled); each states the rounds it rests on, so a single dataset's
    wider intervals show."""
    colors = ev.colors()
    runs = ev.acceptance(scope)
    speed, tps = ev.speedups(scope)
    note = "" if scope == OVERALL else f"dataset: {scope}"
    m = ev.meta
    tree = f"{m.run_settings.get('tree_budget', '?')}-node tree, depth {ev.depth}, {m.dtype or '?'}"
    return {
        "speedup": figures.speedup_figure(
            speed,
            tps,
            colors=colors,
            note="; ".join(x for x in (tree, note) if x),
            title="Speed-up with this run's tree",
        ),
        "pos_acc": figures.pos_acc_figure(runs, conditional=True, colors=colors, note=note),
        "pos_rate": figures.pos_acc_figure(runs, conditional=False, specialist_bands=None, colors=colors, note=note),
        "deviation": figures.feature_deviation_figure(runs, colors=colors, note=note, kind=kind),
    }


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
        f"{m.run_settings.get('tree_budget', '?')}-node tree, depth {demo.depth}, {m.dtype or '?'}; "
        f"{m.hardware.split(',')[0].removeprefix('cpu:')}"
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
) -> list:
    """Every output of the tab for one summary, in OUTPUT_NAMES order (the scope picker back on all datasets).
    `preset` and `demo` add what is bundled beside a preset's summary: its drafts' held-out figures and the
    speed-up with the Demo tab's tree."""
    sizes = "questions: " + ", ".join(f"{d} {n}" for d, n in ev.questions().items())
    out = {
        "message": _message(message or f"Showing {source}.", "info"),
        "header": header_html(ev, source),
        "table": table_html(ev),
        "tau": figures.tau_figure(*ev.taus(), colors=ev.colors(), sizes=sizes),
        **scoped_charts(ev),
        "speedup_demo": demo_speed_chart(demo),
        "heldout": heldout_chart(preset, ev),
        "scope": gr.update(choices=scope_choices(ev), value=OVERALL, interactive=True),
        "shown": ev,
    }
    return [out[name] for name in OUTPUT_NAMES]


def empty_outputs(message: str, kind: str = "info") -> list:
    """The tab with nothing to show: the message says why and what to run."""
    blank = figures.empty_figure("No evidence summary loaded.", 300)
    out = {
        "message": _message(message, kind),
        "header": "",
        "table": "",
        "scope": gr.update(choices=[(ALL_DATASETS, OVERALL)], value=OVERALL, interactive=False),
        "shown": None,
    }
    return [out.get(name, blank) for name in OUTPUT_NAMES]


def _message(text: str, kind: str) -> str:
    icon = "⚠ " if kind == "error" else ""
    return f'<div class="poss-status {kind}">{icon}{html.escape(text, quote=False)}</div>'


# ---------------------------------------------------------------- loads in a worker process

_LOADER: Any = None  # multiprocessing Pool of one process, started by the first upload or folder load
_LOADER_LOCK = threading.Lock()


def _loader() -> Any:
    """The worker pool: forked from a server process that imported the loader once (the first load waits seconds for
    it, later ones a fraction of a second), one process, renewed after every load (a build's memory goes back when it
    ends). As multiprocessing does, a worker runs the entry script again as `__mp_main__`: app.py launches only under
    `if __name__ == "__main__"`."""
    global _LOADER
    with _LOADER_LOCK:
        if _LOADER is None:
            method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
            ctx = multiprocessing.get_context(method)
            if method == "forkserver":
                ctx.set_forkserver_preload(["poss_core.results.evidence"])
            _LOADER = ctx.Pool(processes=1, maxtasksperchild=1)
        return _LOADER


def _end_loader() -> None:
    """End the worker (and the load in it); the next load starts a fresh one."""
    global _LOADER
    with _LOADER_LOCK:
        if _LOADER is not None:
            _LOADER.terminate()
            _LOADER = None


atexit.register(_end_loader)


def run_apart(fn, *args) -> Any:
    """`fn(*args)` in the worker process, its exceptions raised here; ended with a ConfigError after LOAD_SECONDS."""
    job = _loader().apply_async(fn, args)
    try:
        return job.get(timeout=LOAD_SECONDS)
    except multiprocessing.TimeoutError:
        _end_loader()
        raise ConfigError(
            f"building the summary took longer than {LOAD_SECONDS:g} s and was stopped: summarise "
            f"the results with `python -m poss_core.bench evidence FOLDER --out FILE` and load that "
            f"file."
        ) from None


def load_apart(path: Path, roots: list[Path] | None = None) -> Evidence:
    """`load_evidence(path, roots)` in the worker process (see LOAD_CONCURRENCY)."""
    return run_apart(load_evidence, path, roots)


# ---------------------------------------------------------------- handlers


def _guarded(load, source: str, preset: str | None = None, demo: Evidence | None = None) -> list:
    """Outputs for `load()`'s summary; a bad file changes nothing else and says what to do (never a traceback)."""
    try:
        return evidence_outputs(load(), source, preset=preset, demo=demo)
    except PossError as err:
        return [_message(f"Could not load {source}: {err}", "error")] + [gr.skip()] * (len(OUTPUT_NAMES) - 1)
    except Exception as err:  # noqa: BLE001 - a hostile file must never take the app down
        traceback.print_exc(file=sys.stderr)
        return [_message(f"Could not load {source}: {type(err).__name__} (see the server log).", "error")] + [
            gr.skip()
        ] * (len(OUTPUT_NAMES) - 1)


def bundled_handler(preset: str) -> list:
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


def upload_handler(file: Any) -> list:
    """An uploaded evidence .json or records.jsonl."""
    if not file:
        return [gr.skip()] * len(OUTPUT_NAMES)
    path = Path(file if isinstance(file, str) else getattr(file, "name", ""))
    if path.suffix not in (".json", ".jsonl"):
        return [_message(f"{path.name}: load an evidence summary (.json) or a records.jsonl.", "error")] + [
            gr.skip()
        ] * (len(OUTPUT_NAMES) - 1)
    return _guarded(lambda: load_apart(path), f"the uploaded {path.name}")


def scope_handler(ev: Evidence | None, scope: Any, kind: Any = "every_position") -> list:
    """The scoped charts for the dataset and deviation kind picked (the summary shown is kept in the session's
    state)."""
    if (
        not isinstance(ev, Evidence)
        or scope not in (OVERALL, *ev.datasets)
        or kind not in {v for _, v in DEVIATION_CHOICES}
    ):
        return [gr.skip()] * len(SCOPED)
    charts = scoped_charts(ev, scope, kind)
    return [charts[name] for name in SCOPED]


def folder_handler(text: Any) -> list:
    """A results folder (or summary file) typed into the path box, inside the folders it may read."""
    return _guarded(lambda: load_results_path(text), f"{str(text).strip()[:200]!r}")


# ---------------------------------------------------------------- layout


def build_tab(demo: gr.Blocks, preset: str, preset_choices: list) -> None:
    """The tab's controls and charts, and their wiring (called inside `with gr.Tab("Evidence")`)."""
    gr.Markdown(INTRO)
    with gr.Row():
        preset_dd = gr.Dropdown(preset_choices, value=preset, label="Preset (its bundled drafts' summary)", scale=1)
        message = gr.HTML(elem_id="poss-evidence-message")
    header = gr.HTML(elem_id="poss-evidence-header")
    table = gr.HTML(elem_id="poss-evidence-table")
    with gr.Row():
        tau = gr.Plot(show_label=False, elem_id="poss-evidence-tau")
        heldout = gr.Plot(show_label=False, elem_id="poss-evidence-heldout")
    with gr.Row():
        speedup = gr.Plot(show_label=False, elem_id="poss-evidence-speedup")
        speedup_demo = gr.Plot(show_label=False, elem_id="poss-evidence-speedup-demo")
    gr.Markdown(SPEED_WORDS, elem_id="poss-evidence-speed-words")
    with gr.Row():
        pos_acc = gr.Plot(show_label=False, elem_id="poss-evidence-pos-acc")
        pos_rate = gr.Plot(show_label=False, elem_id="poss-evidence-pos-rate")
    with gr.Row():
        deviation = gr.Plot(show_label=False, elem_id="poss-evidence-deviation", scale=3)
        with gr.Column(scale=1):
            scope = gr.Dropdown(
                [(ALL_DATASETS, OVERALL)],
                value=OVERALL,
                label="Dataset (speed-up, acceptance and deviation charts)",
                interactive=False,
                elem_id="poss-evidence-scope",
            )
            dev_kind = gr.Radio(
                DEVIATION_CHOICES,
                value="every_position",
                label="Deviation measured",
                info="from every position: chains start at each token of the target's continuation (a sample of "
                "the text); round roots: only where the last draft failed; accepted only: conditional on acceptance",
                elem_id="poss-evidence-dev-kind",
            )
    shown = gr.State(None)  # the summary on screen, for the dataset picker
    with gr.Accordion("Load another summary or results folder (e.g. your own GPU run)", open=False):
        with gr.Row():
            upload = gr.File(
                label="Evidence summary (.json) or records.jsonl", file_types=[".json", ".jsonl"], type="filepath"
            )
            with gr.Column():
                folder = gr.Textbox(
                    label="Results folder on this server",
                    placeholder="results/paper",
                    max_length=1000,
                    elem_id="poss-evidence-folder",
                )
                folder_btn = gr.Button("Load folder", elem_id="poss-evidence-load")
        gr.Markdown(FOLDER_NOTE)
    outputs = [message, header, table, tau, speedup, speedup_demo, pos_acc, pos_rate, deviation, heldout, scope, shown]
    assert len(outputs) == len(OUTPUT_NAMES)
    light = {"api_visibility": "private", "show_progress": "hidden"}
    loads = {"concurrency_id": "evidence", "concurrency_limit": LOAD_CONCURRENCY, "show_progress": "minimal"}
    preset_dd.change(bundled_handler, preset_dd, outputs, **light)
    demo.load(bundled_handler, preset_dd, outputs, **light)
    upload.upload(upload_handler, upload, outputs, api_name="load_evidence", **loads)
    folder_btn.click(folder_handler, folder, outputs, api_visibility="private", **loads)
    folder.submit(folder_handler, folder, outputs, api_visibility="private", **loads)
    scope.input(scope_handler, [shown, scope, dev_kind], [speedup, pos_acc, pos_rate, deviation], **light)
    dev_kind.input(scope_handler, [shown, scope, dev_kind], [speedup, pos_acc, pos_rate, deviation], **light)
