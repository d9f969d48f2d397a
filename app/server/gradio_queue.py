"""The few places the server reaches into Gradio's queue and session state, all here, so that a Gradio upgrade that
changes them breaks one module and its test (tests/test_gradio_queue.py), not the shares or the reaping.

Gradio offers no public way to ask how many events of a group wait, whether a session's stream is known, or to drop
a session's events, its unread replies and its per-session state; each function below names the attribute it
reads."""

from __future__ import annotations

from typing import Any


def queue_of(app: Any) -> Any | None:
    """The Gradio queue behind an ASGI app's scope["app"] (None: not Gradio's app, or no queue yet)."""
    try:
        return app.get_blocks()._queue
    except Exception:  # noqa: BLE001 - a test's app, or Gradio's app before the queue exists
        return None


def knows_session(queue: Any, session: str) -> bool:
    """Whether the queue holds a message store for `session` (`Queue.pending_messages_per_session`)."""
    return session in queue.pending_messages_per_session


def waiting(queue: Any, group: str) -> int:
    """Events of concurrency group `group` waiting for a worker (`Queue.event_queue_per_concurrency_id`)."""
    line = queue.event_queue_per_concurrency_id.get(group)
    return len(line.queue) if line is not None else 0


def line_size(queue: Any) -> int | None:
    """The most events Gradio's line holds (`Queue.max_size`; None: no limit)."""
    return queue.max_size


async def drop_session(app: Any, session: str) -> None:
    """End `session` as Gradio does for a closed stream (`Queue.clean_events`: waiting events removed, running ones
    stopped at their next yield), then let go of its message store (unread replies), its event ids and its
    per-session state (`App.state_holder.session_data`)."""
    queue = queue_of(app)
    if queue is None:
        return
    await queue.clean_events(session_hash=session)
    queue.pending_messages_per_session.pop(session, None)
    queue.pending_event_ids_session.pop(session, None)
    holder = getattr(app, "state_holder", None)
    if holder is not None:
        with holder.lock:
            holder.session_data.pop(session, None)
            holder.time_last_used.pop(session, None)


def stores(app: Any) -> tuple[int, int]:
    """(message stores, per-session states) Gradio holds now: for tests and the checks."""
    queue = queue_of(app)
    holder = getattr(app, "state_holder", None)
    return (
        len(queue.pending_messages_per_session) if queue is not None else 0,
        len(holder.session_data) if holder is not None else 0,
    )
