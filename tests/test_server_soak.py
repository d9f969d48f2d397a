"""scripts/server_soak.py's options and verdicts, without a server."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("server_soak", ROOT / "scripts" / "server_soak.py")
soak = importlib.util.module_from_spec(_spec)
sys.modules["server_soak"] = soak  # its dataclasses look their module up by name
_spec.loader.exec_module(soak)


def test_defaults_are_a_space_like_half_hour():
    a = soak.parse_args([])
    assert (a.minutes, a.visitors, a.seed) == (30.0, 6, 0)
    assert a.extra[:2] == ["--max-call-seconds", "20"]
    assert a.idle_minutes == 2.0 and a.disk_cap_mb == 128.0
    assert a.out == ROOT / "results" / "soak"


def test_server_args_replace_the_defaults_and_feed_the_reaper_wait_and_the_cap():
    a = soak.parse_args(["--minutes", "2", "--visitors", "3", "--server-args=--idle-minutes=0.5 --disk-cap-mb 64"])
    assert (a.minutes, a.visitors) == (2.0, 3)
    assert a.extra == ["--idle-minutes=0.5", "--disk-cap-mb", "64"]
    assert (a.idle_minutes, a.disk_cap_mb) == (0.5, 64.0)
    # Without the flags, the app's own defaults count.
    a = soak.parse_args(["--server-args=--no-call-fits"])
    assert (a.idle_minutes, a.disk_cap_mb) == (10.0, 2048.0)


@pytest.mark.parametrize("argv", [["--minutes", "0"], ["--visitors", "0"], ["--think", "5", "2"]])
def test_bad_options_are_refused(argv):
    with pytest.raises(SystemExit):
        soak.parse_args(argv)


def _gauges(start: float, end: float, disk_peak: float, log_bytes: int):
    return soak.Gauges(
        rss_start_mb=start,
        rss_peak_mb=max(start, end) + 500,
        rss_end_mb=end,
        disk_peak_mb=disk_peak,
        disk_end_mb=1.0,
        log_bytes=log_bytes,
    )


def test_summary_passes_within_every_bound():
    a = soak.parse_args([])
    tally = soak.Tally()
    tally.call("run")
    tally.call("run")
    tally.error("run", "TimeoutError:   no\n answer")
    s = soak.summarize(_gauges(1000, 1900, 100, 4 * 2**20), tally, a, 30.0)
    assert s["pass"] and all(c["pass"] for c in s["criteria"].values())
    assert s["calls"] == {"run": 2} and s["errors"] == {"run": 1}
    assert s["error_samples"] == {"run": ["TimeoutError: no answer"]}
    lines = soak.report_lines(s)
    assert any(line.startswith("[soak] PASS rss") for line in lines)


@pytest.mark.parametrize(
    ("gauges", "failed"),
    [
        ((1000, 2100, 100, 100), "rss"),
        ((1000, 1000, 129, 100), "disk"),
        ((1000, 1000, 100, 5 * 2**20), "log"),
    ],
)
def test_summary_fails_the_criterion_that_is_broken(gauges, failed):
    s = soak.summarize(_gauges(*gauges), soak.Tally(), soak.parse_args([]), 30.0)
    assert not s["pass"]
    assert [name for name, c in s["criteria"].items() if not c["pass"]] == [failed]
    assert f"[soak] FAIL {failed}: " in "\n".join(soak.report_lines(s))
