"""A draft on the Hub: its model card (a README.md with the Hub's metadata) and a model-repo copy of it, weights in
shards under the Hub's 10 MB limit for plain files."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from .hub_files import SpaceError, StagedFile, list_files

CARD_FILE = "model_card.json"
DEFAULT_SHARD_SIZE = "9MB"

# What the Hub card says about drafts of a known target, keyed by the target folder's name (our drafts record a local
# path: the default target is prepared from a GGUF into a cache folder). Unknown targets need --base-model etc.
KNOWN_TARGETS: dict[str, dict[str, Any]] = {
    "smollm2-135m-instruct": {
        "base_model": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "license": "apache-2.0",
        # Training prompts (the target wrote the answers): GSM8K train questions, self-instruct seed and
        # user-oriented tasks, and T0 (P3) prompt templates; plus prompts the target wrote itself.
        "datasets": ["openai/gsm8k", "yizhongw/self_instruct", "bigscience/P3"],
    },
}


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise SpaceError(f"{path} is not valid JSON ({err.msg}).") from err


def card_metadata(
    draft_dir: Path, base_model: str | None = None, license: str | None = None, datasets: list[str] | None = None
) -> dict[str, Any]:
    """The card's YAML metadata: the flags, else model_card.json's own keys, else what is known of its target."""
    card, meta = _read_json(draft_dir / CARD_FILE), _read_json(draft_dir / "poss_draft.json")
    target = str(meta.get("target") or card.get("target") or "")
    known = KNOWN_TARGETS.get(Path(target).name.lower(), {})
    if not known and re.fullmatch(r"[\w.-]+/[\w.-]+", target) and not Path(target).exists():
        known = {"base_model": target}  # a Hugging Face id
    base = base_model or card.get("base_model") or known.get("base_model")
    if not base:
        raise SpaceError(
            f"{draft_dir}: its target {target or '(not recorded)'!r} is not a Hugging Face id; give "
            f"--base-model ID (the target model this draft speeds up)."
        )
    method = str(meta.get("method") or card.get("method") or "")
    kind = {"eagle": ["eagle"], "poss": ["poss", "position-specialists"], "stacked": ["stacked-draft"]}
    tags = ["speculative-decoding", "draft-model", *kind.get(method, []), "safetensors"]
    return {
        "library_name": "poss-demo",
        "base_model": base,
        "tags": tags,
        "license": license or card.get("license") or known.get("license") or "other",
        "datasets": list(datasets or card.get("datasets") or known.get("datasets") or []),
    }


def model_card(draft_dir: str | os.PathLike, **overrides) -> str:
    """A Hub model card (README.md) for a draft folder, built from its model_card.json and poss_draft.json."""
    import yaml

    folder = Path(draft_dir)
    if not (folder / "config.json").is_file():
        raise SpaceError(f"{folder} is not a draft folder (no config.json).")
    card, meta = _read_json(folder / CARD_FILE), _read_json(folder / "poss_draft.json")
    data = card_metadata(folder, **overrides)
    label = card.get("label") or meta.get("label") or folder.name
    layers, n = meta.get("num_layers", "?"), meta.get("positions_per_specialist", "?")
    lines = [
        "---",
        yaml.safe_dump(data, sort_keys=False, allow_unicode=True).strip(),
        "---",
        "",
        f"# {label}: a draft model for speculative decoding of {data['base_model']}",
        "",
        f"A draft head (method `{meta.get('method', '?')}`, {layers} layer(s), {n} draft position(s) per specialist) "
        f"that proposes a tree of tokens the target model then verifies, so generation is lossless and faster. "
        f"It reads the target's last hidden state and shares its embedding and LM head, which this checkpoint does "
        f"not carry. It is loaded by the POSS vs EAGLE demo's `poss_core` package, not by `transformers`.",
        "",
        "## Use",
        "",
        "```bash",
        'python -m poss_core.generate --preset smollm2-135m --draft hub:OWNER/NAME --prompt "Why is the sky blue?"',
        "```",
        "",
        "`poss_draft.json` records the method, the draft vocabulary and a fingerprint of the target it was trained "
        "for; loading refuses another target.",
        "",
    ]
    acc = card.get("heldout_top1_by_position_decoding")
    if acc:
        lines += [
            "## Held-out top-1 agreement with the target, by draft position",
            "",
            "| " + " | ".join(f"k={i + 1}" for i in range(len(acc))) + " |",
            "|" + "---|" * len(acc),
            "| " + " | ".join(f"{a:.3f}" for a in acc) + " |",
            "",
        ]
    if "steps" in card or "data" in card:
        d = card.get("data") or {}
        init = f"; {card['init']}" if card.get("init") else ""

        def num(key: str) -> str:
            return f"{d[key]:,}" if isinstance(d.get(key), int) else "?"

        lines += [
            "## Training",
            "",
            f"Self-distillation: the target wrote the answers to the training prompts. "
            f"{card.get('steps', '?')} steps this run{init}. {num('sequences')} sequences, "
            f"{num('answer_tokens')} answer tokens, a draft vocabulary of {num('draft_vocab')} tokens. "
            f"Every setting: `model_card.json`.",
            "",
        ]
    return "\n".join(lines)


def write_model_card(draft_dir: str | os.PathLike, out: str | os.PathLike | None = None, **overrides) -> Path:
    path = Path(out) if out else Path(draft_dir) / "README.md"
    path.write_text(model_card(draft_dir, **overrides), encoding="utf-8")
    return path


def export_hub(
    draft_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    max_shard_size: str | int = DEFAULT_SHARD_SIZE,
    **card_overrides,
) -> list[StagedFile]:
    """A Hub model-repo copy of a draft: config.json, weights sharded under `max_shard_size` (with the standard
    model.safetensors.index.json when more than one shard), our metadata files and the README.md model card."""
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file

    from ..models.checkpoint import META_FILE, read_weights

    src, out = Path(draft_dir), Path(out_dir)
    if not (src / "config.json").is_file():
        raise SpaceError(f"{src} is not a draft folder (no config.json).")
    if out.exists() and any(out.iterdir()):
        raise SpaceError(f"{out} exists and is not empty: export into a new folder.")
    readme = model_card(src, **card_overrides)  # fails early on a missing base model
    state = read_weights(src)
    split = split_torch_state_dict_into_shards(
        state, filename_pattern="model{suffix}.safetensors", max_shard_size=max_shard_size
    )
    out.mkdir(parents=True, exist_ok=True)
    for filename, names in split.filename_to_tensors.items():
        save_file({k: state[k].contiguous() for k in names}, str(out / filename), metadata={"format": "pt"})
    if split.is_sharded:
        index = {"metadata": {**split.metadata}, "weight_map": split.tensor_to_filename}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    for name in ("config.json", META_FILE, CARD_FILE):
        if (src / name).is_file():
            shutil.copy2(src / name, out / name)
    (out / "README.md").write_text(readme, encoding="utf-8")
    return list_files(out)
