"""A class on one server, measured: starts `python app.py` on 127.0.0.1 (a free port, its own temp and cache folders:
scripts/server_harness.py's Server) and lets N students (gradio_client clients, one thread each, arriving over
--spread seconds) each open the app's API, replay an example (/example: its bundled recording), start one short live
run of the same prompt (/run) and read the pooled charts ("everyone on this server", /view). Loopback only; bounded
by --students (at most 64) and --timeout.

It prints: time to the first replayed round (p50, p95) and how many replays began while live runs were decoding;
queue wait (submit to the first frame past "Waiting for a live slot") and end-to-end time of the live runs (p50,
p95), with the first estimate each waiting run was shown against its real wait; what the pooled charts said; the
server's peak memory; unexpected errors (each listed); and the server's CPU once every call has ended.

    python scripts/class_load.py                # 30 students arriving over 30 s, tiny-random, 16 new tokens
    nice -n 19 python scripts/class_load.py --preset smollm2-135m --students 30 --max-new-tokens 16
    python scripts/class_load.py --students 8 --server-args="--concurrency 2"
    python scripts/class_load.py --replay-cost                     # the CPU one example replay costs the server
    python scripts/class_load.py --phase-cost [--preset smollm2-135m]   # each step of one student, in server CPU
"""

from __future__ import annotations

import argparse
import random
import re
import shlex
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import server_harness  # noqa: E402  (the same loopback server the public-server cases start)

from poss_core.models.presets import DEFAULT_PRESET  # noqa: E402

MAX_STUDENTS = 64
VIEW = ["draft position", False, "conditional (POSS pos-acc)"]
WAITING = "Waiting for a live slot"


@dataclass
class Results:
    """What the students saw, gathered across their threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    first_replay: list[float] = field(default_factory=list)
    replay_began: list[float] = field(default_factory=list)  # monotonic time each replay was submitted
    queue_wait: list[float] = field(default_factory=list)
    end_to_end: list[float] = field(default_factory=list)
    live_spans: list[tuple[float, float]] = field(default_factory=list)  # (first decoding frame, end) of each run
    estimates: list[tuple[float, float]] = field(default_factory=list)  # (estimate shown, the wait really left)
    most_in_line: int = 0
    charts: list[str] = field(default_factory=list)  # the pos-acc chart's title each student read
    errors: list[str] = field(default_factory=list)

    def add(self, name: str, value) -> None:
        with self.lock:
            getattr(self, name).append(value)


def percentile(values: list[float], q: float) -> float:
    """The q-th quantile (nearest rank) of `values`; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run_args(prompt: str, preset: str, max_new_tokens: int) -> list:
    """/run's inputs: the app's default lanes and tree for the preset, at the precision the app starts with."""
    from app.sessions.state import default_lanes
    from app.sessions.user_settings import APP_SETTINGS
    from app.views.control_defaults import initial_precision, ui_defaults
    from poss_core.base import settings
    from poss_core.models.hardware import cpu_bf16_units, cuda_available
    from poss_core.models.presets import get_preset

    p = get_preset(preset)
    d = ui_defaults(p)
    lanes = default_lanes(p)
    precision = initial_precision("auto", cuda_available(), cpu_bf16_units())
    values = {**settings.defaults(APP_SETTINGS), **d, "max_new_tokens": max_new_tokens, "precision": precision}
    return [prompt, False, preset, lanes] + [values[n] for n in APP_SETTINGS] + VIEW + ["this run"]


def _status(frame) -> str:
    return str(frame[0]) if isinstance(frame, (list, tuple)) and frame else str(frame)


def student(url: str, i: int, a, res: Results) -> None:
    """One student: open the API, replay example i % 6, run the same prompt live, read the class charts."""
    from gradio_client import Client

    from app.sessions.recordings import EXAMPLES

    prompt = EXAMPLES[i % len(EXAMPLES)]["prompt"]
    try:
        c = Client(url, verbose=False)
    except Exception as err:  # noqa: BLE001
        res.add("errors", f"student {i} could not open the API: {type(err).__name__}: {err}")
        return
    # 1. The example replays its recording.
    t0 = time.monotonic()
    res.add("replay_began", t0)
    try:
        job = c.submit(prompt, a.preset, *VIEW, "this run", api_name="/example")
        first = None
        for frame in job:
            if first is None and "Replaying" in _status(frame):
                first = time.monotonic() - t0
                res.add("first_replay", first)
        final = _status(job.outputs()[-1]) if job.outputs() else ""
        if first is None or "Replay finished" not in final:
            res.add("errors", f"student {i} replay: {final[:160]}")
    except Exception as err:  # noqa: BLE001
        res.add("errors", f"student {i} replay: {type(err).__name__}: {str(err)[:160]}")
    # 2. One short live run of the same prompt.
    t0 = time.monotonic()
    try:
        job = c.submit(*run_args(prompt, a.preset, a.max_new_tokens), api_name="/run")
        started, shown = None, []  # shown: (when, the estimate) of each waiting frame
        for frame in job:
            status = _status(frame)
            if WAITING in status:
                place = re.search(r"(\d+)(?:st|nd|rd|th) in line", status)
                if place:
                    with res.lock:
                        res.most_in_line = max(res.most_in_line, int(place.group(1)))
                found = re.search(r"about (\d+) s to go", status)
                if found:
                    shown.append((time.monotonic(), float(found.group(1))))
            elif started is None:
                started = time.monotonic()
        end = time.monotonic()
        final = _status(job.outputs()[-1]) if job.outputs() else ""
        if "Done" not in final:
            res.add("errors", f"student {i} live run: {re.sub('<[^>]+>', '', final)[:200]}")
        else:
            wait = (started or end) - t0
            res.add("queue_wait", wait)
            res.add("end_to_end", end - t0)
            res.add("live_spans", (started or end, end))
            for when, estimate in shown:  # each estimate against the wait that was really left then
                res.add("estimates", (estimate, (started or end) - when))
    except Exception as err:  # noqa: BLE001
        res.add("errors", f"student {i} live run: {type(err).__name__}: {str(err)[:160]}")
    # 3. The class's pooled charts.
    try:
        out = c.predict(*VIEW, "everyone on this server", api_name="/view")
        charts = " ".join(str(x) for x in out if "Position-wise acceptance" in str(x))
        title = re.search(r"Everyone on this server[^\"\\]*", charts)
        sizes = re.findall(r"(\w[\w-]*) n=(\d+)", charts)
        if not title or not sizes:
            res.add("errors", f"student {i} class charts: no pooled title or sample size")
        else:
            res.add("charts", f"{title.group(0)} | " + ", ".join(f"{m} n={n}" for m, n in sizes[:3]))
    except Exception as err:  # noqa: BLE001
        res.add("errors", f"student {i} class charts: {type(err).__name__}: {str(err)[:160]}")


def run_class(a) -> dict:
    """Start the server, let the students in, and return the figures (also printed)."""
    from gradio_client import Client

    extra = ["--queue-size", "256", "--class-reset-key", "load-check", *a.extra]
    with server_harness.Server(ROOT, a.preset, a.cap, extra, threads=a.threads) as server:
        warm = Client(server.url, verbose=False)  # loads the target and the drafts: not a student's wait
        warm.predict(*run_args("Hello", a.preset, 2), api_name="/run")
        warm.predict("wrong", *VIEW, "this run", api_name="/class_reset")
        warm.predict("load-check", *VIEW, "this run", api_name="/class_reset")  # the warm-up's run is not counted
        base_mb = server_harness.peak_rss_mb(server.proc.pid, "VmRSS")
        cpu0 = server_harness.cpu_seconds(server.proc.pid)
        res = Results()
        rng = random.Random(0)
        t0 = time.monotonic()
        threads = []
        for i in range(a.students):
            t = threading.Thread(target=student, args=(server.url, i, a, res), daemon=True)
            threads.append(t)
            threading.Timer(rng.uniform(0, a.spread), t.start).start()
        deadline = t0 + a.timeout
        time.sleep(a.spread + 0.1)
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        wall = time.monotonic() - t0
        cpu = server_harness.cpu_seconds(server.proc.pid) - cpu0
        stuck = sum(t.is_alive() for t in threads)
        if stuck:
            res.errors.append(f"{stuck} student(s) still going after --timeout {a.timeout:g} s")
        idle_cpu_s, settled_s = server.settle()
        peak = server_harness.peak_rss_mb(server.proc.pid)
        log = server.log_text()
    busy = [b for b in res.replay_began if any(s <= b <= e for s, e in res.live_spans)]
    est_err = [abs(e - w) for e, w in res.estimates]
    figures = {
        "students": a.students,
        "wall_s": wall,
        "server_cpu_s": cpu,
        "first_replay_p50": percentile(res.first_replay, 0.5),
        "first_replay_p95": percentile(res.first_replay, 0.95),
        "first_replay_max": max(res.first_replay, default=float("nan")),
        "replays": len(res.first_replay),
        "replays_while_busy": len(busy),
        "queue_wait_p50": percentile(res.queue_wait, 0.5),
        "queue_wait_p95": percentile(res.queue_wait, 0.95),
        "end_to_end_p50": percentile(res.end_to_end, 0.5),
        "end_to_end_p95": percentile(res.end_to_end, 0.95),
        "live_runs": len(res.end_to_end),
        "most_in_line": res.most_in_line,
        "estimate_error_p50": percentile(est_err, 0.5),
        "estimates": len(est_err),
        "waited_left_p50": percentile([w for _, w in res.estimates], 0.5),
        "charts_read": len(res.charts),
        "last_chart": res.charts[-1] if res.charts else "",
        "peak_mb": peak,
        "base_mb": base_mb,
        "errors": list(res.errors),
        "idle_cpu_percent": 100.0 * idle_cpu_s,
        "settled_s": settled_s,
        "settled": idle_cpu_s < server_harness.IDLE_CPU_S,
        "tracebacks": log.count("Traceback"),
    }
    print_figures(figures, a)
    return figures


def print_figures(f: dict, a) -> None:
    print(
        f"[class] {f['students']} students on {a.preset} ({a.max_new_tokens} new tokens per live run, arrivals over "
        f"{a.spread:g} s, server --threads {a.threads} {' '.join(a.extra)}): {f['wall_s']:.1f} s in all; the "
        f"server used {f['server_cpu_s']:.1f} CPU-seconds meanwhile ({f['server_cpu_s'] / f['wall_s']:.2f} cores)"
    )
    print(
        f"  first replayed round: p50 {f['first_replay_p50']:.2f} s, p95 {f['first_replay_p95']:.2f} s, max "
        f"{f['first_replay_max']:.2f} s ({f['replays']} replays, {f['replays_while_busy']} begun while a live run "
        f"was decoding)"
    )
    print(
        f"  live runs: {f['live_runs']} done; queue wait p50 {f['queue_wait_p50']:.1f} s, p95 "
        f"{f['queue_wait_p95']:.1f} s; end to end p50 {f['end_to_end_p50']:.1f} s, p95 {f['end_to_end_p95']:.1f} s; "
        f"most in line {f['most_in_line']}; each wait estimate shown vs the wait really left: median miss "
        f"{f['estimate_error_p50']:.1f} s (median wait left {f['waited_left_p50']:.1f} s) over {f['estimates']} "
        f"estimates"
    )
    print(f"  pooled charts read by {f['charts_read']} students; the last read: {f['last_chart'][:200]}")
    print(f"  server memory: peak RSS {f['peak_mb']:.0f} MB ({f['base_mb']:.0f} MB after the warm-up run)")
    print(f"  errors: {len(f['errors'])} unexpected; tracebacks in the server's log: {f['tracebacks']}")
    for line in f["errors"][:10]:
        print(f"    {line}")
    state = "nothing left running" if f["settled"] else "something is still running"
    print(
        f"  after the last call: server CPU {f['idle_cpu_percent']:.0f}% in the second that ended "
        f"{f['settled_s']:.0f} s after it ({state})"
    )


def replay_cost() -> None:
    """In this process, no server: each example's replay through the handler at its recorded timing, the CPU it
    costs the server (drawing every frame) and the CPU before its first frame."""
    import torch

    from app.actions import handlers
    from app.sessions import recordings, user_settings

    torch.set_num_threads(1)
    view = user_settings.View()
    rows = []
    for i, example in enumerate(recordings.EXAMPLES):
        request = type("Request", (), {"session_hash": f"replay-cost-{i}"})()
        recordings.recording_for(i, DEFAULT_PRESET)  # read once, as the server keeps it
        c0, t0 = time.process_time(), time.monotonic()
        frames = handlers.example_handler(example["prompt"], DEFAULT_PRESET, view, request=request)
        next(frames)
        first_cpu = time.process_time() - c0
        n = 1 + sum(1 for _ in frames)
        rows.append((time.process_time() - c0, first_cpu, time.monotonic() - t0, n))
    cpu = [r[0] for r in rows]
    print(
        f"[replay cost] {len(rows)} example replays at their recorded timing: {statistics.fmean(cpu):.2f} CPU-s of "
        f"drawing each (max {max(cpu):.2f}) over {statistics.fmean(r[2] for r in rows):.1f} s and "
        f"{statistics.fmean(r[3] for r in rows):.0f} frames; {1000 * statistics.fmean(r[1] for r in rows):.0f} ms of "
        f"CPU before the first frame"
    )


def phase_cost(a) -> None:
    """One student alone on a fresh server, each step's server CPU-seconds (what a class of N costs, N times over,
    whatever else the machine is doing): opening the API, replaying an example, one live run, reading the charts."""
    from gradio_client import Client

    from app.sessions.recordings import EXAMPLES

    with server_harness.Server(
        ROOT, a.preset, a.cap, ["--class-reset-key", "load-check", *a.extra], threads=a.threads
    ) as server:
        Client(server.url, verbose=False).predict(*run_args("Hello", a.preset, 2), api_name="/run")  # warm-up
        pid, prompt, costs = server.proc.pid, EXAMPLES[0]["prompt"], {}

        def step(name, fn):
            c0, t0 = server_harness.cpu_seconds(pid), time.monotonic()
            out = fn()
            costs[name] = (server_harness.cpu_seconds(pid) - c0, time.monotonic() - t0)
            return out

        c = step("open the API", lambda: Client(server.url, verbose=False))
        step("replay an example", lambda: c.predict(prompt, a.preset, *VIEW, "this run", api_name="/example"))
        step(
            f"live run ({a.max_new_tokens} tokens)",
            lambda: c.predict(*run_args(prompt, a.preset, a.max_new_tokens), api_name="/run"),
        )
        step("read the class charts", lambda: c.predict(*VIEW, "everyone on this server", api_name="/view"))
    print(
        f"[phase cost] one student on {a.preset}, server CPU-seconds (wall seconds): "
        + "; ".join(f"{name} {cpu:.2f} ({wall:.1f})" for name, (cpu, wall) in costs.items())
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python scripts/class_load.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--students", type=int, default=30, help=f"simulated students, 1 to {MAX_STUDENTS} (default 30)")
    p.add_argument(
        "--preset",
        default="tiny-random",
        help=f"the server's preset: tiny-random (default) or {DEFAULT_PRESET} (the real default model)",
    )
    p.add_argument("--max-new-tokens", type=int, default=16, help="new tokens of each live run (default 16)")
    p.add_argument("--spread", type=float, default=30.0, help="students arrive over this many seconds (default 30)")
    p.add_argument("--threads", type=int, default=1, help="the server's torch threads (default 1)")
    p.add_argument("--cap", type=float, default=300.0, help="the server's --max-call-seconds (default 300)")
    p.add_argument("--timeout", type=float, default=900.0, help="the most seconds the students get (default 900)")
    p.add_argument("--server-args", default="", help='more app.py flags, e.g. --server-args="--concurrency 2"')
    p.add_argument(
        "--replay-cost",
        action="store_true",
        help="instead: in this process, the CPU each example's replay costs the server (no students)",
    )
    p.add_argument(
        "--phase-cost",
        action="store_true",
        help="instead: one student alone, the server CPU-seconds of each of its steps",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if not 1 <= a.students <= MAX_STUDENTS:
        build_parser().error(f"--students {a.students}: use 1 to {MAX_STUDENTS}.")
    if not 0 < a.timeout <= 3600 or a.spread < 0:
        build_parser().error("--timeout: more than 0 and at most 3600 s; --spread: 0 or more.")
    if a.replay_cost:
        replay_cost()
        return 0
    a.extra = shlex.split(a.server_args)
    if a.phase_cost:
        phase_cost(a)
        return 0
    figures = run_class(a)
    return 0 if not figures["errors"] and figures["live_runs"] == a.students else 1


if __name__ == "__main__":
    raise SystemExit(main())
