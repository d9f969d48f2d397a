"""The drafts a training run makes: each method's shape, the starting weights every method shares (a fresh layer or a
trained draft's), and the draft vocabulary chosen from the training rows."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import torch

from ..base.errors import PossError
from ..models.checkpoint import load_draft
from ..models.draft import DraftModel, DraftSpec, draft_config_from_target
from ..models.target import TargetModel
from .trainer import TrainSequence

METHODS = {
    # name: (method, positions per specialist, simulated positions per step or 0 for "the depth")
    "eagle": ("eagle", 1, 1),
    "poss1": ("poss", 1, 0),
    "poss2": ("poss", 2, 0),
    "poss3": ("poss", 3, 0),
    "matched": ("stacked", 2, 1),
    # HASS's idea as a control for POSS: EAGLE's one layer, trained on the same unrolled positions as POSS (with
    # --unroll decoding), so POSS minus hass is what position specialisation adds.
    "hass": ("eagle", 1, 0),
}


def method_names(text: str) -> list[str]:
    """The comma-separated --methods, each one a key of METHODS."""
    names = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in METHODS]
    if unknown:
        raise PossError(f"unknown method(s) {unknown}: use {', '.join(METHODS)}.")
    return names


def draft_layers(name: str, depth: int) -> tuple[int, int]:
    """A method's draft layers and the positions each training step simulates."""
    method, n, positions = METHODS[name]
    return (1 if method == "eagle" else math.ceil(depth / n)), (positions or depth)


def build_draft_vocab(seqs: list[TrainSequence], size: int, always: set[int]) -> torch.Tensor:
    """The draft vocabulary: the EOS/special ids in `always`, then the most frequent answer tokens, then (to cover
    text the answers never used) the most frequent prompt tokens, up to `size` ids, sorted."""
    answers: Counter[int] = Counter()
    prompts: Counter[int] = Counter()
    for s in seqs:
        mask = s.loss_mask.bool()
        answers.update(s.input_ids[mask].tolist())
        prompts.update(s.input_ids[~mask].tolist())
    chosen = set(always)
    for counts in (answers, prompts):
        for tok, _ in counts.most_common():
            if len(chosen) >= size:
                break
            chosen.add(tok)
    return torch.tensor(sorted(chosen), dtype=torch.long)


def vocab_coverage(seqs: list[TrainSequence], vocab: torch.Tensor) -> float:
    inside = set(vocab.tolist())
    total = hit = 0
    for s in seqs:
        toks = s.input_ids[s.loss_mask.bool()].tolist()
        total += len(toks)
        hit += sum(t in inside for t in toks)
    return hit / max(1, total)


def make_draft(
    target: TargetModel, name: str, depth: int, vocab: torch.Tensor | None, init: DraftModel | None, seed: int
) -> DraftModel:
    """A draft of kind `name`; its layers copy `init`'s first layer (so every method starts the same)."""
    method, n, _ = METHODS[name]
    layers = draft_layers(name, depth)[0]
    torch.manual_seed(seed)
    draft = DraftModel(draft_config_from_target(target.config), DraftSpec(method, layers, n, True), vocab).float()
    if init is not None:
        draft.fc.load_state_dict(init.fc.state_dict())
        for layer in draft.layers:
            # strict=False: stacked layers after the first keep their own (fresh) input norm.
            layer.load_state_dict(init.layers[0].state_dict(), strict=False)
    draft.bind_target(target.input_embedding_weight(), target.lm_head_weight())
    return draft


def trained_draft(folder: str | Path, name: str, option: str, target: TargetModel) -> tuple[DraftModel, Path, str]:
    """The trained draft in `folder/name` (errors name the CLI `option` that asked for it), its folder, and where it
    came from with its step count, for the model card."""
    path = Path(folder) / name
    if not path.is_dir():
        raise PossError(f"{option} {folder}: there is no trained '{name}' draft in it ({path} is missing).")
    card = json.loads((path / "model_card.json").read_text()) if (path / "model_card.json").is_file() else {}
    return load_draft(path, target), path, f"{path} ({card.get('steps', '?')} steps before)"


def continue_from(draft: DraftModel, folder: str | Path, target: TargetModel, name: str) -> str:
    """Load the trained weights of `folder/name` into `draft` (its draft vocabulary may differ: the LM head is the
    target's, sliced, so only the fc and the layers carry over). Returns a description for the model card."""
    trained, path, source = trained_draft(folder, name, "--init-from", target)
    if trained.spec.method != draft.spec.method or len(trained.layers) != len(draft.layers):
        raise PossError(
            f"{path} is a {trained.spec.label} draft with {len(trained.layers)} layer(s); '{name}' needs "
            f"{draft.spec.method} with {len(draft.layers)}: continue from the drafts of the same methods."
        )
    weights = {k: v.float() for k, v in trained.state_dict().items() if not k.startswith("embed_tokens.")}
    draft.load_state_dict(weights, strict=False)
    return f"continued from {source}"


def trained_eagle(folder: str | Path, target: TargetModel) -> tuple[DraftModel, str]:
    """The trained EAGLE draft in `folder/eagle`, whose fc and layer every method's layers start from."""
    eagle, _, source = trained_draft(folder, "eagle", "--specialists-from", target)
    return eagle.float(), f"every layer copied from {source}"
