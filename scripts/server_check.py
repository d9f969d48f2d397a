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

(--server-args takes its value after "=" when it starts with "--".)
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
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


def folder_files(*paths: Path) -> set[Path]:
    """The regular files under the folders (gone meanwhile: not counted)."""
    return {p for path in paths if path.exists() for p in path.rglob("*") if p.is_file()}


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
        return ["--max-new-tokens", "2048"] if "--max-new-tokens" in (root / "app" / "launch.py").read_text() else []

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
    from poss_core import compare, saved_runs

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
    X-Forwarded-For, which the app trusts from a loopback peer, as from the Space's proxy): the answers' status
    counts, the largest `measure()` seen after each, and the seconds taken."""
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
    cap = _flag(a.root, "--disk-cap-mb", f"{a.disk_limit_mb:g}")
    with Server(a.root, "tiny-random", a.cap, ["--cache-minutes", f"{a.cache_minutes:g}", *cap, *a.extra]) as server:

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
    from app.control_defaults import ui_defaults
    from app.user_settings import APP_SETTINGS
    from poss_core import settings
    from poss_core.models.presets import get_preset

    values = {
        **settings.defaults(APP_SETTINGS),
        **ui_defaults(get_preset(preset)),
        "max_new_tokens": max_new_tokens,
        "precision": precision,
    }
    return [prompt, False, preset, methods] + [values[n] for n in APP_SETTINGS] + VIEW


def _flag(root: Path, flag: str, value: str) -> list[str]:
    """[flag, value] where the checkout's app.py has the flag (an older checkout runs without it)."""
    return [flag, value] if _has_flag(root, flag) else []


def _has_flag(root: Path, flag: str) -> bool:
    return flag in (root / "app" / "launch.py").read_text()


def _status_text(out) -> str:
    """The status line's text from a handler's outputs (its first output is the status HTML)."""
    import html
    import re

    first = out[0] if isinstance(out, (list, tuple)) and out else out
    return html.unescape(re.sub(r"<[^>]+>", "", str(first))).strip()


def case_memory(a) -> None:
    import threading

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
}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("case", choices=list(CASES))
    p.add_argument("--root", type=Path, default=ROOT, help="the checkout whose app.py runs (default: this one)")
    p.add_argument("--preset", default="tiny-random")
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
    p.add_argument("--disk-limit-mb", type=float, default=128.0, help="disk: the cap (--disk-cap-mb) that must hold")
    p.add_argument("--cancel-after", type=float, default=2.0, help="refuse: seconds before /compare is cancelled")
    p.add_argument("--quantized", action="store_true", help="refuse: also an 8-bit /run of the default model")
    p.add_argument("--steps", type=int, default=8, help="memory: tabs that pause a Step on a long prompt")
    p.add_argument("--loads", type=int, default=6, help="memory: tabs that load a saved run")
    p.add_argument("--run-tokens", type=int, default=400, help="memory: new tokens of the saved run loaded")
    p.add_argument("--idle-minutes", type=float, default=0.5, help="memory: the server's --idle-minutes")
    p.add_argument("--budget-mb", type=float, default=600.0, help="memory: --session-memory-mb, where there is one")
    p.add_argument("--view-every", type=float, default=10.0, help="memory: seconds between each tab's /view")
    p.add_argument("--reap-wait", type=float, default=25.0, help="memory: seconds past the idle time to wait")
    p.add_argument("--slack-mb", type=float, default=250.0, help="memory: RSS above the start that passes")
    p.add_argument("--prompt-tokens", type=int, default=1900, help="memory, fair, prefill: the long prompt's tokens")
    p.add_argument("--flood-clients", type=int, default=8, help="fair: fresh clients at one address")
    p.add_argument("--calls-each", type=int, default=2, help="fair: long /compare calls each of them submits")
    p.add_argument("--settle", type=float, default=5.0, help="fair: seconds for the flood to join the line")
    p.add_argument("--round-s", type=float, default=6.0, help="prefill: one round and the client, past the cap")
    a = p.parse_args(argv)
    a.extra = shlex.split(a.server_args)
    CASES[a.case](a)


if __name__ == "__main__":
    main()
