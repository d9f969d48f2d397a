"""Row-invariant attention: a row's output is the same bits whether it is computed alone (a plain decoding step), in a
prompt chunk, or as a draft-tree node among siblings it must not see, so greedy speculative decoding reproduces plain
decoding exactly in bfloat16 and float16, not only in float32.

Why the stock kernels are not. A reduction's rounding depends on its order, and SDPA's (and eager attention's softmax
and weighted sum) change with the number of keys in the call and with where a row's visible keys sit among masked
ones: a tree node's ancestors lie between siblings it does not see, at other slots than plain decoding has them. In
bf16 that moves a logit enough to flip a near-tie (the batch invariance of Thinking Machines'
"Defeating Nondeterminism in LLM Inference", 2025; vLLM's batch-invariant mode and SGLang's deterministic inference
follow it on GPUs).

What this attention does instead. A row at absolute position p sees keys 0..p, and every row of every call splits
them the same way, by p alone: a *head* of whole blocks, positions [0, H(p)) with H(p) = BLOCK * floor((p - MARGIN)
/ BLOCK), read straight from the cache (a tree's committed prefix: MARGIN exceeds any tree depth, so the head never
holds a tree node), and a *tail*, positions [H(p), p] in plain decoding's order (a tree node's committed prefix then its
ancestors, gathered by rank among the keys it sees), padded to TAIL keys. Scores of the head and the tail are
concatenated into one row of H(p) + TAIL entries, so the softmax (one row-local kernel) sees the same values in the
same places in every call; the weighted sum is one matmul over the head and one over the tail. Measured on a CPU
(tests/test_row_invariant.py): torch's bf16/fp16 matmuls give a row the same bits whatever the number of rows or
batches beside it, and so does its last-dim softmax whatever the rows and trailing masked keys, which is what the
construction relies on; the tests check the whole forward bit for bit.

On a GPU the same construction is necessary but not sufficient: cuBLAS picks split-K and tile shapes by the problem
size, so the matmuls here (and the model's linear layers) need fixed-tile kernels as well (vLLM's batch-invariant
ops); `scripts/gpu_check.sh` measures whether identity holds there."""

from __future__ import annotations

import os
import threading
from functools import partial

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import eager_mask

from ..base.errors import ConfigError

NAME = "row_invariant"
# What a target's attention can be: this module's, or transformers' own fused kernel (faster, not row-invariant).
ATTENTIONS = (NAME, "sdpa")
BLOCK = 32  # the head grows in whole blocks of this many keys: a boundary every BLOCK positions
MARGIN = 32  # the tail's shortest span: more than any draft-tree depth, so a tree node's head is committed prefix
TAIL = BLOCK + MARGIN  # keys in a tail row (positions [H(p), p], then masked padding)


def padded_rows(rows: int, dtype: torch.dtype) -> int:
    """How many rows a matmul of `rows` rows is given so each row gets the bits it would get among many: torch's CPU
    bf16/fp16 matmul rounds a lone row differently (a vector path), and its float32 one rounds the last rows of a
    call of under 12 rows differently unless they fill whole blocks of 4 (measured in tests/test_row_invariant.py)."""
    if dtype == torch.float32:
        return rows if rows >= 12 else max(4, -(-rows // 4) * 4)
    return max(rows, 2)


def head_length(position: torch.Tensor) -> torch.Tensor:
    """H(p): how many keys from position 0 a row at `position` reads straight from the cache (whole blocks)."""
    return torch.div((position - MARGIN).clamp(min=0), BLOCK, rounding_mode="floor") * BLOCK


class _Layout:
    """What every layer of one forward reads off its mask: each row's position, head length and the cache slots of
    its tail keys in plain decoding's order, with the rows grouped by head length."""

    def __init__(self, allowed: torch.Tensor) -> None:
        q, k = allowed.shape
        seen = allowed.cumsum(-1)
        self.position = seen[:, -1] - 1  # a row sees keys 0..p: p + 1 of them
        self.head = head_length(self.position)
        # The first H(p) keys a row sees must be cache slots 0..H(p)-1, the committed prefix in order.
        ok = (seen.gather(1, (self.head - 1).clamp(min=0)[:, None])[:, 0] == self.head) | (self.head == 0)
        if not bool(ok.all()):
            raise ValueError(
                f"row-invariant attention needs each row's first keys to be the committed prefix; a tree deeper than "
                f"{MARGIN} or a mask that hides prefix keys is not supported"
            )
        rank = seen - 1 - self.head[:, None]  # a visible key's place in the row's tail (negative: in the head)
        take = allowed & (rank >= 0)
        rows, slots = take.nonzero(as_tuple=True)
        self.tail_slots = torch.zeros(q, TAIL, dtype=torch.long, device=allowed.device)
        self.tail_slots[rows, rank[rows, slots]] = slots
        self.tail_masked = torch.arange(TAIL, device=allowed.device)[None, :] > (self.position - self.head)[:, None]
        self.groups = [(int(h), (self.head == h).nonzero()[:, 0]) for h in torch.unique(self.head).tolist()]


# The last mask seen and its layout, per thread (lanes may run in threads of their own).
_last = threading.local()


def _layout(mask: torch.Tensor | None, q: int, k: int, device: torch.device) -> _Layout:
    """The layout of a forward's mask, computed once for all its layers (they share the mask tensor)."""
    if mask is not None and getattr(_last, "mask", None) is mask:
        return _last.layout
    if mask is None:  # no mask: the new rows are the last q of k, causal
        allowed = torch.ones(q, k, dtype=torch.bool, device=device).tril(k - q)
    else:
        m = mask[0, 0]
        allowed = m if m.dtype == torch.bool else m == 0
    layout = _Layout(allowed)
    _last.mask, _last.layout = mask, layout
    return layout


def row_invariant_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: query [1, H, q, d], key/value [1, Hkv, k, d] (the whole cache), the 4D
    mask; returns [1, q, H, d]."""
    batch, heads, q, d = query.shape
    if batch != 1:  # batched forwards (feature extraction for training) need no identity with plain decoding
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    kv_heads, k = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    layout = _layout(attention_mask, q, k, query.device)
    qs = (query[0] * scaling).view(kv_heads, groups, q, d)  # head = kv_head * groups + group
    keys, values = key[0], value[0]
    # Tail keys and values of every row, in plain order: [Hkv, q, TAIL, d].
    flat = layout.tail_slots.view(-1)
    tail_k = keys.index_select(1, flat).view(kv_heads, q, TAIL, d)
    tail_v = values.index_select(1, flat).view(kv_heads, q, TAIL, d)
    if len(layout.groups) == 1:
        out = _rows(qs, tail_k, tail_v, keys, values, layout.groups[0][0], layout.tail_masked)
    else:
        out = torch.empty(kv_heads, groups, q, d, dtype=query.dtype, device=query.device)
        for h, rows in layout.groups:
            sub = _rows(
                qs.index_select(2, rows),
                tail_k.index_select(1, rows),
                tail_v.index_select(1, rows),
                keys,
                values,
                h,
                layout.tail_masked.index_select(0, rows),
            )
            out.index_copy_(2, rows, sub)
    # [Hkv, groups, q, d] -> [1, q, H, d]
    return out.permute(2, 0, 1, 3).reshape(1, q, heads, d), None


def _rows(
    qs: torch.Tensor,
    tail_k: torch.Tensor,
    tail_v: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    h: int,
    tail_masked: torch.Tensor,
) -> torch.Tensor:
    """Attention of rows that share the head length `h`: softmax over [head scores | tail scores] (one row-local
    kernel), then the head's and the tail's weighted values. `qs` [Hkv, groups, rows, d], the tails [Hkv, rows,
    TAIL, d]; returns [Hkv, groups, rows, d]."""
    kv_heads, groups, rows, d = qs.shape
    # Tail scores: one small matmul per (kv head, row), [groups, d] @ [d, TAIL] -> [Hkv, groups, rows, TAIL].
    tail_s = torch.matmul(qs.transpose(1, 2), tail_k.transpose(-1, -2)).transpose(1, 2)
    if h == 0:
        scores = tail_s.masked_fill(tail_masked[None, None], float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype)
        return torch.matmul(probs.transpose(1, 2), tail_v).transpose(1, 2)
    # Head scores: [Hkv, groups * rows, d] @ [Hkv, d, h], rows padded (padded_rows).
    m = groups * rows
    s_head = torch.matmul(_at_least(qs.reshape(kv_heads, m, d)), keys[:, :h].transpose(-1, -2))
    scores = torch.cat([s_head[:, :m].view(kv_heads, groups, rows, h), tail_s], dim=-1)
    scores[..., h:].masked_fill_(tail_masked[None, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype)
    o_head = torch.matmul(_at_least(probs[..., :h].reshape(kv_heads, m, h)), values[:, :h])
    o_tail = torch.matmul(probs[..., h:].transpose(1, 2), tail_v).transpose(1, 2)
    return o_head[:, :m].view(kv_heads, groups, rows, d) + o_tail


def _at_least(x: torch.Tensor) -> torch.Tensor:
    """`x` [b, m, n] with copies of its last row appended up to `padded_rows(m)` rows (the copies' results are
    dropped)."""
    m, want = x.shape[1], padded_rows(x.shape[1], x.dtype)
    return x if m >= want else torch.cat([x, x[:, -1:].expand(-1, want - m, -1)], dim=1)


def register() -> str:
    """Make `row_invariant` an attention implementation transformers knows (with eager's float masks for callers
    that build their own, e.g. `generate`), and return its name."""
    AttentionInterface.register(NAME, row_invariant_attention)
    AttentionMaskInterface.register(NAME, eager_mask)
    return NAME


def use_attention(model, attention: str | None = None) -> str:
    """Give `model` the attention `attention` names and return it. None: $POSS_ATTENTION, else row-invariant on a
    CPU, where it is measured exact, and transformers' sdpa on a GPU, where it is not measured yet (cuBLAS tiles by
    shape; scripts/gpu_check.sh runs scripts/row_invariance.py to find out)."""
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    name = (attention or os.environ.get("POSS_ATTENTION") or (NAME if on_cpu else "sdpa")).replace("-", "_")
    if name not in ATTENTIONS:
        raise ConfigError(f"attention {name!r} is unknown: use {' or '.join(a.replace('_', '-') for a in ATTENTIONS)}.")
    if name == NAME:
        register()
    if getattr(model.config, "_attn_implementation", None) != name:
        model.set_attn_implementation(name)
    if name == NAME:
        pad_small_calls(model)
    return name


def pad_small_calls(model) -> None:
    """Pad every batch-1 call of `model`'s decoder and LM head with few rows up to `padded_rows` (copies of the last
    row, dropped afterwards, their cache entries too), through forward hooks, so the engine's forwards and
    transformers' own `generate` alike give a lone row the bits it gets among many. Once per model."""
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    if getattr(decoder, "_row_padding", False):
        return
    dtype = head.weight.dtype if head.weight.is_floating_point() else torch.float32
    decoder.register_forward_pre_hook(partial(_pad_decoder_call, dtype=dtype, config=model.config), with_kwargs=True)
    decoder.register_forward_hook(_unpad_decoder_call, with_kwargs=True)
    head.register_forward_pre_hook(partial(_pad_head_call, dtype=dtype, config=model.config))
    head.register_forward_hook(_unpad_head_call)
    decoder._row_padding = True


# Rows each padded call really had, innermost last, per thread (lanes may run in threads of their own).
_padded = threading.local()


def _stack(name: str) -> list:
    if not hasattr(_padded, name):
        setattr(_padded, name, [])
    return getattr(_padded, name)


def _pad_decoder_call(module, args, kwargs, dtype, config):
    ids = kwargs.get("input_ids", args[0] if args else None)
    padding = config._attn_implementation == NAME  # a model switched back to sdpa is left as it is
    rows = int(ids.shape[1]) if padding and ids is not None and ids.dim() == 2 and ids.shape[0] == 1 else 0
    pad = padded_rows(rows, dtype) - rows if rows else 0
    _stack("decoder").append((rows, pad))
    if not pad:
        return None
    kwargs = dict(kwargs)
    if args:
        kwargs["input_ids"], args = args[0], ()
    kwargs["input_ids"] = _repeat_last(kwargs["input_ids"], pad)
    if kwargs.get("position_ids") is not None:
        kwargs["position_ids"] = _repeat_last(kwargs["position_ids"], pad)
    mask = kwargs.get("attention_mask")
    if mask is not None and mask.dim() == 4:  # the engine's [1, 1, q, k]: copies see what the last row sees
        low = torch.finfo(mask.dtype).min if mask.is_floating_point() else False
        mask = torch.cat([mask, mask[:, :, -1:].expand(-1, -1, pad, -1)], dim=2)
        kwargs["attention_mask"] = torch.nn.functional.pad(mask, (0, pad), value=low)
    elif mask is not None and mask.dim() == 2:  # generate's [1, k]: the copies are causal after the last row
        kwargs["attention_mask"] = torch.cat([mask, mask[:, -1:].expand(-1, pad)], dim=1)
    return args, kwargs


def _unpad_decoder_call(module, args, kwargs, output):
    rows, pad = _stack("decoder").pop()
    if not pad:
        return None
    output.last_hidden_state = output.last_hidden_state[:, :rows]
    cache = kwargs.get("cache")
    if cache is not None:
        cache.crop(-pad)
    return output


def _pad_head_call(module, args, dtype, config):
    x = args[0]
    padding = config._attn_implementation == NAME and x.dim() >= 2 and (x.dim() == 2 or x.shape[0] == 1)
    rows = int(x.shape[-2]) if padding else 0
    pad = padded_rows(rows, dtype) - rows if rows else 0
    _stack("head").append((rows, pad))
    return (_repeat_last(x, pad, dim=-2),) if pad else None


def _unpad_head_call(module, args, output):
    rows, pad = _stack("head").pop()
    return output.narrow(-2, 0, rows) if pad else None


def _repeat_last(x: torch.Tensor, pad: int, dim: int = 1) -> torch.Tensor:
    """`x` with `pad` copies of its last entry along `dim` appended."""
    last = x.narrow(dim, x.shape[dim] - 1, 1)
    shape = list(x.shape)
    shape[dim] = pad
    return torch.cat([x, last.expand(*shape)], dim=dim)
