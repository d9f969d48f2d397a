"""Decoding settings, validated before any model work against the settings table's bounds (the same for the app's
controls, its API endpoints and the generate/benchmark command lines), and the checks a prompt passes before it is
tokenized."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from ..base import settings
from ..base.errors import ConfigError, PromptError

MAX_PROMPT_TOKENS = 2048  # a prompt (the whole conversation, through the chat template) longer than this is refused
MAX_PROMPT_CHARS = 16 * MAX_PROMPT_TOKENS  # refused before tokenizing, so a huge paste costs nothing


def check_prompt_text(text: Any, field: str = "prompt") -> str:
    """A prompt (or a message of a conversation) as text a tokenizer can read: a string, valid Unicode (no lone
    surrogates, which is how undecodable bytes reach Python), no NUL characters, at most MAX_PROMPT_CHARS long."""
    if not isinstance(text, str):
        raise PromptError(f"{field} must be text, not {type(text).__name__}.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise PromptError(
            f"{field} is not valid UTF-8 text (character {err.start} cannot be encoded): send the prompt as UTF-8."
        ) from err
    if "\x00" in text:
        raise PromptError(f"{field} contains a NUL character: send plain text.")
    if len(text) > MAX_PROMPT_CHARS:
        raise PromptError(
            f"{field} has {len(text)} characters: the most is {MAX_PROMPT_CHARS} (and at most "
            f"{MAX_PROMPT_TOKENS} tokens)."
        )
    return text


def check_messages(prompt: Any) -> list[dict]:
    """A prompt given as text or as chat messages ({"role", "content"}), each checked by `check_prompt_text` (the
    last one, when it is the user's, named "prompt"); the whole conversation is bounded by MAX_PROMPT_CHARS too."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": check_prompt_text(prompt)}]
    if not isinstance(prompt, (list, tuple)):
        raise PromptError(f"prompt must be text or a list of messages, not {type(prompt).__name__}.")
    out, total = [], 0
    for i, m in enumerate(prompt):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise PromptError(f"prompt message {i} must be {{'role': ..., 'content': ...}}.")
        # The last message, when it is the user's, is the prompt just asked (also after a conversation).
        name = "prompt" if i == len(prompt) - 1 and m["role"] == "user" else f"prompt message {i}"
        content = check_prompt_text(m.get("content", ""), name)
        check_prompt_text(m["role"], f"prompt message {i}'s role")
        total += len(content)
        if total > MAX_PROMPT_CHARS:
            raise PromptError(f"the conversation has more than {MAX_PROMPT_CHARS} characters: start a new one.")
        out.append({"role": m["role"], "content": content})
    return out


def check_prompt_tokens(n: int, max_context: int | None = None) -> None:
    """Refuse a tokenized prompt longer than MAX_PROMPT_TOKENS or than the model's context window allows."""
    if n > MAX_PROMPT_TOKENS:
        raise PromptError(
            f"the prompt has {n} tokens: the most is {MAX_PROMPT_TOKENS}. Shorten it (or start a new conversation)."
        )
    if max_context is not None and n >= max_context:
        raise PromptError(f"the prompt has {n} tokens but the model's context window is {max_context}: shorten it.")


@dataclass(frozen=True)
class DecodeConfig:
    """What one decode does: the decoding settings of `settings.SETTINGS` (a test checks the fields match the table,
    defaults included). `depth` is the number of draft positions per round; `tree_budget` counts the root.

    However it is made (a run's `RunSpec.resolve`, the command lines' `of`, the engine's own `changed`, a script or a
    test), a config is checked on construction, once, by `settings.checked`: against what the engine can run, which
    may go past what a user may ask for (the overhead measurement's open-ended decode). What a user asks for is held
    to the user's bounds where it comes in (`RunSpec.resolve`, `of`)."""

    depth: int = 6
    top_k: int = 10
    tree_budget: int = 60
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    seed: int = 0
    # Dynamic depth: stop drafting deeper once the best path's draft probability falls below this (0: always draft
    # `depth` positions). An unconfident round then costs fewer draft passes; a confident one still goes deep.
    depth_stop: float = 0.0
    # Which tree slots go through the target's LM head: "read" = the slots with children, plus a leaf's row only when
    # acceptance ends there (a second, one-row call); "all" = every slot in one call. On a CPU the head's cost is mostly
    # reading its weights, so for small trees one call over every slot can beat an occasional second call.
    head_rows: str = "read"

    def __post_init__(self) -> None:
        """Every field valid and inside what the engine can run; an integer field already an integer (4.0 is refused
        here, where `of` types a loosely typed 4.0 as 4 first)."""
        own = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in own.items():
            if settings.SETTINGS[name].kind is int and isinstance(value, float):
                raise ConfigError(f"{name}={value!r} must be an integer.")
        settings.checked(own, capped=False)

    @classmethod
    def of(cls, **values: Any) -> "DecodeConfig":
        """A config from what a user asked for, loosely typed (integral floats for integers, ints for floats; the
        command lines): typed and held to the bounds a user may ask for, then made."""
        return cls(**settings.checked(values, settings.DECODE, "a decoding setting"))

    def changed(self, **values: Any) -> "DecodeConfig":
        """This config with `values` instead (an auto budget's choice, the oracle's chain, the engine's own runs),
        checked as any config is."""
        return replace(self, **values)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
