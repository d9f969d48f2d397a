"""Every queued event counted, every request body capped, unread tabs dropped: the queue share's pages, tickets and
unread sessions (app/server/tabs.py, client_share.py), the body cap (app/server/body_cap.py), the events the app
counts (serving.share_events) and the class pool's share per address."""

from __future__ import annotations

import asyncio
import io
import json
import time

from asgi_request import asgi_request, body_of

from app.server import body_cap, server_text
from app.server.class_pool import ClassPool
from app.server.client_share import ClientShare, Events, QueueShareMiddleware
from app.server.tabs import TabWatch


def _gradio(status: int = 200, event_id: str = "ev"):
    seen = []

    async def app(scope, receive, send):
        seen.append(json.loads((await receive())["body"]))
        body = json.dumps({"event_id": event_id}).encode()
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": body})

    return app, seen


def _join(middleware, fn: int, session: str) -> int:
    body = json.dumps({"fn_index": fn, "session_hash": session, "data": []}).encode()
    return asgi_request(middleware, "POST", "/gradio_api/queue/join", [body])[0]["status"]


def test_every_event_counts_and_a_tabs_events_need_its_page(monkeypatch):
    monkeypatch.setattr("app.server.tabs.PAGE_WAIT_S", 0.0)
    share = ClientShare(per_client=2, per_address=40, light_per_client=3)
    app, seen = _gradio()
    events = Events(calls={1}, light={2}, paged={1, 2})
    middleware = QueueShareMiddleware(app, share=share, events=events)
    assert _join(middleware, 1, "no-page") == 422 and seen == []  # a session hash the client invented
    middleware.watch.page_opened("tab", "127.0.0.1")
    assert [_join(middleware, 1, "tab") for _ in range(3)] == [200, 200, 422]  # the call share: 2 per tab
    assert [_join(middleware, 2, "tab") for _ in range(4)] == [200, 200, 200, 422]  # the light share
    assert _join(middleware, 9, "anyone") == 200  # not an event of the app's: untouched


def test_a_read_reply_gives_its_ticket_back_and_an_unread_session_is_dropped():
    share = ClientShare(per_client=1)
    dropped = []
    watch = TabWatch(share.release, read_grace_s=5.0)
    watch.on_drop.append(dropped.append)
    middleware = QueueShareMiddleware(_gradio(event_id="ev1")[0], share=share, events=Events(calls={1}), watch=watch)
    assert _join(middleware, 1, "reader") == 200 and _join(middleware, 1, "reader") == 422
    watch.stream_opened("reader")
    watch.read(b'data: {"msg":"process_completed","event_id":"ev1","output":{}}\n\n')
    assert share.held("reader", "127.0.0.1") == (0, 0) and _join(middleware, 1, "reader") == 200
    watch.stream_closed("reader")
    assert share.held("reader", "127.0.0.1") == (0, 0)  # a closed stream gives back what it did not read
    assert _join(middleware, 1, "unread") == 200
    assert asyncio.run(watch.drop_unread(time.monotonic() + 1.0)) == []  # within the grace
    assert asyncio.run(watch.drop_unread(time.monotonic() + 6.0)) == ["unread"] and dropped == ["unread"]
    assert share.held("unread", "127.0.0.1") == (0, 0)
    # An open page's event is never dropped for want of a stream: a busy browser may open it late
    watch.page_opened("open-page", "127.0.0.1")
    assert _join(middleware, 1, "open-page") == 200
    assert asyncio.run(watch.drop_unread(time.monotonic() + 60.0)) == []
    watch.page_closed("open-page", "127.0.0.1")
    assert asyncio.run(watch.drop_unread(time.monotonic() + 60.0)) == ["open-page"]


def test_a_refused_join_gives_its_ticket_back():
    share = ClientShare(per_client=1)
    middleware = QueueShareMiddleware(_gradio(status=503)[0], share=share, events=Events(calls={1}))
    assert _join(middleware, 1, "full") == 503 and share.held("full", "127.0.0.1") == (0, 0)


def test_an_address_holds_a_bounded_number_of_open_pages():
    watch = TabWatch(lambda ticket: None, pages_per_address=2)
    assert watch.page_opened("a", "10.0.0.1") and watch.page_opened("b", "10.0.0.1")
    assert not watch.page_opened("c", "10.0.0.1") and watch.page_opened("c", "10.0.0.2")
    watch.page_closed("a", "10.0.0.1")
    assert watch.page_opened("c", "10.0.0.1")


def _reached_app():
    reached = []

    async def app(scope, receive, send):
        got, more = 0, True
        while more:  # the whole body, as Gradio's routes read it
            message = await receive()
            if message["type"] != "http.request":
                return
            got, more = got + len(message.get("body", b"")), message.get("more_body", False)
        reached.append(got)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return app, reached


def test_every_request_body_is_capped_by_its_length_and_by_its_bytes():
    out = io.StringIO()
    app, reached = _reached_app()
    capped = body_cap.BodyCapMiddleware(app, cap_bytes=1000, log=server_text.RefusalLog(out=out))
    said = asgi_request(capped, "POST", "/gradio_api/queue/join", [b"x" * 10], headers={"content-length": "5000"})
    assert said[0]["status"] == 413 and b"at most" in body_of(said) and reached == []
    chunked = asgi_request(capped, "POST", "/gradio_api/queue/join", [b"x" * 600, b"x" * 600])
    assert chunked[0]["status"] == 413 and len(chunked) == 2  # the app's own answer never went out
    assert asgi_request(capped, "POST", "/gradio_api/queue/join", [b"x" * 900])[0]["status"] == 200
    assert asgi_request(capped, "POST", "/gradio_api/upload", [b"x" * 5000])[0]["status"] == 200  # its own cap
    assert out.getvalue().startswith("[poss] refused: the request body size (413), from 127.0.0.1")


def test_the_app_counts_examples_loads_and_the_evidence_tabs_loads():
    from app.page.serving import launch_kwargs, share_events
    from app.page.ui import build_demo
    from app.server.limits import ServerLimits

    demo = build_demo("tiny-random", server=ServerLimits())
    events = share_events(demo)
    calls = {demo.fns[i].api_name for i in events.calls}
    assert {"run", "step", "replay", "example", "load_run", "load_evidence", "compare"} <= calls
    assert any(name.startswith("streamed_") for name in calls)  # the examples' private replays
    assert {"view", "stop", "save_run"} <= {demo.fns[i].api_name for i in events.light}
    compare = next(i for i in events.calls if demo.fns[i].api_name == "compare")
    assert compare not in events.paged and events.paged >= events.calls - {compare}
    limit = max(demo.fns[i].concurrency_limit for i in events.groups if demo.fns[i].concurrency_limit != "default")
    assert limit <= ServerLimits().queue_size // 4  # no group runs enough at once to fill Gradio's line
    kinds = [m.cls for m in launch_kwargs(demo)["app_kwargs"]["middleware"]]
    assert kinds[0] is body_cap.BodyCapMiddleware  # outermost


def test_the_class_pool_counts_each_addresss_share():
    from poss_core.runtime import compare

    comp = compare.run_to_end(
        compare.start(compare.RunSpec("Hi", ["plain"], "tiny-random", max_new_tokens=3, depth=4, top_k=4).resolve())
    )
    pool = ClassPool(per_address=2)
    assert [pool.add_run(comp, "10.0.0.1") for _ in range(3)] == [1, 1, 0]
    assert pool.add_run(comp, "10.0.0.2") == 1 and pool.view("tiny-random")["plain"].runs == 3
    pool.reset_key = "k"
    assert pool.reset("k")[0] and pool.add_run(comp, "10.0.0.1") == 1  # a reset gives every address its share back
