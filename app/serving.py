"""What Gradio's `launch()` is given besides host and port: the page's CSS and theme, the worker threads, the largest
upload, and the middlewares that give each client its share of the queue and limit uploads."""

from __future__ import annotations

from typing import Any

import gradio as gr

from poss_core import saved_runs

from . import client_share, disk_budget, recordings

THREADS = 160  # Gradio's worker threads: a waiting live run and a replay each hold one while they sleep
CSS = (recordings.ASSETS / "app.css").read_text(encoding="utf-8")


def theme() -> gr.themes.Base:
    """Gradio's default look with system fonts: nothing is fetched from a font CDN, so the page works offline."""
    return gr.themes.Default(
        font=["ui-sans-serif", "system-ui", "Segoe UI", "Roboto", "sans-serif"],
        font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"],
    )


def decoding_events(demo: gr.Blocks) -> set[int]:
    """The events each client's queue share counts (app/client_share.py): the ones that decode (Run, its Enter key,
    Step, /compare) and Replay."""
    return {i for i, fn in demo.fns.items() if fn.concurrency_id in ("decode", "live") or fn.api_name == "replay"}


def launch_kwargs(demo: gr.Blocks | None = None) -> dict[str, Any]:
    """What `launch()` needs besides host and port: CSS and theme (Gradio 6 takes them at launch), the largest
    upload (a saved run; Gradio refuses bigger files before they reach a handler) and, given the demo, the middleware
    that gives each client its share of the queue and the one that limits uploads (`disk_budget`)."""
    kwargs: dict[str, Any] = {
        "css": CSS,
        "theme": theme(),
        "max_file_size": saved_runs.MAX_RUN_BYTES,
        "max_threads": THREADS,
    }
    if demo is not None:
        from starlette.middleware import Middleware

        kwargs["app_kwargs"] = {
            "middleware": [
                Middleware(client_share.QueueShareMiddleware, fn_indexes=decoding_events(demo)),
                # uploads are sized, rated per address and fitted under the disk cap before Gradio writes them
                Middleware(disk_budget.UploadLimitMiddleware, max_bytes=saved_runs.MAX_RUN_BYTES + 2**20),
            ]
        }
    return kwargs
