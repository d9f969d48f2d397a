"""Replays the public-server cases against a real `python app.py` on 127.0.0.1 (a free port) and prints figures:

  oracle   one /compare with the oracle lane (a long reference decode): seconds taken against the cap
  fit      one one-token /compare that needs a new tree-budget fit: seconds taken against the cap
  abandon  N clients start long /compare calls and are killed after K s: the server's CPU afterwards
  flood    one client submits M long /compare calls at once: how many were let in and how many refused
  disk     a flood of random uploads (one address, then many): the temp folders' peak against the disk cap; N
           saved runs loaded and saved: what is left after the cache sweep (copies, empty temporary files)
  refuse   log bytes per refused or cancelled call (a bad setting, malformed values, a 100,000-digit integer in
           a saved run, a /compare cancelled while its model loads, a model that fails to load, with
           --quantized an 8-bit /run), and whether a message names a server folder
  memory   K tabs pause a Step on a long prompt and L tabs load a saved run, then only read (/view) past
           --idle-minutes: the server's RSS at start, at the peak and after reaping, and what a reaped tab is told
  fair     N fresh clients at one address queue two long /compare calls each; a visitor from another address
           joins: the place and wait it is told, and when its call started
  prefill  one /compare with the longest prompt and the largest tree (depth 10, top-k 20, budget 256): seconds
           taken against the cap
  own      a visitor loads and saves a run while other sessions at other addresses load and save runs and upload
           16 MB files every 0.5 s: is the visitor's file still served (HTTP 200, the same bytes) --own-wait s later
  bytes    12 uploads of 15 MB sent chunked with Content-Length: 1000 from one address, then one of 1,000 parts: the
           answers, the temp folders' peak against --disk-cap-mb, and the files the many-part upload wrote
  addr     one loopback client rotating invented X-Forwarded-For entries: 40 uploads of 16 MB and 45 long /compare
           calls (how many let in), and a returning visitor's call meanwhile (the place it is told, when it starts)
  models   4-token /compare calls at each precision and quantization: the server's RSS at start, after each call,
           at the peak and at the end, against --session-memory-mb and one target's size
  log      log bytes per GET of /queue/data for an unknown session; the one log line of each refused call (past the
           share, a 413 and a 429 upload, an unknown preset); whether the replies of an upload and of Save name a
           server folder
  replays  M example joins from fresh session hashes, streams never read: the answers, then how long an honest page
           load (page, heartbeat, load event read to its end) takes
  bodies   N JSON bodies of S MB to /queue/join at once: the answers and the server's RSS at the peak
  tabs     K page loads (the load event) from fresh session hashes, never read: the server's RSS a while after
  malformed  wrongly typed /view calls from open pages for T s: log bytes per second

Each case prints one or more "[case] ..." lines with its figures, and most end with PASS or FAIL and the criterion;
the exit status is 1 when one printed FAIL.

Each starts its own server from --root (default: this checkout; point it at an older checkout for "before"
figures) with its own Gradio temp folder, $TMPDIR and cache folder (the prepared default model is linked in, so
fits made here never touch ~/.cache/poss-demo), and stops it at the end. Only loopback, bounded in time.

    python scripts/server_check.py oracle --preset smollm2-135m --cap 20 [--root /tmp/older-checkout]
    python scripts/server_check.py fit --preset smollm2-135m --cap 20 [--server-args=--no-call-fits]
    python scripts/server_check.py abandon --preset smollm2-135m --clients 4 --kill-after 6
    python scripts/server_check.py flood --preset smollm2-135m --cap 5 --calls 6
    python scripts/server_check.py disk --uploads 6 --wait 25
    python scripts/server_check.py refuse --calls 5 [--quantized]
    python scripts/server_check.py memory --preset smollm2-135m --steps 8 --loads 6
    python scripts/server_check.py fair --preset smollm2-135m --cap 4 --flood-clients 8
    python scripts/server_check.py prefill --preset smollm2-135m --cap 20 --prompt-tokens 2016
    python scripts/server_check.py own --own-wait 60 [--own-wait 600 --server-args=--saved-run-minutes=10]
    python scripts/server_check.py bytes --bytes-requests 12 --parts 1000
    python scripts/server_check.py addr --cap 4
    python scripts/server_check.py models --preset smollm2-135m
    python scripts/server_check.py log --log-gets 200
    python scripts/server_check.py replays --replays 128
    python scripts/server_check.py bodies --bodies 3 --body-mb 200
    python scripts/server_check.py tabs --tabs 2000 --tabs-wait 35
    python scripts/server_check.py malformed --malformed-s 20

Flags an older checkout lacks (--proxy-hops, --saved-run-minutes, --disk-cap-mb, --session-memory-mb, ...) are
passed only where its app (app/page/launch.py, or app/launch.py) has them, so the same case gives an older
checkout's figures; where the server counts trusted proxies, the cases that send X-Forwarded-For start it with
--proxy-hops 1.

(--server-args takes its value after "=" when it starts with "--".)
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import re
import select
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LONG_PROMPT = "Tell me everything you know about the history of the printing press, in detail. " * 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_rss_mb(pid: int, key: str = "VmHWM") -> float:
    """A process's peak (VmHWM) or current (VmRSS) resident memory in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


# Cancelled calls stop within a round, but on a busy 2-core machine the last of them (and Gradio's own clean-up)
# can take a few seconds: a server must settle within IDLE_WITHIN_S of its last call. Work left running (a poll that
# never ends, a decode nobody reads) keeps it busy past that.
IDLE_WITHIN_S, IDLE_CPU_S = 10.0, 0.3


def idle_window(pid: int, within_s: float = IDLE_WITHIN_S, quiet_cpu_s: float = IDLE_CPU_S) -> tuple[float, float]:
    """The server's CPU seconds in the first one-second window with less than quiet_cpu_s of it, checked for
    within_s (else the last window's), and how many seconds from the call that window ended."""
    start = time.monotonic()
    while True:
        cpu0 = cpu_seconds(pid)
        time.sleep(1.0)
        used = cpu_seconds(pid) - cpu0
        settled = time.monotonic() - start
        if used < quiet_cpu_s or settled >= within_s:
            return used, settled


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of a process and its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def folder_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20 if path.exists() else 0.0


FAILED: list[str] = []  # the verdicts that failed in this run of main


def verdict(ok: bool) -> str:
    """PASS or FAIL for a printed line; a FAIL makes main's exit status 1."""
    if not ok:
        FAILED.append("FAIL")
    return "PASS" if ok else "FAIL"


class Server:
    """`python app.py` from `root` on a free loopback port, in its own temp and cache folders."""

    def __init__(
        self,
        root: Path,
        preset: str,
        cap: float,
        extra: list[str],
        threads: int = 1,
        log_path: Path | None = None,
        startup_s: float = 180.0,
    ) -> None:
        """`log_path` keeps the server's log past the run (else it goes with the temp folders); `startup_s` bounds
        the wait for the page (the time it took is `started_s`)."""
        self.dir = Path(tempfile.mkdtemp(prefix="poss-check-"))
        self.log_path, self.startup_s, self.started_s = log_path or self.dir / "server.log", startup_s, 0.0
        self.gradio_tmp, self.tmp, cache = self.dir / "gradio", self.dir / "tmp", self.dir / "cache"
        for d in (self.gradio_tmp, self.tmp, cache):
            d.mkdir()
        home_cache = Path(os.environ.get("POSS_CACHE_DIR", Path.home() / ".cache" / "poss-demo"))
        for item in home_cache.glob("*"):  # the prepared models, not the fits or curves
            if item.is_dir():
                (cache / item.name).symlink_to(item)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        env = {
            **os.environ,
            "GRADIO_TEMP_DIR": str(self.gradio_tmp),
            "TMPDIR": str(self.tmp),
            "POSS_CACHE_DIR": str(cache),
            "GRADIO_ANALYTICS_ENABLED": "False",
        }
        self.log = open(self.log_path, "w")
        self.cmd = [
            sys.executable,
            "app.py",
            "--preset",
            preset,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--threads",
            str(threads),
            "--max-call-seconds",
            str(cap),
            "--no-preload",
            *self.token_limit(root),
            *extra,
        ]
        self.proc = subprocess.Popen(self.cmd, cwd=root, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    @staticmethod
    def token_limit(root: Path) -> list[str]:
        """The cases ask for long runs on purpose (the per-call cap is what they check): lift the server's
        --max-new-tokens to the settings' bound where the checkout has that flag."""
        return ["--max-new-tokens", "2048"] if _has_flag(root, "--max-new-tokens") else []

    def __enter__(self) -> "Server":
        t0 = time.monotonic()
        deadline = t0 + self.startup_s
        while True:
            try:
                urllib.request.urlopen(self.url, timeout=2).read(100)
                self.started_s = time.monotonic() - t0
                return self
            except Exception:  # noqa: BLE001
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the app did not start:\n{self.log_text()[-3000:]}")
                time.sleep(0.5)

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_text(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def cpu_percent(self, seconds: float) -> float:
        c0, t0 = cpu_seconds(self.proc.pid), time.monotonic()
        time.sleep(seconds)
        return 100.0 * (cpu_seconds(self.proc.pid) - c0) / (time.monotonic() - t0)

    def settle(self, within_s: float = IDLE_WITHIN_S, quiet_cpu_s: float = IDLE_CPU_S) -> tuple[float, float]:
        """idle_window for this server."""
        return idle_window(self.proc.pid, within_s, quiet_cpu_s)


def client(url: str):
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
    return [prompt, methods, "", max_new_tokens, temperature, 1.0, depth, top_k, tree_budget, 0, precision]


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


def case_oracle(a) -> None:
    with Server(a.root, a.preset, a.cap, a.extra) as server:
        took, how = timed_compare(
            server.url,
            compare_args(prompt_for(a.preset, len(LONG_PROMPT)), ["plain", "oracle"], 2048, temperature=2.0),
            a.timeout,
        )
        after = server.cpu_percent(3.0)
    print(f"[oracle] cap {a.cap:g} s: the call took {took:.1f} s ({how}); server CPU in the 3 s after: {after:.0f}%")


def case_fit(a) -> None:
    with Server(a.root, a.preset, a.cap, a.extra) as server:
        client(server.url).predict(*compare_args("Hi", ["plain"], 1), api_name="/compare")  # loads the target
        took, how = timed_compare(
            server.url, compare_args("Hi", ["plain", "eagle"], 1, depth=10, top_k=20, precision="float32"), a.timeout
        )
    print(f"[fit] cap {a.cap:g} s: a one-token call needing a new fit took {took:.1f} s ({how})")


def prompt_for(preset: str, chars: int) -> str:
    """A long prompt that fits the preset's context (the tiny model reads 512 tokens at most)."""
    return LONG_PROMPT[: min(chars, 600 if preset == "tiny-random" else chars)]


def _long_call(url: str, prompt: str) -> None:
    c = client(url)
    c.submit(
        *compare_args(prompt, ["plain", "eagle", "poss2"], 2048, depth=4, top_k=4, tree_budget=16), api_name="/compare"
    )
    time.sleep(3600)


def case_abandon(a) -> None:
    with Server(a.root, a.preset, a.cap, a.extra) as server:
        client(server.url).predict(*compare_args("Hi", ["plain"], 1), api_name="/compare")  # loads the target
        procs = [
            multiprocessing.Process(target=_long_call, args=(server.url, prompt_for(a.preset, 2000)))
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


def _log_size(server: Server) -> int:
    server.log.flush()
    return (server.dir / "server.log").stat().st_size


def _logged(server: Server, since: int, settle: float = 1.5) -> str:
    """What the server's log gained since byte `since`, once it has settled."""
    time.sleep(settle)
    server.log.flush()
    with open(server.dir / "server.log", "rb") as f:
        f.seek(since)
        return f.read().decode(errors="replace")


def _api_inputs(c, api_name: str, **by_label) -> list:
    """An endpoint's inputs at the app's own defaults (from its API description), some replaced by label."""
    params = c.view_api(return_format="dict", print_info=False)["named_endpoints"][api_name]["parameters"]
    return [by_label.get(p.get("label"), p.get("parameter_default")) for p in params]


def _outcome(fn) -> str:
    """What the client was told: the answer's first output, or the error's text."""
    try:
        out = fn()
        return str(out[0] if isinstance(out, (list, tuple)) and out else out)
    except Exception as err:  # noqa: BLE001 - the refusal the client is meant to get
        return str(err)


def case_refuse(a) -> None:
    """Log bytes per refused or cancelled call, and whether a message names a server folder."""
    from gradio_client import handle_file

    sys.path.insert(0, str(ROOT))
    from poss_core.models.presets import DEFAULT_PRESET

    big_int = Path(tempfile.mkdtemp()) / "big-integer.jsonl"
    big_int.write_text('{"type": "run", "settings": {"max_new_tokens": ' + "1" * 100_000 + "}}\n")
    echo = "9" * 200_000
    rows: list[tuple[str, int, str, str]] = []  # (what, calls, log text, what the client was told)
    with Server(a.root, "tiny-random", a.cap, a.extra) as server:
        c = client(server.url)
        home = str(Path.home())

        def measure(what: str, calls: int, fn) -> None:
            since, told = _log_size(server), ""
            for _ in range(calls):
                told = _outcome(lambda: fn(client(server.url)))  # a fresh client each: a refused call may hold its
                # client's share of the queue for a while, which is not what is measured here
            rows.append((what, calls, _logged(server, since), told))

        measure(
            "refused /compare (depth=20)",
            a.calls,
            lambda c: c.predict(*compare_args("Hi", ["plain", "eagle"], 4, depth=20), api_name="/compare"),
        )
        inputs = len(_api_inputs(c, "/run"))
        measure("malformed /run (200 KB values)", a.calls, lambda c: c.predict(*[echo] * inputs, api_name="/run"))
        measure("malformed /load_run (200 KB value)", a.calls, lambda c: c.predict(echo, *VIEW, api_name="/load_run"))
        measure(
            "saved run with a 100,000-digit integer",
            a.calls,
            lambda c: c.predict(handle_file(str(big_int)), *VIEW, api_name="/load_run"),
        )

        def cancelled(c) -> str:  # cancelled while the default model loads (its first call, about 25 s here)
            args = compare_args("Hi", ["plain", "eagle"], 8)
            args[2] = DEFAULT_PRESET
            job = c.submit(*args, api_name="/compare")
            time.sleep(a.cancel_after)
            job.cancel()
            since, t0, quiet = _log_size(server), time.monotonic(), 0
            while time.monotonic() - t0 < 120 and quiet < 5:  # until the load it started has ended
                quiet = quiet + 1 if server.cpu_percent(1.0) < 10 else 0
                if "never retrieved" in _logged(server, since, 0):
                    break
            return "cancelled"

        measure("/compare cancelled while its model loads", 1, cancelled)
        measure(
            "/compare answered on the default model",
            1,
            lambda c: c.predict("Hi", ["plain"], DEFAULT_PRESET, 1, api_name="/compare"),
        )
        if a.quantized:
            measure(
                f"8-bit /run ({DEFAULT_PRESET}, 32 tokens)",
                1,
                lambda c: c.predict(
                    *_api_inputs(
                        c,
                        "/run",
                        **{
                            "Prompt": "Tell me about the sea.",
                            "Model (preset)": DEFAULT_PRESET,
                            "Quantization (the target's weights)": "8bit",
                            "Max new tokens": 32,
                        },
                    ),
                    api_name="/run",
                ),
            )
        # A load that fails names the model's folder in its error: break the default model's folder here (the
        # server's own cache folder links the prepared model in; this replaces the link, not the model) and ask
        # for it in another precision, which loads it again.
        model = server.dir / "cache" / "smollm2-135m-instruct"
        if model.is_symlink():
            model.unlink()
        model.mkdir(exist_ok=True)
        (model / "config.json").write_text("{}")
        (model / "model.safetensors").write_bytes(b"")
        measure(
            "/compare whose model fails to load",
            1,
            lambda c: c.predict(
                *compare_args("Hi", ["plain"], 1, precision="bfloat16")[:2],
                DEFAULT_PRESET,
                *compare_args("Hi", ["plain"], 1, precision="bfloat16")[3:],
                api_name="/compare",
            ),
        )
        time.sleep(2.0)
        log = server.log_text()
    ok = True
    # asyncio reports a lost exception when the future is collected, which may be calls later: the whole log counts
    lost_anywhere = log.count("never retrieved")
    for what, calls, text, told in rows:
        traces = text.count("Traceback")
        lost = lost_anywhere if what.startswith("/compare cancelled") else 0
        longest = max((len(line) for line in text.splitlines()), default=0)
        paths = [p for p in (str(server.dir), home) if p in told]  # what a user is told; the log may name them
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
    print(
        f"[refuse] {verdict(ok)} (each refused or cancelled call: at most one log line, no trace, no "
        f"echoed value, no server folder named)"
    )


def _saved_run(path: Path, seed: int, tokens: int = 400) -> Path:
    """A valid saved run of the tiny model, made here (different content for each seed)."""
    sys.path.insert(0, str(ROOT))
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


def _flood(url: str, uploads: int, mb: float, addresses: list[str], measure) -> tuple[dict[int, int], float, float]:
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


def case_disk(a) -> None:
    """A flood of random uploads from one address, then from many; then saved runs loaded and saved, with the
    client's downloads landing in the server's Gradio folder (what a client on the same machine does by default):
    the folders' peak against the cap, and what is left once the sweep has run."""
    from gradio_client import Client, handle_file

    files = [_saved_run(Path(tempfile.mkdtemp()) / f"run{i}.jsonl", i) for i in range(a.uploads)]
    mb = sum(f.stat().st_size for f in files) / 2**20
    cap = [*_flag(a.root, "--disk-cap-mb", f"{a.disk_limit_mb:g}"), *_flag(a.root, "--proxy-hops", "1")]
    # The saved runs belong to their tab for as long as it lives and --saved-run-minutes after: short here, so that
    # the sweep's leftovers are measured within the wait.
    short = ["--idle-minutes", f"{a.cache_minutes:g}", *_flag(a.root, "--saved-run-minutes", f"{a.cache_minutes:g}")]
    extra = ["--cache-minutes", f"{a.cache_minutes:g}", *cap, *short, *a.extra]
    with Server(a.root, "tiny-random", a.cap, extra) as server:

        def used() -> float:
            return folder_mb(server.gradio_tmp) + folder_mb(server.tmp)

        base = used()
        one = _flood(server.url, a.flood_uploads, a.flood_mb, ["203.0.113.1"], used)
        many = _flood(server.url, a.flood_uploads, a.flood_mb, [f"198.51.100.{i}" for i in range(1, 255)], used)
        c = Client(server.url, verbose=False, download_files=str(server.gradio_tmp))
        for f in files:
            c.predict(handle_file(str(f)), *VIEW, api_name="/load_run")
            c.predict(api_name="/save_run")
        grown = used() - base
        time.sleep(a.wait)
        left = used() - base
        leftovers = [p for p in server.gradio_tmp.rglob("*") if p.is_file()]
        runs = sum(1 for p in leftovers if p.name.startswith("poss-run-"))
        empty = sum(1 for p in leftovers if p.stat().st_size == 0)
    limit = a.disk_limit_mb + 1  # the folder of a Server holds its log too
    ok = one[1] - base <= limit and many[1] - base <= limit and runs == 0 and empty == 0 and left <= 1.0
    for who, (statuses, peak, took) in (("one address", one), ("254 addresses", many)):
        print(
            f"[disk] {a.flood_uploads} uploads of {a.flood_mb:g} MB of random bytes from {who} in {took:.1f} s: "
            f"answers {dict(sorted(statuses.items()))}; the temp folders peaked {peak - base:.0f} MB above the start"
        )
    print(
        f"[disk] then {a.uploads} loads ({mb:.1f} MB in all) and {a.uploads} saves: {grown:.1f} MB above the start; "
        f"{a.wait:g} s later (cache age {a.cache_minutes:g} min): {left:.1f} MB, {len(leftovers)} files left "
        f"({runs} saved runs or copies, {empty} empty temporary files). {verdict(ok)} (peaks within "
        f"{a.disk_limit_mb:g} MB, nothing left after the sweep)"
    )


VIEW = ["draft position", False, "conditional (POSS pos-acc)", "this run"]  # /view's and /load_run's view values
PROMPT_UNIT = "Tell me everything you know about the history of the printing press, in detail. "  # 16 tokens


def long_prompt(tokens: int) -> str:
    """A prompt of about `tokens` tokens of the default model (its tokenizer reads PROMPT_UNIT as 16)."""
    return PROMPT_UNIT * max(1, tokens // 16)


def rss_mb(pid: int) -> float:
    """A process's resident memory, MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def step_args(prompt: str, preset: str, methods: list[str], max_new_tokens: int, precision: str = "float32") -> list:
    """/step's (and /run's) inputs: the prompt, the methods and the preset's default tree, then the view."""
    sys.path.insert(0, str(ROOT))
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


def _flag(root: Path, flag: str, value: str) -> list[str]:
    """[flag, value] where the checkout's app has the flag (an older checkout runs without it)."""
    return [flag, value] if _has_flag(root, flag) else []


def _has_flag(root: Path, flag: str) -> bool:
    """Whether the checkout's app takes the flag (its flags are in app/page/launch.py, in an older checkout
    app/launch.py)."""
    launch = next(p for p in (root / "app" / "server" / "launch.py", root / "app" / "launch.py") if p.exists())
    return flag in launch.read_text()


def _status_text(out) -> str:
    """The status line's text from a handler's outputs (its first output is the status HTML)."""
    import html
    import re

    first = out[0] if isinstance(out, (list, tuple)) and out else out
    return html.unescape(re.sub(r"<[^>]+>", "", str(first))).strip()


def case_memory(a) -> None:
    from gradio_client import handle_file

    run = _saved_run(Path(tempfile.mkdtemp()) / "run.jsonl", 0, tokens=a.run_tokens)
    extra = ["--idle-minutes", f"{a.idle_minutes:g}", *_flag(a.root, "--session-memory-mb", str(a.budget_mb))]
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
        told = _status_text(tabs[0].predict(*step_args("Hello", a.preset, methods, 4), api_name="/step"))
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


def _queued(job) -> dict | None:
    """The first {"queued": true, ...} value a /compare job yielded, if any yet."""
    for out in job.outputs():
        if isinstance(out, dict) and out.get("queued"):
            return out
    return None


def _warm(url: str, args: list, tries: int = 8) -> None:
    """Load the target and the drafts with short /compare calls (a short cap may stop the first ones mid-load;
    what they loaded stays loaded)."""
    for _ in range(tries):
        try:
            client(url).predict(*args, api_name="/compare")
            return
        except Exception:  # noqa: BLE001 - stopped at the cap while loading: the next call goes further
            pass


def case_fair(a) -> None:
    from gradio_client import Client

    # A short prompt: each call then holds its slot for the cap (the long prompt's prefill is the prefill case's).
    args = compare_args(
        long_prompt(32), ["plain", "eagle"], 256, depth=10, top_k=20, tree_budget=256, precision="float32"
    )
    # The visitor's address is its X-Forwarded-For entry: the one a trusted proxy appends, where the server counts
    # proxies (--proxy-hops); without one the header is ignored and every client here is 127.0.0.1.
    with Server(a.root, a.preset, a.cap, [*_flag(a.root, "--proxy-hops", "1"), *a.extra]) as server:
        # Warmed at the flood's settings and precision: what the flood's first call loads holds its slot past the cap,
        # which no estimate of the line can know of.
        warm = compare_args("Hi", ["plain", "eagle"], 4, depth=10, top_k=20, tree_budget=256, precision="float32")
        _warm(server.url, warm)
        flood = [client(server.url) for _ in range(a.flood_clients)]  # fresh sessions, all from one address
        jobs = [c.submit(*args, api_name="/compare") for c in flood for _ in range(a.calls_each)]
        time.sleep(a.settle)  # every call joined the line
        last = jobs[-1]
        victim = Client(server.url, verbose=False, headers={"X-Forwarded-For": "198.51.100.7"})
        t0 = time.monotonic()
        job = victim.submit(*compare_args("Hi", ["plain", "eagle"], 4, tree_budget=16), api_name="/compare")
        told = None
        while not job.done():
            told = told or _queued(job)
            if any(isinstance(o, dict) and o.get("running") for o in job.outputs()):
                break
            time.sleep(0.2)
        waited = time.monotonic() - t0
        told = told or _queued(job) or {"place": 0, "wait_s": 0.0}
        flood_told = _queued(last) or {}
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
        _warm(server.url, warm)
        took, how = timed_compare(server.url, args, a.timeout)
    ok = took <= a.cap + a.round_s and not how.startswith("error")
    print(
        f"[prefill] a {a.prompt_tokens}-token prompt (the chat template adds about 23), matched / POSS-3 / HASS "
        f"at depth 10, top-k 20, budget 256, 256 tokens, fp32: {took:.1f} s against a {a.cap:g} s cap ({how}). "
        f"{verdict(ok)} (within the cap + {a.round_s:g} s for one round and the client)"
    )


MB = 2**20
BOUNDARY = "poss-check-boundary"


def _server_value(extra: list[str], flag: str, default: float) -> float:
    """A server flag's value among the extra arguments ("--flag V" or "--flag=V", the last one given), else
    `default`."""
    value = default
    for i, arg in enumerate(extra):
        if arg == flag and i + 1 < len(extra):
            value = float(extra[i + 1])
        elif arg.startswith(flag + "="):
            value = float(arg.split("=", 1)[1])
    return value


def _tree(*folders: Path) -> tuple[int, set[str]]:
    """The bytes and paths of the regular files under the folders (a file deleted meanwhile is left out)."""
    total, names, stack = 0, set(), [str(f) for f in folders]
    while stack:
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
                    names.add(entry.path)
            except OSError:
                pass
    return total, names


class _Watch:
    """Samples folders every `every_s` in a thread while in a `with`: their peak bytes, and the files that appeared
    meanwhile (`written`, deleted ones included)."""

    def __init__(self, folders: list[Path], every_s: float = 0.05) -> None:
        self.folders, self.every_s = folders, every_s
        self.start_bytes, self.seen = _tree(*folders)
        self.peak, self.written = self.start_bytes, set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            size, names = _tree(*self.folders)
            self.peak, self.written = max(self.peak, size), self.written | (names - self.seen)
            if self._stop.wait(self.every_s):
                return

    def __enter__(self) -> "_Watch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        size, names = _tree(*self.folders)
        self.peak, self.written = max(self.peak, size), self.written | (names - self.seen)


def _multipart(parts: list[tuple[str, bytes]]) -> bytes:
    """A multipart/form-data body (BOUNDARY) with one "files" part per (file name, bytes), as Gradio's upload takes."""
    head = 'Content-Disposition: form-data; name="files"; filename="{}"\r\nContent-Type: application/octet-stream'
    body = [f"--{BOUNDARY}\r\n{head.format(name)}\r\n\r\n".encode() + data + b"\r\n" for name, data in parts]
    return b"".join(body) + f"--{BOUNDARY}--\r\n".encode()


def _raw_post(
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


# A /compare call of the tiny model that decodes until the cap (a short prompt, so that its 512-token context holds
# it; three lanes on the largest tree): what holds a client's share or a slot of the line.
HELD_CALL = compare_args("Hi", ["plain", "eagle", "poss2"], 2048, depth=10, top_k=20, tree_budget=256)


def _join(http, url: str, fn_index: int, data: list, session: str, headers: dict[str, str] | None = None):
    """One call put in Gradio's queue by hand (what a client's submit does first): the /queue/join answer."""
    payload = {"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None, "trigger_id": None}
    return http.post(url + "gradio_api/queue/join", json=payload, headers=headers or {})


def _raw_call(url: str, fn_index: int, data: list, session: str, headers: dict[str, str], timeout: float = 60.0):
    """One call by hand (/queue/join, then its session's /queue/data stream): the join's status and the raw text of
    the call's "process_completed" message (or of the join's answer when it was refused)."""
    import httpx

    with httpx.Client(timeout=timeout, headers=headers) as http:
        joined = _join(http, url, fn_index, data, session)
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


def _file_data(out) -> dict:
    """The first file value (a dict with a url) among a handler's outputs."""
    for value in out if isinstance(out, (list, tuple)) else [out]:
        if isinstance(value, dict) and value.get("url"):
            return value
    raise SystemExit(f"no file among the outputs: {str(out)[:300]}")


def case_own(a) -> None:
    """A visitor's saved run while other clients (other sessions and addresses) load and save runs and upload random
    files: is it still downloadable --own-wait seconds after it was saved?"""
    import httpx
    from gradio_client import Client, handle_file

    honest_run = _saved_run(Path(tempfile.mkdtemp()) / "honest.jsonl", 0)
    flood_run = _saved_run(Path(tempfile.mkdtemp()) / "flood.jsonl", 1)
    extra = [
        "--cache-minutes",
        f"{a.own_cache_minutes:g}",
        *_flag(a.root, "--disk-cap-mb", f"{a.disk_limit_mb:g}"),
        *_flag(a.root, "--saved-run-minutes", f"{a.saved_run_minutes:g}"),
        *_flag(a.root, "--proxy-hops", "1"),  # the clients' X-Forwarded-For entries are their addresses
        *a.extra,
    ]
    with Server(a.root, "tiny-random", a.cap, extra) as server:
        mine = {"X-Forwarded-For": "198.51.100.20"}
        honest = Client(server.url, verbose=False, download_files=False, headers=mine)
        honest.predict(handle_file(str(honest_run)), *VIEW, api_name="/load_run")
        saved = _file_data(honest.predict(api_name="/save_run"))
        saved_at = time.monotonic()
        url = urllib.parse.urljoin(server.url, saved["url"])
        name = saved.get("orig_name") or Path(saved.get("path") or "").name
        on_disk = next(iter(server.gradio_tmp.rglob(name)), None) if name else None
        with httpx.Client(timeout=60, headers=mine) as http:
            first = http.get(url)
        stop, lock = threading.Event(), threading.Lock()
        tally: dict[str, int] = {}
        why: list[str] = []  # the first refusal's words

        def count(what: str, err: Exception | None = None) -> None:
            with lock:
                tally[what] = tally.get(what, 0) + 1
                if err is not None and not why:
                    why.append(((str(err) or type(err).__name__).strip().splitlines() or [""])[-1][:100])

        def load_and_save(k: int) -> None:
            """New sessions from new addresses, each loading and saving a run a few times (nothing decodes)."""
            i = 0
            while not stop.is_set():
                i += 1
                who = {"X-Forwarded-For": f"203.0.113.{(k * 97 + i) % 250 + 1}"}
                try:
                    c = Client(server.url, verbose=False, download_files=False, headers=who)
                except Exception as err:  # noqa: BLE001 - a refused page load counts as a failed save
                    count("failed", err)
                    stop.wait(0.2)
                    continue
                for _ in range(4):
                    if stop.is_set():
                        break
                    try:
                        c.predict(handle_file(str(flood_run)), *VIEW, api_name="/load_run")
                        c.predict(api_name="/save_run")
                        count("saves")
                    except Exception as err:  # noqa: BLE001 - refused or cleared: the flood goes on
                        count("failed", err)
                        stop.wait(0.2)  # as a script retrying would, not a busy loop

        def upload() -> None:
            data, i = os.urandom(16 * MB), 0
            with httpx.Client(timeout=120) as http:
                while not stop.wait(a.own_upload_every):
                    i += 1
                    who = {"X-Forwarded-For": f"192.0.2.{i % 250 + 1}"}
                    try:
                        status = http.post(
                            server.url + "gradio_api/upload", files={"files": (f"r{i}.bin", data)}, headers=who
                        ).status_code
                    except httpx.HTTPError as err:
                        status = type(err).__name__
                    count(f"upload {status}")

        workers = [threading.Thread(target=load_and_save, args=(k,), daemon=True) for k in range(a.own_clients)]
        workers.append(threading.Thread(target=upload, daemon=True))
        for w in workers:
            w.start()
        gone_at, peak = None, 0
        while time.monotonic() - saved_at < a.own_wait:
            if gone_at is None and on_disk is not None and not on_disk.exists():
                gone_at = time.monotonic() - saved_at
            peak = max(peak, _tree(server.gradio_tmp, server.tmp)[0])
            time.sleep(0.5)
        waited = time.monotonic() - saved_at
        with httpx.Client(timeout=60, headers=mine) as http:
            last = http.get(url)
        stop.set()
        for w in workers:
            w.join(timeout=120)
    uploads = {k.split(" ", 1)[1]: v for k, v in sorted(tally.items()) if k.startswith("upload ")}
    same = last.status_code == 200 and first.status_code == 200 and last.content == first.content
    print(
        f"[own] a visitor saved its run ({len(first.content) / MB:.1f} MB; download answered {first.status_code}), "
        f"then {a.own_clients} flooding clients (a new session and address every 4 runs) loaded and saved "
        f"{tally.get('saves', 0)} runs ({tally.get('failed', 0)} refused or failed"
        f"{f', the first told {why[0]!r}' if why else ''}) and uploaded 16 MB every {a.own_upload_every:g} s "
        f"(answers {uploads}); the temp folders peaked {peak / MB:.0f} MB (cap "
        f"{a.disk_limit_mb:g} MB, cache age {a.own_cache_minutes:g} min); the file was "
        + (f"deleted {gone_at:.1f} s after the save" if gone_at is not None else "still on disk" if on_disk else "?")
    )
    print(
        f"[own] the visitor's download {waited:.0f} s after saving: HTTP {last.status_code}"
        f"{', the same bytes' if same else ', other bytes' if last.status_code == 200 else ''}. {verdict(same)} "
        f"(served, HTTP 200 with the bytes saved)"
    )


def case_bytes(a) -> None:
    """Uploads that declare one size and send another, and one with many parts: the temp folders against the cap,
    and the files the many-part upload writes."""
    extra = [*_flag(a.root, "--disk-cap-mb", f"{a.disk_limit_mb:g}"), *_flag(a.root, "--proxy-hops", "1"), *a.extra]
    with Server(a.root, "tiny-random", a.cap, extra) as server:
        folders = [server.gradio_tmp, server.tmp]
        form = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
        smuggled = {**form, "Content-Length": "1000", "Transfer-Encoding": "chunked", "X-Forwarded-For": "203.0.113.5"}
        answers: dict[int, int] = {}
        said = ""
        t0 = time.monotonic()
        with _Watch(folders) as sent:
            for i in range(a.bytes_requests):
                big = _multipart([(f"big{i}.bin", os.urandom(int(a.bytes_mb * MB)))])  # new bytes: a new file each
                status, text = _raw_post(server.port, "/gradio_api/upload", smuggled, big, chunked=True)
                answers[status] = answers.get(status, 0) + 1
                said = said or (text.strip()[:100] if status != 200 else "")
            time.sleep(1.0)
        took = time.monotonic() - t0
        many = _multipart([(f"part{i}.txt", f"part {i}\n".encode()) for i in range(a.parts)])
        with _Watch(folders) as parted:
            status, text = _raw_post(
                server.port,
                "/gradio_api/upload",
                {**form, "Content-Length": str(len(many)), "X-Forwarded-For": "203.0.113.6"},
                many,
            )
            time.sleep(1.0)
        try:
            listed = len(json.loads(text)) if status == 200 else 0
        except ValueError:
            listed = 0
        # Gradio writes each part to a temporary file, then moves it to a folder of its own: the files written are
        # the parts' files seen, the temporary files seen, or the files the answer lists, whichever is most.
        named = sum(1 for f in parted.written if re.fullmatch(r"part\d+\.txt", Path(f).name))
        written = max(named, len(parted.written) - named, listed)
        left = len(_tree(*folders)[1] - parted.seen)
    limit = a.disk_limit_mb + 1  # the sampling's own slack
    ok = sent.peak / MB <= limit and parted.peak / MB <= limit and 400 <= status < 500 and written <= 8
    print(
        f"[bytes] {a.bytes_requests} POSTs of a {a.bytes_mb:g} MB file sent chunked with Content-Length: 1000 from "
        f"one address in {took:.1f} s: answers {dict(sorted(answers.items()))}"
        f"{f' ({said!r})' if said else ''}; the temp folders peaked {sent.peak / MB:.0f} MB against the "
        f"{a.disk_limit_mb:g} MB cap"
    )
    print(
        f"[bytes] one upload of {a.parts:,} parts ({len(many) / 1024:.0f} KB): HTTP {status} "
        f"({text.strip()[:100]!r}); {written:,} files written ({listed:,} listed in the answer), {left:,} of them left "
        f"after; peak {parted.peak / MB:.0f} MB. {verdict(ok)} (the folders never past the cap; the "
        f"many-part upload refused, at most 8 files written)"
    )


def case_addr(a) -> None:
    """One loopback client inventing X-Forwarded-For addresses: uploads, queued /compare calls, and a returning
    visitor's call meanwhile."""
    import httpx
    from gradio_client import Client

    hops = _has_flag(a.root, "--proxy-hops")
    real = "192.0.2.50"  # what the trusted proxy appends for this client, the same for all its requests

    def forwarded(i: int) -> str:
        invented = f"198.18.{i // 250}.{i % 250 + 1}"
        # Where the server counts trusted proxies (--proxy-hops 1), the client writes the first entry and the proxy
        # appends the last; an older checkout charged the leftmost entry, so it gets the invented one alone.
        return f"{invented}, {real}" if hops else invented

    extra = [*_flag(a.root, "--proxy-hops", "1"), *a.extra]
    rate = _server_value(a.extra, "--upload-mb-per-second", 2.0)
    per_address = int(_server_value(a.extra, "--max-calls-per-address", 40))
    short = compare_args("Hi", ["plain", "eagle"], 4, tree_budget=16)
    with Server(a.root, "tiny-random", a.cap, extra) as server:
        # The flood's drafts loaded first (what a call loads holds its slot past the cap), then the visitor served once
        _warm(server.url, compare_args("Hi", HELD_CALL[1], 4, depth=10, top_k=20, tree_budget=256))
        student = Client(server.url, verbose=False, headers={"X-Forwarded-For": "198.51.100.7"})
        student.predict(*short, api_name="/compare")
        uploads = _flood(server.url, a.addr_uploads, 16.0, [forwarded(i) for i in range(a.addr_uploads)], lambda: 0)
        statuses, _, up_took = uploads
        c = client(server.url)
        fn_index = c._infer_fn_index("/compare", None)
        long = HELD_CALL
        data = long + _api_inputs(c, "/compare")[len(long) :]
        joined: dict[int, int] = {}
        with httpx.Client(timeout=60) as http:
            for i in range(a.addr_calls):
                answer = _join(http, server.url, fn_index, data, os.urandom(8).hex(), {"X-Forwarded-For": forwarded(i)})
                joined[answer.status_code] = joined.get(answer.status_code, 0) + 1
        time.sleep(a.settle)  # the first of them decodes, the rest wait in line
        t0 = time.monotonic()
        job = student.submit(*short, api_name="/compare")
        told, started = None, None
        while time.monotonic() - t0 < a.addr_wait and not job.done():
            told = told or _queued(job)
            if any(isinstance(o, dict) and o.get("running") for o in job.outputs()):
                started = time.monotonic() - t0
                break
            time.sleep(0.2)
        if started is None and job.done():
            started = time.monotonic() - t0  # answered between two looks
        told = told or _queued(job)
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


def _safetensors_params(path: Path) -> int:
    """The parameters in a safetensors file, from its header (nothing loaded)."""
    with open(path, "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    return sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")


PRECISION_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def case_models(a) -> None:
    """/compare calls of a few tokens, one per precision and quantization: the server's RSS against the tabs' memory
    total (--session-memory-mb) and one target's size."""
    extra = [*_flag(a.root, "--session-memory-mb", f"{a.budget_mb:g}"), *a.extra]
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


def case_log(a) -> None:
    """What the log gains from requests for unknown queue sessions and from refused calls, and whether the upload
    and Save replies name a server folder."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    from gradio_client import Client, handle_file

    run = _saved_run(Path(tempfile.mkdtemp()) / "run.jsonl", 0, tokens=60)
    address, secret = "198.51.100.9", "zq7-secret-value"
    mine = {"X-Forwarded-For": address}
    results: list[bool] = []
    with Server(a.root, "tiny-random", a.cap, [*_flag(a.root, "--proxy-hops", "1"), *a.extra]) as server:

        def unknown_session(_) -> str:
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

        since = _log_size(server)
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(unknown_session, range(a.log_gets)))
        text = _logged(server, since, settle=2.0)
        per = len(text.encode()) / a.log_gets
        results.append(per <= 300 and "Traceback" not in text)
        counted = {k: answers.count(k) for k in sorted(set(answers))}
        print(
            f"[log] {a.log_gets} GETs of /gradio_api/queue/data for unknown sessions: answers {counted}; the log "
            f"gained {len(text.encode()):,} bytes ({per:,.0f} per request), {text.count('Traceback')} tracebacks. "
            f"{verdict(results[-1])} (at most 300 bytes each, no traceback)"
        )

        def refused(what: str, names: str, fn, was_refused) -> None:
            since = _log_size(server)
            told = fn()
            ok, line = _one_line(_logged(server, since), address, [secret], names)
            ok = ok and was_refused(told)
            results.append(ok)
            print(f"[log] {what}: told {str(told).strip()[:90]!r}; logged {line.strip()[:200]!r}. {verdict(ok)}")

        c = Client(server.url, verbose=False, headers=mine)
        c.predict(*compare_args("Hi", ["plain", "eagle"], 4, tree_budget=16), api_name="/compare")  # model loaded
        held = [c.submit(*HELD_CALL, api_name="/compare") for _ in range(2)]
        time.sleep(2.0)
        past = [secret, *HELD_CALL[1:]]
        refused(
            "a /compare past the client's share (422)",
            r"call|share|limit",
            lambda: _outcome(lambda: c.submit(*past, api_name="/compare").result(timeout=60)),
            lambda told: "validation" in told,  # gradio_client's words for a refused join
        )
        for job in held:
            job.cancel()
        time.sleep(3.0)
        form = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}", **mine}
        too_big = _multipart([(f"{secret}.bin", os.urandom(20 * MB))])
        refused(
            "an upload over the size limit (413)",
            r"MB|size|large|limit",
            lambda: _raw_post(
                server.port, "/gradio_api/upload", {**form, "Content-Length": str(len(too_big))}, too_big
            ),
            lambda told: told[0] == 413,
        )
        data = os.urandom(16 * MB)
        with httpx.Client(timeout=120, headers=mine) as http:
            for _ in range(12):
                since = _log_size(server)
                answer = http.post(server.url + "gradio_api/upload", files={"files": (f"{secret}.bin", data)})
                if answer.status_code == 429:
                    break
            ok, line = _one_line(_logged(server, since), address, [secret], r"rate|MB/s|too many|limit")
            ok = ok and answer.status_code == 429
            results.append(ok)
            print(
                f"[log] an upload over the address's rate ({answer.status_code}): told {answer.text.strip()[:90]!r}; "
                f"logged {line.strip()[:200]!r}. {verdict(ok)}"
            )
        bad = compare_args("Hi", ["plain"], 1)
        bad[2] = f"{secret}-preset"
        refused(
            "a /compare of an unknown preset",
            r"preset|input",  # the preset, or the inputs' check that refused it
            lambda: _outcome(
                lambda: Client(server.url, verbose=False, headers=mine).predict(*bad, api_name="/compare")
            ),
            lambda told: not told.startswith("{"),  # an error, not an answer
        )

        folders = [str(server.gradio_tmp), str(server.tmp), str(server.dir / "cache"), str(a.root.resolve())]
        with httpx.Client(timeout=60, headers={"X-Forwarded-For": "198.51.100.10"}) as http:
            upload = http.post(server.url + "gradio_api/upload", files={"files": ("note.txt", b"hello")})
        saver = Client(server.url, verbose=False, headers={"X-Forwarded-For": "198.51.100.11"})
        saver.predict(handle_file(str(run)), *VIEW, api_name="/load_run")
        status, save_reply = _raw_call(
            server.url, saver._infer_fn_index("/save_run", None), [], saver.session_hash, saver.headers
        )
        for what, reply in (("/gradio_api/upload", upload.text), ("/save_run", save_reply)):
            named = [f for f in folders if f in reply]
            results.append(not named and bool(reply))
            print(
                f"[log] {what}'s reply ({len(reply):,} chars): "
                + (f"names {' and '.join(named)}" if named else "names no server folder" if reply else "empty")
                + f"; {reply.strip()[:160]!r}. {verdict(results[-1])}"
            )
    print(
        f"[log] {sum(results)} of {len(results)} checks passed. {verdict(all(results))} (unknown sessions cost at "
        f"most 300 log bytes and no traceback; each refusal logs one line naming its limit and the address and no "
        f"value; no reply names a server folder)"
    )


class _Page:
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

    def __enter__(self) -> "_Page":
        self._thread.start()
        time.sleep(0.3)  # the heartbeat is open before the page's first event
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()


def _fn_index(url: str, api_name: str) -> int:
    return client(url)._infer_fn_index(api_name, None)


def _page_load(url: str, view_fn: int, timeout: float) -> tuple[float, str]:
    """An honest page load: the page, its heartbeat, then its load event read to the end; (seconds, how it ended)."""
    import httpx

    t0, session = time.monotonic(), os.urandom(6).hex()
    with _Page(url, session), httpx.Client(timeout=timeout) as http:
        while time.monotonic() - t0 < timeout:
            status = http.get(url).status_code
            if status == 200:
                status, text = _raw_call(url, view_fn, VIEW, session, {}, timeout=timeout)
                if status == 200 and '"success":true' in text.replace(" ", ""):
                    return time.monotonic() - t0, "completed"
            time.sleep(1.0)  # a browser's user reloads
        return time.monotonic() - t0, f"not completed (last answer {status})"


async def _many_joins(url: str, fn_index: int, data: list, count: int, at_once: int = 200) -> dict[int, int]:
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


def case_replays(a) -> None:
    """Example replays joined from fresh session hashes, streams never read: does an honest page load still
    complete, and how busy is the server?"""
    import asyncio

    sys.path.insert(0, str(ROOT))
    from poss_core.models.presets import DEFAULT_PRESET

    with Server(a.root, a.preset, a.cap, a.extra) as server:
        example, view = _fn_index(server.url, "/example"), _fn_index(server.url, "/view")
        data = ["Why is the sky blue?", DEFAULT_PRESET, *VIEW]
        answers = asyncio.run(_many_joins(server.url, example, data, a.replays))
        cpu = server.cpu_percent(2.0)
        took, how = _page_load(server.url, view, a.load_wait)
    ok = how == "completed" and took <= 30.0
    print(
        f"[replays] {a.replays} example joins from fresh session hashes, never read: answers {answers}; server CPU "
        f"{cpu:.0f}% after; an honest page load then took {took:.1f} s ({how}). {verdict(ok)} (within 30 s)"
    )


class _RssWatch:
    """The server's resident memory sampled every 0.1 s: its first and highest figures (MB)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.first, self.peak = pid, rss_mb(pid), 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb(self.pid))
            time.sleep(0.1)

    def __enter__(self) -> "_RssWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def case_bodies(a) -> None:
    """Large JSON bodies to /queue/join at once: the server's RSS and the answers."""
    from concurrent.futures import ThreadPoolExecutor

    body = b'{"data": ["' + b"x" * int(a.body_mb * MB) + b'"], "fn_index": 0, "session_hash": "big"}'
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    with Server(a.root, a.preset, a.cap, a.extra) as server:
        time.sleep(3.0)  # the server settles after its start
        with _RssWatch(server.proc.pid) as watch, ThreadPoolExecutor(a.bodies) as pool:
            answers = list(
                pool.map(
                    lambda _: _raw_post(server.port, "/gradio_api/queue/join", headers, body, timeout=120)[0],
                    range(a.bodies),
                )
            )
            time.sleep(1.0)
    grew = watch.peak - watch.first
    ok = grew < 150 and all(s == 413 for s in answers)
    print(
        f"[bodies] {a.bodies} JSON bodies of {a.body_mb:g} MB at once: answers {answers}; the server's RSS rose "
        f"{grew:,.0f} MB at the peak (from {watch.first:,.0f} MB). {verdict(ok)} (under 150 MB, each 413)"
    )


def case_tabs(a) -> None:
    """Page loads (the load event) from fresh session hashes, never read: the server's RSS a while after."""
    import asyncio

    with Server(a.root, a.preset, a.cap, a.extra) as server:
        view = _fn_index(server.url, "/view")
        time.sleep(3.0)
        start = rss_mb(server.proc.pid)
        t0 = time.monotonic()
        answers = asyncio.run(_many_joins(server.url, view, VIEW, a.tabs))
        sent_s = time.monotonic() - t0
        peak = rss_mb(server.proc.pid)
        time.sleep(a.tabs_wait)
        after = rss_mb(server.proc.pid)
    held = after - start
    ok = held < 300
    print(
        f"[tabs] {a.tabs} page loads from fresh session hashes, never read ({sent_s:.0f} s): answers {answers}; "
        f"RSS {peak - start:,.0f} MB above the start once sent, {held:,.0f} MB {a.tabs_wait:g} s later "
        f"(start {start:,.0f} MB). {verdict(ok)} (under 300 MB)"
    )


def case_malformed(a) -> None:
    """Wrongly typed /view calls from one open page for --malformed-s seconds: log bytes per second."""
    from concurrent.futures import ThreadPoolExecutor

    bad = [12345, {"not": "a view"}, [1, 2], None]
    with Server(a.root, a.preset, a.cap, a.extra) as server:
        view = _fn_index(server.url, "/view")
        since, calls = _log_size(server), [0]
        deadline = time.monotonic() + a.malformed_s

        def caller(i: int) -> None:
            session = os.urandom(6).hex()
            with _Page(server.url, session):
                while time.monotonic() < deadline:
                    _raw_call(server.url, view, bad, session, {}, timeout=30)
                    calls[0] += 1

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(caller, range(4)))
        text = _logged(server, since)
    rate = len(text.encode()) / a.malformed_s
    ok = rate < 200
    print(
        f"[malformed] {calls[0]} wrongly typed /view calls in {a.malformed_s:g} s: the log grew "
        f"{len(text.encode()):,} bytes ({rate:,.0f} per second). {verdict(ok)} (under 200 bytes a second)"
    )


CASES = {
    "oracle": case_oracle,
    "fit": case_fit,
    "abandon": case_abandon,
    "flood": case_flood,
    "disk": case_disk,
    "refuse": case_refuse,
    "memory": case_memory,
    "fair": case_fair,
    "prefill": case_prefill,
    "own": case_own,
    "bytes": case_bytes,
    "addr": case_addr,
    "models": case_models,
    "log": case_log,
    "replays": case_replays,
    "bodies": case_bodies,
    "tabs": case_tabs,
    "malformed": case_malformed,
}


def main(argv: list[str] | None = None) -> int:
    """Run one case; 1 when it printed a FAIL, else 0."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("case", choices=list(CASES))
    p.add_argument("--root", type=Path, default=ROOT, help="the checkout whose app.py runs (default: this one)")
    p.add_argument("--preset", default=None, help="default: smollm2-135m for models, tiny-random for the others")
    p.add_argument("--cap", type=float, default=20.0, help="--max-call-seconds of the server (default 20)")
    p.add_argument(
        "--server-args", default="", help='more flags for app.py, e.g. --server-args="--max-calls-per-client 2"'
    )
    p.add_argument("--timeout", type=float, default=600.0, help="the most seconds to wait for one call")
    p.add_argument("--clients", type=int, default=4, help="abandon: clients started then killed")
    p.add_argument("--kill-after", type=float, default=6.0, help="abandon: seconds before they are killed")
    p.add_argument("--grace", type=float, default=2.0, help="abandon: seconds after the kill before measuring")
    p.add_argument("--window", type=float, default=5.0, help="abandon: seconds of CPU measured")
    p.add_argument("--calls", type=int, default=6, help="flood: calls one client submits; refuse: bad calls")
    p.add_argument("--uploads", type=int, default=6, help="disk: saved runs uploaded and saved")
    p.add_argument("--wait", type=float, default=25.0, help="disk: seconds to wait for the cache sweep")
    p.add_argument("--cache-minutes", type=float, default=0.05, help="disk: the server's --cache-minutes")
    p.add_argument("--flood-uploads", type=int, default=20, help="disk: random uploads from one address, then many")
    p.add_argument("--flood-mb", type=float, default=16.0, help="disk: MB of each random upload")
    p.add_argument(
        "--disk-limit-mb", type=float, default=128.0, help="disk, own, bytes: the cap (--disk-cap-mb) that must hold"
    )
    p.add_argument("--cancel-after", type=float, default=2.0, help="refuse: seconds before /compare is cancelled")
    p.add_argument("--quantized", action="store_true", help="refuse: also an 8-bit /run of the default model")
    p.add_argument("--steps", type=int, default=8, help="memory: tabs that pause a Step on a long prompt")
    p.add_argument("--loads", type=int, default=6, help="memory: tabs that load a saved run")
    p.add_argument("--run-tokens", type=int, default=400, help="memory: new tokens of the saved run loaded")
    p.add_argument("--idle-minutes", type=float, default=0.5, help="memory: the server's --idle-minutes")
    p.add_argument(
        "--budget-mb", type=float, default=600.0, help="memory, models: --session-memory-mb, where there is one"
    )
    p.add_argument("--view-every", type=float, default=10.0, help="memory: seconds between each tab's /view")
    p.add_argument("--reap-wait", type=float, default=25.0, help="memory: seconds past the idle time to wait")
    p.add_argument("--slack-mb", type=float, default=250.0, help="memory: RSS above the start that passes")
    p.add_argument("--prompt-tokens", type=int, default=1900, help="memory, fair, prefill: the long prompt's tokens")
    p.add_argument("--flood-clients", type=int, default=8, help="fair: fresh clients at one address")
    p.add_argument("--calls-each", type=int, default=2, help="fair: long /compare calls each of them submits")
    p.add_argument("--settle", type=float, default=5.0, help="fair, addr: seconds for the flood to join the line")
    p.add_argument("--round-s", type=float, default=6.0, help="prefill: one round and the client, past the cap")
    p.add_argument("--own-wait", type=float, default=60.0, help="own: seconds from the save to the download")
    p.add_argument("--own-cache-minutes", type=float, default=0.5, help="own: the server's --cache-minutes")
    p.add_argument(
        "--saved-run-minutes", type=float, default=1.0, help="own: the server's --saved-run-minutes, where there is one"
    )
    p.add_argument("--own-clients", type=int, default=2, help="own: flooding clients that load and save runs")
    p.add_argument("--own-upload-every", type=float, default=0.5, help="own: seconds between the 16 MB uploads")
    p.add_argument("--bytes-mb", type=float, default=15.0, help="bytes: MB of each upload sent chunked")
    p.add_argument("--bytes-requests", type=int, default=12, help="bytes: those uploads, one address in a row")
    p.add_argument("--parts", type=int, default=1000, help="bytes: parts of the many-part upload")
    p.add_argument("--addr-uploads", type=int, default=40, help="addr: 16 MB uploads from invented addresses")
    p.add_argument("--addr-calls", type=int, default=45, help="addr: long /compare calls from invented addresses")
    p.add_argument("--addr-wait", type=float, default=60.0, help="addr: the most seconds to wait for the visitor")
    p.add_argument("--rounds", type=int, default=2, help="models: times through every precision and quantization")
    p.add_argument("--log-gets", type=int, default=200, help="log: GETs of /queue/data for unknown sessions")
    p.add_argument("--replays", type=int, default=128, help="replays: example joins from fresh session hashes")
    p.add_argument("--load-wait", type=float, default=60.0, help="replays: the most seconds an honest load may try")
    p.add_argument("--bodies", type=int, default=3, help="bodies: large JSON bodies sent at once")
    p.add_argument("--body-mb", type=float, default=200.0, help="bodies: MB of each")
    p.add_argument("--tabs", type=int, default=2000, help="tabs: page loads from fresh session hashes")
    p.add_argument("--tabs-wait", type=float, default=35.0, help="tabs: seconds before the RSS is read")
    p.add_argument("--malformed-s", type=float, default=20.0, help="malformed: seconds of wrongly typed /view calls")
    a = p.parse_args(argv)
    a.extra = shlex.split(a.server_args)
    a.preset = a.preset or ("smollm2-135m" if a.case == "models" else "tiny-random")
    FAILED.clear()
    CASES[a.case](a)
    return 1 if FAILED else 0


if __name__ == "__main__":
    raise SystemExit(main())
