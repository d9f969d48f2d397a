"""End to end: the app served on localhost (tiny-random preset, a free port), driven by gradio_client (run, stream,
stop, the compare API, two sessions at once) and by a headless browser (Debian's chromium through Playwright), which
saves a screenshot to screenshots/app.png."""

from __future__ import annotations

import json
import os
import socket
import threading
from contextlib import contextmanager
from pathlib import Path

import page as lane_page
import pytest
import wording

from app.page.serving import launch_kwargs
from app.page.ui import build_demo
from app.server.limits import ServerLimits
from app.sessions import recordings
from poss_core.models.presets import DEFAULT_PRESET

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
SCREENSHOT = ROOT / "screenshots" / "app.png"
VIEW = ["draft position", False, "conditional (POSS pos-acc)", "this run"]
needs_chromium = pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason=f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    demo = build_demo("tiny-random", server=ServerLimits(slots=2))
    demo.queue(max_size=16, default_concurrency_limit=2)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **launch_kwargs())
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


def run_args(prompt="Hello there", methods=("plain", "eagle", "poss2"), max_new_tokens=16):
    """/run's inputs (app_settings.run_inputs, a 32-node tree of depth 6), then the four view toggles."""
    from app_settings import run_inputs

    tree = dict(depth=6, top_k=8, tree_budget=32)
    return run_inputs(prompt=prompt, methods=methods, max_new_tokens=max_new_tokens, **tree) + VIEW


def client(url):
    from gradio_client import Client

    return Client(url, verbose=False)


def status_of(frame) -> str:
    return frame[0]


def lane_heads(frame) -> list[str]:
    """The lane headers among a frame's outputs (lanes on show)."""
    return [v for v in frame if isinstance(v, str) and v.startswith('<div class="poss-lane-head">')]


def identity_kinds(frame) -> list[str]:
    """Each speculative lane's identity badge kind ("ok": it reproduced plain decoding)."""
    return [lane_page.identity(h).kind for h in lane_heads(frame) if "identity" in lane_page.badges(h)]


def wait_for_status(tab, phrase: str, timeout: int = 120_000) -> None:
    """Until the tab's status line holds `phrase` (a tests/wording.py phrase); a timeout says what it held."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        tab.wait_for_function(
            f"document.querySelector('#poss-status').innerText.includes({json.dumps(phrase)})", timeout=timeout
        )
    except PlaywrightTimeout:
        said = tab.locator("#poss-status").inner_text()
        raise AssertionError(
            f"the status never said {phrase!r} within {timeout / 1000:g} s; it says {said!r}"
        ) from None


def test_client_run_streams_and_stop_cancels(server):
    c = client(server)
    api = c.view_api(return_format="dict", print_info=False)["named_endpoints"]
    assert {"/run", "/step", "/stop", "/replay", "/compare", "/save_run", "/load_run"} <= set(api)

    job = c.submit(*run_args(max_new_tokens=16), api_name="/run")
    frames = list(job)
    assert wording.says(status_of(frames[0]), wording.LOADING)
    assert any(wording.says_running(status_of(f)) for f in frames)  # it streamed while the lanes ran
    final = job.outputs()[-1]
    assert wording.says_done(status_of(final)), status_of(final)
    html = " ".join(v for v in final if isinstance(v, str))
    assert 'class="tok ' in html and identity_kinds(final) == ["ok", "ok"]

    # Stop: a long run, cancelled after its first live frames, ends cleanly, and the next run works.
    job = c.submit(*run_args(max_new_tokens=500), api_name="/run")
    seen = threading.Event()
    for frame in job:
        if wording.says_running(status_of(frame)):
            seen.set()
            c.predict(*VIEW, api_name="/stop")
            break
    assert seen.is_set()
    job.result(timeout=120)
    final = job.outputs()[-1]
    assert wording.says_stopped(status_of(final)), status_of(final)
    assert [lane_page.lane_state(h) for h in lane_heads(final)] == ["cancelled"] * 3
    again = c.predict(*run_args(methods=("plain",), max_new_tokens=4), api_name="/run")
    assert wording.says_done(status_of(again))


def test_client_compare_api_and_two_sessions(server):
    from poss_core.models.presets import get_preset
    from poss_core.runtime import methods

    a, b = client(server), client(server)
    ref_a = a.predict("Good morning", ["plain", "poss1"], "tiny-random", 10, api_name="/compare")
    assert ref_a["lanes"][1]["identical_to_plain"] is True
    assert ref_a["lanes"][0]["summary"]["new_tokens"] == 10 and ref_a["lanes"][1]["summary"]["tau"] >= 1.0
    ref_b = b.predict("What is 2+2?", ["plain"], "tiny-random", 10, api_name="/compare")
    # Two sessions streaming at once keep their own lanes.
    jobs = {
        name: c.submit(*run_args(prompt=p, methods=m, max_new_tokens=10), api_name="/run")
        for name, c, p, m in [("a", a, "Good morning", ("plain", "poss1")), ("b", b, "What is 2+2?", ("plain",))]
    }
    outs = {name: job.result(timeout=180) for name, job in jobs.items()}
    texts_a = [v for v in outs["a"] if isinstance(v, str)]
    texts_b = [v for v in outs["b"] if isinstance(v, str)]
    assert ref_a["lanes"][0]["text"] in texts_a and ref_b["lanes"][0]["text"] in texts_b
    assert ref_a["lanes"][0]["text"] != ref_b["lanes"][0]["text"]
    titles = {name: [lane_page.lane_title(h) for h in lane_heads(out)] for name, out in outs.items()}
    poss1 = methods.label_of("poss1", get_preset("tiny-random"))
    assert titles == {"a": [methods.label_of("plain"), poss1], "b": [methods.label_of("plain")]}


@contextmanager
def app_page(url: str):
    """The app open in headless chromium, ready for input."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.goto(url)
            page.wait_for_selector("#poss-run", timeout=60_000)
            yield page
        finally:
            browser.close()


@pytest.mark.slow
@needs_chromium
def test_browser_shows_tokens_tree_and_charts(server):
    with app_page(server) as page:
        page.fill("#poss-prompt textarea", "Hello, how are you?")
        page.click("#poss-run")
        wait_for_status(page, wording.DONE)
        # Coloured tokens: accepted draft tokens have a tint, the target's tokens an underline; all have tooltips.
        drafts = page.locator(".poss-tokens .tok.draft")
        assert drafts.count() > 0
        tint = drafts.first.evaluate("e => getComputedStyle(e).backgroundColor")
        assert tint not in ("rgba(0, 0, 0, 0)", "transparent")
        target = page.locator("#poss-lane1-tokens .tok.target").first
        assert "inset" in target.evaluate("e => getComputedStyle(e).boxShadow")
        assert target.get_attribute("data-round") is not None and target.get_attribute("title")
        assert page.locator("#poss-lane0-tokens .tok").count() > 5
        assert page.locator(".poss-badge.ok").count() == 2  # both speculative lanes match plain decoding
        # The draft tree of a speculative lane and the four charts are drawn by plotly.
        assert page.locator("#poss-lane1-tree .main-svg .scatterlayer .trace").count() >= 3
        # Under the tree, the shown round told in words.
        account = page.locator("#poss-lane1-explain .poss-round-account").inner_text()
        assert wording.says_one_forward_pass(account) and wording.says(account, wording.TIME_SPLIT)
        for chart in ("pos-acc", "deviation", "hist", "tps"):
            assert page.locator(f"#poss-chart-{chart} .main-svg").count() > 0, chart
        assert page.locator("#poss-chart-tps .scatterlayer .trace").count() == 3
        assert wording.says(page.locator("#poss-chart-pos-acc").inner_text(), wording.POS_ACC_TITLE)
        page.click("#poss-settings > .label-wrap")  # the settings start closed
        assert "bfloat16" in page.locator("#poss-precision").inner_text()
        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert SCREENSHOT.stat().st_size > 10_000


def test_client_cancel_of_compare_stops_its_decoding(server):
    """A /compare call the client cancels stops decoding on the server (it used to run on to max_new_tokens)."""
    import time

    from poss_core.runtime import compare

    c = client(server)
    before = set(map(id, compare.live_comparisons()))
    job = c.submit("Tell me a long story", ["plain", "eagle", "poss2"], "tiny-random", 450, api_name="/compare")
    deadline = time.monotonic() + 60
    mine = []
    while not mine and time.monotonic() < deadline:
        mine = [
            comp
            for comp in compare.live_comparisons()
            if id(comp) not in before and min(len(lane.events) for lane in comp.lanes) >= 2
        ]
        time.sleep(0.02)
    assert mine, "the /compare call never started decoding"
    comp = mine[0]
    job.cancel()
    at_cancel = [len(lane.events) for lane in comp.lanes]
    deadline = time.monotonic() + 30
    while comp in compare.live_comparisons() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert comp not in compare.live_comparisons(), "the cancelled /compare call is still decoding"
    # Stopped within a round or two of the cancel (the cancel travels over HTTP first), far from max_new_tokens.
    assert all(len(lane.events) - n <= 3 for lane, n in zip(comp.lanes, at_cancel)), (at_cancel, comp.lanes)
    assert all(lane.stop_reason == "cancelled" for lane in comp.lanes)


def eagle_rounds(prompt: str, timeout_s: float = 120.0) -> int:
    """The EAGLE lane's draft rounds in the finished run of `prompt`, read off the server's sessions (the server
    runs in this process); waits for the run to finish."""
    import time

    from app.sessions import state
    from poss_core.rounds import metrics

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        comps = [
            s.comparison
            for s in list(state.SESSIONS._sessions.values())
            if s.comparison is not None and s.comparison.spec.prompt == prompt and s.comparison.finished
        ]
        if comps:
            return len(metrics.draft_rounds(comps[-1].lane("eagle").events))
        time.sleep(0.05)
    raise AssertionError(f"no finished run of {prompt!r}")


def wait_for_title(page, chart: str, *parts: str) -> None:
    """Until the chart's title (with its sample sizes) holds every one of `parts`."""
    page.wait_for_function(
        "([sel, parts]) => { const t = document.querySelector(sel);"
        " return t !== null && parts.every(p => t.textContent.includes(p)); }",
        arg=[f"#poss-chart-{chart} .gtitle", list(parts)],
        timeout=20_000,
    )


@pytest.mark.slow
@needs_chromium
def test_browser_token_click_picks_a_round_and_all_my_runs_pools(server):
    """A clicked token (or Enter on a focused one) moves its lane's round slider and account to its round; after
    two runs, "all my runs" redraws the charts over both (the sample size grows to the sum)."""

    def run(page, prompt) -> int:
        page.fill("#poss-prompt textarea", prompt)
        page.click("#poss-run")
        n = eagle_rounds(prompt)
        wait_for_status(page, wording.DONE, timeout=60_000)
        wait_for_title(page, "pos-acc", f"EAGLE n={n}")
        return n

    with app_page(server) as page:
        first = run(page, "Hello, how are you?")
        slider = page.locator("#poss-lane1-round input[type=number]")
        assert int(slider.input_value()) >= 3
        page.locator('#poss-lane1-tokens .tok[data-round="1"]').first.click()
        page.wait_for_function(
            f"document.querySelector('#poss-lane1-explain').innerText.includes({json.dumps(wording.proposed(1))})",
            timeout=20_000,
        )
        assert slider.input_value() == "1"
        assert wording.tree_round(page.locator("#poss-lane1-tree .gtitle").text_content()) == 1
        # Keyboard: the first token of each round is a tab stop; Enter picks its round.
        page.locator('#poss-lane1-tokens [data-round="2"][tabindex="0"]').focus()
        page.keyboard.press("Enter")
        page.wait_for_function(
            f"document.querySelector('#poss-lane1-explain').innerText.includes({json.dumps(wording.proposed(2))})",
            timeout=20_000,
        )
        assert slider.input_value() == "2"

        second = run(page, "Name three colours.")
        assert not wording.says_pooled(page.locator("#poss-chart-pos-acc .gtitle").text_content())
        page.locator("#poss-charts-from label", has_text="all my runs").click()
        wait_for_title(page, "pos-acc", wording.pooled(2), f"EAGLE n={first + second}")
        page.locator("#poss-charts-from label", has_text="this run").click()
        wait_for_title(page, "pos-acc", f"EAGLE n={second}")
        assert not wording.says_pooled(page.locator("#poss-chart-pos-acc .gtitle").text_content())


def test_the_served_app_runs_the_training_free_lanes_identical_to_plain(server):
    """Prompt lookup and assisted generation through the running server (/compare and /run), each with its badge."""
    c = client(server)
    out = c.predict("abc abc abc abc", ["plain", "pld", "assisted"], "tiny-random", 24, api_name="/compare")
    plain, pld, assisted = out["lanes"]
    assert pld["identical_to_plain"] is True and assisted["identical_to_plain"] is True
    assert pld["text"] == plain["text"] == assisted["text"]
    frames = c.submit(*run_args(prompt="abc abc abc abc", methods=("plain", "pld")), api_name="/run").result(
        timeout=180
    )
    assert identity_kinds(frames) == ["ok"]


@pytest.mark.slow
@needs_chromium
def test_browser_example_replays_at_once_while_another_tab_runs_and_the_class_pools(server):
    """Two tabs: while the first runs live, the second clicks an example and its recording streams tokens within
    2 s (labelled as a recording); then the second tab's "everyone on this server" shows the first tab's run."""
    import time

    with app_page(server) as live:
        other = live.context.browser.new_page(viewport={"width": 1500, "height": 1100})  # a second tab, own session
        other.goto(server)
        other.wait_for_selector("#poss-run", timeout=60_000)
        live.fill("#poss-prompt textarea", "Tell me a long story about a lighthouse keeper.")
        live.click("#poss-settings > .label-wrap")  # the settings start closed
        live.locator("#poss-max-new-tokens input[type=number]").fill("2000")
        live.click("#poss-run")
        wait_for_status(live, wording.RUNNING, timeout=60_000)
        t0 = time.monotonic()
        other.get_by_role("button", name=recordings.example_label(recordings.EXAMPLES[0])).click()
        other.wait_for_selector("#poss-lane0-tokens .tok", timeout=60_000)
        took = time.monotonic() - t0
        print(f"\n[e2e] an example's first replayed tokens {took:.2f} s after the click, while another tab ran live")
        assert wording.says_replaying_recording(other.locator("#poss-status").inner_text(), DEFAULT_PRESET, "")
        # It did not wait for the live run (the goal is 2 s; a busy shared machine can starve the browser and the
        # server, so the bound here is that the live run is still going).
        assert wording.says_running(live.locator("#poss-status").inner_text()), took
        live.click("#poss-stop")
        wait_for_status(live, wording.STOPPED)
        wait_for_status(other, wording.REPLAY_DONE)
        other.locator("#poss-charts-from label", has_text="everyone on this server").click()
        wait_for_title(other, "pos-acc", wording.class_pool_title("tiny-random"), "EAGLE n=")
