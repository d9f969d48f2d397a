"""Where a training batch's target features come from: stored shards read through memory maps (offline), or the frozen
target run on the batch as training uses it (online). Either way only the batch's own rows are ever in memory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open

from ..base.errors import PossError
from ..models.target import TargetModel
from .trainer import TrainSequence

FEATURE_MODES = ("auto", "online", "offline")
FeatureFill = Callable[[list[TrainSequence]], list[TrainSequence]]
STORED_DTYPE = torch.bfloat16  # the precision data folders store features in; online features are rounded to it too


def shard_files(folder: str | Path) -> list[Path]:
    """A data folder's shards, or a clear error naming what is missing."""
    folder = Path(folder)
    if not folder.is_dir():
        raise PossError(
            f"data folder {folder} does not exist: build it with python -m poss_core.training.data "
            f"(or python -m poss_core.training.recipe data)."
        )
    files = sorted(folder.glob("shard-*.safetensors"))
    if not files:
        raise PossError(f"data folder {folder} has no shard-*.safetensors: run python -m poss_core.training.data.")
    return files


def index_shards(folder: str | Path, max_len: int = 512) -> list[TrainSequence]:
    """The sequences of a data folder as `read_shards` gives them (cut to `max_len`, rows without an answer token
    left out), with only their tokens in memory: each keeps where its features lie (`origin`) for `StoredFeatures`."""
    seqs = []
    for f in shard_files(folder):
        with safe_open(str(f), framework="pt") as shard:
            tokens, mask = shard.get_tensor("tokens"), shard.get_tensor("loss_mask")
            off = shard.get_tensor("offsets").tolist()
            stored = "hidden" in shard.keys()
        for a, b in zip(off[:-1], off[1:]):
            b = min(b, a + max_len)
            if not bool(mask[a + 1 : b].any()):  # row 0 is never a prediction target
                continue
            seqs.append(TrainSequence(tokens[a:b].long(), None, mask[a:b], (str(f), a, b) if stored else None))
    return seqs


def stored_features(rows: list[TrainSequence]) -> list[TrainSequence]:
    """Rows with their stored features, read from the shards' memory maps (a few rows' worth of the file at a time)."""
    out = list(rows)
    by_file: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        if r.hidden is None and r.origin is not None:
            by_file.setdefault(r.origin[0], []).append(i)
    for path, todo in by_file.items():
        with safe_open(path, framework="pt") as shard:
            hidden = shard.get_slice("hidden")
            for i in todo:
                _, a, b = rows[i].origin
                out[i] = TrainSequence(rows[i].input_ids, hidden[a:b], rows[i].loss_mask, rows[i].origin)
    return out


@torch.inference_mode()
def features_batch(target: TargetModel, seqs: list[list[int]]) -> list[torch.Tensor]:
    """The target's last hidden states (after the final norm) for each sequence (right padding, real tokens only)."""
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    hidden = target.decoder(input_ids=ids.to(target.device), attention_mask=mask.to(target.device)).last_hidden_state
    return [hidden[i, : len(s)].cpu() for i, s in enumerate(seqs)]


def target_features(target: TargetModel) -> FeatureFill:
    """Rows with features computed by the frozen `target` on its device, rounded to the stored precision so a run
    online trains on what the same run offline would read. Rows that already have features pass through."""

    def fill(rows: list[TrainSequence]) -> list[TrainSequence]:
        todo = [i for i, r in enumerate(rows) if r.hidden is None]
        if not todo:
            return rows
        hidden = features_batch(target, [rows[i].input_ids.tolist() for i in todo])
        out = list(rows)
        for i, h in zip(todo, hidden):
            out[i] = TrainSequence(rows[i].input_ids, h.to(STORED_DTYPE), rows[i].loss_mask, rows[i].origin)
        return out

    return fill


def feature_fill(target_name: str, dtype: torch.dtype) -> FeatureFill:
    """Features for rows that have none, from a copy of the target in `dtype` (bf16: faster than fp32 on a CPU, and
    the precision data folders store features in). Rows that have features pass through untouched; the computed ones
    are not kept, so memory stays that of the tokens."""
    from ..models.loading import load_preset_target

    return target_features(load_preset_target(target_name, quantization="none", dtype=dtype))


def check_feature_mode(mode: str, seqs: list[TrainSequence], folders: list[str]) -> None:
    """`offline` needs every folder to hold features; say which does not and what to do."""
    if mode not in FEATURE_MODES:
        raise PossError(f"--features {mode!r} is unknown: use {', '.join(FEATURE_MODES)}.")
    if mode == "offline" and any(s.origin is None and s.hidden is None for s in seqs):
        bare = [f for f in folders if any(s.origin is None for s in index_shards(f, 1 << 30))]
        raise PossError(
            f"--features offline: {', '.join(bare)} holds token ids only (data --tokens-only): use --features online "
            f"(the target computes each batch's features), or rebuild the folder with its features."
        )


def needs_target(mode: str, seqs: list[TrainSequence]) -> bool:
    """Whether training runs the target for features: always online, and for tokens-only rows in `auto`."""
    return mode == "online" or (mode == "auto" and any(s.origin is None and s.hidden is None for s in seqs))


def feature_source(mode: str, target: TargetModel | None) -> FeatureFill:
    """The fill a run's batches go through: stored features (offline), the target's (online), or stored where a
    folder has them and the target's elsewhere (auto)."""
    if mode == "offline":
        return stored_features
    compute = target_features(target) if target is not None else (lambda rows: rows)
    if mode == "online":
        return lambda rows: compute([TrainSequence(r.input_ids, None, r.loss_mask, r.origin) for r in rows])
    return lambda rows: compute(stored_features(rows))
