"""What Gradio's `launch()` is given besides host and port: the page's CSS, script and theme, the worker threads, the
largest upload, Gradio's per-tab state capacity, and the middlewares that cap request bodies, give each client its
share of the queue and limit uploads."""

from __future__ import annotations

from typing import Any

import gradio as gr

from app.server import body_cap, client_share, limits, path_alias, upload_limits
from app.server.tabs import TabWatch
from app.sessions import recordings, state
from poss_core.runtime import saved_runs
from poss_core.runtime.run_spec import MAX_LANES

THREADS = 160  # Gradio's worker threads: a waiting live run and a replay each hold one while they sleep
CSS = (recordings.ASSETS / "app.css").read_text(encoding="utf-8")
# On Run (a click, or Enter in the prompt), Step, Replay and an example: the Settings panel closes (open, it pushes the
# lanes below a projector's screen), and where the first lane's text has less than about ten lines (280 px) of the
# screen to stream into, the page scrolls to give it that, never past the prompt's top on a wide screen, so that a
# projector keeps the prompt and Run in view while the answers stream (at 1280x720 the page's title and tabs go); a
# phone's column is too tall for both, and scrolls to the lanes' headers. While a lane streams, its text box follows
# its newest token (unless the reader scrolled it in the last few seconds) and, on a wide screen, ends at the
# screen's bottom, so the newest tokens and the end mark are seen without scrolling the page. Installed once when
# the page loads (launch's js), so it acts at the click itself.
LANES_INTO_VIEW_JS = """
() => {
  const intoView = () => {
    const lane = document.querySelector("#poss-lane0-tokens");
    const prompt = document.querySelector("#poss-prompt");
    if (!lane || !prompt) return;
    const below = lane.getBoundingClientRect().top + 280 - window.innerHeight;
    if (below <= 0) return;
    if (window.innerWidth < 700) {  // a phone: the lanes from their headers down
      const head = document.querySelector("#poss-lane0-head") || lane;
      window.scrollBy({top: head.getBoundingClientRect().top - 8, behavior: "instant"});
      return;
    }
    const room = Math.max(0, prompt.getBoundingClientRect().top - 8);
    window.scrollBy({top: Math.min(below, room), behavior: "instant"});
  };
  const closeSettings = () => {
    const open = document.querySelector("#poss-settings > .label-wrap.open");
    if (open) open.click();
  };
  const start = () => {
    closeSettings();
    watchLanes();
    requestAnimationFrame(() => requestAnimationFrame(intoView));
    setTimeout(intoView, 400);  // and again once a closing panel's animation has ended
  };
  document.addEventListener("click", (e) => {
    if (e.target.closest && e.target.closest("#poss-run, #poss-step, #poss-replay, .poss-example")) start();
  }, true);
  document.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && e.target.closest && e.target.closest("#poss-prompt")) start();
  }, true);
  const touched = new WeakMap();  // a lane's box -> when its reader last scrolled it by hand
  const follow = (holder) => {
    const box = holder.querySelector(".poss-lane-tokens");
    if (!box) return;
    if (window.innerWidth >= 700) {
      const top = box.getBoundingClientRect().top;
      if (top > 0 && top < window.innerHeight - 160) box.style.maxHeight = (window.innerHeight - top - 12) + "px";
    }
    if (Date.now() - (touched.get(holder) || 0) > 4000) box.scrollTop = box.scrollHeight;
  };
  const watched = new WeakSet();
  const watchLanes = () => {
    for (let i = 0; i < MAX_LANES; i++) {
      const holder = document.querySelector("#poss-lane" + i + "-tokens");
      if (!holder || watched.has(holder)) continue;
      watched.add(holder);
      for (const kind of ["wheel", "touchmove", "keydown"]) {
        holder.addEventListener(kind, () => touched.set(holder, Date.now()), {passive: true});
      }
      new MutationObserver(() => follow(holder)).observe(holder, {childList: true, subtree: true, characterData: true});
    }
  };
  watchLanes();
}
""".replace("MAX_LANES", str(MAX_LANES))


def theme() -> gr.themes.Base:
    """Gradio's default look with system fonts: nothing is fetched from a font CDN, so the page works offline."""
    return gr.themes.Default(
        font=["ui-sans-serif", "system-ui", "Segoe UI", "Roboto", "sans-serif"],
        font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"],
    )


def decoding_events(demo: gr.Blocks) -> set[int]:
    """The events that decode (Run, its Enter key, Step, /compare) and Replay."""
    return {i for i, fn in demo.fns.items() if fn.concurrency_id in ("decode", "live") or fn.api_name == "replay"}


def share_events(demo: gr.Blocks) -> client_share.Events:
    """Every queued event as the client share counts it (app/server/client_share.py): a call when it may wait for a
    worker (its group has a limit: examples, Replay, Step, Load, the Evidence tab's loads) or decodes (the live
    group), else light (a page load, a view toggle, Stop, Save); all but /compare only from an open page."""
    events = client_share.Events()
    for i, fn in demo.fns.items():
        if not fn.queue or fn.fn is None:
            continue  # answered in the browser or at once by Gradio's route, never queued
        call = fn.concurrency_limit is not None or fn.concurrency_id == "live"
        (events.calls if call else events.light).add(i)
        if call and fn.concurrency_id != "live":
            events.groups[i] = str(fn.concurrency_id)
        if fn.api_name != "compare":
            events.paged.add(i)
    return events


def tab_watch() -> TabWatch:
    """The watch of open pages and unread replies; a session it drops for not reading is dropped from the tabs'
    store too (what its page load made)."""
    watch = TabWatch(client_share.SHARE.release, pages_per_address=limits.LIMITS.pages_per_address)
    watch.on_drop.append(state.SESSIONS.forget)
    return watch


def _upload_folder() -> str:
    from gradio.utils import get_upload_folder

    return get_upload_folder()


def launch_kwargs(demo: gr.Blocks | None = None) -> dict[str, Any]:
    """What `launch()` needs besides host and port: CSS and theme (Gradio 6 takes them at launch), the largest
    upload (a saved run; Gradio refuses bigger files before they reach a handler) and, given the demo, the middleware
    that gives each client its share of the queue and the one that limits uploads (`disk_cap`)."""
    kwargs: dict[str, Any] = {
        "css": CSS,
        "js": LANES_INTO_VIEW_JS,
        "theme": theme(),
        "max_file_size": saved_runs.MAX_RUN_BYTES,
        "max_threads": THREADS,
    }
    if demo is not None:
        from starlette.middleware import Middleware

        kwargs["state_session_capacity"] = state.SESSIONS.capacity  # Gradio's per-tab state: as many tabs as ours
        kwargs["app_kwargs"] = {
            "middleware": [
                # outermost: no body is read whole, by anything inside, past the cap
                Middleware(body_cap.BodyCapMiddleware),
                # the others see the server's own paths, a client only the alias
                Middleware(path_alias.PathAliasMiddleware, folder=_upload_folder),
                Middleware(client_share.QueueShareMiddleware, events=lambda: share_events(demo), watch=tab_watch()),
                # uploads: sized, rated per address, fitted under the disk cap before Gradio writes them, then metered
                Middleware(upload_limits.UploadLimitMiddleware, max_bytes=saved_runs.MAX_RUN_BYTES + 2**20),
            ]
        }
    return kwargs
