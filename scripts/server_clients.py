"""What the public-server cases (scripts/server_check.py) send a loopback server: gradio_client calls and their
arguments, queue joins and POSTs made by hand (headers and bodies exactly as given), a page held open by its
heartbeat, saved runs to load and floods of uploads. The server itself is scripts/server_harness.py's."""

from __future__ import annotations

import html
import json
import os
import re
import select
import socket
import sys
import threading
import time
from pathlib import Path

from server_harness import ROOT

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # saved runs and settings come from the package beside scripts/


MB = 2**20
BOUNDARY = "poss-check-boundary"  # of the multipart bodies made by hand
PROMPT_UNIT = "Tell me everything you know about the history of the printing press, in detail. "  # 16 tokens
LONG_PROMPT = PROMPT_UNIT * 100
VIEW = ["draft position", False, "conditional (POSS pos-acc)", "this run"]  # /view's and /load_run's view values


def long_prompt(tokens: int) -> str:
    """A prompt of about `tokens` tokens of the default model (its tokenizer reads PROMPT_UNIT as 16)."""
    return PROMPT_UNIT * max(1, tokens // 16)


def prompt_for(preset: str, chars: int) -> str:
    """A long prompt that fits the preset's context (the tiny model reads 512 tokens at most)."""
    return LONG_PROMPT[: min(chars, 600 if preset == "tiny-random" else chars)]


def client(url: str):
    """A fresh gradio_client (a new session) of the server."""
    from gradio_client import Client

    return Client(url, verbose=False)


def compare_args(
    prompt: str,
    methods: list[str],
    max_new_tokens: int,
    temperature: float = 0.0,
    depth: int = 0,
    top_k: int = 0,
    tree_budget: int = 0,
    precision: str = "auto",
) -> list:
    """/compare's inputs in order, the preset left empty (the server's own); without a tree budget the call asks
    for one fitted to the machine (auto_budget), as a class's default lanes do."""
    auto_budget = tree_budget == 0
    return [
        prompt,
        methods,
        "",
        max_new_tokens,
        temperature,
        1.0,
        depth,
        top_k,
        tree_budget,
        0,
        precision,
        "auto",
        auto_budget,
    ]


# A /compare call of the tiny model that decodes until the cap (a short prompt, so that its 512-token context holds
# it; three lanes on the largest tree): what holds a client's share or a slot of the line.
HELD_CALL = compare_args("Hi", ["plain", "eagle", "poss2"], 2048, depth=10, top_k=20, tree_budget=256)


def timed_compare(url: str, args: list, timeout: float) -> tuple[float, str]:
    """Seconds one /compare took and how it ended (timed out, answered, or the error's first line)."""
    c, t0 = client(url), time.monotonic()
    try:
        out = c.submit(*args, api_name="/compare").result(timeout=timeout)
        how = "timed_out" if out.get("timed_out") else "answered"
    except TimeoutError:
        how = f"no answer within --timeout {timeout:g} s"
    except Exception as err:  # noqa: BLE001
        how = f"error: {(str(err) or type(err).__name__).splitlines()[0][:160]}"
    return time.monotonic() - t0, how


def api_inputs(c, api_name: str, **by_label) -> list:
    """An endpoint's inputs at the app's own defaults (from its API description), some replaced by label."""
    params = c.view_api(return_format="dict", print_info=False)["named_endpoints"][api_name]["parameters"]
    return [by_label.get(p.get("label"), p.get("parameter_default")) for p in params]


def outcome(fn) -> str:
    """What the client was told: the answer's first output, or the error's text."""
    try:
        out = fn()
        return str(out[0] if isinstance(out, (list, tuple)) and out else out)
    except Exception as err:  # noqa: BLE001 - the refusal the client is meant to get
        return str(err)


def status_text(out) -> str:
    """The status line's text from a handler's outputs (its first output is the status HTML)."""
    first = out[0] if isinstance(out, (list, tuple)) and out else out
    return html.unescape(re.sub(r"<[^>]+>", "", str(first))).strip()


def queued(job) -> dict | None:
    """The first {"queued": true, ...} value a /compare job yielded, if any yet."""
    for out in job.outputs():
        if isinstance(out, dict) and out.get("queued"):
            return out
    return None


def warm_up(url: str, args: list, tries: int = 8) -> None:
    """Load the target and the drafts with short /compare calls (a short cap may stop the first ones mid-load;
    what they loaded stays loaded)."""
    for _ in range(tries):
        try:
            client(url).predict(*args, api_name="/compare")
            return
        except Exception:  # noqa: BLE001 - stopped at the cap while loading: the next call goes further
            pass


def file_data(out) -> dict:
    """The first file value (a dict with a url) among a handler's outputs."""
    for value in out if isinstance(out, (list, tuple)) else [out]:
        if isinstance(value, dict) and value.get("url"):
            return value
    raise SystemExit(f"no file among the outputs: {str(out)[:300]}")


def endpoint_index(url: str, api_name: str) -> int:
    """The fn_index of a named endpoint, for calls joined by hand."""
    return client(url)._infer_fn_index(api_name, None)


def step_args(prompt: str, preset: str, methods: list[str], max_new_tokens: int, precision: str = "float32") -> list:
    """/step's (and /run's) inputs: the prompt, the methods and the preset's default tree, then the view."""
    from app.sessions.user_settings import APP_SETTINGS
    from app.views.control_defaults import ui_defaults
    from poss_core.base import settings
    from poss_core.models.presets import get_preset

    values = {
        **settings.defaults(APP_SETTINGS),
        **ui_defaults(get_preset(preset)),
        "max_new_tokens": max_new_tokens,
        "precision": precision,
    }
    return [prompt, False, preset, methods] + [values[n] for n in APP_SETTINGS] + VIEW


def multipart(parts: list[tuple[str, bytes]]) -> bytes:
    """A multipart/form-data body (BOUNDARY) with one "files" part per (file name, bytes), as Gradio's upload takes."""
    head = 'Content-Disposition: form-data; name="files"; filename="{}"\r\nContent-Type: application/octet-stream'
    body = [f"--{BOUNDARY}\r\n{head.format(name)}\r\n\r\n".encode() + data + b"\r\n" for name, data in parts]
    return b"".join(body) + f"--{BOUNDARY}--\r\n".encode()


def raw_post(
    port: int, path: str, headers: dict[str, str], body: bytes, chunked: bool = False, timeout: float = 60.0
) -> tuple[int, str]:
    """POST `body` by hand on a socket, its headers exactly as given (`chunked`: in chunks of 1 MB, chunked
    encoding): the answer's status (0: closed without one) and body. Sending stops once an answer has come (a server
    that refuses before reading the body)."""
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", *(f"{k}: {v}" for k, v in headers.items())]
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(("\r\n".join([*lines, "Connection: close", "", ""])).encode("latin-1"))
            for i in range(0, len(body), MB):
                if select.select([s], [], [], 0)[0]:
                    break  # answered before the body was all sent
                piece = body[i : i + MB]
                s.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            else:
                if chunked:
                    s.sendall(b"0\r\n\r\n")
        except OSError:  # the server closed the connection: its answer, if any, is in the socket
            pass
        try:
            while got := s.recv(65536):
                answer += got
        except OSError:
            pass
    head, _, rest = answer.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0, ""
    if b"transfer-encoding: chunked" in head.lower():  # the answer's own chunks, joined
        pieces, rest = [], rest
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size.split(b";")[0] or b"0", 16)
            if n == 0:
                break
            pieces.append(rest[:n])
            rest = rest[n + 2 :]
        rest = b"".join(pieces)
    return status, rest.decode(errors="replace")


def join_queue(http, url: str, fn_index: int, data: list, session: str, headers: dict[str, str] | None = None):
    """One call put in Gradio's queue by hand (what a client's submit does first): the /queue/join answer."""
    payload = {"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None, "trigger_id": None}
    return http.post(url + "gradio_api/queue/join", json=payload, headers=headers or {})


def raw_call(url: str, fn_index: int, data: list, session: str, headers: dict[str, str], timeout: float = 60.0):
    """One call by hand (/queue/join, then its session's /queue/data stream): the join's status and the raw text of
    the call's "process_completed" message (or of the join's answer when it was refused)."""
    import httpx

    with httpx.Client(timeout=timeout, headers=headers) as http:
        joined = join_queue(http, url, fn_index, data, session)
        if joined.status_code != 200:
            return joined.status_code, joined.text
        event = joined.json().get("event_id")
        with http.stream("GET", url + "gradio_api/queue/data", params={"session_hash": session}) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    message = json.loads(line[5:])
                    if message.get("msg") == "process_completed" and message.get("event_id") == event:
                        return 200, line[5:].strip()
    return 200, ""


class OpenPage:
    """A page held open the way a browser tab holds it: its session's heartbeat stream, read in a thread."""

    def __init__(self, url: str, session: str, headers: dict[str, str] | None = None) -> None:
        self.url, self.session, self.headers = url, session, headers or {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self) -> None:
        import httpx

        try:
            with httpx.stream(
                "GET", f"{self.url}gradio_api/heartbeat/{self.session}", headers=self.headers, timeout=None
            ) as stream:
                for _ in stream.iter_lines():
                    if self._stop.is_set():
                        return
        except httpx.HTTPError:
            pass

    def __enter__(self) -> "OpenPage":
        self._thread.start()
        time.sleep(0.3)  # the heartbeat is open before the page's first event
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()


def page_load(url: str, view_fn: int, timeout: float) -> tuple[float, str]:
    """An honest page load: the page, its heartbeat, then its load event read to the end; (seconds, how it ended)."""
    import httpx

    t0, session = time.monotonic(), os.urandom(6).hex()
    with OpenPage(url, session), httpx.Client(timeout=timeout) as http:
        while time.monotonic() - t0 < timeout:
            status = http.get(url).status_code
            if status == 200:
                status, text = raw_call(url, view_fn, VIEW, session, {}, timeout=timeout)
                if status == 200 and '"success":true' in text.replace(" ", ""):
                    return time.monotonic() - t0, "completed"
            time.sleep(1.0)  # a browser's user reloads
        return time.monotonic() - t0, f"not completed (last answer {status})"


async def many_joins(url: str, fn_index: int, data: list, count: int, at_once: int = 200) -> dict[int, int]:
    """`count` joins of one event from fresh session hashes, `at_once` at a time, streams never read: answers by
    status (0: no answer)."""
    import asyncio

    import httpx

    gate, answers = asyncio.Semaphore(at_once), {}
    async with httpx.AsyncClient(timeout=60) as http:

        async def one() -> None:
            async with gate:
                payload = {"data": data, "fn_index": fn_index, "session_hash": os.urandom(6).hex()}
                try:
                    status = (await http.post(url + "gradio_api/queue/join", json=payload)).status_code
                except httpx.HTTPError:
                    status = 0
                answers[status] = answers.get(status, 0) + 1

        await asyncio.gather(*(one() for _ in range(count)))
    return dict(sorted(answers.items()))


def saved_run(path: Path, seed: int, tokens: int = 400) -> Path:
    """A valid saved run of the tiny model, made here (different content for each seed)."""
    from poss_core.runtime import compare, saved_runs

    comp = compare.run_to_end(
        compare.start(
            compare.RunSpec(
                "Tell me a story.",
                ["plain", "eagle", "poss2"],
                "tiny-random",
                max_new_tokens=tokens,
                seed=seed,
                temperature=1.0,
                depth=6,
                top_k=10,
                tree_budget=60,
            ).resolve()
        )
    )
    return saved_runs.save_run(comp, path)


def upload_flood(
    url: str, uploads: int, mb: float, addresses: list[str], measure
) -> tuple[dict[int, int], float, float]:
    """`uploads` POSTs of `mb` MB of random bytes to /gradio_api/upload, spread over `addresses` (sent as
    X-Forwarded-For, which the app reads from a loopback peer as from the Space's proxy: its last entry where the
    server runs with --proxy-hops 1, the first in an older checkout): the answers' status counts, the largest
    `measure()` seen after each, and the seconds taken."""
    import httpx

    statuses: dict[int, int] = {}
    peak, t0 = measure(), time.monotonic()
    with httpx.Client(timeout=120) as http:
        for i in range(uploads):
            data = os.urandom(int(mb * 2**20))
            answer = http.post(
                url + "gradio_api/upload",
                files={"files": (f"flood{i}.bin", data)},
                headers={"x-forwarded-for": addresses[i % len(addresses)]},
            )
            statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
            peak = max(peak, measure())
    return statuses, peak, time.monotonic() - t0
