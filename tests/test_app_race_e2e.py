"""What a class watches is what the clock measured, in headless Chromium on the real default model: mid-race, each
draft lane's token count over plain decoding's is within 20% of the speed-up its header shows (two example replays
and a live Run at 1280x720); a short answer's τ and token count end with the answer; at 390x844 the three lanes'
texts all start within 1,700 px of the Run button; Run with Settings open at 1280x720 still shows lane text, and a
long answer's newest tokens stay on screen. Screenshots go to screenshots/ (ignored)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import test_app_projector_e2e as projector
import wording
from test_app_e2e import needs_chromium, wait_for_status

from app.sessions import recordings
from poss_core.models.presets import DEFAULT_PRESET

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "screenshots"
RACE_TOLERANCE = 0.2  # a draft lane's count ratio may differ from its header's speed-up by this share
PHONE_LANES_PX = 1700  # at 390x844, every lane's text starts within this far below the Run button
LIVE_PROMPT = "Describe how a bicycle works, part by part, in a few paragraphs."
SHORT_PROMPT = "What is 17 times 3? Answer briefly."

pytestmark = [pytest.mark.slow, needs_chromium]

# Each lane's figures, its state and its token view's tokens, as the page shows them.
LANES_JS = """() => [0, 1, 2].map(i => {
  const head = document.querySelector('#poss-lane' + i + '-head');
  if (!head || !head.querySelector('h3')) return null;
  const shown = document.querySelectorAll('#poss-lane' + i + '-tokens .tok').length;
  const out = {title: head.querySelector('h3').innerText, shown: shown};
  head.querySelectorAll('[data-stat]').forEach(s => out[s.dataset.stat] = s.querySelector('b').innerText);
  const state = head.querySelector('[data-lane-state]');
  out.state = state ? state.dataset.laneState : '';
  return out;
})"""


browser = projector.browser  # Debian's chromium


@pytest.fixture(scope="module")
def server():
    with projector.serving(DEFAULT_PRESET) as url:
        yield url


def open_page(browser, url: str, width: int, height: int):
    tab = browser.new_page(viewport={"width": width, "height": height})
    tab.goto(url)
    tab.wait_for_selector("#poss-run", timeout=120_000)
    tab.wait_for_timeout(1000)
    return tab


def run_live(tab, prompt: str) -> None:
    """Type `prompt`, press Run, and wait for the first lane's first token."""
    tab.fill("#poss-prompt textarea", prompt)
    tab.click("#poss-run")
    tab.wait_for_selector("#poss-lane0-tokens .tok", timeout=120_000)


def number(text: str) -> float:
    return float(text.replace("×", "").replace(",", ""))


def race_samples(tab, timeout_s: float = 240.0) -> list[dict]:
    """Every 0.25 s until every lane has finished: for each draft lane still running while plain decoding is too,
    both past 20 tokens, its token count over plain decoding's and the speed-up its header shows."""
    samples, t0 = [], time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        lanes = [lane for lane in tab.evaluate(LANES_JS) if lane]
        plain = lanes[0]
        if all(lane["state"] not in ("running", "idle", "") for lane in lanes):
            return samples
        for lane in lanes[1:]:
            running = lane["state"] == "running" and plain["state"] == "running"
            if running and "vs_plain" in lane and number(lane["tokens"]) > 20 and number(plain["tokens"]) > 20:
                ratio = number(lane["tokens"]) / number(plain["tokens"])
                samples.append({"lane": lane["title"], "ratio": ratio, "header": number(lane["vs_plain"])})
        tab.wait_for_timeout(250)
    raise AssertionError(f"the lanes did not finish within {timeout_s:g} s")


def check_race(samples: list[dict], what: str) -> None:
    assert samples, f"{what}: no moment with both lanes past 20 tokens"
    worst = max(samples, key=lambda s: abs(s["ratio"] / s["header"] - 1))
    print(
        f"\n[race] {what}: {len(samples)} mid-race samples; worst {worst['lane']}: count ratio {worst['ratio']:.2f} "
        f"against its header's ×{worst['header']:.2f}"
    )
    assert abs(worst["ratio"] / worst["header"] - 1) <= RACE_TOLERANCE, worst


@pytest.mark.parametrize("example", [0, 4])
def test_an_example_replay_races_in_time(server, browser, example):
    tab = open_page(browser, server, 1280, 720)
    try:
        tab.get_by_role("button", name=recordings.example_label(recordings.EXAMPLES[example])).click()
        tab.wait_for_selector("#poss-lane0-tokens .tok", timeout=60_000)
        check_race(race_samples(tab), f"example {example}")
        wait_for_status(tab, wording.REPLAY_DONE)
        assert tab.locator("#poss-race [data-race=over]").count() == 1
    finally:
        tab.close()


def test_a_live_run_races_in_time_and_its_newest_tokens_stay_on_screen(server, browser):
    tab = open_page(browser, server, 1280, 720)
    try:
        run_live(tab, LIVE_PROMPT)
        samples = race_samples(tab)
        SHOTS.mkdir(exist_ok=True)
        tab.screenshot(path=str(SHOTS / "race-1280x720-live.png"))
        check_race(samples, "live run")
        wait_for_status(tab, wording.DONE)
        # The lane's box follows its newest token: the last token (the end mark, or the last of a cut answer) shows
        last = tab.locator("#poss-lane1-tokens .tok").last.bounding_box()
        assert last is not None and 0 <= last["y"] and last["y"] + last["height"] <= 720, last
    finally:
        tab.close()


def test_a_short_answer_counts_end_with_the_answer(server, browser):
    tab = open_page(browser, server, 1280, 720)
    try:
        tab.fill("#poss-prompt textarea", SHORT_PROMPT)
        tab.click("#poss-run")
        wait_for_status(tab, wording.DONE)
        for lane in tab.evaluate(LANES_JS):
            tokens, rounds = int(lane["tokens"]), int(lane["rounds"])
            assert lane["shown"] == tokens, lane  # every counted token is on screen, the end mark included
            assert number(lane["tau"]) == pytest.approx((tokens - 1) / rounds, abs=0.006), lane
    finally:
        tab.close()


def test_on_a_phone_every_lanes_text_comes_first(server, browser):
    tab = open_page(browser, server, 390, 844)
    try:
        tab.fill("#poss-prompt textarea", LIVE_PROMPT)
        tab.click("#poss-run")
        wait_for_status(tab, wording.DONE, timeout=240_000)
        tops = tab.evaluate(
            """() => ['#poss-run', '#poss-lane0-tokens', '#poss-lane1-tokens', '#poss-lane2-tokens', '#poss-lane0-tree']
              .map(s => document.querySelector(s).getBoundingClientRect().top + window.scrollY)"""
        )
        SHOTS.mkdir(exist_ok=True)
        tab.screenshot(path=str(SHOTS / "race-390x844-done.png"))
        run, lanes, first_tree = tops[0], tops[1:4], tops[4]
        print(f"\n[race] 390x844: the lanes' texts start {', '.join(f'{t - run:.0f}' for t in lanes)} px below Run")
        assert all(t - run <= PHONE_LANES_PX for t in lanes), (run, lanes)
        assert max(lanes) < first_tree  # trees, sliders and accounts after every lane's text
    finally:
        tab.close()


def test_run_with_the_settings_open_still_shows_lane_text(server, browser):
    tab = open_page(browser, server, 1280, 720)
    try:
        tab.click("#poss-settings > .label-wrap")
        tab.locator("#poss-methods").wait_for(state="visible", timeout=10_000)
        run_live(tab, SHORT_PROMPT)
        on_screen = "(() => { const t = document.querySelector('#poss-lane0-tokens').getBoundingClientRect().top;"
        on_screen += " return 0 <= t && t <= 720 - 40; })()"  # at least two lines of the lane's text on screen
        tab.wait_for_function(on_screen, timeout=10_000)  # once the closing panel has settled
        assert not tab.locator("#poss-methods").is_visible()
        assert tab.locator("#poss-run").bounding_box()["y"] >= 0  # Run still in view
        SHOTS.mkdir(exist_ok=True)
        tab.screenshot(path=str(SHOTS / "race-1280x720-settings.png"))
        wait_for_status(tab, wording.DONE)
    finally:
        tab.close()


def test_an_example_clicked_during_a_live_run_leaves_the_prompt_box_as_it_is(server, browser):
    tab = open_page(browser, server, 1280, 720)
    try:
        run_live(tab, LIVE_PROMPT)
        tab.get_by_role("button", name=recordings.example_label(recordings.EXAMPLES[1])).click()
        tab.wait_for_timeout(1500)
        assert tab.locator("#poss-prompt textarea").input_value() == LIVE_PROMPT  # the streaming answers' prompt
        tab.click("#poss-stop")
        tab.wait_for_function(
            "!document.querySelector('#poss-status .poss-status.busy')", timeout=120_000
        )  # stopped, or done just before the Stop
        assert tab.locator("#poss-prompt textarea").input_value() == LIVE_PROMPT
    finally:
        tab.close()
