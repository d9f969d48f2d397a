"""Decoding settings, validated before any model work: one set of bounds (`LIMITS`) for the app's controls, its API
endpoints and the generate/benchmark command lines, and the checks a prompt passes before it is tokenized."""

from __future__ import annotations

from dataclasses import dataclass, fields
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

    Each value is checked once, where it comes in: a run's settings by `settings.checked` (then `from_checked`),
    loosely typed values by `of` (the command lines, `methods.decode_config`), a change by `changed` (only the values
    changed); a config built directly from a caller's own values (a script, a test, the engine's own runs) is checked
    on construction against what the engine can run, which may go past what a user may ask for (the overhead
    measurement's open-ended decode)."""

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
        for name in settings.DECODE:
            _check_field(name, getattr(self, name))

    @classmethod
    def from_checked(cls, values: settings.Checked) -> "DecodeConfig":
        """A config from the decoding settings among values `settings.checked` typed and bounded already (a run's
        settings), not checked again; a setting not among them takes its default."""
        if not isinstance(values, settings.Checked):
            raise TypeError(f"from_checked takes what settings.checked returns, not {type(values).__name__}")
        return cls._built({f.name: values.get(f.name, f.default) for f in fields(cls)})

    @classmethod
    def of(cls, **values: Any) -> "DecodeConfig":
        """A config from loosely typed values (integral floats for integers, ints for floats), every one checked
        against the bounds a user may ask for."""
        unknown = sorted(set(values) - set(settings.DECODE))
        if unknown:
            raise ConfigError(f"{unknown[0]!r} is not a decoding setting: use {', '.join(settings.DECODE)}.")
        return cls.from_checked(settings.checked(values))

    def changed(self, **values: Any) -> "DecodeConfig":
        """This config with `values` instead (an auto budget's choice, the oracle's chain, the engine's own runs):
        only those are checked, against what the engine can run; the others were checked when this one was made."""
        typed = {name: _check_field(name, value) for name, value in values.items()}
        return self._built({**{f.name: getattr(self, f.name) for f in fields(self)}, **typed})

    @classmethod
    def _built(cls, values: dict[str, Any]) -> "DecodeConfig":
        # Set the way a frozen dataclass's own __init__ sets its fields, without __post_init__'s check.
        config = object.__new__(cls)
        for name, value in values.items():
            object.__setattr__(config, name, value)
        return config

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def _check_field(name: str, value: Any) -> Any:
    """`value` as the engine takes it, or ConfigError: a valid `name`, already an integer for an integer field (4.0
    is refused, which `settings.check` would turn into 4) and inside what the engine can run."""
    if name not in settings.DECODE:
        raise ConfigError(f"{name!r} is not a decoding setting: use {', '.join(settings.DECODE)}.")
    if settings.SETTINGS[name].kind is int and isinstance(value, float):
        raise ConfigError(f"{name}={value!r} must be an integer.")
    return settings.check(name, value, capped=False)
