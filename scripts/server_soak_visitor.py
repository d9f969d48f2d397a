"""One simulated visitor of the mixed soak (scripts/server_soak.py): a sequence of tabs from its own address, each
call drawn from a fixed random mix (replays, live runs, Steps left paused, saves, uploads, loads, views, disconnects,
new tabs) with think time between, and the tally of calls, outcomes and errors that all visitors share."""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from server_clients import VIEW, status_text, step_args
from server_harness import ROOT

from poss_core.models.presets import DEFAULT_PRESET

METHODS = ["plain", "eagle", "poss2"]
PROMPTS = [
    "Why is the sky blue?",
    "Name three rivers in Europe.",
    "Write a haiku about the sea.",
    "What is 17 times 23?",
    "Give one tip for learning to cook.",
    "Explain what a compiler does in one sentence.",
]
# Relative weights of a visitor's actions: live decoding (run, compare, step, disconnects) is kept to about a third
# so the one live slot is busy much of the time but not always.
ACTIONS = {
    "example": 4,
    "replay": 2,
    "run": 3,
    "compare": 1,
    "step": 2,
    "save": 2,
    "upload": 2,
    "load": 2,
    "view": 2,
    "cancel": 1,
    "kill": 1,
    "new_tab": 2,
}
KILLED_CLIENT = """
import sys, time
from gradio_client import Client
c = Client(sys.argv[1], verbose=False, headers={"X-Forwarded-For": sys.argv[2]}, download_files=False)
c.submit(*__import__("json").loads(sys.argv[3]), api_name="/run")
time.sleep(3600)
"""


@dataclass
class Tally:
    """Calls and errors by kind, gathered across the visitors' threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    calls: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    samples: dict[str, list[str]] = field(default_factory=dict)  # the first few error texts of each kind
    outcomes: dict[str, Counter] = field(default_factory=dict)  # what the status line said, by kind

    def outcome(self, kind: str, out) -> None:
        """Count the call's status line, numbers blanked, so that refusals and cap stops show up by kind."""
        text = re.sub(r"\d+(\.\d+)?", "#", " ".join(status_text(out).split()))[:70]
        with self.lock:
            self.outcomes.setdefault(kind, Counter())[text or "(no status)"] += 1

    def refused(self, kind: str, text: str) -> None:
        """A refusal the app gives on purpose (gr.Error): counted as an outcome, not as an error."""
        with self.lock:
            self.outcomes.setdefault(kind, Counter())["refused: " + " ".join(text.split())[:60]] += 1

    def call(self, kind: str) -> None:
        with self.lock:
            self.calls[kind] += 1

    def error(self, kind: str, text: str) -> None:
        with self.lock:
            self.errors[kind] += 1
            kept = self.samples.setdefault(kind, [])
            if len(kept) < 3:
                kept.append(" ".join(text.split())[:240])


class Visitor:
    """One simulated visitor: a sequence of tabs (gradio_client clients) from one address, a fixed random mix."""

    def __init__(self, i: int, url: str, a: argparse.Namespace, tally: Tally, stop: threading.Event, files: Path):
        self.i, self.url, self.a, self.tally, self.stop = i, url, a, tally, stop
        self.rng = random.Random(a.seed * 1000 + i)
        self.address = f"198.51.100.{i + 1}"
        self.files = files / f"visitor{i}"  # the client's downloads (saved runs), outside the server's folders
        self.files.mkdir(parents=True, exist_ok=True)
        self.tab = None
        self.has_run = False
        self.saved: list[Path] = sorted(files.glob("seed-*.jsonl"))  # saved runs made before the soak
        self.children: list[subprocess.Popen] = []

    def client(self):
        from gradio_client import Client

        return Client(
            self.url, verbose=False, headers={"X-Forwarded-For": self.address}, download_files=str(self.files)
        )

    def run_args(self, prompt: str, tokens: int) -> list:
        return step_args(prompt, DEFAULT_PRESET, METHODS, tokens, precision="float32")

    def act(self, kind: str) -> None:
        """One call of `kind` (raises what the call raised)."""
        from gradio_client import handle_file

        view = VIEW
        prompt = self.rng.choice(PROMPTS)
        tokens = self.rng.randint(4, self.a.max_tokens)
        timeout = self.a.call_timeout
        if self.tab is None or kind == "new_tab":
            self.tab, self.has_run = self.client(), False
            if kind == "new_tab":
                return
        c = self.tab
        if kind == "example":
            from app.sessions.recordings import EXAMPLES

            example = self.rng.choice(EXAMPLES)["prompt"]
            self.tally.outcome(
                kind, c.submit(example, DEFAULT_PRESET, *view, api_name="/example").result(timeout=timeout)
            )
            self.has_run = True
        elif kind == "replay":
            self.tally.outcome(kind, c.submit(*view, api_name="/replay").result(timeout=timeout))
        elif kind == "run":
            self.tally.outcome(kind, c.submit(*self.run_args(prompt, tokens), api_name="/run").result(timeout=timeout))
            self.has_run = True
        elif kind == "compare":
            params = c.view_api(return_format="dict", print_info=False)["named_endpoints"]["/compare"]["parameters"]
            args = [p.get("parameter_default") for p in params]
            args[:4] = [prompt, METHODS, DEFAULT_PRESET, tokens]
            if len(args) > 10:
                args[10] = "float32"  # precision
            out = c.submit(*args, api_name="/compare").result(timeout=timeout)
            self.tally.outcome(kind, {"timed_out": out.get("timed_out")} if isinstance(out, dict) else out)
        elif kind == "step":  # one or two Steps, then left paused holding its caches
            for _ in range(self.rng.randint(1, 2)):
                out = c.submit(*self.run_args(prompt, 64), api_name="/step").result(timeout=timeout)
            self.tally.outcome(kind, out)
        elif kind == "save":
            out = c.submit(api_name="/save_run").result(timeout=timeout)
            path = out if isinstance(out, str) else (out or {}).get("path") if isinstance(out, dict) else None
            if path and Path(path).is_file():
                self.saved.append(Path(path))
        elif kind == "upload":
            self.upload()
        elif kind == "load":
            run = handle_file(str(self.rng.choice(self.saved)))
            self.tally.outcome(kind, c.submit(run, *view, api_name="/load_run").result(timeout=timeout))
            self.has_run = True
        elif kind == "view":
            c.submit(*view, api_name="/view").result(timeout=timeout)
        elif kind == "cancel":  # the visitor closes the tab mid-run: the call is cancelled
            job = c.submit(*self.run_args(prompt, self.a.max_tokens), api_name="/run")
            time.sleep(self.rng.uniform(1.0, 5.0))
            job.cancel()
            self.tab = None  # a closed tab is gone; its holdings are the reaper's
        elif kind == "kill":  # a client process killed mid-call
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    KILLED_CLIENT,
                    self.url,
                    self.address,
                    json.dumps(self.run_args(prompt, self.a.max_tokens)),
                ],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            self.children.append(proc)
            time.sleep(self.rng.uniform(4.0, 10.0))  # its import and submit take a few seconds
            proc.kill()
            proc.wait()
            self.children.remove(proc)

    def upload(self) -> None:
        """A raw POST of a saved run to /gradio_api/upload, as a browser's file picker sends it."""
        import httpx

        path = self.rng.choice(self.saved)
        answer = httpx.post(
            self.url + "gradio_api/upload",
            files={"files": (path.name, path.read_bytes())},
            headers={"x-forwarded-for": self.address},
            timeout=self.a.call_timeout,
        )
        if answer.status_code != 200:
            raise RuntimeError(f"upload answered {answer.status_code}: {answer.text[:160]}")

    def choose(self) -> str:
        kinds = [k for k in ACTIONS if self.has_run or k not in ("replay", "save")]
        return self.rng.choices(kinds, weights=[ACTIONS[k] for k in kinds])[0]

    def loop(self) -> None:
        # Visitors arrive over the first think interval, not all at once.
        if self.stop.wait(self.rng.uniform(0, self.a.think[1])):
            return
        while not self.stop.is_set():
            kind = self.choose()
            self.tally.call(kind)
            try:
                self.act(kind)
            except Exception as err:  # noqa: BLE001 - every failure is counted, by kind, and the visitor goes on
                if type(err).__name__ == "AppError":  # the app's own message, e.g. a tab reaped before its save
                    self.tally.refused(kind, str(err))
                else:
                    self.tally.error(kind, f"{type(err).__name__}: {err}")
                    self.tab = None  # start afresh in a new tab, as a visitor reloading the page would
            self.stop.wait(self.rng.uniform(*self.a.think))

    def kill_children(self) -> None:
        for proc in list(self.children):
            proc.kill()
