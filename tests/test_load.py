"""A load test of the real app: `python app.py --preset tiny-random` on 127.0.0.1 (a free port) driven by 16
concurrent gradio_client clients, each a fixed script of Runs, Stops, Steps, Replays and /compare calls with good and
bad inputs. It records unexpected errors, queue waits (p50/p95), the server's peak RSS, and checks that every greedy
output matched plain decoding and that nothing keeps running afterwards. Prints its figures."""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from scripts import server_harness

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = 16
PROMPTS = ["Hello there", "What is 2+2?", "Name three colours.", "Write a haiku about rain."]
VIEW = ["draft position", False, "conditional (POSS pos-acc)"]
NEW_TOKENS = 10


def run_args(prompt, methods=("plain", "eagle", "poss2"), max_new_tokens=NEW_TOKENS, seed=0, tree_budget=16):
    """/run's inputs (app_settings.run_inputs), then the view toggles."""
    from app_settings import run_inputs

    kw = dict(max_new_tokens=max_new_tokens, seed=seed, tree_budget=tree_budget)
    return run_inputs(prompt=prompt, methods=methods, **kw) + VIEW


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waits: list[float] = []
        self.calls = 0
        self.expected_errors = 0
        self.unexpected: list[str] = []
        self.greedy_checked = 0
        self.greedy_mismatches: list[str] = []

    def wait(self, job, t0: float) -> None:
        from gradio_client.utils import Status

        waiting = {Status.STARTING, Status.JOINING_QUEUE, Status.IN_QUEUE, Status.SENDING_DATA}
        while not job.done() and job.status().code in waiting and time.monotonic() - t0 < 120:
            time.sleep(0.01)
        with self.lock:
            self.waits.append(time.monotonic() - t0)
            self.calls += 1

    def bad(self, what: str) -> None:
        with self.lock:
            self.unexpected.append(what)

    def greedy(self, ok: bool, what: str) -> None:
        with self.lock:
            self.greedy_checked += 1
            if not ok:
                self.greedy_mismatches.append(what)


def client_script(url: str, i: int, refs: dict, rec: Recorder) -> None:
    from gradio_client import Client

    c = Client(url, verbose=False)
    prompt = PROMPTS[i % len(PROMPTS)]

    def call(*args, api_name, expect_error: str | None = None):
        t0 = time.monotonic()
        job = c.submit(*args, api_name=api_name)
        rec.wait(job, t0)
        try:
            out = job.result(timeout=120)
        except Exception as err:  # noqa: BLE001
            if expect_error and expect_error in str(err):
                with rec.lock:
                    rec.expected_errors += 1
                return None
            rec.bad(f"client {i} {api_name}: {type(err).__name__}: {str(err)[:200]}")
            return None
        if expect_error:
            status = out[0] if isinstance(out, (list, tuple)) else str(out)
            if expect_error in str(status) and "error" in str(status):
                with rec.lock:
                    rec.expected_errors += 1
            else:
                rec.bad(f"client {i} {api_name}: expected an error naming {expect_error!r}, got {str(status)[:200]}")
        return out

    # 1. /compare, good: every draft lane identical to plain decoding, plain decoding as the reference computes it.
    out = call(
        prompt, ["plain", "eagle", "poss2"], "tiny-random", NEW_TOKENS, 0.0, 1.0, 4, 4, 16, 0, api_name="/compare"
    )
    if out is not None:
        plain = out["lanes"][0]
        rec.greedy(
            plain["text"] == refs[prompt] and all(lane["identical_to_plain"] for lane in out["lanes"][1:]),
            f"client {i} /compare {prompt!r}",
        )
    # 2. /compare, bad inputs: a clear error naming the field.
    bad_compare = [
        (dict(seed=1e30), "seed"),
        (dict(max_new_tokens=1e9), "max_new_tokens"),
        (dict(depth=20), "depth"),
        (dict(tree_budget=5000), "tree_budget"),
    ][i % 4]
    kw = dict(max_new_tokens=NEW_TOKENS, temperature=0.0, top_p=1.0, depth=4, top_k=4, tree_budget=16, seed=0)
    kw.update(bad_compare[0])
    call(
        prompt,
        ["plain", "eagle"],
        "tiny-random",
        kw["max_new_tokens"],
        kw["temperature"],
        kw["top_p"],
        kw["depth"],
        kw["top_k"],
        kw["tree_budget"],
        kw["seed"],
        api_name="/compare",
        expect_error=bad_compare[1],
    )
    # 3. /run, good, streamed: Done, both draft lanes badged identical, the plain text is the reference's.
    out = call(*run_args(prompt), api_name="/run")
    if out is not None:
        texts = [v for v in out if isinstance(v, str)]
        ok = (
            "Done" in out[0] and refs[prompt] in texts and sum("✓ identical to plain decoding" in t for t in texts) == 2
        )
        rec.greedy(ok, f"client {i} /run {prompt!r}: {out[0][:120]}")
    # 4. /run, bad: the seed named in the status line.
    call(*run_args(prompt, seed=1e30), api_name="/run", expect_error="seed")
    # 5. /run, long, then Stop after the first live frame.
    t0 = time.monotonic()
    job = c.submit(*run_args(prompt, max_new_tokens=400), api_name="/run")
    rec.wait(job, t0)
    for frame in job:
        if "Running" in frame[0]:
            c.predict(*VIEW, api_name="/stop")
            break
    try:
        job.result(timeout=120)
        final = job.outputs()[-1][0]
        if "Stopped" not in final and "Done" not in final:
            rec.bad(f"client {i} stop: {final[:200]}")
    except Exception as err:  # noqa: BLE001
        rec.bad(f"client {i} stop: {type(err).__name__}: {err}")
    # 6. Step twice, then Stop.
    for k in range(2):
        out = call(*run_args(prompt, max_new_tokens=40), api_name="/step")
        if out is not None and "Step mode" not in out[0]:
            rec.bad(f"client {i} step {k}: {out[0][:200]}")
    stop = c.predict(*VIEW, api_name="/stop")
    if "Stopped" not in stop[0]:
        rec.bad(f"client {i} stop after steps: {stop[0][:200]}")
    # 7. Replay the stopped run.
    out = call(*VIEW, api_name="/replay")
    if (
        out is not None and "Replay finished" not in out[0] and "Stopped" not in out[0]
    ):  # the run it replays was stopped
        rec.bad(f"client {i} replay: {out[0][:200]}")
    # 8. Half the clients cancel a long /compare call.
    if i % 2 == 0:
        job = c.submit(prompt, ["plain", "eagle"], "tiny-random", 400, 0.0, 1.0, 4, 4, 16, 0, api_name="/compare")
        time.sleep(0.3)
        job.cancel()
        with rec.lock:
            rec.calls += 1
    c.close() if hasattr(c, "close") else None


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_sixteen_clients_against_the_real_app():
    import torch

    from poss_core.runtime import compare

    torch.set_num_threads(1)
    refs = {
        p: compare.run_to_end(
            compare.start(compare.RunSpec(p, ["plain"], "tiny-random", max_new_tokens=NEW_TOKENS).resolve())
        )
        .lanes[0]
        .text
        for p in PROMPTS
    }
    port = server_harness.free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "app.py",
            "--preset",
            "tiny-random",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--threads",
            "1",
            "--concurrency",
            "2",
            "--queue-size",
            "256",
            "--max-new-tokens",
            "2048",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).read(100)
                break
            except Exception:  # noqa: BLE001
                assert server.poll() is None, server.stderr.read()[-3000:]
                assert time.monotonic() < deadline, "the app did not start"
                time.sleep(0.5)
        rec = Recorder()
        start = time.monotonic()
        # Daemon threads: a client stuck past the test's timeout must not keep the test process from exiting.
        threads = [
            threading.Thread(target=client_script, args=(url, i, refs, rec), daemon=True) for i in range(CLIENTS)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        wall = time.monotonic() - start
        assert not any(t.is_alive() for t in threads), "a client did not finish"
        idle_cpu, settled_s = server_harness.idle_window(server.pid)
        waits = sorted(rec.waits)
        p50, p95 = statistics.median(waits), waits[int(0.95 * (len(waits) - 1))]
        rss = server_harness.peak_rss_mb(server.pid)
        print(
            f"\n[load] {CLIENTS} clients, {rec.calls} calls in {wall:.1f} s; expected errors (bad inputs) "
            f"{rec.expected_errors}; unexpected errors {len(rec.unexpected)}; queue wait p50 {p50:.2f} s, "
            f"p95 {p95:.2f} s, max {waits[-1]:.2f} s; server peak RSS {rss:.0f} MB; greedy outputs checked "
            f"{rec.greedy_checked}, all equal to plain decoding: {not rec.greedy_mismatches}; server idle "
            f"{settled_s:.0f} s after the last call (CPU {idle_cpu:.2f} s in the second after)"
        )
        for line in rec.unexpected[:10] + rec.greedy_mismatches[:10]:
            print("  ", line)
        assert rec.unexpected == [] and rec.greedy_mismatches == []
        assert rec.greedy_checked == 2 * CLIENTS and rec.expected_errors == 2 * CLIENTS
        assert idle_cpu < server_harness.IDLE_CPU_S, (
            f"the server keeps working {server_harness.IDLE_WITHIN_S:g} s after every call ended"
        )
        assert wall < 240
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
