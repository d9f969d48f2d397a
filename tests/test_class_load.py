"""The class load tool (scripts/class_load.py) with 8 students on a real `python app.py --preset tiny-random` on
loopback: every student replays an example, runs the same prompt live and reads the pooled charts; no unexpected
error, replays start quickly while live runs take turns, and nothing keeps running afterwards."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("class_load", ROOT / "scripts" / "class_load.py")
class_load = importlib.util.module_from_spec(_spec)
sys.modules["class_load"] = class_load  # its dataclasses look their module up by name
_spec.loader.exec_module(class_load)

pytestmark = pytest.mark.slow


@pytest.mark.timeout(400)
def test_eight_students_on_one_server():
    a = class_load.build_parser().parse_args(["--students", "8", "--spread", "4", "--timeout", "300"])
    a.extra = []
    f = class_load.run_class(a)
    assert f["errors"] == [] and f["tracebacks"] == 0
    assert f["replays"] == 8 and f["live_runs"] == 8 and f["charts_read"] == 8
    # The goal is under 1 s. On a shared machine whose other work starves the server, the bound is relative: a
    # replay never waits the way a live run in line does.
    assert f["first_replay_p95"] < max(5.0, 0.5 * f["end_to_end_p95"]), f
    assert "Everyone on this server (tiny-random)" in f["last_chart"] and "EAGLE n=" in f["last_chart"]
    assert f["settled"], f"the server kept working {f['settled_s']:.0f} s after every call ended"
