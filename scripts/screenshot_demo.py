"""The README's picture of the demo: the app on the real default preset (SmolLM2-135M-Instruct with the bundled
drafts, its default lanes plain / EAGLE / POSS-2 and default settings), one example prompt run to the end in a
headless browser (Debian's chromium), saved as a full-page PNG.

    python scripts/screenshot_demo.py [--prompt TEXT] [--precision auto|bfloat16] \
        [--threads 1] [--out assets/demo.png]

Run it on a quiet machine: the lanes' tokens/s are measured live.
"""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file from anywhere: the package is beside

from app.page.serving import launch_kwargs
from app.page.ui import build_demo
from app.server.limits import ServerLimits
from app.sessions.recordings import EXAMPLES
from poss_core.models.presets import DEFAULT_PRESET

CHROMIUM = "/usr/bin/chromium"
PROMPT = EXAMPLES[0]["prompt"]  # the first example (chat), run live


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--out", default="assets/demo.png")
    ap.add_argument("--width", type=int, default=1500)
    ap.add_argument("--precision", default="auto", help="the Precision setting (auto = fp32 on a CPU)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads, as `python app.py` sets on 2 cores")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)

    from playwright.sync_api import sync_playwright

    demo = build_demo(DEFAULT_PRESET, args.precision, ServerLimits(slots=1))
    demo.queue(max_size=4, default_concurrency_limit=1)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **launch_kwargs())
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": args.width, "height": 1100})
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_selector("#poss-run", timeout=120_000)
            page.fill("#poss-prompt textarea", args.prompt)
            page.click("#poss-run")
            # The first run loads the model and, once per machine, calibrates the auto budget: minutes on a CPU.
            page.wait_for_function("document.querySelector('#poss-status').innerText.includes('Done')", timeout=900_000)
            page.wait_for_timeout(3_000)  # the charts repaint after the last round
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=args.out, full_page=True)
            print(page.locator("#poss-status").inner_text())
            for i in range(3):  # each lane's figures and where they come from
                head = page.locator(f"#poss-lane{i}-head")
                if head.is_visible():
                    print(" | ".join(line for line in head.inner_text().splitlines() if line.strip()))
            browser.close()
    finally:
        demo.close()
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
