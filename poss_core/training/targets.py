"""The target a draft is trained for: any Hugging Face decoder-only causal LM of the Llama family's shape (Llama,
Mistral, Qwen), read from its config before any weight loads, so a wrong name fails in a second with what to do."""

from __future__ import annotations

from ..base.errors import ModelLoadError

# Model types whose decoder layers a Llama-layer draft mirrors: RMSNorm, RoPE, grouped-query attention, SwiGLU MLP.
LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "qwen3")
# Gated targets whose exact configuration the project holds as a twin (models/twin.py): their plan prints offline.
TWIN_OF = {"meta-llama/Meta-Llama-3-8B-Instruct": "llama3-8b-twin"}
SIZE_FIELDS = ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size", "num_hidden_layers")


def builtin_config(name: str):
    """The configuration of a `builtin:` target, built without weights; None for other names."""
    from transformers import LlamaConfig

    if name in ("builtin:tiny-random", "builtin:tiny-random-small"):
        from ..models.tiny import tiny_config, tiny_tokenizer

        return tiny_config(vocab_size=len(tiny_tokenizer()), layers=1 if name.endswith("small") else 2)
    if name.startswith("builtin:llama3-"):
        from ..models.twin import SHAPES

        shape = SHAPES.get(name.split(":", 1)[1])
        return LlamaConfig(**shape) if shape else None
    if name == "builtin:smollm2-135m":
        from transformers import AutoConfig

        from ..models.default_model import prepare_default_model

        return AutoConfig.from_pretrained(str(prepare_default_model()))
    return None


def target_config(name: str, allow_twin: bool = False):
    """The target's configuration (a `builtin:` name, a Hugging Face id or a local folder), checked to be a
    Llama-like causal LM. With `allow_twin`, a gated target that cannot be read here gives its twin's (identical)
    configuration: enough to plan a run."""
    from transformers import AutoConfig

    config = builtin_config(name)
    if config is None and allow_twin and name in TWIN_OF:
        try:  # a download already made is read; the gated hub is not asked (a plan needs only the sizes)
            config = AutoConfig.from_pretrained(name, local_files_only=True)
        except (OSError, ValueError):
            print(f"[plan] {name}: sizes from its twin builtin:{TWIN_OF[name]} (the same configuration)")
            return builtin_config(f"builtin:{TWIN_OF[name]}")
    if config is None:
        try:
            config = AutoConfig.from_pretrained(name)
        except (OSError, ValueError) as err:
            raise ModelLoadError(
                f"--target {name!r}: no model configuration found ({str(err).splitlines()[0]}). Give a Hugging Face "
                f"id you can download (gated ones need `huggingface-cli login`) or a folder with config.json, "
                f"tokenizer and weights."
            ) from err
    check_llama_like(config, name)
    return config


def check_llama_like(config, name: str) -> None:
    """Refuse a target whose layers a Llama-layer draft cannot mirror, naming its model type and the ones that fit."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    kind = getattr(text, "model_type", "?")
    missing = [f for f in SIZE_FIELDS if getattr(text, f, None) is None]
    if kind not in LLAMA_LIKE or missing:
        raise ModelLoadError(
            f"--target {name!r} is a {kind!r} model: the draft mirrors decoder-only causal LMs of the Llama family "
            f"({', '.join(LLAMA_LIKE)}){'; its config lacks ' + ', '.join(missing) if missing else ''}."
        )
