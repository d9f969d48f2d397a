"""Quantized targets (bitsandbytes 8-bit / 4-bit NF4) when the model would not fit otherwise. Drafts stay unquantized."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import ConfigError

MODES = ("auto", "none", "8bit", "4bit")
GiB = 1024**3


@dataclass(frozen=True)
class QuantChoice:
    mode: str  # "none" | "8bit" | "4bit"
    reason: str


def estimate_target_bytes(config, bytes_per_param: float = 2.0) -> int:
    """Parameter bytes of a Llama-family target from its config (bf16 by default)."""
    c = config.get_text_config() if hasattr(config, "get_text_config") else config
    h, inter, layers, vocab = c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.vocab_size
    heads = c.num_attention_heads
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    head_dim = getattr(c, "head_dim", None) or h // heads
    attn = h * heads * head_dim * 2 + h * kv_heads * head_dim * 2
    per_layer = attn + 3 * h * inter + 2 * h
    embeddings = vocab * h * (1 if getattr(c, "tie_word_embeddings", False) else 2)
    return int((layers * per_layer + embeddings + h) * bytes_per_param)


def estimate_kv_bytes(config, tokens: int = 4096, bytes_per_value: float = 2.0) -> int:
    c = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = c.num_attention_heads
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    return int(2 * c.num_hidden_layers * kv_heads * head_dim * tokens * bytes_per_value)


def choose_quantization(mode: str, device_type: str, need_bytes: int, free_bytes: int | None,
                        margin: float = 0.9) -> QuantChoice:
    """`auto` on CUDA: none if bf16 fits in `margin` of free memory, else 8-bit, else 4-bit NF4. On CPU: none."""
    if mode not in MODES:
        raise ConfigError(f"quantization={mode!r} is unknown: use one of {', '.join(MODES)}.")
    if mode != "auto":
        return QuantChoice(mode, f"{mode} as asked")
    if device_type != "cuda" or free_bytes is None:
        return QuantChoice("none", f"auto on {device_type}: full precision (quantization only pays off on a GPU)")
    budget = free_bytes * margin
    gib = lambda b: f"{b / GiB:.1f} GiB"  # noqa: E731
    if need_bytes <= budget:
        return QuantChoice("none", f"bf16 needs about {gib(need_bytes)}, {gib(free_bytes)} free: no quantization")
    # Parameters dominate; 8-bit halves them, 4-bit NF4 quarters them (the KV cache and drafts stay as they are).
    if need_bytes * 0.55 <= budget:
        return QuantChoice("8bit", f"bf16 needs about {gib(need_bytes)} but only {gib(free_bytes)} is free: 8-bit")
    if need_bytes * 0.3 <= budget:
        return QuantChoice("4bit", f"bf16 needs about {gib(need_bytes)} but only {gib(free_bytes)} is free; "
                                   f"8-bit would not fit either: 4-bit NF4")
    raise ConfigError(f"the target needs about {gib(need_bytes)} in bf16 and does not fit in {gib(free_bytes)} of free "
                      f"GPU memory even in 4-bit: pick a smaller preset.")


def free_cuda_bytes(device: torch.device) -> int | None:
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return int(free)


def bnb_config(mode: str, compute_dtype: torch.dtype):
    """The BitsAndBytesConfig for a mode, or None for "none"."""
    if mode == "none":
        return None
    try:
        import bitsandbytes  # noqa: F401
        from transformers import BitsAndBytesConfig
    except ImportError as err:  # pragma: no cover - bitsandbytes is in requirements
        raise ConfigError(f"quantization={mode} needs the bitsandbytes package: pip install bitsandbytes") from err
    if mode == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute_dtype,
                              bnb_4bit_use_double_quant=True)
