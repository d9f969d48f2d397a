"""The Gradio internals app/server/gradio_queue.py reads, checked on a real Gradio queue: a Gradio upgrade that renames
or reshapes them fails here, by name, instead of silently leaving the queue share or the reaping without effect."""

from __future__ import annotations

import asyncio

import gradio as gr
import orjson
from gradio.server_messages import ProcessCompletedMessage

from app.server import gradio_queue, tabs


def _app():
    with gr.Blocks() as demo:
        box = gr.Textbox()
        box.change(lambda v: v, box, box, concurrency_id="g", concurrency_limit=1)
    demo.queue(max_size=10)
    app = gr.routes.App.create_app(demo)
    demo._queue.set_server_app(app)
    return demo, app


def test_the_queue_attributes_the_share_and_the_reaping_read_are_there():
    demo, app = _app()
    queue = demo._queue
    assert gradio_queue.queue_of(app) is queue and gradio_queue.line_size(queue) == 10
    queue.create_event_queue_for_fn(next(iter(demo.fns.values())))
    assert gradio_queue.waiting(queue, "g") == 0 and gradio_queue.waiting(queue, "absent") == 0
    queue.pending_messages_per_session["s"] = object()
    queue.pending_event_ids_session["s"] = {"e"}
    app.state_holder["s"]  # noqa: B018 - Gradio makes a tab's state on first use
    assert gradio_queue.knows_session(queue, "s") and gradio_queue.stores(app) == (1, 1)
    asyncio.run(gradio_queue.drop_session(app, "s"))
    assert not gradio_queue.knows_session(queue, "s") and gradio_queue.stores(app) == (0, 0)
    assert "s" not in queue.pending_event_ids_session


def test_a_completed_message_on_the_stream_is_recognised():
    message = ProcessCompletedMessage(output={"data": ['"msg":"process_completed"']}, success=True, event_id="ev1")
    chunk = b"data: " + orjson.dumps(message.model_dump(), default=str) + b"\n\n"
    assert tabs.COMPLETED.findall(chunk) == [b"ev1"]
