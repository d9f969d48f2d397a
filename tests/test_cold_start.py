"""The app's start-up fit of the auto tree budgets never makes a first Run wait: a Run that comes while it is under way
starts on the default budget and says so; once the fit is done, Runs use the fitted budgets."""

from __future__ import annotations

import threading

import pytest
from app_settings import req, run_settings

from app.actions import handlers
from app.sessions import state, user_settings
from poss_core.autobudget import cache, calibration
from poss_core.runtime import compare


def cold_settings(**kw):
    return run_settings(
        **{
            **dict(
                methods=["plain", "eagle", "poss2"],
                depth=6,
                top_k=8,
                tree_budget=32,
                max_new_tokens=8,
                auto_budget=True,
            ),
            **kw,
        }
    )


@pytest.mark.slow  # a start-up fit: the quick tier stays under 90 s
def test_a_run_during_the_start_up_fit_starts_on_the_default_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "choice_cache_path", lambda: tmp_path / "choices.json")
    monkeypatch.setattr(cache, "curve_cache_path", lambda: tmp_path / "curves.json")
    real, release, entered = calibration.auto_tree_budget, threading.Event(), threading.Event()

    def held(*args, **kwargs):  # the start-up fit waits here until the first Run is over
        entered.set()
        assert release.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(calibration, "auto_tree_budget", held)
    spec = cold_settings().resolved([])
    prefit = threading.Thread(target=compare.prefit_budgets, args=(spec,), daemon=True)
    prefit.start()
    assert entered.wait(60)
    view = user_settings.View()
    request = req("cold")
    frames = list(handlers.run_handler(cold_settings(), view, request=request))
    statuses = [f["status"] for f in frames]
    assert sum("starts on the default tree budget (32)" in s for s in statuses) == 2  # both draft lanes
    assert not any("Fitting the tree budget" in s for s in statuses)
    comp = state.SESSIONS.get(request).comparison
    plain, eagle, poss2 = comp.lanes
    assert [lane.tree_budget for lane in comp.lanes] == [None, 32, 32] and not eagle.budget_auto
    assert eagle.token_ids == plain.token_ids == poss2.token_ids  # the default budget is as lossless
    release.set()
    prefit.join(120)
    assert not prefit.is_alive()
    frames = list(handlers.run_handler(cold_settings(), view, request=request))
    again = state.SESSIONS.get(request).comparison
    assert all(lane.budget_auto for lane in again.lanes[1:])
    assert not any("default tree budget" in f["status"] for f in frames)
