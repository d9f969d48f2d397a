"""The Evidence tab in a headless browser (Debian's chromium through Playwright): the bundled summary's charts with
their sample sizes on load, then a results folder typed into the path box. Saves screenshots/evidence.png."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_app_e2e import app_page, free_port, needs_chromium
from test_bench import DEPTH, known_records

from app.page import server_state
from app.page.serving import launch_kwargs
from app.page.ui import build_demo
from app.server.limits import ServerLimits
from poss_core.bench import report
from poss_core.results import evidence

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = ROOT / "screenshots" / "evidence.png"
CHARTS = ("tau", "speedup", "pos-acc", "pos-rate", "deviation")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The app on tiny-random, its bundled summary made from known records, and a results folder it may read."""
    root = tmp_path_factory.mktemp("evidence-e2e")
    records = known_records()
    meta = {"preset": "tiny-random", "command": "python -m poss_core.bench --bundled-unit", "hardware": "unit CPU"}
    evidence.write_evidence(root / "bundled" / "tiny-random.json", evidence.build_evidence(records, meta, DEPTH))
    mine = {**meta, "command": "python -m poss_core.bench --mine"}
    report.write_outputs(root / "results" / "mine", records[:8], mine, DEPTH, plotlyjs="cdn")  # the first run only
    before = os.environ.get("POSS_EVIDENCE_DIR")
    os.environ["POSS_EVIDENCE_DIR"] = str(root / "bundled")
    demo = build_demo("tiny-random", server=ServerLimits(slots=2, results_dir=str(root / "results")))
    demo.queue(max_size=16, default_concurrency_limit=2)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **launch_kwargs())
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()
        server_state.install(ServerLimits())  # the defaults back for the tests after this one
        if before is None:
            os.environ.pop("POSS_EVIDENCE_DIR", None)
        else:
            os.environ["POSS_EVIDENCE_DIR"] = before


@pytest.mark.slow
@needs_chromium
def test_browser_shows_the_evidence_charts_and_their_sample_sizes(server):
    with app_page(server) as page:
        page.get_by_role("tab", name="Evidence").click()
        page.wait_for_selector("#poss-evidence-tau .main-svg", timeout=60_000)
        for chart in CHARTS:
            assert page.locator(f"#poss-evidence-{chart} .main-svg").count() > 0, chart
        # Each chart states its sample size; the rates carry error bars.
        text = {chart: page.locator(f"#poss-evidence-{chart}").inner_text() for chart in CHARTS}
        assert "EAGLE n=12" in text["pos-acc"] and "POSS-2 n=10" in text["pos-acc"]
        assert "EAGLE n=12" in text["pos-rate"] and "EAGLE n=2" in text["speedup"]
        assert "d1 1, d2 1" in text["tau"] and "EAGLE n=8" in text["deviation"]
        assert page.locator("#poss-evidence-pos-acc .errorbar").count() > 0
        header = page.locator("#poss-evidence-header").inner_text()
        assert "--bundled-unit" in header and "unit CPU" in header and "EAGLE 12" in header
        assert "+75.0% (+75.0 to +75.0)" in page.locator("#poss-evidence-table").inner_text()  # POSS-2 vs EAGLE
        # The dataset picker redraws the acceptance charts on one dataset, with that dataset's sample size.
        page.click("#poss-evidence-scope input")
        page.get_by_role("option", name="d1").click()
        page.wait_for_function(
            "document.querySelector('#poss-evidence-pos-acc').innerText.includes('dataset: d1')", timeout=60_000
        )
        assert "EAGLE n=12" not in page.locator("#poss-evidence-pos-acc").inner_text()
        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), full_page=True)

        # Another results folder, typed into the path box: its own command and sizes (one run: EAGLE n=6).
        page.get_by_text("Load another summary or results folder").click()
        page.fill("#poss-evidence-folder textarea, #poss-evidence-folder input", "mine")
        page.click("#poss-evidence-load")
        page.wait_for_function(
            "document.querySelector('#poss-evidence-header').innerText.includes('--mine')", timeout=60_000
        )
        assert "EAGLE n=6" in page.locator("#poss-evidence-pos-acc").inner_text()
        page.fill("#poss-evidence-folder textarea, #poss-evidence-folder input", "/etc")
        page.click("#poss-evidence-load")
        page.wait_for_function(
            "document.querySelector('#poss-evidence-message').innerText.includes('reads only')", timeout=60_000
        )
        assert "--mine" in page.locator("#poss-evidence-header").inner_text()  # what was shown stays
