"""The target model: one forward over new tokens with explicit positions and a tree mask, and a cache commit."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase
from transformers.cache_utils import DynamicLayer

from .numerics import Numerics, target_numerics
from .row_invariant import NAME as ROW_INVARIANT
from .row_invariant import use_attention

# Prompt tokens read per forward in a prefill: a call's cap is checked between chunks, so a stop or the cap lands
# within one chunk (about a second for the default model on one CPU thread) instead of after the whole prompt; a
# chunk this long keeps the forwards' matmuls as efficient as one forward over the prompt.
PREFILL_CHUNK = 256


@dataclass
class TargetOutput:
    logits: torch.Tensor | None  # [q, V] float32 (None when not asked for)
    hidden: torch.Tensor  # [q, H] last hidden states after the final norm: the features drafts read


def float_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Turn a bool [q, k] visibility matrix into the float (1, 1, q, k) mask transformers accepts."""
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def causal_allowed(q: int, past: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Bool [q, past+q]: every new token sees the whole past and the new tokens up to itself."""
    allowed = torch.ones(q, past + q, dtype=torch.bool, device=device)
    allowed[:, past:] = torch.ones(q, q, dtype=torch.bool, device=device).tril()
    return allowed


class KVSlab:
    """Every layer's keys and values in one preallocated buffer [layers, 2, batch, kv_heads, capacity, head_dim],
    grown by doubling. Layers hold prefix views of it, so a forward writes its new rows in place instead of
    concatenating each layer's whole cache, and committing a verified tree is one gather over all layers."""

    def __init__(self, num_layers: int) -> None:
        self.num_layers = num_layers
        self.data: torch.Tensor | None = None
        self.layers: list[SlabLayer] = []

    def reserve(self, like: torch.Tensor, length: int) -> torch.Tensor:
        """The buffer, with room for `length` rows per layer (layers' views are rebound when it grows)."""
        if self.data is None or self.data.shape[-2] < length:
            b, h, _, d = like.shape
            cap = max(256, 2 * length)
            new = torch.empty(self.num_layers, 2, b, h, cap, d, dtype=like.dtype, device=like.device)
            if self.data is not None:
                old = self.data.shape[-2]
                new[..., :old, :] = self.data
            self.data = new
            for layer in self.layers:
                if layer.is_initialized:
                    layer.rebase()
                    layer.bind(layer.keys.shape[-2])
        return self.data


class SlabLayer(DynamicLayer):
    """A DynamicLayer whose keys and values are prefix views of a `KVSlab` (row i of the cache is row i of the
    slab), so transformers reads it like any dynamic layer and slicing it (truncation) still works."""

    def __init__(self, slab: KVSlab, index: int) -> None:
        super().__init__()
        self.slab, self.index = slab, index
        slab.layers.append(self)

    def rebase(self) -> None:
        """Take this layer's whole-capacity views of the slab (after it was made or grown)."""
        self.key_base = self.slab.data[self.index, 0]
        self.value_base = self.slab.data[self.index, 1]

    def bind(self, length: int) -> None:
        # One narrow per tensor: a commit rebinds every layer, so this is on the per-round path.
        self.keys = self.key_base.narrow(-2, 0, length)
        self.values = self.value_base.narrow(-2, 0, length)

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.slab.reserve(key_states, key_states.shape[-2])
        self.rebase()
        self.bind(0)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, q = self.keys.shape[-2], key_states.shape[-2]
        self.slab.reserve(key_states, n + q)
        self.key_base[..., n : n + q, :] = key_states
        self.value_base[..., n : n + q, :] = value_states
        self.bind(n + q)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.keys.shape[-2] if self.is_initialized else 0

    def reset(self) -> None:
        self.is_initialized = False
        self.keys = self.values = None


def slab_cache(config) -> DynamicCache:
    """A DynamicCache whose layers share one `KVSlab` (a dynamic cache as transformers builds it if the model has
    other kinds of layers, e.g. sliding windows)."""
    cache = DynamicCache(config=config)
    if cache.layers and all(type(layer) is DynamicLayer for layer in cache.layers):
        slab = KVSlab(len(cache.layers))
        cache.layers = [SlabLayer(slab, i) for i in range(len(cache.layers))]
    return cache


@torch.inference_mode()
def keep_cache_slots(cache: DynamicCache, past_len: int, keep: torch.Tensor) -> None:
    """Keep the first `past_len` entries plus the entries at `past_len + keep` (in that order); drop the rest.

    Only the tail is rewritten, so committing a verified tree costs O(tree), not O(context). With a `KVSlab` it is
    one gather over every layer at once, and nothing at all when the kept slots already come first (a chain)."""
    n = int(keep.numel())
    layers = cache.layers
    if layers and all(isinstance(layer, SlabLayer) and layer.is_initialized for layer in layers):
        # The length is read from the views themselves: `truncate_cache_layer` (and transformers) may slice them.
        slab, length = layers[0].slab, layers[0].keys.shape[-2]
        if len(layers) == slab.num_layers and all(
            layer.slab is slab and layer.keys.shape[-2] == length for layer in layers
        ):
            if keep.tolist() != list(range(n)):
                data = slab.data
                data[..., past_len : past_len + n, :] = data.index_select(-2, keep.to(data.device) + past_len)
            for layer in layers:
                layer.bind(past_len + n)
            return
    for layer in cache.layers:
        if not getattr(layer, "is_initialized", True) or layer.keys is None:
            continue
        idx = keep.to(layer.keys.device) + past_len
        layer.keys[..., past_len : past_len + n, :] = layer.keys[..., idx, :]
        layer.values[..., past_len : past_len + n, :] = layer.values[..., idx, :]
        layer.keys = layer.keys[..., : past_len + n, :]
        layer.values = layer.values[..., : past_len + n, :]


def truncate_cache_layer(cache: DynamicCache, layer_idx: int, length: int) -> None:
    """Cut one layer of a cache back to `length` entries."""
    layer = cache.layers[layer_idx]
    if getattr(layer, "is_initialized", True) and layer.keys is not None and layer.keys.shape[-2] > length:
        layer.keys = layer.keys[..., :length, :]
        layer.values = layer.values[..., :length, :]


class TargetModel:
    """A transformers causal LM of the Llama family, seen through the one forward speculative decoding needs."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        name: str = "target",
        quantization: str = "none",
        attention: str | None = None,
    ) -> None:
        self.model = model.eval()
        # Row-invariant attention (row_invariant.py) unless `attention` (or $POSS_ATTENTION) asks for transformers'
        # own "sdpa": exact identity with plain decoding in every CPU precision, for a few percent of speed.
        self.attention = use_attention(self.model, attention)
        self.kernel: str | None = None  # a 4-bit target's kernels: "row-independent" or "fast" (quantization.py)
        if quantization != "none":
            from .quantization import use_kernels

            self.kernel = use_kernels(self.model)
        self.tokenizer = tokenizer
        self.name = name
        self.quantization = quantization
        self.config = model.config
        self.decoder = model.get_decoder()
        self.lm_head = model.get_output_embeddings()
        self.device = self.lm_head.weight.device
        self.dtype = self.lm_head.weight.dtype if self.lm_head.weight.is_floating_point() else torch.bfloat16
        self.hidden_size = int(self.config.hidden_size)
        self.vocab_size = int(self.lm_head.weight.shape[0])
        self.max_context = int(getattr(self.config, "max_position_embeddings", 4096) or 4096)
        self.eos_ids = self._eos_ids()
        # Row-invariant attention promises a row the same bits alone or beside others; the matmuls' one-row path
        # is padded away (forward) so the promise holds for a plain step too.
        self.row_invariant = self.attention == ROW_INVARIANT

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (getattr(self.model, "generation_config", None), self.config, self.tokenizer):
            eos = getattr(source, "eos_token_id", None) if source is not None else None
            if eos is None:
                continue
            ids.update([eos] if isinstance(eos, int) else list(eos))
        return ids

    def new_cache(self) -> DynamicCache:
        return slab_cache(self.config)

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        allowed: torch.Tensor,
        cache: DynamicCache,
        logits: str = "all",
    ) -> TargetOutput:
        """Run new tokens [q] at `position_ids` [q]; `allowed` is bool [q, past+q]. Extends `cache`.

        `logits` is "all", "last" or "none": the LM head over a 49k vocabulary is costly, so ask only for what is
        used. With row-invariant attention a forward of few rows runs with copies of its last row beside it
        (row_invariant.pad_small_calls), so a plain step gets the bits a tree node at its place gets."""
        mask = float_mask(allowed.to(self.device), self.dtype_for_mask)
        out = self.decoder(
            input_ids=input_ids.to(self.device)[None],
            position_ids=position_ids.to(self.device)[None],
            attention_mask=mask,
            cache=cache,
            use_cache=True,
        )
        hidden = out.last_hidden_state[0]
        if logits == "none":
            return TargetOutput(None, hidden)
        head_in = hidden[-1:] if logits == "last" else hidden
        return TargetOutput(self.lm_head(head_in).float(), hidden)

    @torch.inference_mode()
    def prefill(
        self, ids: torch.Tensor, cache: DynamicCache, cancel=None, chunk: int | None = None
    ) -> TargetOutput | None:
        """Read the prompt `ids` [n] into an empty `cache`, `chunk` (PREFILL_CHUNK) tokens per forward, with the last
        row's logits and every row's features. `cancel` (an Event, e.g. a call's cap) is checked before each
        chunk, so a long prompt is stopped within one chunk of it: None then (the cache holds the chunks read so
        far). Each chunk sees the whole past and itself causally, as one forward over the prompt would: the same
        logits and features up to float rounding (matmuls of other shapes sum in another order), and bit for bit
        for a prompt of one chunk. Every lane of a comparison reads its prompt this way, so they stay alike."""
        n, step = len(ids), max(1, int(PREFILL_CHUNK if chunk is None else chunk))
        hidden = []
        out = None
        for begin in range(0, n, step):
            if cancel is not None and cancel.is_set():
                return None
            end = min(n, begin + step)
            out = self.forward(
                ids[begin:end],
                torch.arange(begin, end),
                causal_allowed(end - begin, begin),
                cache,
                logits="last" if end == n else "none",
            )
            hidden.append(out.hidden)
        if out is None:
            raise ValueError("prefill needs at least one token")
        return TargetOutput(out.logits, hidden[0] if len(hidden) == 1 else torch.cat(hidden))

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The LM head over some rows of `forward`'s hidden states: float32 logits on the CPU."""
        return self.lm_head(hidden).float().cpu()

    @property
    def dtype_for_mask(self) -> torch.dtype:
        # The mask must match the dtype of the attention scores: the model's compute dtype.
        emb = self.model.get_input_embeddings().weight
        return emb.dtype if emb.is_floating_point() else torch.float32

    @property
    def numerics(self) -> Numerics:
        """What identity with plain decoding this target's device, compute dtype and quantization allow."""
        return target_numerics(
            self.device.type, self.dtype_for_mask, self.quantization, self.kernel, row_invariant=self.row_invariant
        )

    def input_embedding_weight(self) -> torch.Tensor:
        return self.model.get_input_embeddings().weight

    def lm_head_weight(self) -> torch.Tensor:
        return self.lm_head.weight
