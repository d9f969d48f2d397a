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

from ..errors import CheckpointError
from .target import truncate_cache_layer

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
                f"draft hidden size {self.config.hidden_size} does not fit the target's {head_weight.shape[1]}.")
        if head_weight.shape[0] != self.config.vocab_size:
            raise CheckpointError(
                f"draft vocabulary {self.config.vocab_size} does not fit the target's {head_weight.shape[0]}.")
        device = self.fc.weight.device
        w = head_weight.detach().to(device=device, dtype=self.fc.weight.dtype)
        if self.draft_vocab is not None:
            self.draft_vocab = self.draft_vocab.to(device)
            w = w.index_select(0, self.draft_vocab)
        self.head_weight = w
        if copy_embedding:
            with torch.no_grad():
                self.embed_tokens.weight.copy_(embed_weight.detach().to(device=device, dtype=self.embed_tokens.weight.dtype))

    # ----- forward pieces --------------------------------------------------------------------------------------
    def head_logits(self, features: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary (the full one when no draft vocabulary is set)."""
        return F.linear(features.to(self.head_weight.dtype), self.head_weight)

    def to_full_vocab(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return self.draft_vocab[draft_ids] if self.draft_vocab is not None else draft_ids

    def to_draft_vocab(self, full_ids: torch.Tensor) -> torch.Tensor:
        """Map full-vocabulary ids into the draft vocabulary; ids outside it become -1."""
        if self.draft_vocab is None:
            return full_ids
        lookup = torch.full((self.config.vocab_size,), -1, dtype=torch.long, device=self.draft_vocab.device)
        lookup[self.draft_vocab] = torch.arange(self.draft_vocab.numel(), device=self.draft_vocab.device)
        return lookup[full_ids.to(self.draft_vocab.device)]

    def run_specialist(self, group: int, tokens: torch.Tensor, features: torch.Tensor, position_ids: torch.Tensor,
                       attention_mask: torch.Tensor | None, cache: DynamicCache | None = None) -> torch.Tensor:
        """Rows (emb(token_t+1), feature_t) -> predicted feature_t+1 through one specialist.

        Shapes: tokens [B, q], features [B, q, H], position_ids [B, q], attention_mask float [B|1, 1, q, k]."""
        x = self.fc(torch.cat([self.embed_tokens(tokens).to(features.dtype), features], dim=-1))
        pos_emb = self.rotary_emb(x, position_ids)
        for li in self.groups[group]:
            x = self.layers[li](x, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
                                use_cache=cache is not None, position_embeddings=pos_emb)
        return x


class DraftState:
    """Per-decode draft state: one KV cache layer per draft layer, and how far each specialist has read the context."""

    def __init__(self, draft: DraftModel) -> None:
        self.draft = draft
        self.cache = DynamicCache()  # layers appear as specialists first write
        self.num_rows = 0  # context rows known (tokens whose preceding target feature is known)
        self.read = [0] * draft.num_specialists  # context rows in each specialist's cache
        self._tokens = torch.empty(0, dtype=torch.long, device=draft.fc.weight.device)
        self._features = torch.empty(0, draft.config.hidden_size, dtype=draft.fc.weight.dtype,
                                     device=draft.fc.weight.device)

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
        return self._tokens[start - base:], self._features[start - base:], start

    def mark_read(self, group: int) -> None:
        self.read[group] = self.num_rows
        # Rows every specialist has read are no longer needed.
        base = self.num_rows - int(self._tokens.numel())
        drop = min(self.read) - base
        if drop > 0:
            self._tokens = self._tokens[drop:]
            self._features = self._features[drop:]

    def reset_tree(self) -> None:
        """Drop this round's tree rows from every specialist's cache, keeping what it read of the context."""
        for g, layers in enumerate(self.draft.groups):
            for li in layers:
                if li < len(self.cache.layers):
                    truncate_cache_layer(self.cache, li, self.read[g])

    def cache_len(self, group: int) -> int:
        li = self.draft.groups[group][0]
        if li >= len(self.cache.layers):
            return 0
        layer = self.cache.layers[li]
        if not getattr(layer, "is_initialized", True) or layer.keys is None:
            return 0
        return int(layer.keys.shape[-2])



def check_draft_fits(draft: DraftModel, target) -> None:
    """Refuse a draft whose hidden size or vocabulary does not fit the target, naming both sizes."""
    if draft.config.hidden_size != target.hidden_size:
        raise CheckpointError(f"the draft's hidden size is {draft.config.hidden_size} but the target's is "
                              f"{target.hidden_size}: this draft was made for another target.")
    if draft.config.vocab_size != target.vocab_size:
        raise CheckpointError(f"the draft's vocabulary has {draft.config.vocab_size} tokens but the target's has "
                              f"{target.vocab_size}: this draft was made for another target.")
    if draft.head_weight is None:
        draft.bind_target(target.input_embedding_weight(), target.lm_head_weight(), copy_embedding=False)
