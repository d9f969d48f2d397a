"""The public-server cases that attack the log (scripts/server_check.py runs them): refused or cancelled calls
(refuse), unknown queue sessions and refusals, and the replies that might name a server folder (log), and wrongly
typed calls from open pages (malformed)."""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from server_clients import (
    BOUNDARY,
    HELD_CALL,
    MB,
    VIEW,
    OpenPage,
    api_inputs,
    client,
    compare_args,
    endpoint_index,
    multipart,
    outcome,
    raw_call,
    raw_post,
    saved_run,
)
from server_harness import Server, flag_if_known, log_size, logged, verdict


class _LogCost:
    """What each kind of call adds to the server's log, measured one kind after another: `rows` holds (what, calls,
    the log's text, what the last client was told)."""

    def __init__(self, server: Server) -> None:
        self.server, self.rows = server, []

    def measure(self, what: str, calls: int, fn) -> None:
        """`calls` calls of `fn(client)`, each from a fresh client: a refused call may hold its client's share of the
        queue for a while, which is not what is measured here."""
        since, told = log_size(self.server), ""
        for _ in range(calls):
            told = outcome(lambda: fn(client(self.server.url)))
        self.rows.append((what, calls, logged(self.server, since), told))


def _cancel_while_loading(server: Server, cancel_after: float, c) -> str:
    """A /compare of the default model cancelled while that model loads (its first call, about 25 s here), then a
    wait until the load it started has ended."""
    from poss_core.models.presets import DEFAULT_PRESET

    args = compare_args("Hi", ["plain", "eagle"], 8)
    args[2] = DEFAULT_PRESET
    job = c.submit(*args, api_name="/compare")
    time.sleep(cancel_after)
    job.cancel()
    since, t0, quiet = log_size(server), time.monotonic(), 0
    while time.monotonic() - t0 < 120 and quiet < 5:  # until the load it started has ended
        quiet = quiet + 1 if server.cpu_percent(1.0) < 10 else 0
        if "never retrieved" in logged(server, since, 0):
            break
    return "cancelled"


def _eight_bit_run(c):
    """A 32-token /run of the default model with its weights in 8 bits."""
    from poss_core.models.presets import DEFAULT_PRESET

    values = {
        "Prompt": "Tell me about the sea.",
        "Model (preset)": DEFAULT_PRESET,
        "Quantization (the target's weights)": "8bit",
        "Max new tokens": 32,
    }
    return c.predict(*api_inputs(c, "/run", **values), api_name="/run")


def _break_default_model(server: Server) -> None:
    """A load that fails names the model's folder in its error: break the default model's folder (the server's own
    cache folder links the prepared model in; this replaces the link, not the model)."""
    model = server.dir / "cache" / "smollm2-135m-instruct"
    if model.is_symlink():
        model.unlink()
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")


def _judge_refusals(rows: list[tuple[str, int, str, str]], log: str, folders: list[str]) -> bool:
    """Print each kind of call's log cost; whether each logged at most one line per call, no value echoed, no trace,
    nothing lost, and told the client no server folder."""
    ok = True
    # asyncio reports a lost exception when the future is collected, which may be calls later: the whole log counts
    lost_anywhere = log.count("never retrieved")
    for what, calls, text, told in rows:
        traces = text.count("Traceback")
        lost = lost_anywhere if what.startswith("/compare cancelled") else 0
        longest = max((len(line) for line in text.splitlines()), default=0)
        paths = [p for p in folders if p in told]  # what a user is told; the log may name them
        # One line per call at most, no value echoed, no trace, nothing lost, no folder of the server named.
        fine = traces == 0 and lost == 0 and longest <= 500 and not paths and len(text) <= 400 * calls
        if what.startswith("8-bit"):  # a run logs bitsandbytes' warnings once, not per matmul
            fine = len(text) <= 4000 and traces == 0
        if what.startswith("/compare cancelled"):  # its log also has the load's own lines (progress, notes)
            fine = traces == 0 and lost == 0
        ok &= fine
        print(
            f"[refuse] {what}: {calls} call{'s' if calls > 1 else ''}, {len(text.encode()):,} log bytes "
            f"({len(text.encode()) // calls:,} per call), {len(text.splitlines())} lines, {traces} traces, longest "
            f"line {longest:,} chars{', ' + str(lost) + ' never retrieved' if lost else ''}"
            f"{', names ' + ' and '.join(paths) if paths else ''}; told: "
            f"{(told[max(0, told.find(paths[0]) - 60) :] if paths else told).strip()[:100]!r}"
            f"{'' if fine else '  <- FAIL; the log begins ' + repr(text[:240])}"
        )
    return ok


def case_refuse(a) -> None:
    """Log bytes per refused or cancelled call, and whether a message names a server folder."""
    from gradio_client import handle_file

    from poss_core.models.presets import DEFAULT_PRESET

    big_int = Path(tempfile.mkdtemp()) / "big-integer.jsonl"
    big_int.write_text('{"type": "run", "settings": {"max_new_tokens": ' + "1" * 100_000 + "}}\n")
    echo = "9" * 200_000
    with Server(a.root, "tiny-random", a.cap, a.extra) as server:
        cost, c = _LogCost(server), client(server.url)
        cost.measure(
            "refused /compare (depth=20)",
            a.calls,
            lambda c: c.predict(*compare_args("Hi", ["plain", "eagle"], 4, depth=20), api_name="/compare"),
        )
        inputs = len(api_inputs(c, "/run"))
        cost.measure("malformed /run (200 KB values)", a.calls, lambda c: c.predict(*[echo] * inputs, api_name="/run"))
        cost.measure(
            "malformed /load_run (200 KB value)", a.calls, lambda c: c.predict(echo, *VIEW, api_name="/load_run")
        )
        cost.measure(
            "saved run with a 100,000-digit integer",
            a.calls,
            lambda c: c.predict(handle_file(str(big_int)), *VIEW, api_name="/load_run"),
        )
        cost.measure(
            "/compare cancelled while its model loads", 1, lambda c: _cancel_while_loading(server, a.cancel_after, c)
        )
        cost.measure(
            "/compare answered on the default model",
            1,
            lambda c: c.predict("Hi", ["plain"], DEFAULT_PRESET, 1, api_name="/compare"),
        )
        if a.quantized:
            cost.measure(f"8-bit /run ({DEFAULT_PRESET}, 32 tokens)", 1, _eight_bit_run)
        _break_default_model(server)  # then asked for in another precision, which loads it again
        broken = compare_args("Hi", ["plain"], 1, precision="bfloat16")
        broken[2] = DEFAULT_PRESET
        cost.measure("/compare whose model fails to load", 1, lambda c: c.predict(*broken, api_name="/compare"))
        time.sleep(2.0)
        log = server.log_text()
    ok = _judge_refusals(cost.rows, log, [str(server.dir), str(Path.home())])
    print(
        f"[refuse] {verdict(ok)} (each refused or cancelled call: at most one log line, no trace, no "
        f"echoed value, no server folder named)"
    )


def _one_line(text: str, address: str, secrets: list[str], names: str) -> tuple[bool, str]:
    """Whether a refusal's log is exactly one line naming the address and the limit (a word of `names`, a regular
    expression) and none of the values sent; and that line (or what was logged)."""
    lines = [line for line in text.splitlines() if line.strip()]
    line = lines[0] if len(lines) == 1 else text
    ok = (
        len(lines) == 1
        and address in line
        and re.search(names, line, re.IGNORECASE) is not None
        and not any(s in text for s in secrets)
    )
    return ok, line


# The address the log case's refused calls come from, and a value they send that the log must never repeat.
_ADDRESS, _SECRET = "198.51.100.9", "zq7-secret-value"


def _unknown_sessions(server: Server, gets: int) -> bool:
    """GETs of /queue/data for sessions the server never saw, 8 at a time: whether each cost at most 300 log bytes
    and none a traceback (printed)."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    def unknown_session(_) -> str:
        """One GET; its status or the error's name."""
        try:
            with httpx.stream(
                "GET",
                server.url + "gradio_api/queue/data",
                params={"session_hash": os.urandom(6).hex()},
                timeout=3.0,
            ) as stream:
                next(stream.iter_raw(), None)
                return str(stream.status_code)
        except httpx.HTTPError as err:
            return type(err).__name__

    since = log_size(server)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(unknown_session, range(gets)))
    text = logged(server, since, settle=2.0)
    per = len(text.encode()) / gets
    ok = per <= 300 and "Traceback" not in text
    counted = {k: answers.count(k) for k in sorted(set(answers))}
    print(
        f"[log] {gets} GETs of /gradio_api/queue/data for unknown sessions: answers {counted}; the log "
        f"gained {len(text.encode()):,} bytes ({per:,.0f} per request), {text.count('Traceback')} tracebacks. "
        f"{verdict(ok)} (at most 300 bytes each, no traceback)"
    )
    return ok


def _refused(server: Server, what: str, names: str, fn, was_refused) -> bool:
    """One refused request (`fn()`, what it was told): whether it was refused and logged one line naming its limit
    (`names`) and the address and not the secret (printed)."""
    since = log_size(server)
    told = fn()
    ok, line = _one_line(logged(server, since), _ADDRESS, [_SECRET], names)
    ok = ok and was_refused(told)
    print(f"[log] {what}: told {str(told).strip()[:90]!r}; logged {line.strip()[:200]!r}. {verdict(ok)}")
    return ok


def _past_the_share(server: Server) -> bool:
    """A /compare from a client whose share of the line two long calls hold: refused (422), one line logged."""
    from gradio_client import Client

    c = Client(server.url, verbose=False, headers={"X-Forwarded-For": _ADDRESS})
    c.predict(*compare_args("Hi", ["plain", "eagle"], 4, tree_budget=16), api_name="/compare")  # model loaded
    held = [c.submit(*HELD_CALL, api_name="/compare") for _ in range(2)]
    time.sleep(2.0)
    past = [_SECRET, *HELD_CALL[1:]]
    ok = _refused(
        server,
        "a /compare past the client's share (422)",
        r"call|share|limit",
        lambda: outcome(lambda: c.submit(*past, api_name="/compare").result(timeout=60)),
        lambda told: "validation" in told,  # gradio_client's words for a refused join
    )
    for job in held:
        job.cancel()
    time.sleep(3.0)
    return ok


def _over_the_rate(server: Server) -> bool:
    """16 MB uploads from one address until one is refused for the address's rate (429): one line logged."""
    import httpx

    data = os.urandom(16 * MB)
    with httpx.Client(timeout=120, headers={"X-Forwarded-For": _ADDRESS}) as http:
        for _ in range(12):
            since = log_size(server)
            answer = http.post(server.url + "gradio_api/upload", files={"files": (f"{_SECRET}.bin", data)})
            if answer.status_code == 429:
                break
        ok, line = _one_line(logged(server, since), _ADDRESS, [_SECRET], r"rate|MB/s|too many|limit")
    ok = ok and answer.status_code == 429
    print(
        f"[log] an upload over the address's rate ({answer.status_code}): told {answer.text.strip()[:90]!r}; "
        f"logged {line.strip()[:200]!r}. {verdict(ok)}"
    )
    return ok


def _refusals(server: Server) -> list[bool]:
    """Each refusal (past the share, a 413 and a 429 upload, an unknown preset) logs one line naming its limit and
    the address and no value sent."""
    from gradio_client import Client

    results = [_past_the_share(server)]
    form = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}", "X-Forwarded-For": _ADDRESS}
    too_big = multipart([(f"{_SECRET}.bin", os.urandom(20 * MB))])
    results.append(
        _refused(
            server,
            "an upload over the size limit (413)",
            r"MB|size|large|limit",
            lambda: raw_post(server.port, "/gradio_api/upload", {**form, "Content-Length": str(len(too_big))}, too_big),
            lambda told: told[0] == 413,
        )
    )
    results.append(_over_the_rate(server))
    bad = compare_args("Hi", ["plain"], 1)
    bad[2] = f"{_SECRET}-preset"
    mine = {"X-Forwarded-For": _ADDRESS}
    results.append(
        _refused(
            server,
            "a /compare of an unknown preset",
            r"preset|input",  # the preset, or the inputs' check that refused it
            lambda: outcome(lambda: Client(server.url, verbose=False, headers=mine).predict(*bad, api_name="/compare")),
            lambda told: not told.startswith("{"),  # an error, not an answer
        )
    )
    return results


def _replies_name_no_folder(server: Server, root: Path, run: Path) -> list[bool]:
    """Whether the replies of an upload and of Save name none of the server's folders nor the checkout (printed)."""
    import httpx
    from gradio_client import Client, handle_file

    folders = [str(server.gradio_tmp), str(server.tmp), str(server.dir / "cache"), str(root.resolve())]
    with httpx.Client(timeout=60, headers={"X-Forwarded-For": "198.51.100.10"}) as http:
        upload = http.post(server.url + "gradio_api/upload", files={"files": ("note.txt", b"hello")})
    saver = Client(server.url, verbose=False, headers={"X-Forwarded-For": "198.51.100.11"})
    saver.predict(handle_file(str(run)), *VIEW, api_name="/load_run")
    status, save_reply = raw_call(
        server.url, saver._infer_fn_index("/save_run", None), [], saver.session_hash, saver.headers
    )
    results = []
    for what, reply in (("/gradio_api/upload", upload.text), ("/save_run", save_reply)):
        named = [f for f in folders if f in reply]
        results.append(not named and bool(reply))
        print(
            f"[log] {what}'s reply ({len(reply):,} chars): "
            + (f"names {' and '.join(named)}" if named else "names no server folder" if reply else "empty")
            + f"; {reply.strip()[:160]!r}. {verdict(results[-1])}"
        )
    return results


def case_log(a) -> None:
    """What the log gains from requests for unknown queue sessions and from refused calls, and whether the upload
    and Save replies name a server folder."""
    run = saved_run(Path(tempfile.mkdtemp()) / "run.jsonl", 0, tokens=60)
    with Server(a.root, "tiny-random", a.cap, [*flag_if_known(a.root, "--proxy-hops", "1"), *a.extra]) as server:
        results = [_unknown_sessions(server, a.log_gets)]
        results += _refusals(server)
        results += _replies_name_no_folder(server, a.root, run)
    print(
        f"[log] {sum(results)} of {len(results)} checks passed. {verdict(all(results))} (unknown sessions cost at "
        f"most 300 log bytes and no traceback; each refusal logs one line naming its limit and the address and no "
        f"value; no reply names a server folder)"
    )


MALFORMED_BYTES_PER_S = 200.0  # the most the log may grow per second of wrongly typed calls


class Malformed(NamedTuple):
    """What the malformed case measured: the calls made, the bytes the log gained and over how many seconds."""

    calls: int
    log_bytes: int
    seconds: float

    @property
    def per_s(self) -> float:
        """The log's bytes per second."""
        return self.log_bytes / self.seconds

    @property
    def ok(self) -> bool:
        """Under MALFORMED_BYTES_PER_S."""
        return self.per_s < MALFORMED_BYTES_PER_S


def malformed_calls(server: Server, seconds: float, pages: int = 4) -> Malformed:
    """Wrongly typed /view calls for `seconds` s from `pages` open pages (each its heartbeat read, one call at a
    time)."""
    from concurrent.futures import ThreadPoolExecutor

    bad = [12345, {"not": "a view"}, [1, 2], None]
    view = endpoint_index(server.url, "/view")
    since, calls = log_size(server), [0]
    deadline = time.monotonic() + seconds

    def caller(i: int) -> None:
        """One open page calling until the deadline."""
        session = os.urandom(6).hex()
        with OpenPage(server.url, session):
            while time.monotonic() < deadline:
                raw_call(server.url, view, bad, session, {}, timeout=30)
                calls[0] += 1

    with ThreadPoolExecutor(pages) as pool:
        list(pool.map(caller, range(pages)))
    return Malformed(calls[0], len(logged(server, since).encode()), seconds)


def case_malformed(a) -> None:
    """Wrongly typed /view calls from four open pages for --malformed-s seconds: log bytes per second."""
    with Server(a.root, a.preset, a.cap, a.extra) as server:
        m = malformed_calls(server, a.malformed_s)
    print(
        f"[malformed] {m.calls} wrongly typed /view calls in {a.malformed_s:g} s: the log grew "
        f"{m.log_bytes:,} bytes ({m.per_s:,.0f} per second). {verdict(m.ok)} (under {MALFORMED_BYTES_PER_S:g} bytes "
        f"a second)"
    )
