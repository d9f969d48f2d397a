"""The session store ends the work of tabs it no longer serves: an evicted tab's run stops and its paused Step frees
its decoders; a Step session idle past the stated time frees them and says so when resumed; the per-tab lock holds."""

from __future__ import annotations

import time

import page
import pytest
import wording
from app_settings import req, run_settings

from app.actions import handlers
from app.sessions import state, user_settings
from poss_core.runtime import compare

VIEW = user_settings.View()


@pytest.fixture
def store(monkeypatch):
    small = state.SessionStore(capacity=2, idle_s=60.0)
    monkeypatch.setattr(state, "SESSIONS", small)
    return small


def test_evicting_a_running_tab_stops_its_run_and_its_lock_holds(store):
    a = req("evict-run-a")
    gen = handlers.run_handler(run_settings(max_new_tokens=400), VIEW, request=a)
    next(gen)  # loading
    next(gen)  # a live frame: the lanes are decoding
    old = store.get(a)
    comp = old.comparison
    assert comp in compare.live_comparisons()
    store.get(req("evict-run-b"))
    store.get(req("evict-run-c"))  # tab A is now the least recently used of three: evicted
    assert comp.cancelled
    # The tab comes back while its old run is ending: a fresh session, the same lock, so no second run beside it.
    again = store.get(a)
    assert again is not old and again.lock is old.lock
    refused = list(handlers.run_handler(run_settings(), VIEW, request=a))
    assert page.status(refused[-1]) == page.Status("error", wording.TAB_BUSY)
    rest = list(gen)
    assert wording.says_stopped(rest[-1])
    assert all(lane.stop_reason == "cancelled" and len(lane.events) < 50 for lane in comp.lanes)
    assert comp not in compare.live_comparisons()
    assert wording.says_done(list(handlers.run_handler(run_settings(), VIEW, request=a))[-1])  # the tab works again


def test_evicting_a_paused_step_session_frees_its_decoders(store):
    a = req("evict-step-a")
    handlers.step_handler(run_settings(max_new_tokens=40), VIEW, request=a)
    handlers.step_handler(run_settings(max_new_tokens=40), VIEW, request=a)
    comp = store.get(a).comparison
    assert comp in compare.live_comparisons() and all(lane.source is not None for lane in comp.lanes)
    store.get(req("evict-step-b"))
    store.get(req("evict-step-c"))
    assert all(lane.source is None for lane in comp.lanes) and comp not in compare.live_comparisons()
    assert all(lane.stop_reason == "cancelled" for lane in comp.lanes)
    out = handlers.step_handler(run_settings(max_new_tokens=40), VIEW, request=a)  # the tab starts over
    assert wording.says_stepped(out, 0)


def test_an_idle_paused_step_session_releases_its_decoders_and_says_so(store):
    a = req("idle-step")
    handlers.step_handler(run_settings(max_new_tokens=40), VIEW, request=a)
    handlers.step_handler(run_settings(max_new_tokens=40), VIEW, request=a)
    session = store.get(a)
    comp = session.comparison
    events = [len(lane.events) for lane in comp.lanes]
    assert store.reap() == 0 and comp in compare.live_comparisons()  # not idle yet
    assert store.reap(now=time.monotonic() + store.idle_s + 1) == 1
    assert comp not in compare.live_comparisons() and all(lane.source is None for lane in comp.lanes)
    assert [len(lane.events) for lane in comp.lanes] == events  # what the lanes show stays
    assert session.comparison is comp and not session.stepping
    assert wording.says_memory_freed(session.status, wording.idle_for(store.idle_s / 60))  # a redraw says why
    out = handlers.step_handler(run_settings(max_new_tokens=40), VIEW, request=a)
    said = page.status(out)
    assert wording.says_memory_freed(said, wording.idle_for(1)) and wording.says_stepped(said, 0), said
    assert not session.lock.locked()
    out = handlers.step_handler(run_settings(max_new_tokens=40), VIEW, request=a)
    assert not wording.says_memory_freed(out) and wording.says_stepped(out, 1)  # said once


def test_the_reaper_leaves_a_streaming_run_alone_and_dropping_a_tab_ends_its_work(store):
    a = req("reap-run")
    gen = handlers.run_handler(run_settings(max_new_tokens=400), VIEW, request=a)
    next(gen)
    next(gen)
    comp = store.get(a).comparison
    assert store.reap(now=time.monotonic() + store.idle_s + 1) == 0 and not comp.cancelled
    store.drop(a)
    assert comp.cancelled
    assert wording.says_stopped(list(gen)[-1])
    b = req("drop-step")
    handlers.step_handler(run_settings(max_new_tokens=40), VIEW, request=b)
    paused = store.get(b).comparison
    store.drop(b)
    assert paused not in compare.live_comparisons()


def test_the_app_starts_one_reaper():
    from app.page.ui import build_demo

    build_demo("tiny-random")
    build_demo("tiny-random")
    assert state.SESSIONS._reaper is not None and state.SESSIONS._reaper.is_alive()
