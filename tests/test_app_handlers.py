"""The app's event handlers called directly: token view, lane figures, charts and trees for known events, errors,
step/stop, save/load/replay, sessions and the API function. Uses the tiny-random preset (loads instantly)."""

from __future__ import annotations

import html
import importlib.util
import json
import math
import threading
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import page
import pytest
import torch
import wording
from app_settings import run_settings

from app.actions import api, handlers, saved_files, view_handlers
from app.page import launch
from app.sessions import state, user_settings
from app.views import control_defaults, render, token_html
from poss_core.base.errors import ModelLoadError, PromptError
from poss_core.models.hardware import cuda_available
from poss_core.models.presets import get_preset
from poss_core.rounds import metrics
from poss_core.rounds.events import DecodeSummary, DraftNode, FeatureDeviation, RoundEvent
from poss_core.rounds.token_records import round_records
from poss_core.runtime import compare, methods, saved_runs
from poss_core.runtime.run_spec import MAX_LANES
from poss_core.views import draft_tree, figures, tree_geometry

ROOT = Path(__file__).resolve().parents[1]
VIEW = (user_settings.View.from_controls("draft position", True, "conditional"),)


def settings(prompt="Hello there", methods=("plain", "eagle", "poss2"), max_new_tokens=12, **kw):
    """A handler's settings and view (see ui.build_demo: the settings controls, then the view toggles)."""
    tree = dict(depth=6, top_k=8, tree_budget=32)
    s = run_settings(prompt=prompt, methods=list(methods), max_new_tokens=max_new_tokens, **{**tree, **kw})
    return [s, *VIEW]


def req(name):
    return SimpleNamespace(session_hash=name)


# ---------------------------------------------------------------- known events


def prefill(token=40, ms=4.0):
    return RoundEvent.target_only(0, token, ms, 1, tokens=[token], text="A", wall_ms=ms, prefill=True)


def spec_round(r, new_tokens):
    """A round drafting a small tree: nodes 0,1 at depth 1 (node 0 accepted), node 2 at depth 2 (accepted, from
    specialist 1), node 3 and 4 at depth 3 under node 2 (both rejected); the target's correction is token 50."""
    nodes = [
        DraftNode(10, -1, 1, math.log(0.8), 0.8, 0),
        DraftNode(11, -1, 1, math.log(0.1), 0.1, 0),
        DraftNode(12, 0, 2, math.log(0.48), 0.6, 1),
        DraftNode(13, 2, 3, math.log(0.24), 0.5, 1),
        DraftNode(14, 2, 3, math.log(0.1), 0.2, 1),
    ]
    return RoundEvent(
        round=r,
        nodes=nodes,
        accepted=[0, 2],
        bonus=50,
        target_probs=[0.9, 0.05, 0.7, 0.1, 0.01],
        feature_deviation=[FeatureDeviation(1.0, 0.1), FeatureDeviation(3.0, 0.3)],
        draft_ms=2.0,
        verify_ms=6.0,
        new_tokens=new_tokens,
        tokens=[10, 12, 50],
        text="b<c>&",
        wall_ms=10.0,
    )


def miss_round(r, new_tokens):
    nodes = [DraftNode(20, -1, 1, math.log(0.5), 0.5, 0)]
    return RoundEvent(
        round=r,
        nodes=nodes,
        accepted=[],
        bonus=21,
        target_probs=[0.2],
        feature_deviation=[],
        draft_ms=1.0,
        verify_ms=5.0,
        new_tokens=new_tokens,
        tokens=[21],
        text="\n",
        wall_ms=8.0,
    )


def plain_round(r, token):
    return RoundEvent.target_only(r, token, 3.0, r + 1, tokens=[token], text="x", wall_ms=4.0)


SPEC_EVENTS = [prefill(), spec_round(1, 4), miss_round(2, 5), spec_round(3, 8)]
PIECES = [["A"], ["b", "<c>", "&"], ["\n"], ["b", "<c>", "&"]]
LABELS = [[], ["b", "z", "<c>", "q", "w"], ["y"], ["b", "z", "<c>", "q", "w"]]
PLAIN_TOKENS = [40, 10, 12, 50, 21, 10, 12, 50]


def known_comparison(temperature=0.0, plain_tokens=PLAIN_TOKENS):
    """A finished comparison built from known events, no model."""
    spec = compare.Lane("eagle", "EAGLE")
    for e, p, lab in zip(SPEC_EVENTS, PIECES, LABELS):
        spec.add(e, p, lab, "t")
    spec.summary = {"text": "", "stop_reason": "max_new_tokens", "stats": {}}
    plain = compare.Lane("plain", methods.label_of("plain"))
    plain.add(prefill(plain_tokens[0]), ["A"], [], "A")
    for r, tok in enumerate(plain_tokens[1:], start=1):
        plain.add(plain_round(r, tok), ["x"], [], "x")
    plain.summary = {"text": "", "stop_reason": "max_new_tokens", "stats": {}}
    run_spec = compare.RunSpec("hi", ["plain", "eagle"], "tiny-random", temperature=temperature)
    return compare.Comparison(run_spec, [plain, spec])


def test_round_records_classify_tokens():
    recs = round_records(SPEC_EVENTS[1], PIECES[1], LABELS[1])
    assert [r.source for r in recs] == ["draft", "draft", "corrected"]
    assert [(r.position, r.specialist) for r in recs[:2]] == [(1, 0), (2, 1)]
    assert recs[0].draft_prob == pytest.approx(0.8) and recs[0].target_prob == pytest.approx(0.9)
    assert recs[1].target_prob == pytest.approx(0.7)
    # Rejected at position 3: the children of the last accepted node (2), best draft score first.
    assert [r.text for r in recs[2].rejected] == ["q", "w"]
    assert recs[2].rejected[0].target_prob == pytest.approx(0.1)
    assert round_records(SPEC_EVENTS[0], ["A"], [])[0].source == "prefill"
    assert round_records(plain_round(1, 5), ["x"], [])[0].source == "plain"


def test_tokens_html_escapes_and_colours():
    recs = [r for e, p, lab in zip(SPEC_EVENTS, PIECES, LABELS) for r in round_records(e, p, lab)]
    out = token_html.tokens_html(recs, "position", show_rejected=True)
    assert "<c>" not in out and "&lt;c&gt;" in out and "&amp;" in out  # token text is escaped
    toks = page.tokens(out)
    assert [t.text for t in toks] == [p for pieces in PIECES for p in pieces]
    assert [(t.source, t.position, t.specialist) for t in toks] == [
        ("prefill", None, None),
        ("draft", 1, 1),
        ("draft", 2, 2),
        ("corrected", None, None),
        ("corrected", None, None),
        ("draft", 1, 1),
        ("draft", 2, 2),
        ("corrected", None, None),
    ]
    assert [t.round for t in toks] == [0, 1, 1, 1, 2, 3, 3, 3]
    assert [(t.round, t.text) for t in page.tokens(out, rejected=True) if t.rejected] == [(1, "q"), (2, "y"), (3, "q")]
    assert [t.title for t in toks] == [token_html.tooltip(r) for r in recs]  # each token's tooltip is its record's
    assert wording.says_accepted_draft(toks[1].title, 1) and wording.says_probs(toks[1].title, 0.8, 0.9)
    assert '<span class="nl">↵</span>' in out  # a newline token stays visible
    by_spec = token_html.tokens_html(recs, "specialist", show_rejected=False)
    assert page.view_classes(by_spec) == {"by-specialist", "hide-rej"}


def test_lane_update_for_a_known_event_stream():
    """A lane fed a known stream through its source: records, figures in the header, badge, tree and slider."""
    lane = compare.Lane(
        "eagle",
        "EAGLE",
        source=iter(
            [(e, p, lab, "t") for e, p, lab in zip(SPEC_EVENTS, PIECES, LABELS)]
            + [{"text": "", "stop_reason": "eos", "stats": {}}]
        ),
    )
    while lane.advance():
        pass
    assert lane.finished and lane.stop_reason == "eos"
    assert lane.token_ids == [40, 10, 12, 50, 21, 10, 12, 50]
    comp = known_comparison()
    comp.lanes[1] = lane
    session = state.Session(comparison=comp)
    out = render.render(session, user_settings.View(show_rejected=True))
    head = out["lane1_head"]
    tps = metrics.tokens_per_s(SPEC_EVENTS)  # 8 tokens over 32 ms
    speedup = metrics.speedup(tps, metrics.tokens_per_s(comp.lanes[0].events))
    assert page.stats(head) == {
        "tokens_per_s": f"{tps:.1f}",
        "tau": f"{metrics.tau(SPEC_EVENTS):.2f}",  # (3+1+3)/3
        "rounds": "3",
        "tokens": "8",
        "vs_plain": f"×{speedup:.2f}",
    }
    assert page.identity(head).kind == "ok" and wording.says_identical(page.identity(head))
    assert page.lane_state(head) == "eos"
    assert out["lane1_tokens"].count("tok draft") == 4
    assert out["lane1_text"] == "".join(e.text for e in SPEC_EVENTS)
    tree = out["lane1_tree"]
    assert wording.tree_title(tree) == ("EAGLE", 3)
    assert out["lane1_slider"].maximum == 3 and out["lane1_slider"].value == 3
    assert out["lane2_col"].visible is False and out["lane0_col"].visible is True


def test_identity_badge_reports_the_first_difference():
    comp = known_comparison(plain_tokens=[40, 10, 99, 50, 21, 10, 12, 50])
    badge = page.identity(render.lane_head_html(comp.lanes[1], comp, running=False))  # replay-like: no margin probe
    assert badge.kind == "bad" and wording.says_differs(badge, at=3)  # fp32 on a CPU promises exact identity

    def margin_of(want, index, got):
        assert index == 2 and got != want[2]
        return margin

    for dtype, margin, kind, tolerance in [
        ("bfloat16", 0.3, "neutral", 0.5),
        ("bfloat16", 2.0, "bad", None),
        ("float32", 0.004, "neutral", 0.01),
        ("bfloat16", None, "neutral", None),
    ]:
        comp = known_comparison(plain_tokens=[40, 10, 99, 50, 21, 10, 12, 50])
        comp.hardware["dtype"] = dtype
        comp.margin_probe = None if margin is None else margin_of
        badge = page.identity(render.lane_head_html(comp.lanes[1], comp, running=False))
        assert badge.kind == kind
        assert wording.says_differs(badge, at=3, margin=margin, tolerance=tolerance, near_tie=kind == "neutral")
    sampled = known_comparison(temperature=0.7)
    badge = page.identity(render.lane_head_html(sampled.lanes[1], sampled, running=False))
    assert badge.kind == "neutral" and wording.says_sampling(badge)


def test_tree_figure_data():
    e = SPEC_EVENTS[1]
    fig = draft_tree.tree_figure(e, labels=LABELS[1], root_label="A", bonus_label="t")
    traces = {t.name: t for t in fig.data}
    x, y = tree_geometry.tree_layout(e)
    assert x == [0.0, 1.0, 1.0, 2.0, 3.0, 3.0]
    # Accepted path: root -> node 0 -> node 2, then on to the target's token one step deeper.
    path = traces["accepted path"]
    assert list(path.x) == [0.0, 1.0, None, 1.0, 2.0, None, 2.0, 3.0]
    assert list(path.y[:2]) == [y[0], y[1]]
    s1, s2 = traces["specialist S1"], traces["specialist S2"]
    # "<c>" goes to Plotly as entities, which it shows as "<c>" (raw, it would read it as a tag and show nothing).
    assert list(s1.text) == ["b", "z"] and list(s2.text) == ["&lt;c&gt;", "q", "w"]
    assert s1.marker.color == figures.specialist_color(0) and s2.marker.color == figures.specialist_color(1)
    assert list(s1.marker.opacity) == [1.0, 0.4] and list(s2.marker.opacity) == [1.0, 0.4, 0.4]
    assert s1.marker.size[0] == pytest.approx(8 + 18 * 0.8)
    bonus = traces["target's token"]
    assert list(bonus.x) == [3.0] and list(bonus.text) == ["t"]
    # Rejected edges are the faded ones: node 1 (from root) and nodes 3, 4 (from node 2).
    assert list(traces["edges"].x) == [0.0, 1.0, None, 2.0, 3.0, None, 2.0, 3.0, None]
    assert wording.says_prefill_tree(draft_tree.tree_figure(SPEC_EVENTS[0]))
    assert wording.says_plain_tree(draft_tree.tree_figure(plain_round(1, 3)))


def test_chart_figures_data():
    plain = [prefill()] + [plain_round(r, 5) for r in range(1, 4)]
    runs_ = {"EAGLE": SPEC_EVENTS, "Plain": plain}
    fig = figures.pos_acc_figure(runs_, conditional=True)
    lines = [t for t in fig.data if t.type == "scatter"]
    assert [t.name for t in lines] == ["EAGLE"]  # plain decoding has no draft positions
    hist = metrics.accept_hist(SPEC_EVENTS)
    assert hist == [1, 0, 2, 0]
    assert metrics.pos_acc(SPEC_EVENTS) == pytest.approx([2 / 3, 1.0, 0.0])
    assert list(lines[0].y) == pytest.approx(metrics.pos_acc(SPEC_EVENTS))
    assert wording.chart_n(fig) == {"EAGLE": 3}
    band = next(t for t in fig.data if t.type == "heatmap")
    assert [list(row) for row in band.z] == [[0, 1, 1]]  # specialist per position, read off the nodes
    unc = figures.pos_acc_figure(runs_, conditional=False, specialist_bands=None)
    assert list(unc.data[0].y) == pytest.approx(metrics.pos_rate(SPEC_EVENTS))
    assert all(t.type != "heatmap" for t in unc.data)
    dev = figures.feature_deviation_figure(runs_)
    assert list(dev.data[0].y) == [1.0, 3.0] and wording.chart_n(dev) == {"EAGLE": 2}
    assert list(figures.feature_deviation_figure(runs_, metric="cosine").data[0].y) == pytest.approx([0.1, 0.3])
    bars = figures.accept_hist_figure(runs_)
    assert list(bars.data[0].y) == pytest.approx([1 / 3, 0, 2 / 3, 0])
    tps = figures.tokens_per_s_figure(runs_)
    assert [t.name for t in tps.data] == ["EAGLE", "Plain"]
    assert list(tps.data[0].y) == pytest.approx([y for _, y in metrics.tokens_per_s_series(SPEC_EVENTS)])
    assert wording.says_no_draft_rounds(figures.pos_acc_figure({"Plain": plain}))


# ---------------------------------------------------------------- handlers on the tiny model


def test_run_streams_three_lanes_identical_to_plain():
    frames = list(handlers.run_handler(*settings(max_new_tokens=16), request=req("run")))
    assert len(frames) >= 3  # loading, at least one live frame, the final one
    out = frames[-1]
    assert page.status(out).kind == "info" and wording.says_done(out), out["status"]
    for i in range(3):
        assert out[f"lane{i}_col"].visible is True
        assert page.stats(out[f"lane{i}_head"])["tokens"] == "16"
    comp = state.SESSIONS.get(req("run")).comparison
    for i in (1, 2):
        assert page.identity(out[f"lane{i}_head"]).kind == "ok"
        assert comp.lanes[i].token_ids == comp.lanes[0].token_ids
    assert out["lane0_text"] == comp.lanes[0].summary["text"]
    assert [t.name for t in out["tokens_per_s"].data] == ["Plain", "EAGLE", "POSS-2"]


def test_prompt_lookup_and_assisted_lanes_get_the_identity_badge_draft_colours_and_an_honest_tree():
    frames = list(
        handlers.run_handler(
            *settings("abc abc abc abc abc", methods=("plain", "pld", "assisted"), max_new_tokens=24),
            request=req("peer"),
        )
    )
    out = frames[-1]
    comp = state.SESSIONS.get(req("peer")).comparison
    assert [page.lane_title(out[f"lane{i}_head"]) for i in (1, 2)] == [lane.label for lane in comp.lanes[1:]]
    offered = methods.lane_methods(get_preset("tiny-random"))
    assert [lane.label for lane in comp.lanes[1:]] == [offered["pld"].label, offered["assisted"].label]
    for i in (1, 2):
        assert page.identity(out[f"lane{i}_head"]).kind == "ok"
        assert comp.lanes[i].token_ids == comp.lanes[0].token_ids
    lane = comp.lanes[1]
    candidates = [t for t in page.tokens(out["lane1_tokens"]) if t.source == "draft"]
    assert candidates and {t.position for t in candidates} >= {1}  # accepted candidates shaded like draft tokens
    assert all(t.specialist == 1 and wording.UNOBSERVABLE in t.title for t in candidates)  # tooltip: what is unknown
    r = next(i for i, e in enumerate(lane.events) if e.accepted and not e.prefill)
    tree = render.lane_tree(lane, r)
    assert wording.says(tree, wording.UNOBSERVABLE) and len(tree.data) >= 3
    assert wording.says(render.lane_explain(lane, r).lower(), wording.UNOBSERVABLE)


def test_the_default_run_gives_every_draft_lane_the_same_full_depth_tree():
    """Like for like by default: one budget, no fitted budget and no depth stop, so every draft lane drafts the same
    tree to the full depth and every specialist drafts every round; the fastest tree is a choice."""
    from poss_core.models.presets import get_preset

    d = control_defaults.ui_defaults(get_preset("tiny-random"))
    assert d["auto_budget"] is False
    run = settings(
        max_new_tokens=10,
        depth=d["depth"],
        top_k=d["top_k"],
        tree_budget=d["tree_budget"],
        auto_budget=d["auto_budget"],
    )
    list(handlers.run_handler(*run, request=req("same-tree")))
    comp = state.SESSIONS.get(req("same-tree")).comparison
    drafts = [lane for lane in comp.lanes if not lane.plain]
    assert len(drafts) == 2
    assert {(lane.tree_budget, lane.depth_stop, lane.budget_auto) for lane in drafts} == {
        (d["tree_budget"], 0.0, False)
    }
    for lane in drafts:
        rounds = [e for e in lane.events if e.nodes]
        assert rounds and all(len(e.draft_ms_by_depth) == d["depth"] for e in rounds)  # drafted to the full depth


def test_auto_budget_fits_each_draft_lane_once_then_reads_the_cache(tmp_path, monkeypatch):
    from poss_core import autobudget
    from poss_core.autobudget import cache, calibration

    monkeypatch.setattr(cache, "choice_cache_path", lambda: tmp_path / "choices.json")
    monkeypatch.setattr(cache, "curve_cache_path", lambda: tmp_path / "curves.json")
    frames = list(handlers.run_handler(*settings(max_new_tokens=8, auto_budget=True), request=req("auto")))
    statuses = [f["status"] for f in frames]
    assert len({s for s in statuses if wording.says(s, wording.FITTING)}) == 2  # once per draft lane
    comp = state.SESSIONS.get(req("auto")).comparison
    plain, eagle, poss2 = comp.lanes
    assert plain.tree_budget is None and eagle.budget_auto and poss2.budget_auto
    assert all(2 <= lane.tree_budget <= autobudget.MAX_BUDGET for lane in (eagle, poss2))
    assert eagle.token_ids == plain.token_ids  # any budget is lossless
    assert page.stats(frames[-1]["lane1_head"])["budget"] == f"{eagle.tree_budget} auto"
    # The fit's dynamic depth stop travels with its budget, and the lane header names it when there is one.
    fitted = json.loads((tmp_path / "choices.json").read_text()).values()
    assert sorted((c["budget"], c["depth_stop"]) for c in fitted) == sorted(
        (lane.tree_budget, lane.depth_stop) for lane in (eagle, poss2)
    )
    for i, lane in ((1, eagle), (2, poss2)):
        shown = page.stats(frames[-1][f"lane{i}_head"])
        assert shown.get("depth_stop") == (f"{lane.depth_stop:g}" if lane.depth_stop else None)

    def no_calibration(*a, **k):
        raise AssertionError("the cached choice should be used")

    monkeypatch.setattr(calibration, "auto_tree_budget", no_calibration)
    frames = list(handlers.run_handler(*settings(max_new_tokens=4, auto_budget=True), request=req("auto")))
    assert not any(wording.says(f, wording.FITTING) for f in frames)
    again = state.SESSIONS.get(req("auto")).comparison
    assert [lane.tree_budget for lane in again.lanes] == [None, eagle.tree_budget, poss2.tree_budget]


@pytest.mark.parametrize(
    "change,message",
    [
        (dict(prompt="   "), wording.PROMPT_EMPTY),
        (dict(methods=[]), wording.NO_METHOD),
        (dict(methods=["plain", "eagle", "poss1", "poss2"]), wording.too_many_lanes(MAX_LANES)),
        (dict(tree_budget=1), wording.out_of_range("tree_budget", 1)),
        (dict(top_p=0.0), wording.out_of_range("top_p", 0.0)),
        (dict(methods=["plain", "hass"]), wording.method_unavailable("hass")),
        (dict(prompt="word " * 200), wording.over_context(512)),
        (dict(precision="int4"), wording.not_one_of("precision", "int4", "auto", "float32")),
    ],
)
def test_bad_inputs_show_a_message_not_a_traceback(change, message):
    out = list(handlers.run_handler(*settings(**change), request=req("bad")))[-1]
    status = page.status(out)
    assert status.kind == "error" and wording.says(status, message), status
    assert "Traceback" not in out["status"]


def test_gpu_preset_on_cpu_and_failing_model_load(monkeypatch):
    if not cuda_available():
        out = list(handlers.run_handler(*settings(preset="llama3-8b-instruct", methods=["plain"]), request=req("gpu")))[
            -1
        ]
        assert page.status(out).kind == "error" and wording.says(out, wording.NEEDS_GPU)

    def broken(*a, **k):
        raise ModelLoadError("could not load target 'x': disk on fire")

    monkeypatch.setattr(compare.MODELS, "target", broken)
    out = list(handlers.run_handler(*settings(), request=req("broken")))[-1]
    assert page.status(out) == page.Status("error", "could not load target 'x': disk on fire")  # the error, as raised
    monkeypatch.undo()
    out = list(handlers.run_handler(*settings(max_new_tokens=4), request=req("broken")))[-1]
    assert wording.says_done(out)  # the app keeps serving


def test_unexpected_errors_are_contained(monkeypatch):
    def boom(spec, *a, **k):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(compare, "start", boom)
    out = list(handlers.run_handler(*settings(), request=req("boom")))[-1]
    assert page.status(out).kind == "error" and wording.says_crashed(out, "RuntimeError", "kaboom")
    assert not state.SESSIONS.get(req("boom")).lock.locked()


def test_step_then_stop_then_run_again():
    r = req("step")
    out = handlers.step_handler(*settings(max_new_tokens=40), request=r)
    assert wording.says_stepped(out, 0)
    comp = state.SESSIONS.get(r).comparison
    assert [len(lane.events) for lane in comp.lanes] == [1, 1, 1]
    assert wording.says_stepped(handlers.step_handler(*settings(max_new_tokens=40), request=r), 1)
    assert [len(lane.events) for lane in comp.lanes] == [2, 2, 2]
    assert page.lane_state(view_handlers.view_handler(*VIEW, request=r)["lane1_head"]) == "paused"
    out = handlers.stop_handler(*VIEW, request=r)
    assert wording.says_stopped(out)
    assert all(lane.stop_reason == "cancelled" and lane.source is None for lane in comp.lanes)
    assert all(page.lane_state(out[f"lane{i}_head"]) == "cancelled" for i in range(3))
    out = list(handlers.run_handler(*settings(max_new_tokens=6), request=r))[-1]
    assert wording.says_done(out)


def test_replay_after_steps_plays_the_rounds_so_far():
    r = req("step-replay")
    for _ in range(3):
        handlers.step_handler(*settings(max_new_tokens=40), request=r)
    stepped = state.SESSIONS.get(r).comparison
    frames = list(handlers.replay_handler(*VIEW, request=r))
    assert wording.says_replay_done(frames[-1]), page.status(frames[-1])
    replayed = state.SESSIONS.get(r).comparison
    assert replayed.replay and [lane.token_ids for lane in replayed.lanes] == [lane.token_ids for lane in stepped.lanes]
    assert all(len(lane.events) == 3 for lane in replayed.lanes)


def test_stop_cancels_a_running_comparison(monkeypatch):
    monkeypatch.setattr(handlers, "STOP_WAIT_S", 0.05)  # the run is turned by this thread: it cannot end meanwhile
    r = req("stop")
    gen = handlers.run_handler(*settings(max_new_tokens=400), request=r)
    next(gen)  # loading
    next(gen)  # first live frame
    stopping = page.status(handlers.stop_handler(*VIEW, request=r))
    assert stopping.kind == "busy" and wording.says(stopping, wording.STOPPING)
    assert not wording.says(state.SESSIONS.get(r).status[0], wording.STOPPING)  # a passing word, not the tab's status
    rest = list(gen)
    assert wording.says_stopped(rest[-1])
    comp = state.SESSIONS.get(r).comparison
    assert all(lane.stop_reason == "cancelled" for lane in comp.lanes)
    assert all(metrics.total_new_tokens(lane.events) < 400 for lane in comp.lanes)
    assert not state.SESSIONS.get(r).lock.locked()


def test_stop_answers_with_the_status_the_run_ended_on():
    """Stop's answer and the run's last frame reach the page in either order: both say the run stopped."""
    r = req("stop-live")
    frames: list = []
    gen = handlers.run_handler(*settings(max_new_tokens=400), request=r)
    frames.append(next(gen))  # loading
    frames.append(next(gen))  # first live frame
    run = threading.Thread(target=lambda: frames.extend(gen))
    run.start()
    answer = page.status(handlers.stop_handler(*VIEW, request=r))
    run.join(timeout=30)
    assert not run.is_alive()
    assert wording.says_stopped(answer), answer
    assert page.status(frames[-1]) == answer
    assert state.SESSIONS.get(r).status == (answer.text, answer.kind)


def test_closing_the_stream_releases_the_session():
    r = req("close")
    gen = handlers.run_handler(*settings(max_new_tokens=400), request=r)
    next(gen)
    next(gen)
    gen.close()  # what Gradio does when the browser goes away
    session = state.SESSIONS.get(r)
    assert not session.lock.locked()
    assert all(lane.source is None for lane in session.comparison.lanes)


def test_save_load_replay_without_a_model(tmp_path, monkeypatch):
    r = req("save")
    list(handlers.run_handler(*settings(methods=["plain", "poss2"], max_new_tokens=8), request=r))
    live = state.SESSIONS.get(r).comparison
    path = saved_files.save_handler(request=r)
    # Another tab loads it with no model available at all.
    monkeypatch.setattr(compare.MODELS, "target", lambda *a, **k: pytest.fail("replay must not load a model"))
    other = req("load")
    out = saved_files.load_handler(path, *VIEW, request=other)
    assert wording.says(out, wording.LOADED)
    assert out["prompt"] == live.spec.messages()[-1]["content"]  # ▶ Run then runs the loaded run's prompt
    loaded = state.SESSIONS.get(other).comparison
    for a, b in zip(live.lanes, loaded.lanes):
        assert a.token_ids == b.token_ids and a.text == b.text
        assert [e.to_json() for e in a.events] == [e.to_json() for e in b.events]
        assert token_html.tokens_html(a.records) == token_html.tokens_html(b.records)
    assert page.stats(out["lane1_head"])["tokens_per_s"] == f"{metrics.tokens_per_s(loaded.lanes[1].events):.1f}"
    assert out["lane1_head"].count('data-stat="tokens_per_s"') == 1
    frames = list(handlers.replay_handler(*VIEW, request=other))
    assert wording.says_replay_done(frames[-1])
    replayed = state.SESSIONS.get(other).comparison
    assert replayed.replay and [lane.token_ids for lane in replayed.lanes] == [lane.token_ids for lane in live.lanes]
    # Step goes through a freshly loaded run round by round.
    saved_files.load_handler(path, *VIEW, request=other)
    handlers.step_handler(*settings(), request=other)
    assert [len(lane.events) for lane in state.SESSIONS.get(other).comparison.lanes] == [1, 1]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    refused = page.status(saved_files.load_handler(str(bad), *VIEW, request=other))
    assert refused.kind == "error" and wording.says(refused, wording.BAD_RUN_FILE, repr(bad.name))


def test_sessions_do_not_mix():
    a, b = req("tab-a"), req("tab-b")
    list(handlers.run_handler(*settings(prompt="first tab", methods=["plain"], max_new_tokens=5), request=a))
    list(handlers.run_handler(*settings(prompt="second tab", methods=["plain", "poss1"], max_new_tokens=5), request=b))
    ca, cb = state.SESSIONS.get(a).comparison, state.SESSIONS.get(b).comparison
    assert ca is not cb
    assert ca.spec.prompt == "first tab" and [lane.method for lane in ca.lanes] == ["plain"]
    assert cb.spec.prompt == "second tab" and [lane.method for lane in cb.lanes] == ["plain", "poss1"]


def test_multi_turn_continues_the_conversation():
    r = req("chat")
    list(handlers.run_handler(*settings(prompt="Hi", methods=["plain"], max_new_tokens=4), request=r))
    first = state.SESSIONS.get(r).history
    assert [m["role"] for m in first] == ["user", "assistant"]
    list(
        handlers.run_handler(
            *settings(prompt="And then?", multi_turn=True, methods=["plain"], max_new_tokens=4), request=r
        )
    )
    spec = state.SESSIONS.get(r).comparison.spec
    assert [m["content"] for m in spec.prompt][:3] == ["Hi", first[1]["content"], "And then?"]
    assert view_handlers.new_conversation_handler(request=r) == {"conversation": wording.conversation_empty()}
    assert state.SESSIONS.get(r).history == []


def test_tree_slider_scrubs_back_and_follows_again():
    r = req("slider")
    list(handlers.run_handler(*settings(methods=["eagle"], max_new_tokens=6), request=r))
    lane = state.SESSIONS.get(r).comparison.lanes[0]
    fig, account = view_handlers.tree_handler(0, 1, request=r).values()
    assert wording.tree_title(fig) == ("EAGLE", 1) and state.SESSIONS.get(r).pins == {0: 1}
    assert [t.name for t in fig.data][:2] == ["edges", "accepted path"]
    assert wording.says_proposed(account, 1) and wording.says_one_forward_pass(account)
    view_handlers.tree_handler(0, len(lane.events) - 1, request=r)
    assert state.SESSIONS.get(r).pins == {}


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_picking_a_round_tells_it_in_words_escaped(temperature):
    r = req(f"explain{temperature}")
    session = state.SESSIONS.get(r)
    session.comparison = known_comparison(temperature=temperature)
    out = view_handlers.tree_handler(1, 1, request=r)
    assert set(out) == {"lane1_tree", "lane1_explain"}  # that lane's only
    fig, account = out["lane1_tree"], out["lane1_explain"]
    assert wording.tree_title(fig) == ("EAGLE", 1)
    assert account.startswith('<div class="poss-round-account"><p>') and wording.says_proposed(account, 1, 5)
    # Token texts are escaped: node 2 is "<c>", the target's token is "t".
    assert "&quot;&lt;c&gt;&quot;" in account and "<c>" not in account
    assert wording.says_kept(account, 2, "b", 0.9) and '(target p 0.90), "<c>"' in html.unescape(account)
    assert wording.says_top_candidate(account, "q", 0.5) and "&quot;t&quot;" in account
    assert wording.says_sampling_draw(account) == (temperature > 0)
    out = render.render(session, *VIEW)
    assert wording.says_proposed(out["lane1_explain"], 1)  # the pinned round, on a repaint too
    assert wording.says_prefill_round(view_handlers.tree_handler(0, 0, request=r)["lane0_explain"])
    assert wording.says_plain_round(view_handlers.tree_handler(0, 2, request=r)["lane0_explain"])
    state.SESSIONS.drop(r)


def test_compare_api_returns_texts_and_summaries():
    out = api.compare_api("Hello", ["plain", "eagle"], preset="tiny-random", max_new_tokens=8)
    plain, eagle = out["lanes"]
    assert plain["text"] == eagle["text"] and eagle["identical_to_plain"] is True
    assert eagle["summary"]["new_tokens"] == 8 and eagle["summary"]["tau"] >= 1.0
    assert out["settings"]["methods"] == ["plain", "eagle"]
    with pytest.raises(gr.Error) as refused:  # Gradio's error for the client, raised from the PromptError
        api.compare_api("", ["plain"], preset="tiny-random")
    assert isinstance(refused.value.__cause__, PromptError)
    assert wording.says(refused.value.message, wording.PROMPT_EMPTY)


def test_saved_run_file_format(tmp_path):
    comp = known_comparison()
    path = saved_runs.save_run(comp, tmp_path / "run.jsonl")
    lines = path.read_text().splitlines()
    assert lines[0].startswith('{"type": "run"')
    back = saved_runs.load_run(path)
    assert [lane.token_ids for lane in back.lanes] == [lane.token_ids for lane in comp.lanes]
    assert back.lanes[1].node_texts == comp.lanes[1].node_texts


def test_engine_summary_closes_a_lane():
    lane = compare.Lane("plain", "Plain", source=iter([DecodeSummary("", [], "eos", {})]))
    assert lane.advance() is False and lane.stop_reason == "eos"


def test_models_are_loaded_once_and_shared(monkeypatch):
    import time as _time

    from poss_core.models import loading
    from poss_core.models.presets import get_preset

    preset = get_preset("tiny-random")
    assert compare.MODELS.target(preset) is compare.MODELS.target(preset)
    target = compare.MODELS.target(preset)
    poss2 = methods.get_method(preset, "poss2")
    assert compare.MODELS.draft(preset, poss2, target) is compare.MODELS.draft(preset, poss2, target)
    calls = []

    def slow_load(name, quantization="auto", dtype=None):
        calls.append((name, dtype))
        _time.sleep(0.2)
        return target

    monkeypatch.setattr(loading, "load_preset_target", slow_load)
    cache = compare.ModelCache()
    cache.dtype = torch.bfloat16  # what `python app.py --dtype bfloat16` sets: every target loads in it
    got = []
    threads = [threading.Thread(target=lambda: got.append(cache.target(preset))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [("builtin:tiny-random", torch.bfloat16)] and all(g is target for g in got)


def test_auto_precision_and_the_precision_it_stands_for_share_one_loaded_target(monkeypatch):
    import dataclasses

    from poss_core.models import loading
    from poss_core.models.presets import get_preset

    preset = dataclasses.replace(get_preset("tiny-random"), target="org/some-real-model")  # never loaded: patched
    calls = []
    load = lambda name, quantization, dtype: calls.append(dtype) or object()  # noqa: E731
    monkeypatch.setattr(loading, "load_preset_target", load)
    monkeypatch.setattr(loading, "pick_device", lambda device=None: torch.device("cpu"))
    cache = compare.ModelCache()
    auto = cache.target(preset, precision="auto")
    assert cache.target(preset, precision="float32") is auto and calls == [torch.float32]  # a CPU's auto: float32
    assert cache.target(preset, precision="bfloat16") is not auto and calls == [torch.float32, torch.bfloat16]


def test_precision_setting_loads_its_own_target_and_badges_say_what_identity_means(monkeypatch):
    from poss_core.models import loading
    from poss_core.models.presets import get_preset

    preset = get_preset("tiny-random")
    real = loading.load_preset_target
    calls = []

    def recording_load(name, quantization="auto", dtype=None):
        calls.append(dtype)
        return real(name, quantization=quantization, dtype=dtype)

    monkeypatch.setattr(loading, "load_preset_target", recording_load)
    cache = compare.ModelCache()
    fp32, bf16 = cache.target(preset, precision="float32"), cache.target(preset, precision="bfloat16")
    assert fp32 is not bf16 and cache.target(preset, precision="bfloat16") is bf16
    assert calls == [torch.float32, torch.bfloat16] and bf16.dtype == torch.bfloat16
    eagle = methods.get_method(preset, "eagle")
    assert cache.draft(preset, eagle, bf16, precision="bfloat16") is not cache.draft(
        preset, eagle, fp32, precision="float32"
    )
    # Through the UI's handler: the lanes run in the chosen dtype, and the hardware panel and the badge say so.
    monkeypatch.setattr(compare, "MODELS", cache)
    out = list(handlers.run_handler(*settings(max_new_tokens=8, precision="bfloat16"), request=req("bf16")))[-1]
    assert "bfloat16" in out["hardware"]
    badge = page.identity(out["lane1_head"])  # identical, or a rounding near-tie: never a mismatch
    assert (badge.kind == "ok" and wording.says_identical(badge)) or (
        badge.kind == "neutral" and wording.says_near_tie(badge)
    )
    assert wording.says_done(out) and "precision=" not in out["status"]
    note = control_defaults.precision_note(gpu=False)
    assert "float32" in note and "bfloat16" in note
    # `python app.py` starts in bf16 only on a CPU with bf16 units, and only when --dtype is auto.
    assert control_defaults.initial_precision("auto", gpu=False, bf16_units="AVX-512 BF16") == "bfloat16"
    assert control_defaults.initial_precision("auto", gpu=False, bf16_units=None) == "auto"
    assert control_defaults.initial_precision("auto", gpu=True, bf16_units="AMX") == "auto"
    assert control_defaults.initial_precision("float32", gpu=False, bf16_units="AMX") == "float32"


def test_preset_switch_and_app_flags():
    from poss_core.models.presets import DEFAULT_PRESET, get_preset

    out = view_handlers.preset_handler("tiny-random")
    methods = out["methods"]
    assert [v for _, v in methods.choices] == [
        "plain",
        "eagle",
        "poss1",
        "poss2",
        "poss3",
        "matched",
        "pld",
        "assisted",
        "oracle",
    ]
    assert methods.value == ["plain", "eagle", "poss2"]
    smol = get_preset(DEFAULT_PRESET)
    note = render.draft_note(smol)
    untrained = [n for n, ref in smol.drafts.items() if "untrained" in ref.label]
    assert wording.says_untrained_drafts(note) == bool(untrained)
    assert control_defaults.ui_defaults(smol)["tree_budget"] <= smol.tree_budget
    spec = importlib.util.spec_from_file_location("app_entry", ROOT / "app.py")
    entry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(entry)
    assert entry.main is launch.main  # `python app.py` runs app/page/launch.py's main, with its flags
    args = launch.build_parser().parse_args([])
    assert args.preset == DEFAULT_PRESET and args.share is False and args.host is None and args.port is None
    assert args.dtype == "auto" and launch.build_parser().parse_args(["--dtype", "bfloat16"]).dtype == "bfloat16"
    assert launch.build_parser().parse_args(["--preset", "tiny-random", "--port", "7999"]).port == 7999
    assert launch.cpu_threads(None) >= 1 and launch.cpu_threads(3) == 3


def test_stop_during_a_stepped_replay_ends_every_lane(tmp_path):
    r = req("replay-stop")
    path = saved_runs.save_run(known_comparison(), tmp_path / "known.jsonl")
    saved_files.load_handler(str(path), *VIEW, request=r)
    handlers.step_handler(*settings(), request=r)
    out = handlers.stop_handler(*VIEW, request=r)
    assert wording.says_stopped(out)
    comp = state.SESSIONS.get(r).comparison
    assert comp.replay and all(lane.stop_reason == "cancelled" for lane in comp.lanes)
    assert [len(lane.events) for lane in comp.lanes] == [1, 1]


def test_untrained_drafts_are_flagged_in_the_lane_header(tmp_path, monkeypatch):
    """The real smollm2-135m preset with POSS-2 trained and POSS-1 not (a drafts folder holding only poss2): the
    registry's `trained` flag puts the badge on POSS-1's lane, whose title reads like the others."""
    from poss_core.models.presets import get_preset

    (tmp_path / "poss2").mkdir()
    (tmp_path / "poss2" / "model.safetensors").write_bytes(b"")
    monkeypatch.setenv("POSS_DRAFTS_DIR", str(tmp_path))
    offered = methods.preset_methods(get_preset("smollm2-135m"))
    comp = known_comparison()
    for lane, name in zip(comp.lanes, ("poss2", "poss1")):
        lane.method, lane.label, lane.trained = name, offered[name].label, offered[name].trained
    head = render.lane_head_html(comp.lanes[1], comp, running=False)
    assert page.lane_title(head) == "POSS-1 (6 specialists)" == offered["poss1"].label
    assert page.badges(head)["untrained"].kind == "bad"
    assert "untrained" not in page.badges(render.lane_head_html(comp.lanes[0], comp, running=False))


def test_sampling_runs_are_reproducible_with_a_seed():
    r = req("sample")
    args = settings(methods=["plain", "eagle"], max_new_tokens=6, temperature=0.8, top_p=0.9, seed=7)
    out = list(handlers.run_handler(*args, request=r))[-1]
    assert wording.says_done(out) and wording.says_sampling(page.identity(out["lane1_head"]))
    first = [lane.token_ids for lane in state.SESSIONS.get(r).comparison.lanes]
    list(handlers.run_handler(*args, request=r))
    assert [lane.token_ids for lane in state.SESSIONS.get(r).comparison.lanes] == first
