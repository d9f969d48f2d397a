"""One draft module for EAGLE (one layer), POSS-n (position specialists) and the matched-capacity control (stacked).

Layout follows released EAGLE/HASS/POSS checkpoints: `embed_tokens` (frozen copy of the target's), `fc` (2H -> H),
Llama decoder layers without the input RMSNorm, and the target's LM head shared (never stored)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache, LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

from ..base.errors import CheckpointError
from .packed_linear import PackedLinear

METHODS = ("eagle", "poss", "stacked")


@dataclass
class DraftSpec:
    """What kind of draft this is. EAGLE is POSS with one specialist; `stacked` runs every layer at every position."""

    method: str = "poss"
    num_layers: int = 1
    positions_per_specialist: int = 1
    bias: bool = True

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise CheckpointError(f"draft method {self.method!r} is unknown: use one of {', '.join(METHODS)}.")
        if self.num_layers < 1 or self.positions_per_specialist < 1:
            raise CheckpointError("a draft needs at least one layer and at least one position per specialist.")

    @property
    def label(self) -> str:
        if self.method == "stacked":
            return f"matched ({self.num_layers} stacked layers)"
        if self.num_layers == 1:
            return "EAGLE (1 layer)"
        return f"POSS-{self.positions_per_specialist} ({self.num_layers} specialists)"


def draft_config_from_target(target_config) -> LlamaConfig:
    """A LlamaConfig with the target's sizes (GQA heads, RoPE) for the draft layers."""
    cfg = target_config
    text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    kwargs = dict(
        vocab_size=text_cfg.vocab_size,
        hidden_size=text_cfg.hidden_size,
        intermediate_size=text_cfg.intermediate_size,
        num_attention_heads=text_cfg.num_attention_heads,
        num_key_value_heads=getattr(text_cfg, "num_key_value_heads", None) or text_cfg.num_attention_heads,
        rms_norm_eps=getattr(text_cfg, "rms_norm_eps", 1e-6),
        max_position_embeddings=getattr(text_cfg, "max_position_embeddings", 4096),
        hidden_act=getattr(text_cfg, "hidden_act", "silu"),
        num_hidden_layers=1,
    )
    head_dim = getattr(text_cfg, "head_dim", None)
    if head_dim:
        kwargs["head_dim"] = head_dim
    rope = getattr(text_cfg, "rope_parameters", None)
    if rope:
        kwargs["rope_parameters"] = dict(rope)
    config = LlamaConfig(**kwargs)
    config._attn_implementation = "sdpa"
    return config


class DraftModel(nn.Module):
    """Position-specialist draft. Specialist g is a group of layers; position p uses `specialist_of(p)`."""

    def __init__(self, config: LlamaConfig, spec: DraftSpec, draft_vocab: torch.Tensor | None = None) -> None:
        super().__init__()
        self.config = config
        self.spec = spec
        h = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, h)
        self.embed_tokens.weight.requires_grad_(False)
        self.fc = nn.Linear(2 * h, h, bias=spec.bias)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, layer_idx=i) for i in range(spec.num_layers))
        for i, layer in enumerate(self.layers):
            # The incoming feature is already normalised by the target's final norm; only stacked layers after the
            # first read an un-normalised residual stream and keep their input norm.
            if spec.method != "stacked" or i == 0:
                layer.input_layernorm = nn.Identity()
        self.rotary_emb = LlamaRotaryEmbedding(config)
        if draft_vocab is not None:
            draft_vocab = torch.as_tensor(draft_vocab, dtype=torch.long)
        self.register_buffer("draft_vocab", draft_vocab, persistent=False)
        self.register_buffer("head_weight", None, persistent=False)

    # ----- structure -------------------------------------------------------------------------------------------
    @property
    def groups(self) -> list[list[int]]:
        if self.spec.method == "stacked":
            return [list(range(self.spec.num_layers))]
        return [[i] for i in range(self.spec.num_layers)]

    @property
    def num_specialists(self) -> int:
        return len(self.groups)

    def specialist_of(self, position: int) -> int:
        """Position p (1 = first drafted token) uses specialist min((p-1)//n, L-1)."""
        return min((position - 1) // self.spec.positions_per_specialist, self.num_specialists - 1)

    @property
    def draft_vocab_size(self) -> int:
        return int(self.draft_vocab.numel()) if self.draft_vocab is not None else self.config.vocab_size

    # ----- binding to a target ---------------------------------------------------------------------------------
    def bind_target(self, embed_weight: torch.Tensor, head_weight: torch.Tensor, copy_embedding: bool = True) -> None:
        """Share the target's LM head (rows of the draft vocabulary only) and, if asked, copy its input embedding."""
        if head_weight.shape[1] != self.config.hidden_size:
            raise CheckpointError(
                f"draft hidden size {self.config.hidden_size} does not fit the target's {head_weight.shape[1]}."
            )
        if head_weight.shape[0] != self.config.vocab_size:
            raise CheckpointError(
                f"draft vocabulary {self.config.vocab_size} does not fit the target's {head_weight.shape[0]}."
            )
        device = self.fc.weight.device
        w = head_weight.detach().to(device=device, dtype=self.fc.weight.dtype)
        if self.draft_vocab is not None:
            self.draft_vocab = self.draft_vocab.to(device)
            w = w.index_select(0, self.draft_vocab)
        self.head_weight = w
        if copy_embedding:
            with torch.no_grad():
                self.embed_tokens.weight.copy_(
                    embed_weight.detach().to(device=device, dtype=self.embed_tokens.weight.dtype)
                )

    # ----- forward pieces --------------------------------------------------------------------------------------
    def head_logits(self, features: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary (the full one when no draft vocabulary is set). Without autograd (decoding,
        evaluation) the head's weight is packed once for oneDNN where that pays (`PackedLinear`)."""
        features = features.to(self.head_weight.dtype)
        if torch.is_grad_enabled():
            return F.linear(features, self.head_weight)
        return self.packed_head()(features)

    def packed_head(self) -> PackedLinear:
        """The head's weight as a `PackedLinear` (packed again after `bind_target` rebinds it)."""
        return self._packed("head", self.head_weight)

    def _packed(self, key: str, weight: torch.Tensor, bias: torch.Tensor | None = None) -> PackedLinear:
        """`weight` as a `PackedLinear`, packed again whenever it changed: another tensor, or updated in place."""
        cache = self.__dict__.setdefault("_packed_weights", {})
        stamp = (weight.data_ptr(), weight._version)  # the cache holds the old tensor, so its address is not reused
        known = cache.get(key)
        if known is None or known[0] != stamp:
            known = cache[key] = (stamp, PackedLinear(weight, bias))
        return known[1]

    def to_full_vocab(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return self.draft_vocab[draft_ids] if self.draft_vocab is not None else draft_ids

    def to_draft_vocab(self, full_ids: torch.Tensor) -> torch.Tensor:
        """Map full-vocabulary ids into the draft vocabulary; ids outside it become -1."""
        if self.draft_vocab is None:
            return full_ids
        lookup = torch.full((self.config.vocab_size,), -1, dtype=torch.long, device=self.draft_vocab.device)
        lookup[self.draft_vocab] = torch.arange(self.draft_vocab.numel(), device=self.draft_vocab.device)
        return lookup[full_ids.to(self.draft_vocab.device)]

    def run_specialist(
        self,
        group: int,
        tokens: torch.Tensor,
        features: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        cache: DynamicCache | DraftKV | None = None,
    ) -> torch.Tensor:
        """Rows (emb(token_t+1), feature_t) -> predicted feature_t+1 through one specialist.

        Shapes: tokens [B, q], features [B, q, H], position_ids [B, q], attention_mask float [B|1, 1, q, k] (with a
        `DraftKV` cache, decoding's: batch 1 and a bool [q, k] mask, True where a row may look)."""
        if isinstance(cache, DraftKV):
            return self._decode_rows(group, tokens[0], features[0], position_ids[0], attention_mask, cache)[None]
        x = self.fc(torch.cat([self.embed_tokens(tokens).to(features.dtype), features], dim=-1))
        pos_emb = self.rotary_emb(x, position_ids)
        for li in self.groups[group]:
            x = self.layers[li](
                x,
                attention_mask=attention_mask,
                position_ids=position_ids,
                cache=cache,
                use_cache=cache is not None,
                position_embeddings=pos_emb,
            )
        return x

    # ----- decoding's path: the same layers with fewer, larger ops --------------------------------------------
    # Drafting runs a specialist over a handful of rows per depth, so the transformers layer's many small ops and
    # its cache's concatenations cost as much as the matmuls. This path computes the same function for inference:
    # q/k/v and gate/up as one matmul each (fused copies of the weights, rebuilt when the weights change), RoPE
    # read from a precomputed table, keys and values written into a preallocated `DraftKV`, and a bool mask
    # handed straight to SDPA (grouped-query heads without copies).
    def _decode_rows(
        self,
        group: int,
        tokens: torch.Tensor,
        features: torch.Tensor,
        positions: torch.Tensor,
        allowed: torch.Tensor,
        kv: "DraftKV",
    ) -> torch.Tensor:
        weights = kv.weights if kv.weights is not None else self.decode_weights()
        x = weights["fc"](torch.cat([self.embed_tokens(tokens).to(features.dtype), features], dim=-1))
        cos, sin = self._rope_rows(positions, x.dtype)
        mask = allowed[None, None]
        for li in self.groups[group]:
            x = self._decode_layer(weights["layers"][li], li, x, cos, sin, mask, kv)
        return x

    @staticmethod
    def _decode_layer(
        f: dict, li: int, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, kv: "DraftKV"
    ) -> torch.Tensor:
        n = int(x.shape[0])
        h = x if f["in_norm"] is None else f["in_norm"](x)
        qkv = f["qkv"](h)
        heads, kv_heads, d = f["heads"], f["kv_heads"], f["head_dim"]
        # RoPE on the query and key heads at once: x*cos + rotate_half(x)*sin, where rotate_half(x) is x rolled by
        # half a head times a sign that the table's sine already carries (bit-identical: a negation is exact).
        qk = qkv[:, : (heads + kv_heads) * d].view(n, heads + kv_heads, d)
        qk = qk * cos + torch.roll(qk, d // 2, dims=-1) * sin
        q, k = qk[:, :heads].transpose(0, 1), qk[:, heads:].transpose(0, 1)
        v = qkv[:, (heads + kv_heads) * d :].view(n, kv_heads, d).transpose(0, 1)
        keys, values = kv.append(li, k, v)
        attn = F.scaled_dot_product_attention(
            q[None], keys[None], values[None], attn_mask=mask, scale=f["scale"], enable_gqa=kv_heads != heads
        )
        x = x + f["o"](attn[0].transpose(0, 1).reshape(n, -1))
        h = _rms_norm(x, f["post_w"], f["post_eps"])
        gate, up = f["gate_up"](h).chunk(2, dim=-1)
        return x + f["down"](F.silu(gate) * up)

    def decode_weights(self) -> dict:
        """The decoding path's weights: `fc` and each layer's fused, packed copies (`PackedLinear`), rebuilt where a
        weight changed since the last call (training). Drafting checks them once per tree (`DraftKV.weights`)."""
        return {
            "fc": self._packed("fc", self.fc.weight, self.fc.bias),
            "layers": [self._fused_layer(li) for li in range(len(self.layers))],
        }

    def _fused_layer(self, li: int) -> dict:
        """Fused copies of layer li's weights for `_decode_layer`, rebuilt whenever a weight changed (training)."""
        layer = self.layers[li]
        att, mlp = layer.self_attn, layer.mlp
        params = (att.q_proj, att.k_proj, att.v_proj, att.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
        stamp = tuple((m.weight.data_ptr(), m.weight._version) for m in params) + (
            layer.post_attention_layernorm.weight._version,
        )
        cache = self.__dict__.setdefault("_fused", {})
        known = cache.get(li)
        if known is not None and known["stamp"] == stamp:
            return known

        def cat_bias(*mods):
            if all(m.bias is None for m in mods):
                return None
            return torch.cat(
                [
                    m.bias
                    if m.bias is not None
                    else torch.zeros(m.out_features, dtype=m.weight.dtype, device=m.weight.device)
                    for m in mods
                ]
            )

        with torch.no_grad():
            fused = {
                "stamp": stamp,
                "qkv": PackedLinear(
                    torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]),
                    cat_bias(att.q_proj, att.k_proj, att.v_proj),
                ),
                "o": PackedLinear(att.o_proj.weight, att.o_proj.bias),
                "gate_up": PackedLinear(
                    torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]), cat_bias(mlp.gate_proj, mlp.up_proj)
                ),
                "down": PackedLinear(mlp.down_proj.weight, mlp.down_proj.bias),
                "head_dim": att.head_dim,
                "heads": att.q_proj.out_features // att.head_dim,
                "kv_heads": att.k_proj.out_features // att.head_dim,
                "scale": att.scaling,
                "in_norm": None if isinstance(layer.input_layernorm, nn.Identity) else layer.input_layernorm,
                "post_w": layer.post_attention_layernorm.weight,
                "post_eps": layer.post_attention_layernorm.variance_epsilon,
            }
        if self.config.hidden_act != "silu":
            raise CheckpointError(f"draft activation {self.config.hidden_act!r} is not supported: use silu.")
        cache[li] = fused
        return fused

    def _rope_rows(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sign-carrying sin [q, 1, head_dim] at these positions (see `_decode_layer`), read from a table
        computed once (as the rotary module computes them)."""
        table = self.__dict__.get("_rope_table")
        need = int(positions.max()) + 1 if positions.numel() else 1
        if table is None or table.dtype != dtype or table.shape[0] < need:
            size = max(need, int(getattr(self.config, "max_position_embeddings", 0) or 0), 1)
            pos = torch.arange(size, device=positions.device)[None]
            with torch.no_grad():
                cos, sin = self.rotary_emb(torch.empty(0, dtype=dtype, device=positions.device), pos)
            half = cos.shape[-1] // 2
            sin = torch.cat([-sin[0, :, :half], sin[0, :, half:]], dim=-1)
            table = torch.stack([cos[0], sin], dim=1)  # [positions, 2, head_dim]: one lookup gives both
            self.__dict__["_rope_table"] = table
        rows = table[positions]
        return rows[:, :1], rows[:, 1:]


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """LlamaRMSNorm's arithmetic (in float32, then back to the input's dtype)."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


class DraftKV:
    """The draft's keys and values during decoding: one preallocated buffer per draft layer, [kv_heads, capacity,
    head_dim], grown by doubling. Appending writes in place (no concatenation of the whole cache per call) and
    truncating only moves a length."""

    def __init__(self, num_layers: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers
        self.lengths = [0] * num_layers
        # The decoding weights checked for the current tree (`DraftState.begin_tree`); None: check on every call.
        self.weights: dict | None = None

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add rows k, v [kv_heads, n, head_dim]; return every cached row of the layer (views of the buffers)."""
        length, n = self.lengths[layer], int(k.shape[1])
        buf = self.keys[layer]
        if buf is None or length + n > buf.shape[1]:
            cap = max(256, 2 * (length + n))
            for store in (self.keys, self.values):
                old = store[layer]
                new = torch.empty(k.shape[0], cap, k.shape[2], dtype=k.dtype, device=k.device)
                if old is not None and length:
                    new[:, :length] = old[:, :length]
                store[layer] = new
        self.keys[layer][:, length : length + n] = k
        self.values[layer][:, length : length + n] = v
        self.lengths[layer] = length + n
        return self.keys[layer][:, : length + n], self.values[layer][:, : length + n]

    def truncate(self, layer: int, length: int) -> None:
        self.lengths[layer] = min(self.lengths[layer], length)


class DraftState:
    """Per-decode draft state: one KV cache layer per draft layer, and how far each specialist has read the context."""

    def __init__(self, draft: DraftModel) -> None:
        self.draft = draft
        self.cache = DraftKV(len(draft.layers))
        self.num_rows = 0  # context rows known (tokens whose preceding target feature is known)
        self.read = [0] * draft.num_specialists  # context rows in each specialist's cache
        self._tokens = torch.empty(0, dtype=torch.long, device=draft.fc.weight.device)
        self._features = torch.empty(
            0, draft.config.hidden_size, dtype=draft.fc.weight.dtype, device=draft.fc.weight.device
        )

    def add_rows(self, tokens: torch.Tensor, features: torch.Tensor) -> None:
        """Append context rows: tokens [m] each paired with the target feature of the position before it [m, H]."""
        w = self.draft.fc.weight
        self._tokens = torch.cat([self._tokens, tokens.to(w.device)])
        self._features = torch.cat([self._features, features.to(device=w.device, dtype=w.dtype)])
        self.num_rows += int(tokens.numel())

    def pending(self, group: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Context rows specialist `group` has not read yet, and the absolute index of the first."""
        base = self.num_rows - int(self._tokens.numel())
        start = self.read[group]
        return self._tokens[start - base :], self._features[start - base :], start

    def mark_read(self, group: int) -> None:
        self.read[group] = self.num_rows
        # Rows every specialist has read are no longer needed.
        base = self.num_rows - int(self._tokens.numel())
        drop = min(self.read) - base
        if drop > 0:
            self._tokens = self._tokens[drop:]
            self._features = self._features[drop:]

    def begin_tree(self) -> None:
        """Check the draft's decoding weights once for the tree about to be drafted, not at every depth."""
        self.cache.weights = self.draft.decode_weights()

    def reset_tree(self) -> None:
        """Drop this round's tree rows from every specialist's cache, keeping what it read of the context."""
        self.cache.weights = None
        for g, layers in enumerate(self.draft.groups):
            for li in layers:
                self.cache.truncate(li, self.read[g])

    def cache_len(self, group: int) -> int:
        return self.cache.lengths[self.draft.groups[group][0]]


def check_draft_fits(draft: DraftModel, target) -> None:
    """Refuse a draft whose hidden size or vocabulary does not fit the target, naming both sizes."""
    if draft.config.hidden_size != target.hidden_size:
        raise CheckpointError(
            f"the draft's hidden size is {draft.config.hidden_size} but the target's is "
            f"{target.hidden_size}: this draft was made for another target."
        )
    if draft.config.vocab_size != target.vocab_size:
        raise CheckpointError(
            f"the draft's vocabulary has {draft.config.vocab_size} tokens but the target's has "
            f"{target.vocab_size}: this draft was made for another target."
        )
    if draft.head_weight is None:
        draft.bind_target(target.input_embedding_weight(), target.lm_head_weight(), copy_embedding=False)
