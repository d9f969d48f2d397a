"""scripts/gpu_app_check.py, the GPU check's app half, on the CPU: it reads each lane's badge, status and tokens/s from
/compare's answer, says when a configuration cannot be asked of this /compare, and (slow) serves the tiny-random app
and drives it end to end, writing its JSON and markdown."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_app_check.py"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("gpu_app_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_lane_is_read_as_its_badge_status_and_speed(check):
    answer_lane = {
        "method": "eagle",
        "identical_to_plain": False,
        "stop_reason": "max_new_tokens",
        "error": None,
        "speedup_vs_plain": 1.31,
        "summary": {"tokens_per_s": 80.5, "new_tokens": 64, "tau": 2.7},
    }
    row = check.lane_row(answer_lane)
    assert row == {
        "method": "eagle",
        "identity": "differs",
        "stop_reason": "max_new_tokens",
        "error": None,
        "tokens_per_s": 80.5,
        "speedup_vs_plain": 1.31,
        "new_tokens": 64,
        "tau": 2.7,
    }
    assert check.lane_row({"method": "plain", "identical_to_plain": None})["identity"] == "plain (reference)"
    table = check.markdown(
        [{"config": "bfloat16", "seconds": 1.5, "lanes": [row]}, {"config": "4bit", "note": "not driven: why"}],
        {"device": "GPU", "preset": "p", "command": "app.py", "startup_s": 3, "tokens": 64},
    )
    assert "| bfloat16 | eagle | differs | max_new_tokens | 80.5 | ×1.31 | 1.5 |" in table
    assert "| 4bit | – | – | not driven: why |" in table


def test_a_quantization_is_sent_only_where_compare_takes_it(check):
    assert check.call_values("float16", {"prompt", "precision"}) == {"precision": "float16"}
    assert check.call_values("4bit", {"prompt", "precision"}) is None
    assert check.call_values("4bit", {"prompt", "quantization"}) == {"quantization": "4bit"}
    fitted = {"prompt", "precision", "auto_budget"}  # a server whose /compare fits the tree when asked
    assert check.call_values("float16", fitted) == {"precision": "float16", "auto_budget": True}
    with pytest.raises(SystemExit, match="--configs 'fp8' is unknown"):
        check.call_values("fp8", set())
    assert check.failed({"config": "x", "lanes": [{"error": "RuntimeError: boom"}]})
    assert not check.failed({"config": "x", "timed_out": False, "lanes": [{"error": None}]})


@pytest.mark.slow
def test_the_tiny_app_is_served_and_driven_through_compare(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--preset",
            "tiny-random",
            "--configs",
            "float32,4bit",
            "--max-new-tokens",
            "12",
            "--warmup-tokens",
            "2",
            "--threads",
            "1",
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "app.json").read_text())
    rows = {r["config"]: r for r in report["rows"]}
    lanes = {lane["method"]: lane for lane in rows["float32"]["lanes"]}
    assert set(lanes) == set(report["meta"]["lanes"]) and "plain" in lanes
    assert all(lane["error"] is None and lane["tokens_per_s"] > 0 for lane in lanes.values())
    # float32 on a CPU: every lane reproduces plain decoding token for token
    assert all(lane["identity"] in ("identical", "plain (reference)") for lane in lanes.values())
    if "quantization" not in report["meta"]["compare_parameters"]:
        assert rows["4bit"]["note"].startswith("not driven")
    else:
        assert rows["4bit"]["lanes"]
    assert "| float32 | plain | plain (reference) |" in (tmp_path / "app.md").read_text()
