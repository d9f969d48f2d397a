"""A bounded mixed soak of one `python app.py` on 127.0.0.1: RSS, disk and log against the public-Space limits.

It starts one server as the public-server cases do (scripts/server_harness.py's Server: a free loopback port, its
own Gradio temp folder, $TMPDIR and cache folder), warms it with one short live run and an example, and records its
RSS. Then, for --minutes, N simulated visitors (threads, each from its own X-Forwarded-For address, fixed seed) do a
random mix with think time between calls: replay an example recording (/example) or their own last run (/replay),
short live runs (/run, the default preset and lanes, fp32, a few tokens), short /compare calls, Steps left paused
(/step), /save_run, raw uploads of a saved run (POST /gradio_api/upload), /load_run, /view, disconnects (a /run
cancelled mid-call, or a client process killed mid-call) and new tabs (a fresh client; the old tab's holdings are
left to the reaper). At the end the visitors stop, the soak waits --idle-minutes plus --reap-margin for the reaper,
and prints and writes (as JSON into --out) the server's RSS after start, at its peak and after reaping; the Gradio
temp folders' peak and final size against --disk-cap-mb; the log's bytes; calls and errors by kind; and PASS or FAIL
for each criterion: RSS after reaping within --rss-slack-mb of the after-start figure, the disk within its cap, the
log under --log-limit-mb.

    python scripts/server_soak.py                                   # 30 minutes, 6 visitors
    python scripts/server_soak.py --minutes 2 --visitors 3          # a quick try
    python scripts/server_soak.py --server-args="--max-call-seconds 20 --idle-minutes 2 --disk-cap-mb 64"

(--server-args takes its value after "=" when it starts with "--"; it replaces the default flags, and
--idle-minutes and --disk-cap-mb are read back from it for the reaper wait and the disk criterion.)
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))  # the server and the visitors are modules beside this file

from server_clients import VIEW, saved_run, status_text, step_args  # noqa: E402
from server_harness import Server, folder_mb, rss_mb, server_value  # noqa: E402
from server_soak_visitor import METHODS, Tally, Visitor  # noqa: E402

from poss_core.models.presets import DEFAULT_PRESET  # noqa: E402

# A free Space's shape: the 20 s cap and no call fits of the public-server cases, the Space's token limit and tab
# memory total, a short idle time so the reaper acts within the soak, and a disk cap nearer what the mix writes in
# 30 minutes (with the 10-minute age sweep) than the Space's 2048 MB, and one trusted proxy hop as behind the Space's
# router (each visitor's X-Forwarded-For is then its address). The size sweep under a flood is server_check's disk case.
DEFAULT_SERVER_ARGS = (
    "--max-call-seconds 20 --no-call-fits --max-new-tokens 256 --idle-minutes 2 "
    "--disk-cap-mb 128 --session-memory-mb 4096 --cache-minutes 10 --proxy-hops 1"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The soak's options; `extra` holds the server flags as a list, `idle_minutes` and `disk_cap_mb` read from
    them."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30.0, help="how long the visitors run (default 30)")
    p.add_argument("--visitors", type=int, default=6, help="concurrent simulated visitors (default 6)")
    p.add_argument("--seed", type=int, default=0, help="the visitors' random seed (default 0)")
    p.add_argument(
        "--think", type=float, nargs=2, default=(3.0, 12.0), metavar=("MIN", "MAX"), help="seconds between calls"
    )
    p.add_argument("--max-tokens", type=int, default=24, help="the most new tokens of a live run (default 24)")
    p.add_argument(
        "--server-args", default=DEFAULT_SERVER_ARGS, help=f"app.py's flags (default: {DEFAULT_SERVER_ARGS})"
    )
    p.add_argument("--reap-margin", type=float, default=60.0, help="seconds past --idle-minutes to wait at the end")
    p.add_argument("--rss-slack-mb", type=float, default=1024.0, help="RSS after reaping above the start that passes")
    p.add_argument("--log-limit-mb", type=float, default=5.0, help="the log size that passes (default 5)")
    p.add_argument("--progress", type=float, default=30.0, help="seconds between progress lines (default 30)")
    p.add_argument("--call-timeout", type=float, default=180.0, help="the most seconds to wait for one call")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "soak", help="folder for the JSON (results/soak/)")
    a = p.parse_args(argv)
    if a.minutes <= 0 or a.visitors < 1 or a.think[0] < 0 or a.think[1] < a.think[0]:
        p.error("--minutes must be positive, --visitors at least 1, and 0 <= --think MIN <= MAX")
    a.extra = shlex.split(a.server_args)
    a.idle_minutes = server_value(a.extra, "--idle-minutes", 10.0)
    a.disk_cap_mb = server_value(a.extra, "--disk-cap-mb", 2048.0)
    return a


@dataclass
class Gauges:
    """The server's RSS, its temp folders' size and its log's size, sampled by a monitor thread."""

    rss_start_mb: float = 0.0
    rss_peak_mb: float = 0.0
    rss_end_mb: float = 0.0
    disk_peak_mb: float = 0.0
    disk_end_mb: float = 0.0
    log_bytes: int = 0


def summarize(g: Gauges, tally: Tally | None, a: argparse.Namespace, minutes_run: float) -> dict:
    """The figures and a PASS or FAIL for each criterion, as one JSON-ready dict."""
    rss_grew = g.rss_end_mb - g.rss_start_mb
    criteria = {
        "rss": {
            "pass": rss_grew <= a.rss_slack_mb,
            "rule": f"RSS after reaping within {a.rss_slack_mb:g} MB of the after-start figure",
            "value_mb": round(rss_grew, 1),
        },
        "disk": {
            "pass": g.disk_peak_mb <= a.disk_cap_mb and g.disk_end_mb <= a.disk_cap_mb,
            "rule": f"the Gradio temp folders' peak and final size within the cap, {a.disk_cap_mb:g} MB",
            "value_mb": round(g.disk_peak_mb, 1),
        },
        "log": {
            "pass": g.log_bytes < a.log_limit_mb * 2**20,
            "rule": f"the log under {a.log_limit_mb:g} MB",
            "value_bytes": g.log_bytes,
        },
    }
    return {
        "minutes": round(minutes_run, 2),
        "visitors": a.visitors,
        "seed": a.seed,
        "server_args": a.extra,
        "rss_after_start_mb": round(g.rss_start_mb, 1),
        "rss_peak_mb": round(g.rss_peak_mb, 1),
        "rss_after_reaping_mb": round(g.rss_end_mb, 1),
        "disk_cap_mb": a.disk_cap_mb,
        "disk_peak_mb": round(g.disk_peak_mb, 1),
        "disk_final_mb": round(g.disk_end_mb, 1),
        "log_bytes": g.log_bytes,
        "calls": dict(sorted(tally.calls.items())) if tally else {},
        "errors": dict(sorted(tally.errors.items())) if tally else {},
        "error_samples": tally.samples if tally else {},
        "outcomes": {k: dict(v.most_common(8)) for k, v in sorted(tally.outcomes.items())} if tally else {},
        "criteria": criteria,
        "pass": all(c["pass"] for c in criteria.values()),
    }


def report_lines(s: dict) -> list[str]:
    """The summary as a few printable lines."""
    lines = [
        f"[soak] {s['minutes']:g} min, {s['visitors']} visitors, seed {s['seed']}; server: "
        f"{' '.join(s['server_args'])}",
        f"[soak] RSS {s['rss_after_start_mb']:.0f} MB after start, peak {s['rss_peak_mb']:.0f} MB, "
        f"{s['rss_after_reaping_mb']:.0f} MB after reaping",
        f"[soak] Gradio temp folders: peak {s['disk_peak_mb']:.1f} MB, final {s['disk_final_mb']:.1f} MB, cap "
        f"{s['disk_cap_mb']:g} MB; log {s['log_bytes']:,} bytes",
        f"[soak] calls {s['calls']}; errors {s['errors']}",
    ]
    for kind, said in s["outcomes"].items():
        lines.append(f"[soak]   {kind} said: {said}")
    for kind, texts in s["error_samples"].items():
        lines.append(f"[soak]   {kind}: {texts[0]!r}")
    for name, c in s["criteria"].items():
        lines.append(f"[soak] {'PASS' if c['pass'] else 'FAIL'} {name}: {c['rule']}")
    return lines


def seed_runs(folder: Path) -> None:
    """Two saved runs of the tiny model (about 1 and 2 MB) that visitors upload and load before they save their
    own."""
    for seed, tokens in ((1, 64), (2, 400)):
        saved_run(folder / f"seed-{seed}.jsonl", seed, tokens)


def warm(server, a: argparse.Namespace) -> None:
    """Load the target and the drafts (a short cap may stop the first calls mid-load; what loaded stays loaded)
    and replay one example, so the after-start RSS counts the models."""
    from gradio_client import Client

    from app.sessions.recordings import EXAMPLES

    c = Client(server.url, verbose=False, download_files=False)
    for _ in range(6):
        try:
            out = c.predict(*step_args("Hello", DEFAULT_PRESET, METHODS, 2, "float32"), api_name="/run")
            if "Done" in status_text(out):
                break
        except Exception:  # noqa: BLE001 - stopped at the cap while loading: the next call goes further
            pass
    c.predict(EXAMPLES[0]["prompt"], DEFAULT_PRESET, *VIEW, api_name="/example")


def soak(a: argparse.Namespace) -> dict:
    """Run the soak and return its summary."""
    files = Path(tempfile.mkdtemp(prefix="poss-soak-"))
    print(f"[soak] making two saved runs to upload ({files})", file=sys.stderr)
    seed_runs(files)
    g, tally, stop = Gauges(), Tally(), threading.Event()
    with Server(ROOT, DEFAULT_PRESET, 20.0, a.extra) as server:
        pid = server.proc.pid
        log_path = server.dir / "server.log"

        def disk() -> float:
            for _ in range(5):  # a file the sweep deletes while the folder is walked: walk again
                try:
                    return folder_mb(server.gradio_tmp) + folder_mb(server.tmp)
                except OSError:
                    time.sleep(0.1)
            return 0.0

        warm(server, a)
        time.sleep(3.0)
        g.rss_start_mb = g.rss_peak_mb = rss_mb(pid)
        print(f"[soak] server up on {server.url}; RSS after start {g.rss_start_mb:.0f} MB", file=sys.stderr)
        sampling = threading.Event()

        def monitor() -> None:
            while not sampling.wait(2.0):
                try:
                    g.rss_peak_mb = max(g.rss_peak_mb, rss_mb(pid))
                    g.disk_peak_mb = max(g.disk_peak_mb, disk())
                except OSError:  # the server gone: the end reports it
                    pass

        watcher = threading.Thread(target=monitor, daemon=True)
        watcher.start()
        visitors = [Visitor(i, server.url, a, tally, stop, files) for i in range(a.visitors)]
        threads = [threading.Thread(target=v.loop, daemon=True, name=f"visitor{i}") for i, v in enumerate(visitors)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        end = t0 + a.minutes * 60.0
        while time.monotonic() < end:
            time.sleep(min(a.progress, max(0.0, end - time.monotonic())))
            with tally.lock:
                calls, errors = sum(tally.calls.values()), sum(tally.errors.values())
            rss, used = rss_mb(pid), disk()  # also counted in the peaks the monitor keeps
            g.rss_peak_mb, g.disk_peak_mb = max(g.rss_peak_mb, rss), max(g.disk_peak_mb, used)
            print(
                f"[soak] {(time.monotonic() - t0) / 60:.1f}/{a.minutes:g} min: {calls} calls, {errors} errors; RSS "
                f"{rss:.0f} MB (peak {g.rss_peak_mb:.0f}); disk {used:.1f} MB (peak {g.disk_peak_mb:.1f}); log "
                f"{log_path.stat().st_size:,} bytes",
                file=sys.stderr,
            )
        minutes_run = (time.monotonic() - t0) / 60
        stop.set()
        for v in visitors:
            v.kill_children()
        for t in threads:
            t.join(timeout=a.call_timeout)
        wait = a.idle_minutes * 60.0 + a.reap_margin
        print(f"[soak] visitors stopped; waiting {wait:.0f} s for the reaper", file=sys.stderr)
        waited_until = time.monotonic() + wait
        while time.monotonic() < waited_until:
            time.sleep(min(a.progress, max(0.0, waited_until - time.monotonic())))
            print(f"[soak] reaping: RSS {rss_mb(pid):.0f} MB, disk {disk():.1f} MB", file=sys.stderr)
        sampling.set()
        watcher.join()
        g.rss_end_mb = rss_mb(pid)
        g.rss_peak_mb = max(g.rss_peak_mb, g.rss_end_mb)
        g.disk_end_mb = disk()
        g.disk_peak_mb = max(g.disk_peak_mb, g.disk_end_mb)
        server.log.flush()
        g.log_bytes = log_path.stat().st_size
        log_tail = server.log_text()[-4000:]
    shutil.rmtree(files, ignore_errors=True)
    summary = summarize(g, tally, a, minutes_run)
    summary["log_tail"] = log_tail
    return summary


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    summary = soak(a)
    for line in report_lines(summary):
        print(line)
    a.out.mkdir(parents=True, exist_ok=True)
    out = a.out / f"soak-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}.json"
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"[soak] {'PASS' if summary['pass'] else 'FAIL'}; figures in {out}")
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
