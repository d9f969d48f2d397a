import json
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
# One thread: tiny models gain nothing from more, and on a busy machine oversubscribed OpenMP threads make a tiny
# training step ten times slower. Tests of the real model ask for more themselves (`real_model_threads`).
torch.set_num_threads(1)

from helpers import trained_draft  # noqa: E402

from poss_core.models.draft import DraftSpec  # noqa: E402
from poss_core.models.tiny import tiny_target as _tiny_target  # noqa: E402


@pytest.fixture(scope="session")
def tiny_target():
    return _tiny_target(seed=0)


@pytest.fixture(scope="session")
def trained_drafts(tiny_target):
    """Drafts that actually get accepted: EAGLE (teacher-forced) and POSS-2 (unrolled over 6 positions)."""
    return {
        "eagle": trained_draft(tiny_target, DraftSpec("eagle", 1)),
        "poss2": trained_draft(tiny_target, DraftSpec("poss", 3, 2), positions=6, steps=80),
    }


@pytest.fixture
def real_model_threads():
    """Up to two torch threads while a test runs the real default model, one again afterwards."""
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    yield
    torch.set_num_threads(1)


@pytest.fixture()
def eval_files(tmp_path):
    """Two tiny eval sets in the shared format: a multi-turn one and a single-turn one."""
    d = tmp_path / "eval"
    d.mkdir()
    rows = {
        "mt_bench": [
            {"question_id": 81, "category": "writing", "turns": ["Write a haiku about rain.", "Now make it rhyme."]},
            {"question_id": 82, "category": "writing", "turns": ["Name three colors.", "Which is warmest?"]},
            {"question_id": 83, "category": "writing", "turns": ["Say hi.", "Say bye."]},
        ],
        "qa": [
            {"question_id": 1, "category": "qa", "turns": ["Who wrote Hamlet?"]},
            {"question_id": 2, "category": "qa", "turns": ["What is 2 + 2?"]},
        ],
    }
    for name, items in rows.items():
        (d / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
    return d


QUICK_TIER_WORKERS = 2  # processes the quick tier runs on where the machine has the cores (pytest-xdist)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """The quick tier (`-m "not slow"`) runs on QUICK_TIER_WORKERS processes where there are as many cores and
    pytest-xdist is installed, unless `-n` says otherwise: its tests use one torch thread each, so two cores run it in
    about half the time. The full tier stays in one process (its servers and browsers time themselves)."""
    if (
        config.option.markexpr == "not slow"
        and config.pluginmanager.hasplugin("xdist")
        and getattr(config.option, "numprocesses", None) is None
        and not os.environ.get("PYTEST_XDIST_WORKER")
        and not config.getvalue("collectonly")
        and (os.cpu_count() or 1) >= QUICK_TIER_WORKERS
    ):
        config.option.numprocesses = QUICK_TIER_WORKERS


def pytest_collection_modifyitems(config, items):
    """Mark slow what the quick tier leaves to the full one (tests/quick_tier.py, each with its quick cover)."""
    from quick_tier import left_to_full

    for item in items:
        if left_to_full(item.nodeid):
            item.add_marker(pytest.mark.slow)
