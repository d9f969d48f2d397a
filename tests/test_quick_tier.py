"""The quick tier leaves a test to the full one only with a quick test that covers the same behaviour
(tests/quick_tier.py): every entry must name tests that exist, and every cover a test that stays quick."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from quick_tier import LEFT_TO_FULL

ROOT = Path(__file__).resolve().parents[1]


def _collected(marker: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", "-m", marker, "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in out.splitlines() if "::" in line]


@pytest.mark.slow
def test_every_test_left_to_the_full_tier_has_a_quick_cover():
    quick, slow = _collected("not slow"), _collected("slow")
    for key, cover in LEFT_TO_FULL.items():
        assert any(n.startswith(key) for n in slow), f"{key} names no test (renamed?)"
        assert not any(n.startswith(key) for n in quick), f"{key} is still in the quick tier"
        assert any(n.startswith(cover) for n in quick), f"{key}'s cover {cover} is not a quick test"
