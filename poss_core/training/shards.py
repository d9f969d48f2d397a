"""A data folder on disk: its shards (tokens, loss mask, offsets, bf16 features or none), the batches they are planned
in, and the generated token ids kept beside them (`tokens/`, packed into one `.npz` to commit)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ..base.errors import PossError
from .trainer import TrainSequence


def write_shard(path: Path, seqs: list[list[int]], prompt_lens: list[int], hidden: list[torch.Tensor] | None) -> None:
    """One batch's rows; `hidden` None writes a tokens-only shard (the trainer computes its features per batch)."""
    tokens = torch.tensor([t for s in seqs for t in s], dtype=torch.int32)
    loss_mask = torch.tensor(
        [int(i >= pl) for s, pl in zip(seqs, prompt_lens) for i in range(len(s))], dtype=torch.uint8
    )
    offsets = torch.tensor(
        [0] + list(torch.cumsum(torch.tensor([len(s) for s in seqs]), 0).tolist()), dtype=torch.int64
    )
    tensors = {"tokens": tokens, "loss_mask": loss_mask, "offsets": offsets}
    if hidden is not None:
        tensors["hidden"] = torch.cat(hidden).to(torch.bfloat16).contiguous()
    tmp = path.with_suffix(".partial")
    save_file(tensors, str(tmp))
    tmp.rename(path)  # a shard exists only when complete: resuming never reads half a shard


def read_shards(folder: str | Path, max_len: int = 512) -> list[TrainSequence]:
    """All sequences of a data folder, cut to `max_len` tokens; features stay bf16 until batched (None in a tokens-only
    folder). A sequence whose cut leaves no answer token (a long document's prompt alone) is left out: it would train
    nothing."""
    seqs = []
    for f in sorted(Path(folder).glob("shard-*.safetensors")):
        d = load_file(str(f))
        off = d["offsets"].tolist()
        for a, b in zip(off[:-1], off[1:]):
            b = min(b, a + max_len)
            if not bool(d["loss_mask"][a + 1 : b].any()):  # row 0 is never a prediction target
                continue
            hidden = d["hidden"][a:b] if "hidden" in d else None
            seqs.append(TrainSequence(d["tokens"][a:b].long(), hidden, d["loss_mask"][a:b]))
    return seqs


def shard_plan(lengths: list[int], batch_size: int, seed: int) -> list[list[int]]:
    """Deterministic batches of prompt indices, the same on every (re)run: prompts of similar length share a batch
    (less padding), and the batches come in a seeded random order."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    plan = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    random.Random(seed).shuffle(plan)
    return plan


def shard_path(out: Path, i: int) -> Path:
    """Planned batch `i`'s shard in folder `out` (it exists only once complete)."""
    return out / f"shard-{i:05d}.safetensors"


def tokens_path(out: Path, i: int) -> Path:
    return out / "tokens" / f"tokens-{i:05d}.json"


@dataclass
class TokenShard:
    """One batch's generated rows: prompt + answer token ids and where each answer starts."""

    index: int
    input_ids: list[list[int]]
    prompt_lens: list[int]


def pack_token_ids(token_dir: Path, out_file: Path, card: dict | None = None) -> dict:
    """Every `tokens-XXXXX.json` of a folder in one compressed `.npz` (flat int32 ids, row lengths, prompt lengths,
    each shard's index and row count, and the folder's data card as JSON text): a fraction of the JSON's size, one
    file instead of dozens."""
    files = sorted(Path(token_dir).glob("tokens-*.json"))
    if not files:
        raise PossError(f"{token_dir}: no tokens-*.json files to pack.")
    ids, row_lens, prompt_lens, shard_index, shard_rows = [], [], [], [], []
    for f in files:
        rows = json.loads(f.read_text())
        shard_index.append(int(f.stem.split("-")[1]))
        shard_rows.append(len(rows["input_ids"]))
        for seq, pl in zip(rows["input_ids"], rows["prompt_lens"]):
            ids.extend(seq)
            row_lens.append(len(seq))
            prompt_lens.append(pl)
    arrays = {
        "input_ids": np.asarray(ids, dtype=np.int32),
        "row_lens": np.asarray(row_lens, dtype=np.int32),
        "prompt_lens": np.asarray(prompt_lens, dtype=np.int32),
        "shard_index": np.asarray(shard_index, dtype=np.int32),
        "shard_rows": np.asarray(shard_rows, np.int32),
        "card": np.asarray(json.dumps(card or {})),
    }  # a unicode scalar: loads without pickle
    out_file.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out_file, **arrays)
    return {"shards": len(files), "rows": len(row_lens), "tokens": len(ids)}


def read_token_ids(path: str | Path) -> list[TokenShard]:
    """The shards of a `pack_token_ids` file, in shard order (a clear error for a missing or malformed file)."""
    path = Path(path)
    if not path.is_file():
        raise PossError(f"token id file {path} does not exist.")
    try:
        with np.load(path, allow_pickle=False) as z:
            ids, row_lens, prompt_lens = z["input_ids"], z["row_lens"], z["prompt_lens"]
            shard_index, shard_rows = z["shard_index"], z["shard_rows"]
    except (OSError, KeyError, ValueError) as e:
        raise PossError(f"{path} is not a token id file written by pack_token_ids: {e}") from e
    if int(shard_rows.sum()) != len(row_lens) or int(row_lens.sum()) != len(ids) or len(prompt_lens) != len(row_lens):
        raise PossError(f"{path}: its row and shard counts do not add up; the file is damaged.")
    shards, row, start = [], 0, 0
    for index, n in zip(shard_index.tolist(), shard_rows.tolist()):
        seqs = []
        for length in row_lens[row : row + n].tolist():
            seqs.append(ids[start : start + length].tolist())
            start += length
        shards.append(TokenShard(index, seqs, prompt_lens[row : row + n].tolist()))
        row += n
    return shards
