"""What tabs hold is bounded by one total: a paused Step counts its decoders' caches (by their tensors' sizes), a
finished or loaded run its rounds; past the budget the least recently used tab's holdings go first and the tab is
told why; reading (a view toggle) never postpones reaping."""

from __future__ import annotations

import gc
import weakref

import page
import pytest
from app_settings import req, run_settings

from app.actions import handlers, view_handlers
from app.sessions import recordings, state, tab_pools, user_settings
from poss_core.runtime import compare

VIEW = user_settings.View()


@pytest.fixture
def store(monkeypatch):
    s = state.SessionStore(capacity=16, idle_s=60.0, memory_mb=None)
    monkeypatch.setattr(state, "SESSIONS", s)
    return s


def paused_step(store: state.SessionStore, name: str, prompt_words: int = 60) -> state.Session:
    handlers.step_handler(run_settings(prompt="word " * prompt_words, max_new_tokens=64), VIEW, request=req(name))
    session = store.get(req(name))
    assert session.stepping and not session.comparison.finished
    return session


def finished_run(store: state.SessionStore, name: str) -> state.Session:
    list(handlers.run_handler(run_settings(max_new_tokens=16), VIEW, request=req(name)))
    return store.get(req(name))


def kv_bytes(comp: compare.Comparison) -> int:
    """The target caches' storages of a comparison's open decoders, found the long way (for the check only)."""
    total = 0
    for lane in comp.lanes:
        frame = lane.source.gi_frame
        # torch.inference_mode wraps the decoder's generator in its own; a speculative decode keeps its cache in
        # the state of the decode (`decode`), plain decoding in a local of its own
        while "cache" not in frame.f_locals and "decode" not in frame.f_locals:
            frame = frame.f_locals["gen"].gi_frame
        cache = frame.f_locals["cache"] if "cache" in frame.f_locals else frame.f_locals["decode"].cache
        storages = {
            layer.keys.untyped_storage().data_ptr(): layer.keys.untyped_storage().nbytes() for layer in cache.layers
        }
        total += sum(storages.values())
    return total


def test_a_paused_step_counts_its_caches_and_frees_them(store):
    session = paused_step(store, "stepper")
    comp = session.comparison
    caches = kv_bytes(comp)
    assert caches > 0 and session.held_bytes() >= caches
    rounds_only = compare.ROUND_BYTES * sum(len(lane.events) for lane in comp.lanes)
    assert session.held_bytes() > rounds_only + caches // 2  # the caches dominate a paused prefill
    session.release("a test freed it")
    gc.collect()
    pooled = sum(p.rounds for pools in session.pools.values() for p in pools.values())
    assert session.comparison is None and session.held_bytes() == tab_pools.POOLED_ROUND_BYTES * pooled  # pools stay
    assert comp.held_bytes() < caches // 10  # its decoders were closed: their caches went with them
    out = handlers.step_handler(run_settings(), VIEW, request=req("stepper"))
    assert "a test freed it" in page.status(out).text  # the tab is told why on its next Step


def test_a_finished_run_counts_its_rounds_and_a_bundled_recording_none(store, monkeypatch):
    session = finished_run(store, "runner")
    comp = session.comparison
    nodes = sum(len(e.nodes) for lane in comp.lanes for e in lane.events)
    rounds = sum(len(lane.events) for lane in comp.lanes)
    pooled = sum(p.rounds for pools in session.pools.values() for p in pools.values())
    assert session.held_bytes() == (
        compare.ROUND_BYTES * rounds + compare.NODE_BYTES * nodes + tab_pools.POOLED_ROUND_BYTES * pooled
    )
    monkeypatch.setattr(recordings, "loaded_runs", lambda: {id(comp)})  # as if it were an example's recording
    assert session.held_bytes() == tab_pools.POOLED_ROUND_BYTES * pooled


def test_past_the_budget_the_least_recently_used_tabs_are_freed_first_and_told_why(store):
    old, middle, new = (finished_run(store, n) for n in ("old", "middle", "new"))
    each = old.held_bytes()
    kept = [weakref.ref(s.comparison) for s in (old, middle, new)]
    # Reading does not make a tab recent: "old" redraws its view, and is still the least recently used.
    view_handlers.view_handler(VIEW, request=req("old"))
    assert old.last_seen < middle.last_seen < new.last_seen
    store.memory_mb = 2.5 * each / 2**20  # room for two of the three runs
    assert store.enforce_total(keep=new) == 1
    assert old.comparison is None and middle.comparison is not None and new.comparison is not None
    gc.collect()
    assert kept[0]() is None, "the freed run is still held somewhere"
    assert sum(held for _, held in store.holdings()) <= store.memory_mb * 2**20
    # The freed tab is told why the next time it acts, and the message says what the budget is.
    status = page.status(view_handlers.view_handler(VIEW, request=req("old")))
    assert "to free memory" in status.text and f"{store.memory_mb:g} MB" in status.text
    out = list(handlers.replay_handler(VIEW, request=req("old")))[-1]
    assert "to free memory" in page.status(out).text
    # A budget smaller than one tab's run keeps the tab that just acted.
    store.memory_mb = 0.1 * each / 2**20
    store.enforce_total(keep=new)
    assert middle.comparison is None and new.comparison is not None


def test_reading_does_not_postpone_the_idle_reaping_and_every_path_frees_caches(store):
    session = paused_step(store, "idle-step")
    comp = session.comparison
    seen = session.last_seen
    for _ in range(3):
        view_handlers.view_handler(VIEW, request=req("idle-step"))
        view_handlers.tree_handler(0, 0, request=req("idle-step"))
        view_handlers.class_tick_handler(VIEW, request=req("idle-step"))
    assert session.last_seen == seen
    assert store.reap(now=seen + 61.0) == 1
    gc.collect()
    # The paused Step ends (its decoders closed, their caches freed); its lanes stay shown until the next pass.
    assert session.comparison is comp and comp.held_bytes() < 10**6 and not compare.live_comparisons()
    assert store.reap(now=seen + 62.0) == 1 and session.comparison is None
    closed = paused_step(store, "closed-tab")
    caches = weakref.ref(closed.comparison)
    store.drop(req("closed-tab"))  # a closed tab's paused Step is freed too
    gc.collect()
    assert caches() is None or not any(lane.source for lane in caches().lanes)


def test_returning_freed_memory_to_the_system_is_safe_to_call():
    assert state.release_memory() in (True, False)  # glibc trims; elsewhere it only collects
