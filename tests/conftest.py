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
