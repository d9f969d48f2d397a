"""A tiny random Llama target with a character tokenizer: for tests, CI and trying the app without weights."""

from __future__ import annotations

import string

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from .target import TargetModel

CHARS = string.ascii_letters + string.digits + " .,!?'\n-:;()+=*/\"#_<>[]{}"
SPECIALS = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'user' %}<|user|>{% else %}<|assistant|>{% endif %}"
    "{{ m['content'] }}</s>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(SPECIALS + list(CHARS))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        additional_special_tokens=["<|user|>", "<|assistant|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_config(
    vocab_size: int = 64, hidden_size: int = 64, layers: int = 2, max_positions: int = 512, tie: bool = False
) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        rms_norm_eps=1e-6,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=tie,
        attn_implementation="sdpa",
    )


def tiny_target(
    seed: int = 0,
    vocab_size: int | None = None,
    sharpen: float = 4.0,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    **config_kwargs,
) -> TargetModel:
    """A random tiny Llama (fp32 unless `dtype` says otherwise; on the CPU unless `device` names another). `sharpen`
    scales the LM head so its next-token distributions are peaked, like a real model's, which makes acceptance (and
    so the speculative paths) actually happen in tests."""
    tokenizer = tiny_tokenizer()
    config = tiny_config(vocab_size=vocab_size or len(tokenizer), **config_kwargs)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpen)
    if dtype is not None:
        model = model.to(dtype)
    if device is not None:
        model = model.to(device)
    return TargetModel(model, tokenizer, name=f"tiny-random-{seed}")
