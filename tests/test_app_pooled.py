""" "All my runs" (the charts pool every run a tab decoded, per preset and method) and picking a round by clicking a
token, through the handlers on the tiny-random preset."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import wording
from app_settings import req, run_settings
from test_app_handlers import LABELS, PIECES, SPEC_EVENTS, known_comparison
from wording import n_of

from app.actions import handlers, saved_files, view_handlers
from app.sessions import state, tab_pools, user_settings
from app.views import token_html
from poss_core.rounds import metrics
from poss_core.rounds.token_records import round_records
from poss_core.runtime import compare, saved_runs

THIS_RUN = user_settings.View()
ALL_RUNS = user_settings.View.from_controls("draft position", False, "conditional", user_settings.POOLED_VIEW)
THREE = ["plain", "eagle", "poss2"]


def charts(request, view) -> dict:
    return view_handlers.view_handler(view, request=request)


def run(request, **kw) -> compare.Comparison:
    frames = list(handlers.run_handler(run_settings(**kw), THIS_RUN, request=request))
    assert wording.says_done(frames[-1])
    return state.SESSIONS.get(request).comparison


def rounds_by_lane(comp: compare.Comparison) -> dict[str, int]:
    return {lane.short: len(metrics.draft_rounds(lane.events)) for lane in comp.lanes}


def test_all_my_runs_pools_every_round_of_three_runs():
    r = req("pool-three")
    runs = [
        run(r, prompt=p, methods=THREE, max_new_tokens=n)
        for p, n in [("Hello there", 6), ("What is 2+2?", 9), ("Name a colour", 5)]
    ]
    out = charts(r, ALL_RUNS)
    for label in ("EAGLE", "POSS-2"):
        total = sum(rounds_by_lane(c)[label] for c in runs)
        assert n_of(out["pos_acc"], label) == total and n_of(out["accept_hist"], label) == total
    every = {
        label: sum(len(lane.events) for c in runs for lane in c.lanes if lane.short == label)
        for label in ("Plain", "EAGLE", "POSS-2")
    }
    assert {label: n_of(out["tokens_per_s"], label) for label in every} == every  # prefill rounds included
    assert wording.pooled_runs(out["pos_acc"]) == 3
    assert not wording.says_settings_varied(out["pos_acc"])  # only the prompt and length changed
    # The pooled stream keeps counting tokens across runs: tokens/s is every token over every round's time.
    pool = state.SESSIONS.get(r).pools["tiny-random"]["plain"]
    assert metrics.total_new_tokens(pool.events()) == 6 + 9 + 5
    # "This run": the last run alone, no pooled note.
    out = charts(r, THIS_RUN)
    assert n_of(out["pos_acc"], "EAGLE") == rounds_by_lane(runs[-1])["EAGLE"]
    assert wording.pool_note(out["pos_acc"]) == ""


def test_step_runs_count_as_they_go_once_and_replays_never(tmp_path):
    r = req("pool-step")
    first = run(r, methods=["plain", "eagle"], max_new_tokens=5)
    for _ in range(3):
        handlers.step_handler(run_settings(methods=["plain", "eagle"], max_new_tokens=40), THIS_RUN, request=r)
    session = state.SESSIONS.get(r)
    stepped = session.comparison
    assert session.pools["tiny-random"]["eagle"].rounds == len(first.lanes[1].events)  # not pooled while paused
    expect = len(metrics.draft_rounds(first.lanes[1].events)) + len(metrics.draft_rounds(stepped.lanes[1].events))
    assert n_of(charts(r, ALL_RUNS)["pos_acc"], "EAGLE") == expect  # ... but drawn with the pool as it goes
    handlers.stop_handler(THIS_RUN, request=r)  # a stopped run's rounds so far go in, once
    view_handlers.view_handler(THIS_RUN, request=r)
    handlers.stop_handler(THIS_RUN, request=r)
    assert n_of(charts(r, ALL_RUNS)["pos_acc"], "EAGLE") == expect
    assert len(session.pools["tiny-random"]["eagle"].runs) == 2
    list(handlers.replay_handler(THIS_RUN, request=r))  # a replay repeats a pooled run: not added again
    assert session.comparison.replay
    assert n_of(charts(r, ALL_RUNS)["pos_acc"], "EAGLE") == expect
    path = saved_runs.save_run(first, tmp_path / "first.jsonl")
    saved_files.load_handler(str(path), THIS_RUN, request=r)  # nor is a loaded file
    handlers.step_handler(run_settings(), THIS_RUN, request=r)
    run(r, methods=["plain", "eagle"], max_new_tokens=5)
    assert len(session.pools["tiny-random"]["eagle"].runs) == 3


def test_varied_settings_are_said_and_forget_clears_the_pool():
    r = req("pool-forget")
    run(r, methods=["plain", "eagle"], depth=4)
    run(r, methods=["plain", "eagle"], depth=3, temperature=0.5)
    assert wording.says_settings_varied(charts(r, ALL_RUNS)["pos_acc"], "temperature", "depth")
    pooled = sum(p.rounds for p in state.SESSIONS.get(r).pools["tiny-random"].values())
    out = view_handlers.forget_handler(ALL_RUNS, request=r)
    assert wording.says_forgot(out, pooled) and state.SESSIONS.get(r).pools == {}
    assert wording.says_no_draft_rounds(out["pos_acc"])  # the finished run went in already
    assert n_of(charts(r, THIS_RUN)["pos_acc"], "EAGLE") > 0  # "this run" still draws it
    last = run(r, methods=["plain", "eagle"])
    out = charts(r, ALL_RUNS)
    assert n_of(out["pos_acc"], "EAGLE") == rounds_by_lane(last)["EAGLE"]
    assert wording.pooled_runs(out["pos_acc"]) == 1


def test_pools_are_kept_per_preset():
    r = req("pool-presets")
    mine = run(r, methods=["plain", "eagle"])
    session = state.SESSIONS.get(r)
    other = known_comparison()
    other.spec.preset = "smollm2-135m"  # a run on another preset (known events; no model needed)
    session.comparison = other
    session.pool_run(other)
    assert set(session.pools) == {"tiny-random", "smollm2-135m"}
    # Each preset's charts draw its own runs only.
    assert n_of(charts(r, ALL_RUNS)["pos_acc"], "EAGLE") == len(metrics.draft_rounds(SPEC_EVENTS))
    session.comparison = mine
    assert n_of(charts(r, ALL_RUNS)["pos_acc"], "EAGLE") == rounds_by_lane(mine)["EAGLE"]


def test_the_pool_keeps_the_latest_rounds_up_to_its_cap(monkeypatch):
    monkeypatch.setattr(tab_pools, "POOL_ROUNDS", 10)
    r = req("pool-cap")
    for prompt in ("One", "Two"):
        run(r, prompt=prompt, methods=["plain"], max_new_tokens=8)  # 8 rounds each (prefill + 7)
    pool = state.SESSIONS.get(r).pools["tiny-random"]["plain"]
    assert pool.rounds == 10 and pool.dropped == 6 and len(pool.runs) == 2
    assert metrics.total_new_tokens(pool.events()) == 10  # the cut run counts on from the first round it keeps
    tps = charts(r, ALL_RUNS)["tokens_per_s"]
    assert n_of(tps, "Plain") == 10 and wording.says_capped(tps, 10)
    # Pooled rounds are light: the accepted path and one node per other depth, no token ids.
    eagle = tab_pools.MethodPool("EAGLE").added(
        tab_pools.PooledRun([tab_pools.pooled_event(e) for e in SPEC_EVENTS], {})
    )
    assert [len(e.nodes) for e in eagle.events()] == [0, 3, 1, 3] and all(not e.tokens for e in eagle.events())


def test_view_control_values():
    assert user_settings.View.from_controls("draft position", False, "conditional").pooled is False
    assert user_settings.View.from_controls("draft position", False, "conditional", "this run").pooled is False
    assert ALL_RUNS.pooled is True


# ---------------------------------------------------------------- a token picks its round


def test_tokens_carry_their_round_and_each_round_is_one_tab_stop():
    recs = [rec for e, p, lab in zip(SPEC_EVENTS, PIECES, LABELS) for rec in round_records(e, p, lab)]
    out = token_html.tokens_html(recs, show_rejected=True)
    spans = re.findall(r'<(?:span|s) class="(?:tok[^"]*|rej)" data-round="(\d+)"', out)
    assert [int(x) for x in spans] == [0, 1, 1, 1, 1, 2, 2, 3, 3, 3, 3]  # rejected drafts too
    assert out.count('tabindex="0"') == 4  # the first token of each round
    assert re.search(r'data-round="2" tabindex="0"', out)


def test_clicking_a_token_picks_its_round():
    r = req("pick")
    comp = run(r, methods=["plain", "eagle"], max_new_tokens=8)
    lane = comp.lanes[1]
    assert [e.round for e in lane.events] == list(range(len(lane.events)))  # a record's round is its index
    picked = view_handlers.round_pick_for(1)(SimpleNamespace(_data={"round": 1}), request=r)
    assert list(picked) == ["lane1_slider", "lane1_tree", "lane1_explain"]
    slider, fig, account = picked.values()
    assert slider.value == 1 and slider.maximum == len(lane.events) - 1
    assert wording.tree_title(fig) == ("EAGLE", 1) and wording.says_proposed(account, 1)
    assert state.SESSIONS.get(r).pins == {1: 1}
    last = len(lane.events) - 1
    view_handlers.round_pick_handler(1, last, request=r)  # the latest round follows the live one again
    assert state.SESSIONS.get(r).pins == {}
    for bad in (None, "x", -1, last + 1):
        assert view_handlers.round_pick_handler(1, bad, request=r) == {}  # nothing changes
    assert view_handlers.round_pick_handler(5, 0, request=r) == {}


@pytest.fixture(autouse=True)
def _drop_sessions(request):
    yield
    for name in ("pool-three", "pool-step", "pool-forget", "pool-presets", "pool-cap", "pick"):
        state.SESSIONS.drop(req(name))
