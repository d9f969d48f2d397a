"""Draft checkpoints: the released EAGLE/HASS/POSS layout (config.json + weights), plus our metadata file.

Weights: one file, or the Hub's sharded layout (model-0000i-of-0000N.safetensors + model.safetensors.index.json).

Keys: embed_tokens.weight, fc.weight (fc.bias), layers.{i}.self_attn.{q,k,v,o}_proj.weight,
layers.{i}.mlp.{gate,up,down}_proj.weight, layers.{i}.post_attention_layernorm.weight."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig

from ..base.errors import CheckpointError, PossError
from .draft import METHODS, DraftModel, DraftSpec, draft_config_from_target
from .target import TargetModel

META_FILE = "poss_draft.json"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# The Hub's sharded layout: model-00001-of-0000N.safetensors plus an index naming each tensor's shard.
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


# The fingerprint's sample: a strided set of vocabulary rows, their first columns (all of a small embedding).
FINGERPRINT_ROWS, FINGERPRINT_COLS = 256, 1024


def target_fingerprint(target: TargetModel) -> str:
    """A short hash of the target's sizes and the sign bits of a strided sample of its input embedding.

    Only sign bits are used because they are the one thing every precision keeps: rounding to nearest never changes
    a sign, and a value too small for float16 (below its subnormal range) becomes a signed zero. Magnitudes are
    not: float32 -> bfloat16 and float32 -> float16 -> bfloat16 round differently (double rounding, float16's
    subnormals), and any bucketing of magnitudes has edges a rounding can cross. So the same weights give the same
    fingerprint in float32, bfloat16 and float16, on any device, and with a quantized target (whose embedding is
    kept in the compute dtype). A different model, or a fine-tune that moved the embedding, flips some of the
    256 x 1024 sampled signs (an unrelated one about half of them)."""
    emb = target.input_embedding_weight().detach()
    sample = emb[:: max(1, emb.shape[0] // FINGERPRINT_ROWS)][:FINGERPRINT_ROWS, :FINGERPRINT_COLS]
    signs = torch.signbit(sample).to("cpu").numpy()
    h = hashlib.sha256()
    h.update(f"signs:{target.vocab_size}x{target.hidden_size}:{tuple(sample.shape)}".encode())
    h.update(np.packbits(signs).tobytes())
    return h.hexdigest()[:16]


def _weights_file(folder: Path) -> Path:
    """The single weights file, else the sharded layout's index."""
    for name in (*WEIGHT_FILES, *INDEX_FILES):
        if (folder / name).is_file():
            return folder / name
    raise CheckpointError(
        f"{folder} has no draft weights: expected one of {', '.join(WEIGHT_FILES)} or a sharded "
        f"checkpoint with {' or '.join(INDEX_FILES)}."
    )


def read_weights(folder: str | os.PathLike) -> dict[str, torch.Tensor]:
    """A checkpoint folder's tensors, from one weights file or from the shards its index names."""
    path = _weights_file(Path(folder))
    return read_sharded(path) if path.name in INDEX_FILES else read_state_dict(path)


def read_weight_map(index_path: Path, error: type[PossError] = CheckpointError) -> dict[str, str]:
    """A shard index's weight map (tensor name -> shard file). Anything else (not JSON, a list, a map whose entries
    are not names) raises `error` (CheckpointError for a draft, ModelLoadError for a target) saying what it needs."""
    needs = "it needs a 'weight_map' object of tensor name -> shard file"
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise error(f"{index_path} is not a valid shard index ({needs}): {type(err).__name__}.") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        found = type(weight_map if isinstance(index, dict) else index).__name__
        raise error(f"{index_path} is not a valid shard index ({needs}; found {found}).")
    return weight_map


def read_sharded(index_path: Path) -> dict[str, torch.Tensor]:
    """Tensors of a sharded checkpoint: every shard its index names, checked against the index's weight map."""
    weight_map = read_weight_map(index_path)
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        shard_path = index_path.parent / shard
        if Path(shard).name != shard or not shard_path.is_file():
            raise CheckpointError(f"{index_path} names shard {shard!r}, which is not a file in {index_path.parent}.")
        state.update(read_state_dict(shard_path))
    missing = sorted(set(weight_map) - set(state))
    if missing:
        raise CheckpointError(
            f"{index_path.parent}: the index lists tensors no shard holds: {missing[:8]}"
            f"{' ...' if len(missing) > 8 else ''}."
        )
    return state


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Read weights without ever executing pickled code (weights_only for .bin)."""
    try:
        if path.suffix == ".safetensors":
            return load_file(str(path))
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except (SafetensorError, RuntimeError, EOFError, ValueError, OSError, Exception) as err:  # noqa: B014
        raise CheckpointError(
            f"{path} is truncated or corrupt ({type(err).__name__}: "
            f"{str(err).splitlines()[0][:200] if str(err) else 'unreadable'})."
        ) from err


def _num_layers(keys) -> int:
    idx = [int(m.group(1)) for k in keys if (m := re.match(r"layers\.(\d+)\.", k))]
    if not idx:
        raise CheckpointError("the checkpoint has no draft layers (no 'layers.N.' keys): is this a draft?")
    return max(idx) + 1


def expected_keys(draft: DraftModel, with_embedding: bool) -> set[str]:
    keys = set(draft.state_dict().keys())
    return keys if with_embedding else {k for k in keys if not k.startswith("embed_tokens.")}


def load_draft(
    path: str | os.PathLike,
    target: TargetModel,
    positions_per_specialist: int | None = None,
    allow_other_target: bool = False,
) -> DraftModel:
    """Load a released or our own draft for `target`, refusing one made for another target."""
    folder = Path(path)
    if not folder.is_dir():
        raise CheckpointError(
            f"draft folder {str(folder)!r} does not exist (give a checkpoint folder, a preset's "
            f"draft name, or random:eagle|poss1|poss2|poss3|matched)."
        )
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder} has no config.json: a draft checkpoint needs one.")
    raw_cfg = _read_json(folder / "config.json")
    meta = _read_json(folder / META_FILE) if (folder / META_FILE).is_file() else {}
    check_draft_config(raw_cfg, meta, target, positions_per_specialist, where=str(folder / "config.json"))
    state = read_weights(folder)  # one file or the Hub's shards
    fp = meta.get("target_fingerprint")
    if fp and fp != target_fingerprint(target):
        msg = (
            f"this draft was trained for target {meta.get('target', '?')!r} (fingerprint {fp}) but the loaded "
            f"target's weights differ (fingerprint {target_fingerprint(target)}); acceptance will suffer."
        )
        if not allow_other_target:
            raise CheckpointError(msg + " Pass allow_other_target=True (--allow-other-target) to use it anyway.")
        warnings.warn(msg, stacklevel=2)

    layers = _num_layers(state.keys())
    if layers > MAX_DRAFT_LAYERS:
        raise CheckpointError(
            f"{folder}: the weights name {layers} draft layers; a draft has at most {MAX_DRAFT_LAYERS}."
        )
    n = positions_per_specialist or int(meta.get("positions_per_specialist", 1))
    method = meta.get("method") or ("eagle" if layers == 1 else "poss")
    bias = bool(raw_cfg.get("bias", True))  # Llama-2 drafts have no key and a bias
    spec = DraftSpec(method=method, num_layers=layers, positions_per_specialist=n, bias=bias)
    vocab_ids = meta.get("draft_vocab")
    draft = DraftModel(
        _draft_config(raw_cfg, target), spec, torch.tensor(vocab_ids, dtype=torch.long) if vocab_ids else None
    )
    with_embedding = "embed_tokens.weight" in state
    want = expected_keys(draft, with_embedding)
    missing, unexpected = sorted(want - set(state)), sorted(set(state) - want)
    if missing or unexpected:
        raise CheckpointError(
            f"{folder} does not match the draft layout: missing keys {missing[:8]}"
            f"{' ...' if len(missing) > 8 else ''}, unexpected keys {unexpected[:8]}"
            f"{' ...' if len(unexpected) > 8 else ''}."
        )
    for k, v in state.items():
        if draft.state_dict()[k].shape != v.shape:
            raise CheckpointError(
                f"{folder}: {k} has shape {tuple(v.shape)}, expected {tuple(draft.state_dict()[k].shape)}."
            )
    draft.load_state_dict(state, strict=False)
    draft = draft.to(device=target.device, dtype=_float_dtype(target))
    draft.bind_target(target.input_embedding_weight(), target.lm_head_weight(), copy_embedding=not with_embedding)
    draft.meta = meta
    return draft.eval()


MAX_DRAFT_LAYERS = 16  # POSS-1 at the deepest allowed depth has 10 specialists
MAX_POSITIONS_PER_SPECIALIST = 10  # the deepest tree decoding allows (settings.BOUNDS["depth"]; a test checks)
MAX_INTERMEDIATE_RATIO = 4  # a draft's MLP may be at most this many times the target's
MAX_CONFIG_BYTES = 1 << 20


def _read_json(path: Path) -> Any:
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise CheckpointError(f"{path} is larger than {MAX_CONFIG_BYTES // 1024} kB: not a draft's config.")
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise CheckpointError(f"{path} is not valid JSON ({getattr(err, 'msg', type(err).__name__)}).") from err


def _int_field(where: str, cfg: dict, key: str, lo: int, hi: int, why: str = "") -> int | None:
    """cfg[key] as an int in [lo, hi] (None when absent), else CheckpointError naming the file and field."""
    value = cfg.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        if not (isinstance(value, float) and value.is_integer()):
            raise CheckpointError(f"{where}: {key}={value!r} must be an integer{why}.")
        value = int(value)
    if not lo <= value <= hi:
        raise CheckpointError(f"{where}: {key}={value!r} is out of range: use {lo} to {hi}{why}.")
    return value


def _number_field(where: str, cfg: dict, key: str, lo: float, hi: float) -> float | None:
    value = cfg.get(key)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not lo < value < hi
    ):
        raise CheckpointError(f"{where}: {key}={value!r} must be a number between {lo:g} and {hi:g}.")
    return float(value)


def check_draft_config(
    raw: Any, meta: Any, target: TargetModel, positions_per_specialist: int | None = None, where: str = "config.json"
) -> None:
    """Check a draft's config.json (and our metadata) field by field against the target before anything is
    allocated: types, positive sizes, sizes bounded by the target's (hidden size and vocabulary equal, MLP at most
    MAX_INTERMEDIATE_RATIO times), attention heads that divide the hidden size, positions_per_specialist within the
    decoding depth's range. Raises CheckpointError naming the field."""
    if not isinstance(raw, dict):
        raise CheckpointError(f"{where} must be a JSON object of settings, not {type(raw).__name__}.")
    if not isinstance(meta, dict):
        raise CheckpointError(f"{Path(where).parent / META_FILE} must be a JSON object, not {type(meta).__name__}.")
    text = target.config.get_text_config() if hasattr(target.config, "get_text_config") else target.config
    other = ": it was made for another target"
    hidden = _int_field(where, raw, "hidden_size", 1, 1 << 20)
    if hidden != target.hidden_size:
        raise CheckpointError(
            f"this draft has hidden size {hidden} but the target {target.name!r} has {target.hidden_size}{other}."
        )
    vocab = _int_field(where, raw, "vocab_size", 1, 1 << 24)
    if vocab != target.vocab_size:
        raise CheckpointError(
            f"this draft has a vocabulary of {vocab} tokens but the target {target.name!r} has "
            f"{target.vocab_size}{other}."
        )
    target_mlp = int(getattr(text, "intermediate_size", 4 * hidden) or 4 * hidden)
    _int_field(
        where,
        raw,
        "intermediate_size",
        1,
        MAX_INTERMEDIATE_RATIO * target_mlp,
        f" (at most {MAX_INTERMEDIATE_RATIO} times the target's {target_mlp})",
    )
    heads = _int_field(where, raw, "num_attention_heads", 1, hidden) or int(text.num_attention_heads)
    head_dim = _int_field(where, raw, "head_dim", 1, hidden)
    if head_dim is None:
        if hidden % heads:
            raise CheckpointError(
                f"{where}: num_attention_heads={heads} must divide hidden_size={hidden} (or give head_dim)."
            )
    elif heads * head_dim > 4 * hidden:
        raise CheckpointError(
            f"{where}: num_attention_heads × head_dim = {heads * head_dim} is more than 4 × hidden_size ({4 * hidden})."
        )
    kv = _int_field(where, raw, "num_key_value_heads", 1, heads, f" (at most num_attention_heads={heads})")
    if kv is not None and heads % kv:
        raise CheckpointError(f"{where}: num_key_value_heads={kv} must divide num_attention_heads={heads}.")
    _number_field(where, raw, "rms_norm_eps", 0.0, 1.0)
    _number_field(where, raw, "rope_theta", 0.0, 1e12)
    rope = raw.get("rope_parameters")
    if rope is not None:
        if not isinstance(rope, dict):
            raise CheckpointError(f"{where}: rope_parameters must be an object, not {type(rope).__name__}.")
        _number_field(where, rope, "rope_theta", 0.0, 1e12)
    if "bias" in raw and not isinstance(raw["bias"], bool):
        raise CheckpointError(f"{where}: bias={raw['bias']!r} must be true or false.")
    meta_where = str(Path(where).parent / META_FILE)
    max_n = MAX_POSITIONS_PER_SPECIALIST
    _int_field(meta_where, meta, "positions_per_specialist", 1, max_n)
    if positions_per_specialist is not None:
        _int_field(
            "positions_per_specialist",
            {"positions_per_specialist": positions_per_specialist},
            "positions_per_specialist",
            1,
            max_n,
        )
    if meta.get("method") is not None and meta["method"] not in METHODS:
        raise CheckpointError(f"{meta_where}: method={meta['method']!r}: use one of {', '.join(METHODS)}.")
    vocab_ids = meta.get("draft_vocab")
    if vocab_ids is not None:
        if (
            not isinstance(vocab_ids, list)
            or len(vocab_ids) > vocab
            or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in vocab_ids)
        ):
            raise CheckpointError(
                f"{meta_where}: draft_vocab must be a list of at most {vocab} token ids in [0, {vocab})."
            )


def _float_dtype(target: TargetModel) -> torch.dtype:
    return target.dtype if target.dtype.is_floating_point else torch.bfloat16


def _draft_config(raw: dict[str, Any], target: TargetModel) -> LlamaConfig:
    """The draft's layer config: the checkpoint's own sizes where given, the target's otherwise."""
    base = draft_config_from_target(target.config)
    for key in ("intermediate_size", "num_attention_heads", "num_key_value_heads", "rms_norm_eps", "head_dim"):
        if raw.get(key) is not None:
            setattr(base, key, raw[key])
    theta = raw.get("rope_theta") or (raw.get("rope_parameters") or {}).get("rope_theta")
    if theta:
        params = dict(getattr(base, "rope_parameters", None) or {"rope_type": "default"})
        params["rope_theta"] = float(theta)
        base.rope_parameters = params
    if raw.get("head_dim") is None:
        base.head_dim = base.hidden_size // base.num_attention_heads
    return base


def stored_label(folder: str | os.PathLike) -> str | None:
    """The label a draft folder was saved under (its training's name for it, e.g. the hass control), or None: the
    layout alone (`DraftSpec.label`) cannot tell a hass control from EAGLE."""
    path = Path(folder) / META_FILE
    if not path.is_file():
        return None
    meta = _read_json(path)
    label = meta.get("label") if isinstance(meta, dict) else None
    return label if isinstance(label, str) and label else None


def save_draft(
    draft: DraftModel,
    folder: str | os.PathLike,
    target: TargetModel | None = None,
    dtype: torch.dtype = torch.bfloat16,
    include_embedding: bool = False,
    extra_meta: dict[str, Any] | None = None,
) -> Path:
    """Write config.json (released layout, plus `bias`), model.safetensors and our metadata file.

    The embedding is a frozen copy of the target's, so our own drafts leave it out by default (it is taken from the
    target at load time); released checkpoints carry it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = draft.config
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "bias": draft.spec.bias,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": getattr(cfg, "head_dim", None),
        "rms_norm_eps": cfg.rms_norm_eps,
        "max_position_embeddings": cfg.max_position_embeddings,
        "vocab_size": cfg.vocab_size,
        "rope_theta": (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", 10000.0),
        "hidden_act": cfg.hidden_act,
        "num_hidden_layers": draft.spec.num_layers,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    state = {
        k: v.detach().to("cpu", dtype).contiguous()
        for k, v in draft.state_dict().items()
        if include_embedding or not k.startswith("embed_tokens.")
    }
    save_file(state, str(folder / "model.safetensors"))
    meta = {
        **asdict(draft.spec),
        "label": draft.spec.label,
        "draft_vocab": draft.draft_vocab.tolist() if draft.draft_vocab is not None else None,
    }
    if target is not None:
        meta.update(target=target.name, target_fingerprint=target_fingerprint(target))
    meta.update(extra_meta or {})
    (folder / META_FILE).write_text(json.dumps(meta))
    return folder
