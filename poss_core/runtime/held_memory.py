"""What a comparison holds in memory, for the app's budget of what tabs keep: bytes per round and per drafted node,
and the tensors a paused decoder's generator keeps between rounds."""

from __future__ import annotations

from typing import Any

# What a comparison's rounds hold in memory, for the app's budget of what tabs keep: tracemalloc around loading saved
# tiny-random runs (1,650 to 21,700 nodes, 135 to 207 rounds, three lanes) fits about 240 bytes per drafted node
# (its DraftNode, its label text) and 3.2 to 3.9 KB per round (the event, its token records, texts and deviations),
# 1.6 to 2.1 times the saved file; rounded up here.
NODE_BYTES = 300
ROUND_BYTES = 4000


_NOT_WALKED = ("TargetModel", "Detokenizer", "TokenTexts", "_Stream")  # shared models, texts and token ids


def generator_tensor_bytes(source: Any, limit: int = 20_000) -> int:
    """The bytes of the tensors a paused decoder's generator (and the generators it delegates to) holds in its
    locals, each storage counted once: its KV caches, the draft's state, the committed features. Models and
    tokenizers are not walked (their weights are shared by every lane); at most `limit` objects are visited."""
    import torch

    frame = getattr(source, "gi_frame", None)
    if frame is None:
        return 0
    seen_objs: set[int] = set()
    storages: dict[int, int] = {}
    stack = [v for k, v in frame.f_locals.items() if k != "self"]
    while stack and len(seen_objs) < limit:
        obj = stack.pop()
        if id(obj) in seen_objs or obj is None or isinstance(obj, (str, bytes, int, float, bool, torch.nn.Module)):
            continue
        seen_objs.add(id(obj))
        if isinstance(obj, torch.Tensor):
            if not isinstance(obj, torch.nn.Parameter) and obj.device.type != "meta":
                storage = obj.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
        elif hasattr(obj, "gi_frame"):  # a generator this one delegates to (the oracle's rounds)
            if obj.gi_frame is not None:
                stack.extend(v for k, v in obj.gi_frame.f_locals.items() if k != "self")
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            if obj and isinstance(next(iter(obj)), (int, float, str)):
                continue  # token ids and texts: no tensors in them
            stack.extend(obj)
        elif hasattr(obj, "__dict__"):
            kind = type(obj)
            if kind.__name__ in _NOT_WALKED or kind.__module__.startswith(("transformers.tokenization", "tokenizers")):
                continue
            stack.extend(vars(obj).values())
    return sum(storages.values())
