"""What a public server keeps bounded besides a call's time: disk (Gradio's cache swept, saved runs written once into
a small folder) and memory (the runs an idle tab holds are freed)."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import page
import pytest
import wording
from app_settings import req, run_settings
from asgi_request import asgi_request, body_of

from app.actions import handlers, saved_files, view_handlers
from app.server import file_owners
from app.sessions import state, user_settings

VIEW = user_settings.View()


def run_in(store: state.SessionStore, name: str, **kw):
    """A finished Run in tab `name` of `store` (the app's handlers serve that store meanwhile)."""
    list(handlers.run_handler(run_settings(**kw), VIEW, request=req(name)))
    return store.get(req(name))


@pytest.fixture
def store(monkeypatch):
    s = state.SessionStore(capacity=8, idle_s=60.0)
    monkeypatch.setattr(state, "SESSIONS", s)
    return s


def test_a_saved_run_is_written_once_and_belongs_to_its_tab(store, tmp_path, monkeypatch):
    owners = file_owners.FileOwners(keep_s=600.0, per_tab=2, tab_seen=store.last_seen, idle_s=lambda: store.idle_s)
    monkeypatch.setattr(file_owners, "OWNERS", owners)
    monkeypatch.setattr(saved_files, "saved_runs_dir", lambda: tmp_path)
    run_in(store, "saver")
    first = saved_files.save_handler(req("saver"))
    assert saved_files.save_handler(req("saver")) == first  # the same run again: the same file, not a new one
    assert len(list(tmp_path.glob("*.jsonl"))) == 1
    for i in range(5):  # other tabs' saves never touch it
        run_in(store, f"other{i}")
        saved_files.save_handler(req(f"other{i}"))
    assert Path(first).is_file() and first in owners.protected()
    mine = [first]
    for _ in range(3):
        run_in(store, "saver")
        mine.append(saved_files.save_handler(req("saver")))
    assert [Path(p).is_file() for p in mine] == [False, False, True, True]  # the tab keeps its newest two
    assert owners.protected() >= set(mine[2:])


def test_an_idle_tab_lets_go_of_its_finished_and_loaded_runs(store, tmp_path, monkeypatch):
    monkeypatch.setattr(saved_files, "saved_runs_dir", lambda: tmp_path)
    session = run_in(store, "idle-finished")
    finished = weakref.ref(session.comparison)
    saved = saved_files.save_handler(req("idle-finished"))
    loader = store.get(req("idle-loaded"))
    saved_files.load_handler(saved, VIEW, request=req("idle-loaded"))
    loaded = weakref.ref(loader.loaded)
    pooled = sum(p.rounds for pools in session.pools.values() for p in pools.values())
    assert store.reap(now=session.last_seen + 30.0) == 0  # not idle yet: nothing goes
    assert store.reap(now=max(session.last_seen, loader.last_seen) + 61.0) == 2
    gc.collect()
    assert finished() is None and loaded() is None, "an idle tab still holds its runs"
    assert session.comparison is None and loader.loaded is None and loader.comparison is None
    assert sum(p.rounds for pools in session.pools.values() for p in pools.values()) == pooled > 0
    status = page.status(view_handlers.view_handler(VIEW, request=req("idle-finished")))
    assert status.kind == "info" and wording.says(status, wording.RUN_CLEARED)
    out = list(handlers.run_handler(run_settings(), VIEW, request=req("idle-finished")))[-1]
    assert wording.says_done(out)  # the tab works as before


def test_a_client_gets_its_share_of_the_queue_and_no_more():
    from app.server.client_share import ClientShare

    share = ClientShare(per_client=2, per_address=3, pending_ttl_s=60.0)
    assert share.join("a", "10.0.0.1") is None and share.join("a", "10.0.0.1") is None
    refused = share.join("a", "10.0.0.1")
    assert refused and wording.says_share_used(refused, 2)
    assert share.join("b", "10.0.0.1") is None  # another tab at the same address
    assert wording.says_share_used(share.join("c", "10.0.0.1"), 3, by_address=True)  # the address's share is used up
    with share.running("a", "10.0.0.1"):  # a waiting call starts: still held until it ends
        assert share.held("a", "10.0.0.1") == (2, 3)
    assert share.held("a", "10.0.0.1") == (1, 2)
    assert share.join("a", "10.0.0.1") is None
    share.pending_ttl_s = 0.0  # calls that never started (their client left while they waited) stop counting
    assert share.held("a", "10.0.0.1") == (0, 0)


def test_the_queue_middleware_refuses_a_join_past_the_share_with_a_message():
    import json

    from app.server.client_share import ClientShare, QueueShareMiddleware

    seen = []

    async def app(scope, receive, send):
        seen.append(json.loads((await receive())["body"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    middleware = QueueShareMiddleware(app, fn_indexes={7}, share=ClientShare(per_client=1))

    def join(fn_index: int) -> tuple[int, bytes]:
        body = json.dumps({"fn_index": fn_index, "session_hash": "s1", "data": []}).encode()
        sent = asgi_request(middleware, "POST", "/gradio_api/queue/join", [body])
        return sent[0]["status"], body_of(sent)

    assert join(7)[0] == 200 and join(3)[0] == 200  # an uncounted event (a view toggle) always passes
    status, body = join(7)
    assert status == 422 and wording.says_share_used(body.decode(), 1)
    assert [d["fn_index"] for d in seen] == [7, 3]  # the refused join never reached Gradio


def test_the_app_sweeps_gradios_cache_and_counts_its_decoding_events():
    from app.page.serving import decoding_events, launch_kwargs
    from app.page.ui import build_demo
    from app.server.limits import ServerLimits

    demo = build_demo("tiny-random", server=ServerLimits(cache_age_s=120))
    assert demo.delete_cache == (60, 120)
    names = {demo.fns[i].api_name for i in decoding_events(demo)}
    assert {"run", "step", "replay", "compare"} <= names and "stop" not in names
    assert launch_kwargs(demo)["app_kwargs"]["middleware"]


def test_a_call_its_handler_refuses_at_once_stops_counting(store):
    from app.server import client_share

    assert client_share.SHARE.join("double-click", None) is None  # what the middleware does at /queue/join
    session = store.get(req("double-click"))
    with session.lock:  # the tab is busy: this Run is refused at once
        out = list(handlers.run_handler(run_settings(), VIEW, request=req("double-click")))
    assert page.status(out[-1]) == page.Status("error", wording.TAB_BUSY)
    assert client_share.SHARE.held("double-click", None)[0] == 0
