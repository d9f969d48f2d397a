"""What this machine has: a GPU or not, the CPU's bf16 units, and the hardware a run or a timing belongs to (what the
app's header, saved runs, the benchmark's report and the tree-budget cache record)."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch


def cuda_available() -> bool:
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch build with CUDA is just "no GPU"
        return False


def cpu_bf16_units() -> str | None:
    """The CPU's native bf16 instructions ("AMX" or "AVX-512 BF16"), or None: where bf16 is faster than fp32 here."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:  # not Linux: no cheap way to tell, so make no claim
        return None
    if "amx_bf16" in flags:
        return "AMX"
    return "AVX-512 BF16" if "avx512_bf16" in flags else None


def cuda_bf16_units(device: torch.device | int | None = None) -> bool:
    """Whether a CUDA card multiplies bf16 in hardware: compute capability 8.0 (Ampere) or newer. Asked of the
    capability rather than `torch.cuda.is_bf16_supported()`, which also says yes for older cards that only emulate
    bf16 (slowly); a T4 (7.5), V100 (7.0) or P100 (6.0) has fp16 units only."""
    try:
        major, _minor = torch.cuda.get_device_capability(device)
    except Exception:  # noqa: BLE001 - no CUDA here: no bf16 units to use
        return False
    return major >= 8


def auto_dtype(device: torch.device) -> torch.dtype:
    """The precision `auto` loads a target in: float32 on a CPU (exact identity with plain decoding), bf16 on a CUDA
    card with bf16 units and fp16 on one without (a T4 has no bf16 units; fp16 keeps its tensor cores busy), bf16 on
    other accelerators (Apple MPS). fp16's range is narrower: a model whose activations overflow it (Qwen2) needs
    --dtype float32 on such a card."""
    if device.type == "cpu":
        return torch.float32
    if device.type == "cuda":
        return torch.bfloat16 if cuda_bf16_units(device) else torch.float16
    return torch.bfloat16


def device_description(device: torch.device) -> str:
    """The hardware a timing belongs to: GPU name, or CPU model, core count and torch threads."""
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        pass
    return f"{device.type}:{name}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"


def model_label(name: str) -> str:
    """A target's name as the hardware record shows it: a model prepared in the model cache by its folder name
    ("smollm2-135m-instruct (prepared in the model cache)"), since the cache's path is this machine's (and a public
    server's record must not name its folders); a Hub id or another folder as it is."""
    from .default_model import cache_root

    try:
        inside = Path(name).resolve().relative_to(cache_root().resolve())
    except (ValueError, OSError):
        return name
    return f"{inside} (prepared in the model cache)"


def hardware_info(target) -> dict[str, str]:
    device = str(target.device)
    if target.device.type == "cuda":
        device += f" ({torch.cuda.get_device_name(target.device)})"
    else:
        device += f" ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    return {
        "model": model_label(str(target.name)),
        "device": device,
        "dtype": str(target.dtype).replace("torch.", ""),
        "quantization": str(target.quantization),
        "attention": str(getattr(target, "attention", "sdpa")),
        "context": str(target.max_context),
        "torch": torch.__version__,
    }
