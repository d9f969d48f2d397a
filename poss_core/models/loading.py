"""Load targets (local path or Hugging Face id) and build drafts by name (`random:*`) or from checkpoints."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ..base import settings
from ..base.errors import CheckpointError, ConfigError, ModelLoadError
from .draft import DraftModel, DraftSpec, draft_config_from_target
from .hardware import auto_dtype
from .target import TargetModel

RANDOM_DRAFTS = {
    # name: (method, positions per specialist); the layer count follows the depth (6 positions -> 6, 3, 2 specialists)
    "eagle": ("eagle", 1),
    "hass": ("eagle", 1),  # one layer, trained differently
    "poss1": ("poss", 1),
    "poss2": ("poss", 2),
    "poss3": ("poss", 3),
    "matched": ("stacked", 2),  # as many stacked layers as POSS-2 has specialists, all run at every position
}
# Random drafts in the layouts the paper's Llama-3-8B-Instruct drafts were released in: kind -> (method, positions
# per specialist, layers). Llama-3 drafts have no fc bias (their config.json says "bias": false); a POSS draft's
# layers are its forward_num_total over its positions per layer (7/1, 8/2, 12/3), whatever depth decoding uses.
RELEASED_LLAMA3 = {
    "llama3-eagle": ("eagle", 1, 1),  # yuhuili/EAGLE-LLaMA3-Instruct-8B; the HASS and EAGLE retrains alike
    "llama3-poss1": ("poss", 1, 7),  # HINT-lab/PosS1-Llama3-8B-Instruct
    "llama3-poss2": ("poss", 2, 4),  # HINT-lab/PosS2-Llama3-8B-Instruct
    "llama3-poss3": ("poss", 3, 4),  # HINT-lab/PosS3-Llama3-8B-Instruct
}


def pick_device(device: str | None = None) -> torch.device:
    """CUDA if available, else Apple MPS, else CPU (unless a device is named: then it must be usable here)."""
    if device:
        return check_device(device)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def available_devices() -> list[str]:
    """The devices this machine can run on, as --device takes them."""
    out = ["cpu"]
    if torch.cuda.is_available():
        out += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        out.append("mps")
    return out


def check_device(name: str) -> torch.device:
    """A named device, refused with what this machine has when it is not one (`cuda:99`, `cuda` without a GPU, a
    typo): nothing falls back to the CPU silently."""
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        raise ConfigError(
            f"device {name!r} is not a device name: use one of {', '.join(available_devices())}."
        ) from None
    if dev.type == "cuda":
        usable = torch.cuda.is_available() and (dev.index or 0) < torch.cuda.device_count()
    elif dev.type == "mps":
        usable = "mps" in available_devices()
    else:
        usable = dev.type == "cpu" or _allocates(dev)
    if not usable:
        raise ConfigError(
            f"device {name!r} is not available on this machine: use one of {', '.join(available_devices())}."
        )
    return dev


def _allocates(dev: torch.device) -> bool:
    """Whether an empty tensor can be made on `dev` (a backend this module has no availability check for)."""
    try:
        torch.empty(0, device=dev)
    except Exception:  # noqa: BLE001 - any failure means the device is not usable here
        return False
    return True


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def add_dtype_argument(parser, what: str = "", default: str = "auto") -> None:
    """The one `--dtype` option every CLI shares: the precision setting's flag (settings.SETTINGS), for `what`."""
    s = settings.SETTINGS["precision"]
    parser.add_argument(
        s.option,
        default=default,
        choices=list(s.choices),
        help=f"{what}: {s.help.split(': ', 1)[1]}" if what else s.help,
    )


def parse_dtype(name: str | None) -> torch.dtype | None:
    """`None`/"auto" = the device's default; otherwise one of DTYPES (a clear error for anything else)."""
    if name in (None, "auto"):
        return None
    if name not in DTYPES:
        raise ConfigError(f"dtype {name!r} is unknown: use auto, {', '.join(DTYPES)}.")
    return DTYPES[name]


def default_dtype(device: torch.device) -> torch.dtype:
    """What `auto` means on `device`: fp32 on CPU, bf16 on GPUs with bf16 units, fp16 on older ones
    (hardware.auto_dtype)."""
    return auto_dtype(device)


def load_dtype(target_name: str, dtype: torch.dtype | None, device: str | None = None) -> torch.dtype | None:
    """The dtype `load_preset_target` loads `target_name` in: `dtype`, else the device's default. The builtin random
    models (tiny, twins) keep their own default: None."""
    if dtype is not None or (target_name.startswith("builtin:") and target_name != "builtin:smollm2-135m"):
        return dtype
    return default_dtype(pick_device(device))


def parse_max_memory(text: str | None) -> dict | None:
    """`"0:20GiB,1:20GiB,cpu:60GiB"` -> `{0: "20GiB", 1: "20GiB", "cpu": "60GiB"}` (accelerate's max_memory)."""
    if not text:
        return None
    out: dict = {}
    for part in text.split(","):
        key, sep, amount = part.strip().partition(":")
        if not sep or not amount.strip():
            raise ConfigError(f"max memory {part.strip()!r} is not DEVICE:AMOUNT (e.g. 0:20GiB,cpu:60GiB).")
        key = key.strip()
        out[int(key) if key.isdigit() else key] = amount.strip()
    return out


def plan_device_map(name_or_path: str, dtype: torch.dtype, max_memory: dict | None, main: str | int) -> dict:
    """Spread a target over every visible GPU, then the CPU, then disk (accelerate's `infer_auto_device_map`), with
    the input embedding, final norm and LM head on `main`: the draft and the tree verification run where the LM head
    is, and a tied LM head never lands apart from its embedding."""
    from accelerate import infer_auto_device_map, init_empty_weights
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(name_or_path)
    except OSError as err:
        raise ModelLoadError(f"could not read the config of {name_or_path!r}: {str(err).splitlines()[0]}") from err
    with init_empty_weights():
        meta = AutoModelForCausalLM.from_config(config)
    plan = dict(
        infer_auto_device_map(
            meta,
            max_memory=max_memory,
            dtype=dtype,
            no_split_module_classes=getattr(meta, "_no_split_modules", None) or [],
        )
    )
    for name in list(plan):
        if name in ("lm_head", "model.embed_tokens", "model.norm", "model.rotary_emb"):
            plan[name] = main
    if not any(k == "lm_head" or k.startswith("lm_head.") for k in plan):
        plan["lm_head"] = main
    return plan


def load_target(
    name_or_path: str,
    device: str | None = None,
    dtype: torch.dtype | None = None,
    quantization_config=None,
    quantization: str = "none",
    device_map: str | None = None,
    max_memory: dict | None = None,
) -> TargetModel:
    """Load a causal LM and its tokenizer through the public transformers API. `device_map="auto"` spreads it over
    the visible GPUs and the CPU (and disk) by `max_memory`, keeping the LM head on the main device."""
    dev = pick_device(device)
    dtype = dtype or default_dtype(dev)
    kwargs = {"dtype": dtype, "attn_implementation": "sdpa"}
    if device_map not in (None, "auto"):
        raise ConfigError(f"device map {device_map!r} is unknown: use auto (or leave it unset for one device).")
    if device_map == "auto":
        main = (dev.index or 0) if dev.type == "cuda" else str(dev)
        kwargs["device_map"] = plan_device_map(name_or_path, dtype, max_memory, main)
        if "disk" in kwargs["device_map"].values():
            kwargs["offload_folder"] = tempfile.mkdtemp(prefix="poss-offload-")
    if os.path.isdir(name_or_path):  # a folder's shard index is checked here, not left to fail inside transformers
        from .checkpoint import INDEX_FILES, read_weight_map

        for index in INDEX_FILES:
            if os.path.isfile(os.path.join(name_or_path, index)):
                read_weight_map(Path(name_or_path) / index, ModelLoadError)
    if quantization_config is not None:
        kwargs["quantization_config"] = quantization_config
        kwargs.setdefault("device_map", {"": dev.index or 0} if dev.type == "cuda" else {"": str(dev)})
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        model = AutoModelForCausalLM.from_pretrained(name_or_path, **kwargs)
    except OSError as err:
        where = "local folder" if os.path.isdir(name_or_path) else "Hugging Face id"
        raise ModelLoadError(f"could not load target {name_or_path!r} ({where}): {str(err).splitlines()[0]}") from err
    if "device_map" not in kwargs:
        model = model.to(dev)
    return TargetModel(model, tokenizer, name=name_or_path, quantization=quantization)


def random_draft(target: TargetModel, kind: str, depth: int = 6, seed: int = 0) -> DraftModel:
    """An untrained draft of the given kind for this target: what a draft knows before training (nothing)."""
    if kind in RELEASED_LLAMA3:
        method, n, layers = RELEASED_LLAMA3[kind]
        spec = DraftSpec(method=method, num_layers=layers, positions_per_specialist=n, bias=False)
    elif kind in RANDOM_DRAFTS:
        method, n = RANDOM_DRAFTS[kind]
        layers = 1 if method == "eagle" else -(-depth // n)
        spec = DraftSpec(method=method, num_layers=layers, positions_per_specialist=n, bias=True)
    else:
        kinds = [*RANDOM_DRAFTS, *RELEASED_LLAMA3]
        raise CheckpointError(f"random draft {kind!r} is unknown: use random:{', random:'.join(kinds)}.")
    torch.manual_seed(seed)
    # Built where it will run: a paper-scale draft (POSS-1 on Llama-3-8B: 7 layers of 218M parameters) would
    # otherwise be allocated and initialised on the CPU first.
    with torch.device(target.device):
        draft = DraftModel(draft_config_from_target(target.config), spec)
        for layer in draft.layers:  # small init, as a freshly initialised draft would have
            for p in layer.parameters():
                if p.dim() > 1:
                    torch.nn.init.normal_(p, std=0.02)
    draft = draft.to(device=target.device, dtype=target.dtype if target.dtype.is_floating_point else torch.float32)
    draft.bind_target(target.input_embedding_weight(), target.lm_head_weight())
    return draft.eval()


def load_draft_by_name(
    name: str,
    target: TargetModel,
    depth: int = 6,
    positions_per_specialist: int | None = None,
    allow_other_target: bool = False,
) -> DraftModel:
    """`random:KIND` builds an untrained draft, `hub:ID` downloads a released one; anything else is a folder."""
    from .checkpoint import load_draft

    if name.startswith("random:"):
        return random_draft(target, name.split(":", 1)[1], depth=depth)
    if name.startswith("hub:"):
        name = download_draft(name[4:])
    return load_draft(
        name, target, positions_per_specialist=positions_per_specialist, allow_other_target=allow_other_target
    )


def download_draft(repo_id: str) -> str:
    """Fetch a released draft (config and weights only) from the Hugging Face hub."""
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(repo_id, allow_patterns=["config.json", "*.safetensors", "*.bin", "*.json"])
    except Exception as err:  # network, auth or missing repo: one readable line
        raise CheckpointError(
            f"could not download draft {repo_id!r} from the Hugging Face hub: "
            f"{str(err).splitlines()[0] if str(err) else type(err).__name__}"
        ) from err


def load_preset_target(
    target_name: str,
    quantization: str = "auto",
    device: str | None = None,
    extra_bytes: int = 0,
    dtype: torch.dtype | None = None,
    device_map: str | None = None,
    max_memory: dict | None = None,
) -> TargetModel:
    """Load a preset's target (`builtin:smollm2-135m`, `builtin:tiny-random`, a twin such as `builtin:llama3-8b-twin`
    (models/twin.py), or an id/folder), quantized when
    `quantization` says so or `auto` finds it would not fit. `device_map` (default `$POSS_DEVICE_MAP`) `auto` spreads
    it over every visible GPU and the CPU instead, by `max_memory` (default `$POSS_MAX_MEMORY`, e.g.
    `0:20GiB,1:20GiB,cpu:60GiB`), so every CLI and the app take it."""
    device_map = device_map or os.environ.get("POSS_DEVICE_MAP") or None
    max_memory = max_memory or parse_max_memory(os.environ.get("POSS_MAX_MEMORY"))
    dev = pick_device(device)  # a named device that is not here is refused before anything loads, tiny models too
    from .quantization import (
        bnb_config,
        choose_quantization,
        cpu_cost_note,
        estimate_kv_bytes,
        estimate_target_bytes,
        free_cuda_bytes,
    )

    named = dev if device else None  # the tiny models stay on the CPU unless a device is named
    if target_name == "builtin:tiny-random":
        from .tiny import tiny_target

        return tiny_target(seed=0, dtype=dtype, device=named)
    if target_name == "builtin:tiny-random-small":  # the tiny preset's assistant model: one layer, same tokenizer
        from .tiny import tiny_target

        return tiny_target(seed=1, dtype=dtype, layers=1, device=named)
    if target_name.startswith("builtin:llama3-"):  # a paper-scale twin: random weights, built on the device
        from .twin import FULL, is_twin, twin_target

        name = target_name.split(":", 1)[1]
        if is_twin(name):
            if quantization not in ("auto", "none", "4bit"):
                raise ConfigError(f"a twin is built with quantization none or 4bit, not {quantization!r}.")
            mode = "4bit" if quantization == "4bit" else "none"  # auto: 16 GB of bf16 fits the GPUs it is meant for
            return twin_target(name, dtype=dtype, device=dev if name == FULL else named, quantization=mode)
    if target_name == "builtin:smollm2-135m":
        from .default_model import prepare_default_model

        target_name = str(prepare_default_model())
    mode = quantization
    if quantization == "auto" and device_map:
        mode = "none"  # spread over the devices rather than quantize to fit one
        print("[poss] quantization: none (the device map spreads the target instead)", file=sys.stderr)
    elif quantization == "auto":
        from transformers import AutoConfig

        try:
            cfg = AutoConfig.from_pretrained(target_name)
        except OSError as err:
            raise ModelLoadError(f"could not read the config of {target_name!r}: {str(err).splitlines()[0]}") from err
        need = estimate_target_bytes(cfg) + estimate_kv_bytes(cfg) + extra_bytes
        choice = choose_quantization("auto", dev.type, need, free_cuda_bytes(dev))
        print(f"[poss] quantization: {choice.reason}", file=sys.stderr)
        mode = choice.mode
    else:
        choose_quantization(quantization, dev.type, 0, None)  # validates the name
    if dev.type == "cpu" and mode != "none":
        print(f"[poss] {cpu_cost_note(mode)}", file=sys.stderr)
    qcfg = bnb_config(mode, dtype or default_dtype(dev))
    return load_target(
        target_name,
        device=str(dev),
        dtype=dtype,
        quantization_config=qcfg,
        quantization=mode,
        device_map=device_map,
        max_memory=max_memory,
    )
