"""What a class sees in its first minute, through the handlers (tiny-random preset, no browser): lanes named before
the first Run, badges in a student's words with the detail on hover, answers that end (an end mark, never the raw
marker; a cut answer says why), every speed figure naming its machine, precision and tree, a recording showing this
machine's figures once a live run here measured them, charts whose legends and subtitles fit their panels, settings
whose help is one line (the long story in About), and the bundled examples' answers read as sensible English."""

from __future__ import annotations

import re

import page
import plotly.graph_objects as go
import pytest
import wording
from answer_text import looping_phrase, sensible
from app_settings import req, run_settings

from app.actions import handlers, view_handlers
from app.page import evidence_view
from app.server import limits
from app.sessions import machine, recordings, state, user_settings
from app.views import chart_fit, control_defaults, controls, render, token_html
from poss_core.base import settings
from poss_core.models.numerics import MISMATCH, NEAR_TIE, Divergence
from poss_core.models.presets import DEFAULT_PRESET, get_preset
from poss_core.rounds.token_records import TokenRecord
from poss_core.runtime import compare, methods, saved_runs
from poss_core.runtime.run_spec import MAX_LANES

THIS_RUN = user_settings.View()
THREE = ["plain", "eagle", "poss2"]


def live(name: str, **kw) -> compare.Comparison:
    frames = list(handlers.run_handler(run_settings(**kw), THIS_RUN, request=req(name)))
    assert wording.says_done(frames[-1]), page.status(frames[-1])
    return state.SESSIONS.get(req(name)).comparison


def visible_text(html_text: str) -> str:
    """What a browser shows of some HTML: its text, tags and attributes (tooltips) left out."""
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", html_text))


# ---------------------------------------------------------------- before the first Run


def test_lanes_are_named_before_the_first_run_and_follow_the_methods_ticked(monkeypatch):
    monkeypatch.setattr(state, "APP_PRESET", "tiny-random")
    preset = get_preset("tiny-random")
    out = view_handlers.load_handler(THIS_RUN, request=req("idle"))
    shown = [i for i in range(MAX_LANES) if out[f"lane{i}_col"].visible]
    assert [page.lane_title(out[f"lane{i}_head"]) for i in shown] == [methods.label_of(m, preset) for m in THREE]
    assert all(page.lane_state(out[f"lane{i}_head"]) == "idle" for i in shown)
    # A page load draws no figure of its own (the page starts with the empty ones), so it costs almost nothing.
    assert not any(k.endswith(("_tree", "_slider")) or k in ("pos_acc", "tokens_per_s") for k in out)

    out = view_handlers.idle_lanes_handler("tiny-random", ["plain", "poss1"], request=req("idle"))
    assert [out[f"lane{i}_col"].visible for i in range(MAX_LANES)] == [True, True, False]
    assert page.lane_title(out["lane1_head"]) == methods.label_of("poss1", preset)
    # Redrawn later (a view toggle), the tab keeps the lanes ticked.
    again = view_handlers.view_handler(THIS_RUN, request=req("idle"))
    assert page.lane_title(again["lane1_head"]) == methods.label_of("poss1", preset)
    # Once a run is on show, ticking methods changes nothing until the next Run.
    live("idle", methods=THREE, max_new_tokens=4)
    assert view_handlers.idle_lanes_handler("tiny-random", ["plain"], request=req("idle")) == {}


# ---------------------------------------------------------------- badges a student reads


def divergence(kind: str, margin: float | None) -> Divergence:
    return Divergence(11, margin, kind, "the engine's own reason", 0.5, "a rounding near-tie")


def test_identity_badges_speak_words_with_the_detail_on_hover():
    done = page.badges(token_html.identity_badge([1, 2, 3], [1, 2, 3], True, True))["identity"]
    assert done.kind == "ok" and wording.says_identical_in_full(done)
    going = page.badges(token_html.identity_badge([1, 2], [1, 2, 3], True, False))["identity"]
    assert going.kind == "ok" and wording.says_identical(going) and not wording.says_identical_in_full(going)
    tie = page.badges(token_html.identity_badge([1, 9], [1, 2], True, True, divergence(NEAR_TIE, 0.12)))["identity"]
    assert tie.kind == "neutral" and wording.says_differs(tie, at=12, margin=0.12, tolerance=0.5, near_tie=True)
    bad = page.badges(token_html.identity_badge([1, 9], [1, 2], True, True, divergence(MISMATCH, 3.0)))["identity"]
    assert bad.kind == "bad" and wording.says_differs(bad, at=12, margin=3.0, tolerance=0.5)
    unmeasured = page.badges(token_html.identity_badge([1, 9], [1, 2], True, True, divergence(NEAR_TIE, None)))
    assert wording.says_differs(unmeasured["identity"], at=12, near_tie=True)
    for badge in (tie, bad):  # jargon stays in the tooltip: the words carry no logit, margin or tolerance
        assert not re.search(r"logit|margin|≤|tolerance", badge.text), badge.text
        assert "the engine's own reason" in badge.title


# ---------------------------------------------------------------- answers that end


def test_an_end_of_turn_token_is_an_end_mark_and_a_cut_answer_says_why():
    rec = TokenRecord("<|im_end|>", 3, "bonus", 1, special=True)
    view = token_html.tokens_html([TokenRecord("Hi", 3, "plain"), rec])
    assert "<|im_end|>" not in visible_text(view) and token_html.END_MARK in visible_text(view)
    assert "<|im_end|>" in page.tokens(view)[-1].title  # its name on hover
    assert page.tokens(view)[-1].source == "bonus"

    comp = live("cut", methods=THREE, max_new_tokens=5)
    heads = [render.lane_head_html(lane, comp, running=False) for lane in comp.lanes]
    assert {page.lane_state(h) for h in heads} == {"max_new_tokens"}
    assert all(wording.says_cut_off(h, 5) for h in heads)


def test_the_tree_and_the_round_told_in_words_show_the_end_mark_too():
    comp = live("tree-end", methods=["plain", "eagle"], max_new_tokens=6)
    lane = comp.lanes[1]
    last = lane.events[-1]
    lane.special_ids = {last.bonus}  # as if the last round's own token had been the end of the answer
    lane.bonus_texts[-1] = "<|im_end|>"
    tree = render.lane_tree(lane, None)
    texts = [str(t) for trace in tree.data for t in (trace.text or [])] + [a.text for a in tree.layout.annotations]
    assert token_html.END_MARK in " ".join(texts) and not any("<|im_end|>" in t for t in texts)
    account = render.lane_explain(lane, None)
    assert "im_end" not in account and token_html.END_MARK in visible_text(account)


def test_the_default_length_lets_an_answer_end_within_the_servers_cap():
    for name in (DEFAULT_PRESET, "tiny-random"):
        d = control_defaults.ui_defaults(get_preset(name))
        assert d["max_new_tokens"] == control_defaults.ANSWER_TOKENS
    assert 128 < control_defaults.ANSWER_TOKENS <= limits.CPU_MAX_NEW_TOKENS


# ---------------------------------------------------------------- every speed names its machine, precision and tree


def test_a_live_lane_names_this_machine_and_a_recording_its_own_then_this_machines_figures(tmp_path, monkeypatch):
    comp = live("where", methods=THREE, max_new_tokens=6, tree_budget=16, depth=4)
    monkeypatch.setattr(machine, "SPEEDS", machine.MachineSpeeds())  # as if no live run had been measured here
    assert comp.hardware["cpu"].startswith(machine.cpu_name())
    heads = [render.lane_head_html(lane, comp, running=False) for lane in comp.lanes]
    assert all(page.where_kind(h) == "live" and machine.cpu_name() in page.where(h) for h in heads)
    assert "16-node tree, depth 4" in page.where(heads[1]) and "node tree" not in page.where(heads[0])
    assert all(comp.hardware["dtype"] in page.where(h) for h in heads)

    # The same run saved and replayed as a recording of another machine: it says so, and shows this machine's
    # figures for the same lanes and settings once a live run here measured them (the run above, pooled).
    path = saved_runs.save_run(comp, tmp_path / "run.jsonl.gz", compact=True)
    recorded = saved_runs.load_run(path)
    recorded.hardware = {**recorded.hardware, "cpu": "Far Away CPU, 2 thread(s)"}
    replay = saved_runs.replay(recorded)
    compare.run_to_end(replay)
    before = [render.lane_head_html(lane, replay, running=False) for lane in replay.lanes]
    assert all(page.where_kind(h) == "recorded" and "Far Away CPU" in page.where(h) for h in before)
    assert not any(page.here_figures(h) for h in before)  # no live run measured here yet
    assert machine.SPEEDS.add_run(comp) == 3  # what a finished live run adds (Session.pool_run)
    after = [render.lane_head_html(lane, replay, running=False) for lane in replay.lanes]
    assert all(page.here_figures(h) for h in after)
    assert "×" in page.where(after[1]) and machine.cpu_name() in page.where(after[1])
    # Another tree is another figure: a recording with a different budget finds no figures here.
    other = saved_runs.replay(recorded)
    for lane in other.lanes:
        lane.tree_budget = None if lane.plain else 8
    compare.run_to_end(other)
    assert not page.here_figures(render.lane_head_html(other.lanes[1], other, running=False))


def test_one_sentence_says_why_speed_ups_differ_on_the_demo_and_the_evidence_tab():
    from app.page import ui
    from app.views import about

    story = about.SPEED_STORY
    for cause in ("tree", "precision", "machine", "recording"):
        assert cause in story
    assert story in ui.SPEED_STORY and story in evidence_view.SPEED_WORDS


# ---------------------------------------------------------------- charts that fit their panels


def test_charts_get_their_legend_under_the_plot_and_their_subtitles_wrapped():
    fig = evidence_view.bundled_handler(DEFAULT_PRESET)["tau"]  # seven drafts, a long subtitle of sample sizes
    before = fig.layout.title.text
    height = fig.layout.height
    fitted = chart_fit.fit(fig)
    lines = fitted.layout.title.text.split("<br>")
    assert len(lines) > len(before.split("<br>"))
    assert all(len(re.sub(r"<[^>]+>", "", line)) <= chart_fit.SUBTITLE_CHARS for line in lines)
    assert wording.chart_n(fitted) == wording.chart_n(go.Figure(layout={"title": {"text": before}}))
    assert fitted.layout.legend.yref == "container" and fitted.layout.legend.y == 0 and fitted.layout.height > height
    assert chart_fit.fit(fitted).layout.height == fitted.layout.height  # fitting twice changes nothing
    # Lines break between figures, never inside one.
    assert chart_fit.wrap_line("EAGLE n=1461, HASS n=1460", 14) == ["EAGLE n=1461,", "HASS n=1460"]
    assert chart_fit.fit("not a figure") == "not a figure"


def test_the_evidence_speeds_name_their_machine_tree_and_precision():
    out = evidence_view.bundled_handler(DEFAULT_PRESET)
    ev = out["shown"]
    where = f"{evidence_view.machine_of(ev)}, {ev.meta.run_settings['tree_budget']}-node tree, {ev.meta.dtype}"
    speed_heads = re.findall(r"<th[^>]*>([^<]*(?:speed-up|tokens/s)[^<]*)</th>", out["table"])
    assert len(speed_heads) == 2 and all(where in h for h in speed_heads), speed_heads
    for chart in ("speedup", "speedup_demo"):
        assert (
            "node tree" in out[chart].layout.title.text and evidence_view.machine_of(ev) in out[chart].layout.title.text
        )


def test_the_evidence_strip_shows_only_the_drafts_with_several_specialists():
    out = evidence_view.bundled_handler(DEFAULT_PRESET)
    strip = [t for t in out["pos_acc"].data if t.type == "heatmap"]
    assert len(strip) == 1
    rows = list(strip[0].y)
    assert rows and all(label.startswith("POSS") for label in rows), rows


# ---------------------------------------------------------------- settings: one line each, the rest in About


def test_the_precision_help_says_what_identity_the_attention_gives(monkeypatch):
    monkeypatch.delenv("POSS_ATTENTION", raising=False)
    assert control_defaults.cpu_lanes_exact() and "identical" in control_defaults.precision_hint(False)
    monkeypatch.setenv("POSS_ATTENTION", "sdpa")  # python app.py --attention sdpa
    assert not control_defaults.cpu_lanes_exact()
    assert "near-tie" in control_defaults.precision_hint(False) and "near-tie" in control_defaults.precision_note(False)


def test_settings_help_is_one_short_line_and_the_long_story_is_in_about():
    import gradio as gr

    with gr.Blocks():
        built = controls.run_controls(control_defaults.ui_defaults(get_preset("tiny-random")), False, "auto")
    for name, control in built.items():
        info = getattr(control, "info", None) or ""
        assert len(info) <= 90, (name, info)
    assert built["seed"].info == f"any whole number from 0 to {2**32 - 1:,}"
    about = controls.settings_explained(False)
    for name in user_settings.APP_SETTINGS:
        assert settings.SETTINGS[name].label in about
    assert control_defaults.precision_note(False) in about and controls.AUTO_BUDGET_INFO in about


# ---------------------------------------------------------------- the bundled examples


@pytest.mark.parametrize("index", range(len(recordings.EXAMPLES)))
def test_every_bundled_example_answers_in_sensible_english_and_ends(index):
    comp = saved_runs.load_run(recordings.recording_path(index, DEFAULT_PRESET))
    for lane in comp.lanes:
        assert not sensible(lane.text), f"{recordings.example_label(recordings.EXAMPLES[index])}: {sensible(lane.text)}"
        assert "<|im_end|>" not in lane.text and looping_phrase(lane.text) is None
        assert lane.summary["stop_reason"] == "eos", "the answer ends within the default length"
    assert comp.hardware.get("cpu") and comp.hardware.get("recorded")


def test_the_examples_cover_the_six_evaluation_kinds_with_short_labels():
    kinds = {e["family"].lower() for e in recordings.EXAMPLES}
    assert kinds == {"chat", "code", "math", "summary", "qa", "instruction"}
    assert all(len(recordings.example_label(e)) <= 40 for e in recordings.EXAMPLES)
