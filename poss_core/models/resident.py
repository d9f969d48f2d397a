"""The memory models hold while loaded, and handing freed memory back to the system."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from typing import Any

import torch


def model_bytes(*models: Any) -> int:
    """The bytes of the weights and buffers of `models` (torch modules, or objects holding one as `.model`, such as
    a TargetModel), each storage counted once: a draft that shares the target's embeddings adds only its own."""
    storages: dict[int, int] = {}
    for obj in models:
        module = obj if isinstance(obj, torch.nn.Module) else getattr(obj, "model", None)
        if not isinstance(module, torch.nn.Module):
            continue
        for tensor in (*module.parameters(), *module.buffers()):
            if tensor.device.type == "meta":
                continue
            storage = tensor.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


_MALLOC_TRIM: Any = None


def release_memory() -> bool:
    """Return freed memory to the system: collect Python's cycles, then ask glibc to give back the free pages it
    keeps (`malloc_trim(0)`; without it the process's RSS stays at its peak after models or caches are freed).
    False where the C library has no malloc_trim (musl, macOS): collecting is all then."""
    global _MALLOC_TRIM
    gc.collect()
    if _MALLOC_TRIM is None:
        try:
            _MALLOC_TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
            _MALLOC_TRIM.argtypes, _MALLOC_TRIM.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError):
            _MALLOC_TRIM = False
    return bool(_MALLOC_TRIM and _MALLOC_TRIM(0))
