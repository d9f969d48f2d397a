"""The public-server cases that attack the server's memory (scripts/server_check.py runs them): tabs that pause Steps
or load runs and then only read (memory), page loads never read (tabs), pages held open whose page loads are never
read (pages), and calls at every precision and quantization (models)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

from server_clients import (
    MB,
    VIEW,
    client,
    endpoint_index,
    long_prompt,
    many_joins,
    saved_run,
    status_text,
    step_args,
)
from server_harness import Server, flag_if_known, peak_rss_mb, rss_mb, verdict


def case_memory(a) -> None:
    """Tabs pause a Step on a long prompt or load a saved run, then only read past --idle-minutes: the server's RSS
    at start, at the peak and after reaping, and what a reaped tab is told."""
    from gradio_client import handle_file

    run = saved_run(Path(tempfile.mkdtemp()) / "run.jsonl", 0, tokens=a.run_tokens)
    extra = ["--idle-minutes", f"{a.idle_minutes:g}", *flag_if_known(a.root, "--session-memory-mb", str(a.budget_mb))]
    with Server(a.root, a.preset, a.cap, extra + a.extra) as server:
        pid = server.proc.pid
        methods = ["plain", "eagle", "poss2"]
        warm = client(server.url)  # loads the target and the drafts, then lets go of its paused Step
        warm.predict(*step_args("Hello", a.preset, methods, 4), api_name="/step")
        warm.predict(*VIEW, api_name="/stop")
        time.sleep(2.0)
        base = peak = rss_mb(pid)
        tabs: list = []
        done = threading.Event()

        def read() -> None:
            """Every tab keeps reading from its first call on (a view toggle redraws, nothing decodes), as an open
            page does: that must not keep what it holds past --idle-minutes."""
            nonlocal peak
            while not done.wait(a.view_every):
                for c in list(tabs):
                    c.predict(*VIEW, api_name="/view")
                    peak = max(peak, rss_mb(pid))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        t0 = time.monotonic()
        for _ in range(a.steps):  # each pauses after its prefill, holding its lanes' caches
            c = client(server.url)
            c.predict(*step_args(long_prompt(a.prompt_tokens), a.preset, methods, 256), api_name="/step")
            tabs.append(c)
            peak = max(peak, rss_mb(pid))
        stepped = rss_mb(pid)
        for _ in range(a.loads):
            c = client(server.url)
            c.predict(handle_file(str(run)), *VIEW, api_name="/load_run")
            tabs.append(c)
            peak = max(peak, rss_mb(pid))
        took = time.monotonic() - t0
        time.sleep(a.idle_minutes * 60.0 + a.reap_wait)
        done.set()
        reader.join()
        after = rss_mb(pid)
        told = status_text(tabs[0].predict(*step_args("Hello", a.preset, methods, 4), api_name="/step"))
    held, left = peak - base, after - base
    ok = left <= a.slack_mb and "freed" in told
    print(
        f"[memory] {a.steps} paused Steps ({a.prompt_tokens}-token prompt, {', '.join(methods)}, fp32) and "
        f"{a.loads} loaded runs ({run.stat().st_size / 2**20:.1f} MB file) in {took:.0f} s, every tab reading "
        f"/view every {a.view_every:g} s throughout: RSS {base:.0f} MB at start, {stepped:.0f} MB after the Steps, "
        f"peak {peak:.0f} MB (+{held:.0f} MB); {a.idle_minutes:g} min idle + {a.reap_wait:g} s after the last: "
        f"{after:.0f} MB (+{left:.0f} MB). The first tab's next Step says: {told[:150]!r}. "
        f"{verdict(ok)} (within {a.slack_mb:g} MB of the start, and the tab told why)"
    )


TABS_HELD_MB = 300.0  # the most RSS above the start that unread page loads may hold a while after


class Tabs(NamedTuple):
    """What the tabs and pages cases measured: the joins' answers by status, the seconds they took to send, the
    server's RSS at the start, once they were sent and a while after (MB), and the pages held open (pages only)."""

    answers: dict[int, int]
    sent_s: float
    start_mb: float
    peak_mb: float
    after_mb: float
    opened: int = 0

    @property
    def held_mb(self) -> float:
        """The RSS above the start a while after."""
        return self.after_mb - self.start_mb

    @property
    def ok(self) -> bool:
        """Less than TABS_HELD_MB held."""
        return self.held_mb < TABS_HELD_MB


def unread_tabs(server: Server, tabs: int, wait_s: float) -> Tabs:
    """`tabs` page loads (the load event, /view) from fresh session hashes, never read, then `wait_s` s idle."""
    view = endpoint_index(server.url, "/view")
    time.sleep(3.0)
    start = rss_mb(server.proc.pid)
    t0 = time.monotonic()
    answers = asyncio.run(many_joins(server.url, view, VIEW, tabs))
    sent_s = time.monotonic() - t0
    peak = rss_mb(server.proc.pid)
    time.sleep(wait_s)
    return Tabs(answers, sent_s, start, peak, rss_mb(server.proc.pid))


def case_tabs(a) -> None:
    """Page loads (the load event) from fresh session hashes, never read: the server's RSS a while after."""
    with Server(a.root, a.preset, a.cap, a.extra) as server:
        t = unread_tabs(server, a.tabs, a.tabs_wait)
    print(
        f"[tabs] {a.tabs} page loads from fresh session hashes, never read ({t.sent_s:.0f} s): answers {t.answers}; "
        f"RSS {t.peak_mb - t.start_mb:,.0f} MB above the start once sent, {t.held_mb:,.0f} MB {a.tabs_wait:g} s later "
        f"(start {t.start_mb:,.0f} MB). {verdict(t.ok)} (under {TABS_HELD_MB:g} MB)"
    )


async def _hold_page(http, url: str, session: str, opened: list[str], stop: asyncio.Event) -> None:
    """One page's heartbeat stream, held open (read, as a browser reads it) until `stop`."""
    import httpx

    try:
        async with http.stream("GET", f"{url}gradio_api/heartbeat/{session}") as stream:
            if stream.status_code == 200:
                opened.append(session)
            async for _ in stream.aiter_lines():
                if stop.is_set():
                    return
    except (httpx.HTTPError, asyncio.CancelledError):
        pass


async def _pages_and_loads(server: Server, pages: int, wait_s: float) -> Tabs:
    """`pages` heartbeats from fresh session hashes held open, then each page's load event joined and never read;
    the RSS `wait_s` s later, the pages still open."""
    import httpx

    view, start = endpoint_index(server.url, "/view"), rss_mb(server.proc.pid)
    sessions, opened, stop = [os.urandom(6).hex() for _ in range(pages)], [], asyncio.Event()
    limits = httpx.Limits(max_connections=pages + 64, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0, read=None), limits=limits) as http:
        holders = [asyncio.create_task(_hold_page(http, server.url, s, opened, stop)) for s in sessions]
        await asyncio.sleep(5.0)  # the heartbeats open before their pages' first events

        async def join(session: str) -> int:
            payload = {"data": VIEW, "fn_index": view, "session_hash": session}
            try:
                return (await http.post(server.url + "gradio_api/queue/join", json=payload)).status_code
            except httpx.HTTPError:
                return 0

        t0 = time.monotonic()
        statuses = await asyncio.gather(*(join(s) for s in sessions))
        sent_s = time.monotonic() - t0
        peak = rss_mb(server.proc.pid)
        await asyncio.sleep(wait_s)
        after = rss_mb(server.proc.pid)
        stop.set()
        for task in holders:
            task.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
    answers: dict[int, int] = {}
    for status in statuses:
        answers[status] = answers.get(status, 0) + 1
    return Tabs(dict(sorted(answers.items())), sent_s, start, peak, after, opened=len(opened))


def held_pages(server: Server, pages: int, wait_s: float) -> Tabs:
    """The pages case against a running server (see `_pages_and_loads`)."""
    time.sleep(3.0)
    return asyncio.run(_pages_and_loads(server, pages, wait_s))


def case_pages(a) -> None:
    """Pages held open (their heartbeats) from fresh session hashes at one address, each page's load event joined
    and never read: what the server holds while the pages stay open."""
    with Server(a.root, a.preset, a.cap, a.extra) as server:
        t = held_pages(server, a.pages, a.tabs_wait)
    print(
        f"[pages] {a.pages} heartbeats held open from one address ({t.opened} answered 200), each page's load joined "
        f"and never read: answers {t.answers}; RSS {t.peak_mb - t.start_mb:,.0f} MB above the start once sent, "
        f"{t.held_mb:,.0f} MB {a.tabs_wait:g} s later with the pages still open (start {t.start_mb:,.0f} MB). "
        f"{verdict(t.ok)} (under {TABS_HELD_MB:g} MB)"
    )


def _safetensors_params(path: Path) -> int:
    """The parameters in a safetensors file, from its header (nothing loaded)."""
    with open(path, "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    return sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")


PRECISION_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def case_models(a) -> None:
    """/compare calls of a few tokens, one per precision and quantization: the server's RSS against the tabs' memory
    total (--session-memory-mb) and one target's size."""
    extra = [*flag_if_known(a.root, "--session-memory-mb", f"{a.budget_mb:g}"), *a.extra]
    weights = sorted((Path.home() / ".cache" / "poss-demo").glob("*/model.safetensors"))
    params = _safetensors_params(weights[0]) if a.preset == "smollm2-135m" and weights else 0
    rows: list[tuple[str, str, str, float, float]] = []  # (precision, quantization, outcome, seconds, RSS MB)
    with Server(a.root, a.preset, a.cap, extra) as server:
        pid = server.proc.pid
        bare = rss_mb(pid)

        def call(precision: str, quantization: str) -> tuple[str, float]:
            """One 4-token call on a fixed small tree (no budget fit): how it ended and its seconds."""
            c, t0 = client(server.url), time.monotonic()
            job = c.submit(
                "Hi", ["plain", "eagle"], max_new_tokens=4, depth=4, top_k=4, tree_budget=16, precision=precision,
                quantization=quantization, api_name="/compare",
            )  # fmt: skip
            try:
                out = job.result(timeout=a.timeout)
                how = "timed out" if out.get("timed_out") else "answered"
            except Exception as err:  # noqa: BLE001 - a refusal or a load that failed: its last line
                said = ((str(err) or type(err).__name__).strip().splitlines() or [""])[-1][:120]
                how = ("not offered: " if "offered" in said else "error: ") + said
            return how, time.monotonic() - t0

        first, first_s = call("auto", "auto")  # the first visitor's call: the default target and drafts loaded
        start = rss_mb(pid)
        for _ in range(a.rounds):
            for precision in PRECISION_BYTES:
                for quantization in ("auto", "none", "8bit", "4bit"):
                    how, took = call(precision, quantization)
                    rows.append((precision, quantization, how, took, rss_mb(pid)))
        time.sleep(3.0)
        end, peak = rss_mb(pid), peak_rss_mb(pid)
    tried = [r for r in rows if not r[2].startswith("not offered")]
    widest = max([PRECISION_BYTES[p] for p, *_ in tried] or [4])
    target_mb = params * widest / MB
    ok = end <= start + a.budget_mb + target_mb
    print(
        f"[models] {a.preset}, --session-memory-mb {a.budget_mb:g}: RSS {bare:.0f} MB when the server was up, "
        f"{start:.0f} MB after a first call at auto precision and quantization ({first}, {first_s:.1f} s)"
    )
    for precision, quantization, how, took, rss in rows:
        print(f"[models]   {precision} / {quantization}: {how} in {took:.1f} s; RSS {rss:.0f} MB")
    ran = sum(1 for r in rows if r[2] in ("answered", "timed out"))
    skipped = [f"{p}/{q}" for p, q, how, _, _ in rows if how.startswith("not offered")]
    failed = [f"{p}/{q}" for p, q, how, _, _ in rows if how.startswith("error")]
    print(
        f"[models] {ran} of {len(rows)} calls answered (not offered: {', '.join(skipped) or 'none'}; failed: "
        f"{', '.join(failed) or 'none'}); one target: "
        + (
            f"{params / 1e6:.1f} M parameters x {widest} bytes = {target_mb:.0f} MB"
            if params
            else "size unknown for this preset, counted as 0 MB"
        )
        + f". RSS at the end {end:.0f} MB (+{end - start:.0f} MB), peak {peak:.0f} MB. {verdict(ok)} (at the end "
        f"within the start + {a.budget_mb:g} MB + one target = {start + a.budget_mb + target_mb:.0f} MB)"
    )
