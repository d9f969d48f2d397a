"""The public-server cases that attack the line of live calls (scripts/server_check.py runs them): one call past
its cap (oracle, fit, prefill), clients that die mid-call (abandon), one client, one address or invented addresses
filling the line (flood, fair, addr), and example replays joined from fresh sessions and never read (replays)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from typing import NamedTuple

from server_clients import (
    HELD_CALL,
    LONG_PROMPT,
    VIEW,
    api_inputs,
    client,
    compare_args,
    endpoint_index,
    join_queue,
    long_prompt,
    many_joins,
    page_load,
    prompt_for,
    queued,
    timed_compare,
    upload_flood,
    warm_up,
)
from server_harness import Server, flag_if_known, has_flag, server_value, verdict


def case_oracle(a) -> None:
    """One /compare with the oracle lane (a long reference decode): seconds taken against the cap."""
    with Server(a.root, a.preset, a.cap, a.extra) as server:
        took, how = timed_compare(
            server.url,
            compare_args(prompt_for(a.preset, len(LONG_PROMPT)), ["plain", "oracle"], 2048, temperature=2.0),
            a.timeout,
        )
        after = server.cpu_percent(3.0)
    print(f"[oracle] cap {a.cap:g} s: the call took {took:.1f} s ({how}); server CPU in the 3 s after: {after:.0f}%")


def case_fit(a) -> None:
    """One one-token /compare that needs a new tree-budget fit: seconds taken against the cap."""
    with Server(a.root, a.preset, a.cap, a.extra) as server:
        client(server.url).predict(*compare_args("Hi", ["plain"], 1), api_name="/compare")  # loads the target
        took, how = timed_compare(
            server.url, compare_args("Hi", ["plain", "eagle"], 1, depth=10, top_k=20, precision="float32"), a.timeout
        )
    print(f"[fit] cap {a.cap:g} s: a one-token call needing a new fit took {took:.1f} s ({how})")


def long_call(url: str, prompt: str) -> None:
    """A client that submits a long /compare and never reads it (a process the abandon case kills)."""
    c = client(url)
    c.submit(
        *compare_args(prompt, ["plain", "eagle", "poss2"], 2048, depth=4, top_k=4, tree_budget=16), api_name="/compare"
    )
    time.sleep(3600)


def case_abandon(a) -> None:
    """Clients start long /compare calls and are killed: the server's CPU just before and afterwards."""
    with Server(a.root, a.preset, a.cap, a.extra) as server:
        client(server.url).predict(*compare_args("Hi", ["plain"], 1), api_name="/compare")  # loads the target
        procs = [
            multiprocessing.Process(target=long_call, args=(server.url, prompt_for(a.preset, 2000)))
            for _ in range(a.clients)
        ]
        for p in procs:
            p.start()
        time.sleep(a.kill_after)
        during = server.cpu_percent(1.0)
        for p in procs:
            p.kill()
        time.sleep(a.grace)
        after = server.cpu_percent(a.window)
    print(
        f"[abandon] {a.clients} clients killed {a.kill_after:g} s after starting (cap {a.cap:g} s): server CPU "
        f"{during:.0f}% just before, {after:.0f}% over the {a.window:g} s starting {a.grace:g} s after"
    )


def case_flood(a) -> None:
    """One client submits many long /compare calls at once: how many were let in and how many refused."""
    with Server(a.root, a.preset, a.cap, a.extra) as server:
        c = client(server.url)
        jobs = [
            c.submit(
                *compare_args(prompt_for(a.preset, 2000), ["plain", "eagle"], 2048, depth=4, top_k=4, tree_budget=16),
                api_name="/compare",
            )
            for _ in range(a.calls)
        ]
        refused, let_in, message = 0, 0, ""
        for job in jobs:
            try:
                job.result(timeout=a.timeout)
                let_in += 1
            except Exception as err:  # noqa: BLE001
                if "waiting or running" in str(err) or "validation" in str(err):
                    refused, message = refused + 1, str(err).splitlines()[-1]
                else:
                    let_in += 1
    print(
        f"[flood] one client submitted {a.calls} long calls: {let_in} let in, {refused} refused"
        + (f" ({message.strip()[:140]})" if message else "")
    )


def case_fair(a) -> None:
    """Fresh clients at one address queue long /compare calls; a visitor from another address joins: the place and
    wait it is told, and when its call started."""
    from gradio_client import Client

    # A short prompt: each call then holds its slot for the cap (the long prompt's prefill is the prefill case's).
    args = compare_args(
        long_prompt(32), ["plain", "eagle"], 256, depth=10, top_k=20, tree_budget=256, precision="float32"
    )
    # The visitor's address is its X-Forwarded-For entry: the one a trusted proxy appends, where the server counts
    # proxies (--proxy-hops); without one the header is ignored and every client here is 127.0.0.1.
    with Server(a.root, a.preset, a.cap, [*flag_if_known(a.root, "--proxy-hops", "1"), *a.extra]) as server:
        # Warmed at the flood's settings and precision: what the flood's first call loads holds its slot past the cap,
        # which no estimate of the line can know of.
        warm = compare_args("Hi", ["plain", "eagle"], 4, depth=10, top_k=20, tree_budget=256, precision="float32")
        warm_up(server.url, warm)
        flood = [client(server.url) for _ in range(a.flood_clients)]  # fresh sessions, all from one address
        jobs = [c.submit(*args, api_name="/compare") for c in flood for _ in range(a.calls_each)]
        time.sleep(a.settle)  # every call joined the line
        last = jobs[-1]
        victim = Client(server.url, verbose=False, headers={"X-Forwarded-For": "198.51.100.7"})
        t0 = time.monotonic()
        job = victim.submit(*compare_args("Hi", ["plain", "eagle"], 4, tree_budget=16), api_name="/compare")
        told = None
        while not job.done():
            told = told or queued(job)
            if any(isinstance(o, dict) and o.get("running") for o in job.outputs()):
                break
            time.sleep(0.2)
        waited = time.monotonic() - t0
        told = told or queued(job) or {"place": 0, "wait_s": 0.0}
        flood_told = queued(last) or {}
        for j in jobs:
            j.cancel()
    ok = waited <= 2 * a.cap + 5 and abs(told["wait_s"] - waited) <= max(a.cap, 0.5 * waited)
    print(
        f"[fair] {a.flood_clients} fresh clients at one address queued {len(jobs)} calls (cap {a.cap:g} s each); a "
        f"visitor from another address was told place {told['place']}, wait_s {told['wait_s']}; its call started "
        f"after {waited:.1f} s. The flood's last call was told place {flood_told.get('place')}, wait_s "
        f"{flood_told.get('wait_s')}. {verdict(ok)} (started within 2 x cap + 5 s, told within "
        f"max(cap, half the wait) of it)"
    )


def case_prefill(a) -> None:
    """One /compare with the longest prompt and the largest tree: seconds taken against the cap."""
    args = compare_args(
        long_prompt(a.prompt_tokens),
        ["matched", "poss3", "hass"],
        256,
        depth=10,
        top_k=20,
        tree_budget=256,
        precision="float32",
    )
    with Server(a.root, a.preset, a.cap, a.extra) as server:
        warm = compare_args("Hi", ["matched", "poss3", "hass"], 1, depth=10, top_k=20, tree_budget=256)
        warm_up(server.url, warm)
        took, how = timed_compare(server.url, args, a.timeout)
    ok = took <= a.cap + a.round_s and not how.startswith("error")
    print(
        f"[prefill] a {a.prompt_tokens}-token prompt (the chat template adds about 23), matched / POSS-3 / HASS "
        f"at depth 10, top-k 20, budget 256, 256 tokens, fp32: {took:.1f} s against a {a.cap:g} s cap ({how}). "
        f"{verdict(ok)} (within the cap + {a.round_s:g} s for one round and the client)"
    )


def case_addr(a) -> None:
    """One loopback client inventing X-Forwarded-For addresses: uploads, queued /compare calls, and a returning
    visitor's call meanwhile."""
    import httpx
    from gradio_client import Client

    hops = has_flag(a.root, "--proxy-hops")
    real = "192.0.2.50"  # what the trusted proxy appends for this client, the same for all its requests

    def forwarded(i: int) -> str:
        invented = f"198.18.{i // 250}.{i % 250 + 1}"
        # Where the server counts trusted proxies (--proxy-hops 1), the client writes the first entry and the proxy
        # appends the last; an older checkout charged the leftmost entry, so it gets the invented one alone.
        return f"{invented}, {real}" if hops else invented

    extra = [*flag_if_known(a.root, "--proxy-hops", "1"), *a.extra]
    rate = server_value(a.extra, "--upload-mb-per-second", 2.0)
    per_address = int(server_value(a.extra, "--max-calls-per-address", 40))
    short = compare_args("Hi", ["plain", "eagle"], 4, tree_budget=16)
    with Server(a.root, "tiny-random", a.cap, extra) as server:
        # The flood's drafts loaded first (what a call loads holds its slot past the cap), then the visitor served once
        warm_up(server.url, compare_args("Hi", HELD_CALL[1], 4, depth=10, top_k=20, tree_budget=256))
        student = Client(server.url, verbose=False, headers={"X-Forwarded-For": "198.51.100.7"})
        student.predict(*short, api_name="/compare")
        uploads = upload_flood(
            server.url, a.addr_uploads, 16.0, [forwarded(i) for i in range(a.addr_uploads)], lambda: 0
        )
        statuses, _, up_took = uploads
        c = client(server.url)
        fn_index = c._infer_fn_index("/compare", None)
        long = HELD_CALL
        data = long + api_inputs(c, "/compare")[len(long) :]
        joined: dict[int, int] = {}
        with httpx.Client(timeout=60) as http:
            for i in range(a.addr_calls):
                answer = join_queue(
                    http, server.url, fn_index, data, os.urandom(8).hex(), {"X-Forwarded-For": forwarded(i)}
                )
                joined[answer.status_code] = joined.get(answer.status_code, 0) + 1
        time.sleep(a.settle)  # the first of them decodes, the rest wait in line
        t0 = time.monotonic()
        job = student.submit(*short, api_name="/compare")
        told, started = None, None
        while time.monotonic() - t0 < a.addr_wait and not job.done():
            told = told or queued(job)
            if any(isinstance(o, dict) and o.get("running") for o in job.outputs()):
                started = time.monotonic() - t0
                break
            time.sleep(0.2)
        if started is None and job.done():
            started = time.monotonic() - t0  # answered between two looks
        told = told or queued(job)
        job.cancel()
    accepted_mb = statuses.get(200, 0) * 16.0
    allowed_mb = 64.0 + rate * up_took + 16.0  # the burst, the rate meanwhile, one upload of slack
    calls_in = joined.get(200, 0)
    ok_up = accepted_mb <= allowed_mb
    ok_calls = per_address <= 0 or calls_in <= per_address
    ok_start = started is not None and started <= 2 * a.cap + 5
    form = "'<invented>, " + real + "'" if hops else "'<invented>'"
    print(
        f"[addr] {a.addr_uploads} uploads of 16 MB, X-Forwarded-For {form} rotated over {a.addr_uploads} invented "
        f"addresses, in {up_took:.1f} s: answers {dict(sorted(statuses.items()))}, {accepted_mb:.0f} MB accepted "
        f"(one address may send {allowed_mb:.0f} MB in that time). {verdict(ok_up)}"
    )
    print(
        f"[addr] {a.addr_calls} long /compare calls (each a new session), the addresses rotated the same way: "
        f"answers {dict(sorted(joined.items()))}, {calls_in} let in (--max-calls-per-address {per_address}). "
        f"{verdict(ok_calls)}"
    )
    print(
        "[addr] a returning visitor (served once before, its own address) called meanwhile: "
        + (f"told place {told.get('place')}, wait_s {told.get('wait_s')}" if told else "told no place in line")
        + "; its call "
        + (f"started after {started:.1f} s" if started is not None else f"had not started after {a.addr_wait:g} s")
        + f" (cap {a.cap:g} s). {verdict(ok_start)} (started within 2 x cap + 5 s)"
    )


HONEST_LOAD_S = 30.0  # the most seconds an honest page load may take after the replays


class Replays(NamedTuple):
    """What the replays case measured: the joins' answers by status, the server's CPU just after, and how long the
    honest page load took and how it ended."""

    answers: dict[int, int]
    cpu_percent: float
    load_s: float
    load_how: str

    @property
    def ok(self) -> bool:
        """The honest load completed within HONEST_LOAD_S."""
        return self.load_how == "completed" and self.load_s <= HONEST_LOAD_S


def replay_flood(server: Server, replays: int, load_wait: float) -> Replays:
    """`replays` example joins from fresh session hashes, streams never read, then one honest page load (trying
    for at most `load_wait` s)."""
    from poss_core.models.presets import DEFAULT_PRESET

    example, view = endpoint_index(server.url, "/example"), endpoint_index(server.url, "/view")
    data = ["Why is the sky blue?", DEFAULT_PRESET, *VIEW]
    answers = asyncio.run(many_joins(server.url, example, data, replays))
    cpu = server.cpu_percent(2.0)
    took, how = page_load(server.url, view, load_wait)
    return Replays(answers, cpu, took, how)


def case_replays(a) -> None:
    """Example replays joined from fresh session hashes, streams never read: does an honest page load still
    complete, and how busy is the server?"""
    with Server(a.root, a.preset, a.cap, a.extra) as server:
        r = replay_flood(server, a.replays, a.load_wait)
    print(
        f"[replays] {a.replays} example joins from fresh session hashes, never read: answers {r.answers}; server CPU "
        f"{r.cpu_percent:.0f}% after; an honest page load then took {r.load_s:.1f} s ({r.load_how}). {verdict(r.ok)} "
        f"(within {HONEST_LOAD_S:g} s)"
    )
