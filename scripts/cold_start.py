"""Cold start as a new Space sees it: `python app.py` on an empty model cache, timed until the page answers and until
the first comparison on the default lanes returns tokens.

    python scripts/cold_start.py [--preset smollm2-135m] [--methods plain,eagle,poss2] [--tokens 1] [--keep-cache]

The cache (`POSS_CACHE_DIR`: the prepared target, the forward-time curve, the tree budgets) starts empty in a
temporary folder, so the target is prepared and every auto budget calibrated as on a fresh machine. The first call
is `/compare` with the UI's default settings (auto budget) and `--tokens` new tokens: its answer time is the time to
the first lane token. A second call shows a warm start. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a file from anywhere: the package is beside

from poss_core.models.presets import DEFAULT_PRESET  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_page(url: str, server: subprocess.Popen, timeout_s: float) -> float:
    """Seconds until GET `url` answers 200 (the page is usable), or an error if the server dies or times out."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        if server.poll() is not None:
            raise SystemExit(f"error: the app exited with code {server.returncode} before its page was up.")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return time.perf_counter() - t0
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"error: the page did not come up within {timeout_s:.0f} s.")


def timed_compare(client, methods: list[str], tokens: int) -> tuple[float, dict]:
    t0 = time.perf_counter()
    out = client.predict("What is the capital of France?", methods, "", tokens, auto_budget=True, api_name="/compare")
    return time.perf_counter() - t0, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python scripts/cold_start.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--preset", default=DEFAULT_PRESET)
    p.add_argument("--methods", default="plain,eagle,poss2", help="the lanes of the first comparison")
    p.add_argument("--tokens", type=int, default=1, help="new tokens of the first comparison")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--keep-cache", action="store_true", help="use the normal cache (a warm start) instead")
    args = p.parse_args(argv)
    from gradio_client import Client

    cache = None if args.keep_cache else tempfile.mkdtemp(prefix="poss-cold-")
    env = {**os.environ, **({"POSS_CACHE_DIR": cache} if cache else {}), "GRADIO_ANALYTICS_ENABLED": "False"}
    port = free_port()
    t_start = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "app.py", "--preset", args.preset, "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        page_s = wait_for_page(f"http://127.0.0.1:{port}/", server, args.timeout)
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        first_s, first = timed_compare(client, methods, args.tokens)
        second_s, _ = timed_compare(client, methods, args.tokens)
    finally:
        server.terminate()
        try:
            _, err = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            _, err = server.communicate()
    print(
        json.dumps(
            {
                "preset": args.preset,
                "cache": "empty" if cache else "warm",
                "methods": methods,
                "tokens": args.tokens,
                "page_up_s": round(page_s, 1),
                "first_tokens_after_page_s": round(first_s, 1),
                "first_tokens_after_start_s": round(page_s + first_s, 1),
                "second_call_s": round(second_s, 1),
                "budgets": {lane["method"]: lane.get("tree_budget") for lane in first.get("lanes", [])},
                "since_launch_s": round(time.perf_counter() - t_start, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
