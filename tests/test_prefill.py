"""The prompt is read in chunks with the call's cap checked between them: the same logits, features and cache as
one forward over the prompt, and a stop (or the cap) lands within one chunk."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
import torch

from app.server import limits
from app.sessions import user_settings
from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import PlainDecoder
from poss_core.models.target import causal_allowed
from poss_core.rounds.events import DecodeSummary


def one_shot(target, ids):
    cache = target.new_cache()
    out = target.forward(ids, torch.arange(len(ids)), causal_allowed(len(ids), 0), cache, logits="last")
    return out, cache


@pytest.mark.parametrize("chunk", [1, 7, 64, 299, 300, 512])
def test_a_chunked_prefill_gives_the_one_shot_logits_features_and_cache(tiny_target, chunk):
    ids = torch.randint(0, tiny_target.vocab_size, (300,), generator=torch.Generator().manual_seed(1))
    want, want_cache = one_shot(tiny_target, ids)
    cache = tiny_target.new_cache()
    got = tiny_target.prefill(ids, cache, chunk=chunk)
    assert got.hidden.shape == want.hidden.shape
    assert got.logits.shape == want.logits.shape == (1, tiny_target.vocab_size)
    if chunk >= len(ids):  # one chunk: the very same forward
        assert torch.equal(got.hidden, want.hidden) and torch.equal(got.logits, want.logits)
    # Other chunks: matmuls of other shapes sum in another order, so float rounding only (fp32: about 1e-6).
    torch.testing.assert_close(got.hidden, want.hidden, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-5, atol=1e-5)
    assert int(got.logits.argmax()) == int(want.logits.argmax())
    assert cache.get_seq_length() == want_cache.get_seq_length() == len(ids)
    for a, b in zip(cache.layers, want_cache.layers):
        torch.testing.assert_close(a.keys, b.keys, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(a.values, b.values, rtol=1e-5, atol=1e-5)


class StopAfter(threading.Event):
    """An Event that sets itself at its `n`-th check: a call's cap running out mid-prefill."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.checks = n, 0

    def is_set(self) -> bool:
        self.checks += 1
        if self.checks >= self.n:
            self.set()
        return super().is_set()


def test_a_stop_lands_within_one_chunk_of_the_prompt(tiny_target, monkeypatch):
    ids = torch.randint(0, tiny_target.vocab_size, (300,), generator=torch.Generator().manual_seed(2))
    forwards = []
    real = tiny_target.forward
    monkeypatch.setattr(tiny_target, "forward", lambda *a, **k: forwards.append(len(a[0])) or real(*a, **k))
    cache = tiny_target.new_cache()
    assert tiny_target.prefill(ids, cache, StopAfter(3), chunk=64) is None
    assert forwards == [64, 64]  # two chunks read, then the budget was seen set: the other three never ran
    assert cache.get_seq_length() == 128


def test_a_decode_stopped_while_reading_its_prompt_ends_cancelled(tiny_target):
    config = DecodeConfig(max_new_tokens=8)
    ids = torch.randint(0, tiny_target.vocab_size, (300,), generator=torch.Generator().manual_seed(3)).tolist()
    items = list(PlainDecoder(tiny_target, config).generate(ids, cancel=StopAfter(2)))
    assert len(items) == 1 and isinstance(items[0], DecodeSummary)
    assert items[0].stop_reason == "cancelled" and items[0].token_ids == []
    # Unstopped, the same decode reads its prompt in chunks and runs as before.
    done = list(PlainDecoder(tiny_target, config).generate(ids))
    assert done[-1].stop_reason in ("max_new_tokens", "eos") and len(done[-1].token_ids) >= 1


@pytest.fixture
def slow_per_token(monkeypatch):
    """Every target forward takes 8 ms per token it reads (a prompt read in one forward is as slow as it is long),
    and prompts are read 16 tokens at a time."""
    import time

    from poss_core.models import target as target_module

    real = target_module.TargetModel.forward

    def forward(self, input_ids, *a, **k):
        time.sleep(0.008 * len(input_ids))
        return real(self, input_ids, *a, **k)

    monkeypatch.setattr(target_module.TargetModel, "forward", forward)
    monkeypatch.setattr(target_module, "PREFILL_CHUNK", 16)


@pytest.mark.parametrize("handler", ["run", "step"])
def test_the_cap_holds_inside_the_prefill_of_a_run_and_a_step(slow_per_token, monkeypatch, handler):
    import time

    import page
    import wording
    from app_settings import req, run_settings

    from app.actions import handlers
    from app.sessions import state

    monkeypatch.setattr(limits, "LIMITS", replace(limits.LIMITS, call_s=0.5))
    monkeypatch.setattr(state, "SESSIONS", state.SessionStore(memory_mb=None))
    # About 450 tokens: read in one forward, each of the three lanes would take 3.6 s, 10.8 s in all.
    settings = run_settings(prompt="word " * 88, methods=["plain", "eagle", "poss2"], max_new_tokens=8)
    t0 = time.monotonic()
    if handler == "run":
        out = list(handlers.run_handler(settings, user_settings.View(), request=req(f"cap-{handler}")))[-1]
    else:
        out = handlers.step_handler(settings, user_settings.View(), request=req(f"cap-{handler}"))
    took = time.monotonic() - t0
    # The cap, one 16-token chunk (128 ms) and the drawing, with room for a busy machine: still under one lane's
    # prefill read in one forward (3.6 s), which a cap checked only between lanes would take at least.
    assert took < 0.5 + 1.5, took
    assert wording.says_call_limit(page.status(out).text, 0.5), page.status(out)
