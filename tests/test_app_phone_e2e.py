"""Charts and the Evidence tab on a 390x844 phone and a 1280x720 projector, in headless Chromium (Debian's chromium
through Playwright; the app on tiny-random, whose examples replay the default preset's bundled recordings): a replayed
lane's draft-tree labels lie inside the plot and apart; no toolbar sits on a chart's title and every title line ends
inside its chart; the Evidence tab's table scrolls sideways in its box to its speed columns, its header stays in its
box and the preset box shows the preset's whole name; the specialist strip names all of eight methods' rows.
Screenshots go to screenshots/ (ignored)."""

from __future__ import annotations

from pathlib import Path

import pytest
import test_app_projector_e2e as projector
import wording
from test_app_e2e import needs_chromium, wait_for_status
from test_phone_figures import pooled_runs

from app.actions import handlers
from app.sessions import recordings
from app.views import chart_fit
from poss_core.models.presets import DEFAULT_PRESET
from poss_core.views import figures

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "screenshots"
PHONE, PROJECTOR = (390, 844), (1280, 720)
CHARTS = ["#poss-chart-pos-acc", "#poss-chart-deviation", "#poss-chart-hist", "#poss-chart-tps"]

pytestmark = [pytest.mark.slow, needs_chromium]
server, browser = projector.server, projector.browser  # the app on tiny-random, and Debian's chromium
assert_legends_clear = projector.assert_legends_clear

# A chart's text labels (scatter texts) as boxes, and its plot area's box, in the page's pixels.
TREE_TEXT_JS = """(sel) => {
  const c = document.querySelector(sel);
  const bg = c.querySelector('.nsewdrag').getBoundingClientRect();
  const boxes = [...c.querySelectorAll('.textpoint text')].filter(t => t.textContent.trim()).map(t => {
    const r = t.getBoundingClientRect();
    return {text: t.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom};
  });
  return {plot: {left: bg.left, right: bg.right, top: bg.top, bottom: bg.bottom}, labels: boxes};
}"""
# Where the toolbar of a hovered chart is, and its title's box.
MODEBAR_JS = """(sel) => {
  const c = document.querySelector(sel);
  const bar = c.querySelector('.modebar-container');
  const b = bar && getComputedStyle(bar).display !== 'none' ? bar.querySelector('.modebar') : null;
  const t = c.querySelector('.gtitle').getBoundingClientRect();
  const r = b ? b.getBoundingClientRect() : null;
  return {bar: r && r.width ? {left: r.left, right: r.right, top: r.top, bottom: r.bottom} : null,
          title: {left: t.left, right: t.right, top: t.top, bottom: t.bottom}};
}"""


def overlap(a: dict, b: dict, slack: float = 1.0) -> bool:
    """Whether two boxes share more than `slack` pixels each way (glyphs' boxes touch where their letters do not)."""
    return (
        min(a["right"], b["right"]) - max(a["left"], b["left"]) > slack
        and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > slack
    )


def assert_tree_labels_apart(tab, lane: int) -> None:
    """Lane `lane`'s tree: every label inside the plot area, no two labels on each other."""
    sel = f"#poss-lane{lane}-tree"
    tab.locator(sel).scroll_into_view_if_needed()
    found = tab.evaluate(TREE_TEXT_JS, sel)
    plot, labels = found["plot"], found["labels"]
    assert len(labels) >= 3, (sel, labels)
    for i, a in enumerate(labels):
        assert plot["left"] - 1 <= a["left"] and a["right"] <= plot["right"] + 1, (sel, a, plot)
        clash = [b["text"] for b in labels[i + 1 :] if overlap(a, b)]
        assert not clash, (sel, a["text"], clash)


def assert_toolbar_off_the_title(tab, chart: str) -> None:
    """Hovered (a phone's tap), a chart's toolbar is hidden or clear of its title."""
    tab.locator(chart).scroll_into_view_if_needed()
    tab.locator(chart).hover()
    tab.wait_for_timeout(300)
    found = tab.evaluate(MODEBAR_JS, chart)
    assert found["bar"] is None or not overlap(found["bar"], found["title"]), (chart, found)


@pytest.mark.parametrize("width,height", [PHONE, PROJECTOR])
def test_a_replays_trees_and_charts_read_whole(server, browser, width, height, monkeypatch):
    monkeypatch.setattr(handlers, "REPLAY_SPEED", 1000.0)  # the replay over at once: its last trees are checked
    tab = browser.new_page(viewport={"width": width, "height": height})
    try:
        tab.goto(server)
        tab.wait_for_selector("#poss-run", timeout=60_000)
        tab.get_by_role("button", name=recordings.example_label(recordings.EXAMPLES[0])).click()
        wait_for_status(tab, wording.REPLAY_DONE)
        tab.wait_for_timeout(500)  # the last frame's trees drawn
        for lane in (1, 2):
            assert_tree_labels_apart(tab, lane)
        SHOTS.mkdir(exist_ok=True)
        tab.locator("#poss-lane1-tree").screenshot(path=str(SHOTS / f"phone-tree-{width}x{height}.png"))
        for chart in CHARTS + ["#poss-lane1-tree"]:
            assert_toolbar_off_the_title(tab, chart)
        assert_legends_clear(tab, CHARTS + ["#poss-lane1-tree", "#poss-lane2-tree"])
        tab.locator("#poss-chart-pos-acc").screenshot(path=str(SHOTS / f"phone-pos-acc-{width}x{height}.png"))
    finally:
        tab.close()


# The Evidence table's scrolling box, its width and what it holds, and the preset box's text against its width.
EVIDENCE_JS = """() => {
  const table = document.querySelector('#poss-evidence-table table');
  let box = table.parentElement;
  while (box && getComputedStyle(box).overflowX !== 'auto' && getComputedStyle(box).overflowX !== 'scroll')
    box = box.parentElement;
  const header = document.querySelector('#poss-evidence-header');
  const preset = document.querySelector('#poss-evidence-preset input');
  return {box: box ? {width: box.clientWidth, scroll: box.scrollWidth, right: box.getBoundingClientRect().right}
               : null,
          page: document.documentElement.scrollWidth, header: [header.clientWidth, header.scrollWidth],
          preset: [preset.clientWidth, preset.scrollWidth]};
}"""
SPEED_HEADER_JS = """() => {
  const table = document.querySelector('#poss-evidence-table table');
  let box = table.parentElement;
  while (getComputedStyle(box).overflowX !== 'auto') box = box.parentElement;
  const th = [...table.querySelectorAll('th')].find(h => h.textContent.startsWith('speed-up'));
  th.scrollIntoView({block: 'nearest', inline: 'nearest'});
  const r = th.getBoundingClientRect(), b = box.getBoundingClientRect();
  return {th: [r.left, r.right], box: [b.left, b.right]};
}"""


def test_the_evidence_table_scrolls_in_its_box_on_a_phone(server, browser):
    tab = browser.new_page(viewport={"width": PHONE[0], "height": PHONE[1]})
    try:
        tab.goto(server)
        tab.wait_for_selector("#poss-run", timeout=60_000)
        tab.get_by_role("tab", name="Evidence").click()
        tab.click("#poss-evidence-preset input")  # tiny-random has no bundled summary: the default preset's
        tab.get_by_role("option", name=DEFAULT_PRESET, exact=True).click()
        tab.wait_for_function("document.querySelector('#poss-evidence-tau .gtitle') !== null", timeout=60_000)
        tab.wait_for_timeout(800)
        found = tab.evaluate(EVIDENCE_JS)
        print(f"\n[phone] Evidence: {found}")
        assert found["page"] <= PHONE[0], found  # nothing widens the page
        box = found["box"]
        assert box is not None and box["right"] <= PHONE[0] and box["scroll"] > box["width"], found
        assert found["header"][1] <= found["header"][0], found  # the command and commit stay in the header's box
        assert found["preset"][1] <= found["preset"][0], found  # the preset's name whole beside its arrow
        speed = tab.evaluate(SPEED_HEADER_JS)
        assert speed["box"][0] <= speed["th"][0] and speed["th"][1] <= speed["box"][1] + 1, speed
        tab.locator("#poss-evidence-table").screenshot(path=str(SHOTS / "phone-evidence-table.png"))
        for chart in ("#poss-evidence-tau", "#poss-evidence-pos-acc"):
            assert_toolbar_off_the_title(tab, chart)
        assert_legends_clear(tab, ["#poss-evidence-tau", "#poss-evidence-pos-acc", "#poss-evidence-speedup"])
    finally:
        tab.close()


@pytest.mark.parametrize("width", [326, 600])  # a phone's chart, and half a projector's page
def test_the_strip_names_each_of_eight_methods_rows(browser, tmp_path, width):
    runs, _ = pooled_runs(8)
    fig = chart_fit.fit(figures.pos_acc_figure(runs, specialist_bands={label: [0, 1, 2] for label in runs}))
    fig.update_layout(width=width)
    page = tmp_path / "strip.html"
    fig.write_html(page, include_plotlyjs=True, full_html=True)
    tab = browser.new_page(viewport={"width": width + 20, "height": 900})
    try:
        tab.goto(page.as_uri())
        tab.wait_for_selector(".y2tick text", timeout=30_000)
        ticks = tab.evaluate(
            "() => [...document.querySelectorAll('.y2tick text')].map(t => { const r = t.getBoundingClientRect();"
            " return {text: t.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom}; })"
        )
        assert sorted(t["text"] for t in ticks) == sorted(runs), ticks
        assert not any(overlap(a, b) for i, a in enumerate(ticks) for b in ticks[i + 1 :]), ticks
        assert all(t["left"] >= 0 for t in ticks), ticks  # every name whole, none cut at the left
        tab.screenshot(path=str(SHOTS / f"phone-strip-{width}.png"))
    finally:
        tab.close()
