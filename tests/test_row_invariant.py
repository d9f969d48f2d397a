"""Row-invariant attention: a row's logits and features are the same bits alone (a plain step), in prompt chunks, and
as a tree node among siblings it does not see, in every CPU precision; so every greedy lane is plain decoding's
output token for token, and the identity check calls any difference a mismatch."""

import pytest
import torch
from helpers import greedy_reference

from poss_core.base.errors import ConfigError
from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import PlainDecoder, SpeculativeDecoder, encode_prompt
from poss_core.models import row_invariant
from poss_core.models.invariance import invariance
from poss_core.models.loading import random_draft
from poss_core.models.numerics import MISMATCH, classify_divergence, target_numerics
from poss_core.models.target import TargetModel
from poss_core.models.tiny import tiny_target
from poss_core.results.analysis import classify_mismatches
from poss_core.rounds.events import DecodeSummary

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(scope="module", params=DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def target(request) -> TargetModel:
    t = tiny_target(seed=3, dtype=request.param, layers=2)
    assert t.attention == row_invariant.NAME
    return t


def test_a_row_is_the_same_bits_alone_in_chunks_and_among_tree_siblings(target):
    # 150 rows: past MARGIN + BLOCK, so rows read whole head blocks and a chunk spans several head lengths.
    cases = invariance(target, length=150, prefix=101)
    assert [c.name for c in cases if not c.exact] == []
    assert sum(c.rows for c in cases if c.name.startswith("tree")) >= 6


def test_every_greedy_lane_is_plain_decoding_token_for_token(target):
    for kind in ("eagle", "poss2"):
        draft = random_draft(target, kind, depth=6)
        for prompt in ("Hi there, how are you?", "Write a poem about the sea."):
            ids = encode_prompt(target.tokenizer, prompt)
            runs = []
            for decoder in (
                PlainDecoder(target, DecodeConfig(max_new_tokens=48)),
                SpeculativeDecoder(target, draft, DecodeConfig(max_new_tokens=48, tree_budget=24)),
            ):
                *_, summary = decoder.generate(ids)
                assert isinstance(summary, DecodeSummary)
                runs.append(summary.token_ids)
            assert runs[0] == runs[1], f"{kind} on {prompt!r}"
            # transformers' own generate too: its one-row steps are padded like the engine's.
            assert greedy_reference(target, ids, 48) == runs[0], f"generate on {prompt!r}"


def test_row_invariant_numerics_are_exact_on_a_cpu_and_call_any_divergence_a_mismatch(target):
    numerics = target.numerics
    assert numerics.exact and numerics.tolerance == 0
    tiny_margin = classify_divergence(5, 1e-6, numerics)
    assert tiny_margin.kind == MISMATCH and "no rounding explains it" in tiny_margin.reason


def test_sdpa_stays_available_and_keeps_the_rounding_tolerance_in_half_precision():
    fast = tiny_target(seed=3, dtype=torch.bfloat16, layers=2)
    fast = TargetModel(fast.model, fast.tokenizer, attention="sdpa")
    assert fast.attention == "sdpa"
    assert not fast.numerics.exact and fast.numerics.tolerance > 0
    with pytest.raises(ConfigError, match="row-invariant or sdpa"):
        TargetModel(fast.model, fast.tokenizer, attention="flash")


def test_the_benchmark_counts_a_near_tie_of_an_exact_lane_as_a_mismatch():
    entry = {"method": "eagle", "run": 0, "dataset": "d", "question_id": 1, "turn": 0, "index": 3, "got": 7}
    identity = {"reference": "plain", "checked": 2, "mismatches": [{**entry, "margin": 0.01}]}
    assert classify_mismatches(dict(identity), 0.5, "bfloat16")["near_ties"]  # sdpa: a near-tie
    strict = classify_mismatches(dict(identity), target_numerics("cpu", torch.bfloat16, row_invariant=True).tolerance)
    assert not strict["near_ties"] and strict["mismatches"][0]["kind"] == "mismatch"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_the_kernel_facts_the_construction_relies_on(dtype):
    """torch's CPU matmul gives every row of a call padded by row_invariant.padded_rows the bits it gets among 300
    rows, and its last-dim softmax the same values whatever the other rows and trailing masked keys. If a torch
    upgrade breaks one of these, this says which."""
    gen = torch.Generator().manual_seed(2)
    a, b = torch.randn(300, 576, generator=gen).to(dtype), torch.randn(576, 200, generator=gen).to(dtype)
    ref = a @ b
    for m in range(1, 40):
        rows = row_invariant.padded_rows(m, dtype)
        got = torch.cat([a[:m], a[m - 1 : m].expand(rows - m, -1)]) @ b
        assert torch.equal(got[:m], ref[:m]), f"{m} rows padded to {rows}"
    s = torch.randn(50, 90, generator=gen)
    masked = torch.cat([s, torch.full((50, 40), float("-inf"))], dim=-1)
    assert torch.equal(torch.softmax(masked, -1)[:3, :90], torch.softmax(s[:3], -1))
