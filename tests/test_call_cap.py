"""One budget per call: the per-call time cap, Stop, a closed tab and a client gone away cover everything a call
starts (loads, tree-budget fits, the oracle's reference decode, the lanes' rounds), on the tiny model with its
forward pass slowed down so that each piece of work would outlast the cap."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace

import gradio as gr
import page
import pytest
import wording
from app_settings import req, run_settings

from app.actions import api, handlers, view_handlers
from app.server import limits
from app.sessions import state, user_settings
from app.views import control_defaults
from poss_core.autobudget import cache, calibration
from poss_core.base.errors import CallStopped, ConfigError
from poss_core.models.presets import get_preset
from poss_core.models.target import TargetModel
from poss_core.runtime import compare, methods

VIEW = user_settings.View()


@pytest.fixture
def slow_forward(monkeypatch):
    """Every target forward takes at least 10 ms more; returns a counter of forwards done so far."""
    real = TargetModel.forward
    calls = [0]

    def forward(self, *a, **k):
        calls[0] += 1
        time.sleep(0.01)
        return real(self, *a, **k)

    monkeypatch.setattr(TargetModel, "forward", forward)
    return calls


@pytest.fixture
def fresh_fits(tmp_path, monkeypatch):
    """No tree-budget fit or forward-time curve cached: an auto budget has to be fitted."""
    monkeypatch.setattr(cache, "choice_cache_path", lambda: tmp_path / "choices.json")
    monkeypatch.setattr(cache, "curve_cache_path", lambda: tmp_path / "curves.json")
    return tmp_path / "choices.json"


def settle(calls: list[int], quiet_s: float = 0.3, within_s: float = 3.0) -> float:
    """Seconds until the forward counter stops moving for `quiet_s` (work has ended), at most `within_s`."""
    t0, last, seen = time.monotonic(), time.monotonic(), calls[0]
    while time.monotonic() - t0 < within_s:
        time.sleep(0.05)
        if calls[0] != seen:
            seen, last = calls[0], time.monotonic()
        elif time.monotonic() - last >= quiet_s:
            return last - t0
    return within_s


def test_the_oracle_reference_decode_counts_against_the_cap(slow_forward, monkeypatch):
    # Its reference decode (400 tokens, at least 4 s here) ran in the comparison's start, before the cap's clock.
    monkeypatch.setattr(limits, "LIMITS", replace(limits.LIMITS, call_s=0.3))
    t0 = time.monotonic()
    with pytest.raises(gr.Error) as stopped:
        api.compare_api(
            "Hello", ["plain", "oracle"], preset="tiny-random", max_new_tokens=400, depth=4, top_k=4, tree_budget=16
        )
    assert wording.says_call_limit(stopped.value.message, 0.3, doing="preparing the Oracle")
    assert time.monotonic() - t0 < 1.5
    assert slow_forward[0] < 100


def interrupted_oracle_run(slow_forward: list[int], name: str, interrupt) -> list:
    """A Run with the oracle lane in tab `name`, `interrupt()` called while its reference decode runs; the Run's
    frames once it has ended (it must end within 2 s, having done well under its 400 tokens' work)."""
    frames: list = []
    run = threading.Thread(
        target=lambda: frames.extend(
            handlers.run_handler(run_settings(methods=["plain", "oracle"], max_new_tokens=400), VIEW, request=req(name))
        )
    )
    run.start()
    while slow_forward[0] < 5:
        time.sleep(0.01)
    interrupt()
    run.join(timeout=2.0)
    assert not run.is_alive(), "the oracle's reference decode went on"
    assert slow_forward[0] < 100
    return frames


def test_stop_ends_a_run_while_the_oracle_prepares(slow_forward):
    stopped = []
    frames = interrupted_oracle_run(
        slow_forward, "stop-oracle", lambda: stopped.append(handlers.stop_handler(VIEW, request=req("stop-oracle")))
    )
    status = page.status(frames[-1])
    assert wording.says_stopped_preparing(status, "Oracle"), status
    assert page.status(stopped[0]) == status  # Stop answered once the run had ended, with its last word


def test_a_fit_counts_against_the_cap_and_caches_nothing(slow_forward, fresh_fits, monkeypatch):
    monkeypatch.setattr(limits, "LIMITS", replace(limits.LIMITS, call_s=0.3))
    t0 = time.monotonic()
    frames = list(handlers.run_handler(run_settings(auto_budget=True), VIEW, request=req("fit-cap")))
    took = time.monotonic() - t0
    status = page.status(frames[-1])
    assert wording.says_call_limit(status, 0.3, doing="tree budget"), status
    assert took < 1.5, took
    assert not fresh_fits.exists() or fresh_fits.read_text().strip() in ("", "{}")  # a cut-short fit is not kept


def test_without_call_fits_a_lane_uses_the_default_budget_and_says_so(fresh_fits, monkeypatch):
    monkeypatch.setattr(limits, "LIMITS", replace(limits.LIMITS, call_fits=False))

    def no_fit(*a, **k):
        raise AssertionError("a call started a fit on a server that offers only cached fits")

    monkeypatch.setattr(calibration, "auto_tree_budget", no_fit)
    out = api.compare_api(
        "Hello", ["plain", "eagle"], preset="tiny-random", max_new_tokens=4, depth=4, top_k=4, auto_budget=True
    )
    eagle = out["lanes"][1]
    assert (
        eagle["budget_auto"] is False
        and eagle["tree_budget"] == control_defaults.ui_defaults(get_preset("tiny-random"))["tree_budget"]
    )
    assert wording.says(eagle["budget_note"], wording.FITS_AT_START_ONLY)
    frames = list(handlers.run_handler(run_settings(auto_budget=True), VIEW, request=req("no-fits")))
    assert any(wording.says(f, wording.DEFAULT_BUDGET, wording.FITS_AT_START_ONLY) for f in frames)
    assert wording.says_done(frames[-1])


def test_a_run_whose_client_left_stops_its_start_within_a_round(slow_forward):
    # Gradio closes a handler's generator at its next yield once the client has gone: while the oracle prepares,
    # the handler must still yield (it did not: its start ran in one step until the reference decode was done).
    gen = handlers.run_handler(run_settings(methods=["plain", "oracle"], max_new_tokens=400), VIEW, request=req("gone"))
    t0 = time.monotonic()
    next(gen)  # "Loading…"
    next(gen)  # still loading: a frame while the reference decode runs
    assert time.monotonic() - t0 < 1.5
    gen.close()
    assert settle(slow_forward) < 0.5, "the reference decode went on after its client left"
    assert not state.SESSIONS.get(req("gone")).lock.locked()


def test_a_compare_call_whose_client_left_stops_within_a_round(slow_forward, monkeypatch):
    monkeypatch.setattr(api, "PROGRESS_EVERY_S", 0.2)
    endpoint = api.compare_endpoint("tiny-random")

    async def scenario():
        call = endpoint("Hello", ["plain", "oracle"], "", 400, 0.0, 1.0, 4, 4, 16, 0, "auto")
        progress = await call.__anext__()
        assert progress["running"] is True
        await call.aclose()  # what Gradio does once the client has gone

    asyncio.run(scenario())
    assert settle(slow_forward) < 0.5, "the call went on after its client left"
    assert not compare.live_comparisons()


def test_a_budget_stops_a_fit_within_one_round(slow_forward, fresh_fits):
    preset = get_preset("tiny-random")
    target = compare.MODELS.target(preset)
    draft = compare.MODELS.draft(preset, methods.get_method(preset, "eagle"), target)
    budget = compare.CallCap(0.2)
    t0 = time.monotonic()
    with pytest.raises(CallStopped):
        compare.MODELS.budget(
            target,
            draft,
            compare.RunSpec("x", ["eagle"], "tiny-random", depth=4, top_k=4, tree_budget=16).resolve().config,
            cancel=budget,
        )
    assert time.monotonic() - t0 < 1.0 and budget.timed_out


def test_closing_the_tab_ends_a_run_while_the_oracle_prepares(slow_forward):
    interrupted_oracle_run(slow_forward, "closed-tab", lambda: view_handlers.drop_session(req("closed-tab")))  # unload


def test_a_refused_compare_call_logs_no_traceback():
    with pytest.raises(gr.Error) as refused:
        api.compare_api("Hello", ["plain", "eagle"], preset="tiny-random", depth=20, quiet_refusals=True)
    assert isinstance(refused.value.__cause__, ConfigError)
    assert wording.says(refused.value.message, wording.out_of_range("depth", 20))
    assert refused.value.print_exception is False  # Gradio prints a traceback for a gr.Error unless told not to
