"""The draft's decoding matmuls with weights packed once for oneDNN (`PackedLinear`): the same numbers as `F.linear`
where they are packed (bf16 on a CPU), `F.linear` itself everywhere else, and repacked when a weight changes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from poss_core.decoding.tree import build_tree
from poss_core.models.draft import DraftKV, DraftState
from poss_core.models.loading import random_draft
from poss_core.models.packed_linear import PackedLinear, packing_supported
from poss_core.models.target import causal_allowed, float_mask

needs_onednn = pytest.mark.skipif(
    not packing_supported(torch.zeros(1, 1, dtype=torch.bfloat16)),
    reason="this torch build has no oneDNN packed linear",
)


@needs_onednn
def test_packed_bf16_linear_gives_f_linears_numbers_for_any_row_count():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(96, 40, generator=g).bfloat16()
    b = torch.randn(96, generator=g).bfloat16()
    lin = PackedLinear(w, b)
    assert lin.packed is not None
    with torch.inference_mode():
        for shape in [(40,), (1, 40), (3, 40), (8, 40), (2, 5, 40), (0, 40)]:
            x = torch.randn(*shape, generator=g).bfloat16()
            out = lin(x)
            assert out.shape == (*shape[:-1], 96)
            assert torch.equal(out, F.linear(x, w, b)), shape


def test_fp32_weights_and_autograd_keep_f_linear():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(16, 8, generator=g)
    lin = PackedLinear(w, None)
    assert lin.packed is None  # fp32 is not packed: oneDNN's packed fp32 path is slower for one row
    x = torch.randn(3, 8, generator=g)
    assert torch.equal(lin(x), F.linear(x, w))
    if packing_supported(w.bfloat16()):
        packed = PackedLinear(w.bfloat16())
        xb = x.bfloat16().requires_grad_(True)
        y = packed(xb)  # with autograd on, the plain path (the packed op has no backward)
        y.sum().backward()
        assert xb.grad is not None


@needs_onednn
def test_a_bf16_draft_decodes_with_packed_weights_and_repacks_after_a_weight_change(tiny_target):
    """A bf16 draft's decoding path uses packed weights, computes what the transformers layers compute (to bf16
    rounding), checks its weights once per tree, and sees an in-place update of a weight (a training step)."""
    from transformers import DynamicCache

    draft = random_draft(tiny_target, "poss2", depth=6).to(torch.bfloat16)
    draft.head_weight = draft.head_weight.bfloat16()
    weights = draft.decode_weights()
    assert weights["fc"].packed is not None and all(f["qkv"].packed is not None for f in weights["layers"])
    g = torch.Generator().manual_seed(2)
    h, ctx = draft.config.hidden_size, 9
    tokens = torch.randint(0, 90, (1, ctx), generator=g)
    feats = torch.randn(1, ctx, h, generator=g).bfloat16()
    pos = torch.arange(ctx)[None]
    allowed = causal_allowed(ctx, 0)
    with torch.inference_mode():
        slow = draft.run_specialist(0, tokens, feats, pos, float_mask(allowed, feats.dtype), DynamicCache())
        fast = draft.run_specialist(0, tokens, feats, pos, allowed, DraftKV(len(draft.layers)))
    assert torch.allclose(slow.float(), fast.float(), atol=0.05, rtol=0.05)

    with torch.no_grad():
        draft.layers[0].mlp.down_proj.weight.mul_(2.0)  # in place, as an optimizer step does
    after = draft.decode_weights()["layers"][0]
    assert after is not weights["layers"][0]
    assert torch.equal(after["down"].weight, draft.layers[0].mlp.down_proj.weight)
    head = draft.packed_head()
    assert draft.packed_head() is head  # packed once while the head stays as it is
    draft.head_weight = draft.head_weight.clone()  # rebound, as `bind_target` does
    assert draft.packed_head() is not head
    assert draft.packed_head().weight.data_ptr() == draft.head_weight.data_ptr()

    # A tree drafts with the weights checked once, and leaves none pinned afterwards.
    state = DraftState(draft)
    state.add_rows(tokens[0], feats[0])
    with torch.inference_mode():
        tree = build_tree(draft, state, depth=4, top_k=3, tree_budget=10)
    assert tree.size == 9 and state.cache.weights is None
