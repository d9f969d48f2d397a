"""Quantized targets (bitsandbytes 8-bit / 4-bit NF4) when the model would not fit otherwise. Drafts stay unquantized.

Both modes are set up so that a row's result does not depend on the other rows of a forward, which is what greedy
identity with plain decoding of the same quantized target rests on (`numerics.py` says what each mode keeps):
- 4-bit NF4 on a CPU with AVX-512 BF16 would use bitsandbytes' fused kernel, which rounds the activations to bf16
  whatever the compute dtype: a float32 target then behaves like a bf16 one, and a batched verify pass and a
  one-token step drift apart in the logits, so speculative runs part from plain decoding.
  `use_row_independent_kernels` keeps the dequantize-and-multiply path in the compute dtype instead, for one row as
  for many: every lane is then identical to plain decoding. (It is also faster for trees: the fused
  kernel is a matrix-vector kernel.)
- 8-bit is LLM.int8 without the outlier split (`llm_int8_threshold=0`). With the split, the outlier columns are
  chosen from the whole batch, so a tree's other rows change a row's result (speculative runs part from plain
  decoding, even at the first token). Without it each row is rounded to int8 on its own. Identity is still not
  exact: a last-digit float difference upstream (attention over a tree rather than one token) can flip one int8
  rounding, and layer after layer that grows to logit differences large enough that a lane parts from plain
  decoding where plain's two best tokens are that close (how often: `docs/results.md`, "Quantized targets"). The
  price of no outlier split: int8 is weaker on large models whose activations have outlier features (the LLM.int8
  paper's case); measure τ on such a target.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import torch

from ..base.errors import ConfigError

MODES = ("auto", "none", "8bit", "4bit")
GiB = 1024**3

# Plain decoding's tokens/s on a CPU with a bitsandbytes target, over float32's, as SmolLM2-135M measured them
# (`python scripts/quantized_speed.py --threads 1`; docs/results.md, "Quantized targets").
CPU_PLAIN_SPEED_VS_FLOAT32 = {"8bit": 0.67, "4bit": 0.62}
# The same as the range the app and the load-time note quote.
CPU_PLAIN_SPEED_RANGE = (
    f"{min(CPU_PLAIN_SPEED_VS_FLOAT32.values()):.1f}-{max(CPU_PLAIN_SPEED_VS_FLOAT32.values()):.1f}×"
)


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


def choose_quantization(
    mode: str, device_type: str, need_bytes: int, free_bytes: int | None, margin: float = 0.9
) -> QuantChoice:
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
        return QuantChoice(
            "4bit",
            f"bf16 needs about {gib(need_bytes)} but only {gib(free_bytes)} is free; "
            f"8-bit would not fit either: 4-bit NF4",
        )
    raise ConfigError(
        f"the target needs about {gib(need_bytes)} in bf16 and does not fit in {gib(free_bytes)} of free "
        f"GPU memory even in 4-bit: pick a smaller preset."
    )


def cpu_cost_note(mode: str) -> str:
    """What a quantized target costs on a CPU, said before it loads (bitsandbytes saves memory there, not time)."""
    return (
        f"quantization {mode} on a CPU: bitsandbytes saves memory, not time (plain decoding of SmolLM2-135M ran "
        f"at {CPU_PLAIN_SPEED_RANGE} the tokens/s of float32), and the drafts were trained on the full-precision "
        f"target (docs/results.md, 'Quantized targets')"
    )


def free_cuda_bytes(device: torch.device) -> int | None:
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return int(free)


class OncePerProcess(logging.Filter):
    """Lets each warning through once per process (by its logger, message template and arguments)."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[tuple] = set()
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            key = (record.name, str(record.msg), repr(record.args)[:200])
        except Exception:  # noqa: BLE001 - an odd record passes as it is
            return True
        with self._lock:
            if key in self._seen:
                return False
            if len(self._seen) < 1024:  # a bound, should messages vary without end
                self._seen.add(key)
        return True


# bitsandbytes' 8-bit matmul warns "inputs will be cast from torch.float32 to float16" on every call: a line per
# matmul of an 8-bit target.
BNB_LOGGERS = ("bitsandbytes.autograd._functions", "bitsandbytes.nn.modules")


def warn_once(*names: str) -> None:
    """Each of the named loggers lets a given warning through once per process (idempotent)."""
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, OncePerProcess) for f in logger.filters):
            logger.addFilter(OncePerProcess())


def bnb_config(mode: str, compute_dtype: torch.dtype):
    """The BitsAndBytesConfig for a mode, or None for "none"."""
    if mode == "none":
        return None
    try:
        import bitsandbytes  # noqa: F401
        from transformers import BitsAndBytesConfig
    except ImportError as err:  # pragma: no cover - bitsandbytes is in requirements
        raise ConfigError(f"quantization={mode} needs the bitsandbytes package: pip install bitsandbytes") from err
    warn_once(*BNB_LOGGERS)
    if mode == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0)  # row-independent: see the docstring
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_compute_dtype=compute_dtype,
        bnb_4bit_use_double_quant=True,
    )


def use_row_independent_kernels(model: torch.nn.Module) -> int:
    """Keep every bitsandbytes 4-bit layer of `model` off the CPU's fused kernel (it rounds activations to bf16, so
    one-token and batched forwards drift apart), so it dequantizes and multiplies in its compute dtype for any number
    of rows. Call it before the first forward (the fused kernel repacks the weights on first use). Returns the number
    of layers switched."""
    switched = 0
    for module in model.modules():
        if getattr(module, "support_avx512bf16_for_cpu", False):
            if getattr(getattr(module.weight, "quant_state", None), "packing_format_for_cpu", False):
                raise RuntimeError(
                    "a 4-bit layer was already repacked for the fused CPU kernel: call "
                    "use_row_independent_kernels before the model's first forward"
                )
            module.support_avx512bf16_for_cpu = False
            switched += 1
    return switched


# Which 4-bit kernels a target's layers use (`use_kernels`):
# - "row-independent": every forward dequantizes the weights and multiplies in the compute dtype, for one row as for
#   sixty, so a tree's verify pass and a plain step compute a row alike (exact identity in float32 on a CPU). Plain
#   decoding then pays a whole dequantization per layer per token.
# - "fast": bitsandbytes' own choice. On a GPU (bitsandbytes 0.50, `gemm_4bit`) its fused 4-bit kernel for up to 4
#   rows, which reads the packed weights without dequantizing them, and for more rows the fused kernel or
#   dequantize-and-multiply by shape and architecture; on a CPU with AVX-512 BF16 its fused kernel, which rounds the
#   activations to bf16. Rows then round differently alone and in a batch: identity holds up to the near-ties that
#   numerics.py classifies (bf16 compute parts there already).
# "auto": row-independent on a CPU (exact identity, and the faster of the two for trees there), fast on a GPU.
KERNELS = ("auto", "row-independent", "fast")
KERNEL_ENV = "POSS_4BIT_KERNEL"  # the choice for every target this process loads (scripts/gpu_check.sh sets it)


def kernel_choice(device_type: str, asked: str | None = None) -> str:
    """The 4-bit kernels for a target on `device_type`: `asked`, else $POSS_4BIT_KERNEL, else auto's choice."""
    import os

    value = (asked if asked is not None else os.environ.get(KERNEL_ENV, "auto")).strip().lower() or "auto"
    if value not in KERNELS:
        source = "kernel" if asked is not None else KERNEL_ENV
        raise ConfigError(f"{source}={value!r} is unknown: use one of {', '.join(KERNELS)}.")
    if value == "auto":
        return "row-independent" if device_type == "cpu" else "fast"
    return value


def _four_bit_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if getattr(getattr(m, "weight", None), "quant_state", None) is not None]


def dequantized_forward(module: torch.nn.Module):
    """A 4-bit layer's forward as dequantize-and-multiply in its compute dtype, whatever the number of rows (what
    bitsandbytes itself does for many rows on a GPU): the row-independent path off the CPU."""
    import bitsandbytes.functional as bnbf
    import torch.nn.functional as F

    def forward(x: torch.Tensor) -> torch.Tensor:
        dtype = getattr(module, "compute_dtype", None) or x.dtype
        weight = bnbf.dequantize_4bit(module.weight.data, module.weight.quant_state).to(dtype)
        bias = None if module.bias is None else module.bias.to(dtype)
        return F.linear(x.to(dtype), weight, bias).to(x.dtype)

    return forward


def use_kernels(model: torch.nn.Module, kernel: str | None = None) -> str | None:
    """Set up `model`'s 4-bit layers for `kernel` (see KERNELS; None: $POSS_4BIT_KERNEL, else auto) before its first
    forward. Returns the kernels chosen, or None when the model has no 4-bit layer (8-bit has no such choice)."""
    layers = _four_bit_layers(model)
    if not layers:
        return None
    device_type = layers[0].weight.device.type
    choice = kernel_choice(device_type, kernel)
    if choice == "row-independent":
        if device_type == "cpu":
            use_row_independent_kernels(model)
        else:
            for layer in layers:
                layer.forward = dequantized_forward(layer)
    return choice
