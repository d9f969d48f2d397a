"""Decoding settings, validated before any model work: one set of bounds (`LIMITS`) for the app's controls, its API
endpoints and the generate/benchmark command lines, and the checks a prompt passes before it is tokenized."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, PromptError

# The range of every decoding setting, the same wherever a setting comes from (the app's sliders are drawn from it).
# The upper bounds keep one decode's work and memory bounded: the tree verified per round grows with depth, top_k and
# tree_budget, and a round's cost with the tokens already in the cache.
LIMITS: dict[str, tuple[float, float]] = {
    "depth": (1, 10),
    "top_k": (1, 20),
    "tree_budget": (2, 256),
    "max_new_tokens": (1, 2048),
    "seed": (0, 2**32 - 1),
    "temperature": (0.0, 2.0),
}
INTEGER_SETTINGS = ("depth", "top_k", "tree_budget", "max_new_tokens", "seed")
MAX_PROMPT_TOKENS = 2048  # a prompt (the whole conversation, through the chat template) longer than this is refused
MAX_PROMPT_CHARS = 16 * MAX_PROMPT_TOKENS  # refused before tokenizing, so a huge paste costs nothing


def _range_text(name: str) -> str:
    lo, hi = LIMITS[name]
    kind = "an integer" if name in INTEGER_SETTINGS else "a number"
    return f"{kind} from {lo} to {hi}"


def as_integer(name: str, value: Any) -> int:
    """A setting that must be an integer: ints, and floats with an integral value (a number box sends 7.0); anything
    else raises ConfigError naming the field."""
    if isinstance(value, bool) or value is None:
        raise ConfigError(f"{name}={value!r} must be an integer.")
    if isinstance(value, float):
        if name in LIMITS and math.isfinite(value) and not LIMITS[name][0] <= value <= LIMITS[name][1]:
            raise ConfigError(f"{name}={value!r} is out of range: use {_range_text(name)}.")
        if not math.isfinite(value) or not value.is_integer():
            raise ConfigError(f"{name}={value!r} must be an integer" +
                              (f" ({_range_text(name)})." if name in LIMITS else "."))
        return int(value)
    if isinstance(value, int):
        return value
    raise ConfigError(f"{name}={value!r} must be an integer.")


def as_number(name: str, value: Any) -> float:
    """A setting that must be a finite number (NaN and infinities are refused, naming the field)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name}={value!r} must be a number.")
    if not math.isfinite(float(value)):
        raise ConfigError(f"{name}={value!r} is not a finite number: use {_range_text(name) if name in LIMITS else 'a finite number'}.")
    return float(value)


def check_prompt_text(text: Any, field: str = "prompt") -> str:
    """A prompt (or a message of a conversation) as text a tokenizer can read: a string, valid Unicode (no lone
    surrogates, which is how undecodable bytes reach Python), no NUL characters, at most MAX_PROMPT_CHARS long."""
    if not isinstance(text, str):
        raise PromptError(f"{field} must be text, not {type(text).__name__}.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise PromptError(f"{field} is not valid UTF-8 text (character {err.start} cannot be encoded): "
                          f"send the prompt as UTF-8.") from err
    if "\x00" in text:
        raise PromptError(f"{field} contains a NUL character: send plain text.")
    if len(text) > MAX_PROMPT_CHARS:
        raise PromptError(f"{field} has {len(text)} characters: the most is {MAX_PROMPT_CHARS} (and at most "
                          f"{MAX_PROMPT_TOKENS} tokens).")
    return text


def check_messages(prompt: Any) -> list[dict]:
    """A prompt given as text or as chat messages ({"role", "content"}), each checked by `check_prompt_text`; the
    whole conversation is bounded by MAX_PROMPT_CHARS too."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": check_prompt_text(prompt)}]
    if not isinstance(prompt, (list, tuple)):
        raise PromptError(f"prompt must be text or a list of messages, not {type(prompt).__name__}.")
    out, total = [], 0
    for i, m in enumerate(prompt):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise PromptError(f"prompt message {i} must be {{'role': ..., 'content': ...}}.")
        content = check_prompt_text(m.get("content", ""), f"prompt message {i}")
        check_prompt_text(m["role"], f"prompt message {i}'s role")
        total += len(content)
        if total > MAX_PROMPT_CHARS:
            raise PromptError(f"the conversation has more than {MAX_PROMPT_CHARS} characters: start a new one.")
        out.append({"role": m["role"], "content": content})
    return out


def check_prompt_tokens(n: int, max_context: int | None = None) -> None:
    """Refuse a tokenized prompt longer than MAX_PROMPT_TOKENS or than the model's context window allows."""
    if n > MAX_PROMPT_TOKENS:
        raise PromptError(f"the prompt has {n} tokens: the most is {MAX_PROMPT_TOKENS}. Shorten it (or start a new "
                          f"conversation).")
    if max_context is not None and n >= max_context:
        raise PromptError(f"the prompt has {n} tokens but the model's context window is {max_context}: shorten it.")


@dataclass(frozen=True)
class DecodeConfig:
    """What one decode does. `depth` is the number of draft positions per round; `tree_budget` counts the root.

    The one validated settings type: the app (its controls, /run, /step, /compare) and the command lines all build
    one through `DecodeConfig.of(...)` or `methods.decode_config(...)`, which check every value against LIMITS
    (`check_limits`); `of` also accepts integral floats (what a number box or a JSON client sends) and names the field
    of anything else. Construction itself checks types, finiteness and the lower bounds."""

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
        self.validate()

    @classmethod
    def of(cls, **values: Any) -> "DecodeConfig":
        """A config from loosely typed values (floats for integers, ints for floats), every one checked."""
        fixed = {}
        for name, value in values.items():
            if name in INTEGER_SETTINGS:
                fixed[name] = as_integer(name, value)
            elif name in ("temperature", "top_p", "depth_stop"):
                fixed[name] = as_number(name, value)
            else:
                fixed[name] = value
        return cls(**fixed).check_limits()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def validate(self) -> None:
        """Raise ConfigError naming the first value of the wrong type or out of its range."""
        for name in INTEGER_SETTINGS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{name}={value!r} must be an integer.")
        for name in ("temperature", "top_p", "depth_stop"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"{name}={value!r} must be a finite number.")
        checks = [
            ("depth", self.depth >= 1, "an integer >= 1"),
            ("top_k", self.top_k >= 1, "an integer >= 1"),
            ("tree_budget", self.tree_budget >= 2, "an integer >= 2 (the root plus at least one node)"),
            ("temperature", self.temperature >= 0.0, "a number >= 0 (0 means greedy)"),
            ("top_p", 0.0 < self.top_p <= 1.0, "a number in (0, 1]"),
            ("max_new_tokens", self.max_new_tokens >= 1, "an integer >= 1"),
            ("depth_stop", 0.0 <= self.depth_stop < 1.0,
             "a probability in [0, 1) (0 drafts every round `depth` deep)"),
            ("head_rows", self.head_rows in ("read", "all"), "'read' or 'all'"),
        ]
        for name, ok, valid in checks:
            if not ok:
                raise ConfigError(f"{name}={getattr(self, name)!r} is out of range: use {valid}.")

    def check_limits(self) -> "DecodeConfig":
        """Raise ConfigError naming the first setting outside LIMITS (what every way in allows); return self.

        Every entry point checks these (`DecodeConfig.of`, `methods.decode_config`); the engine's own internal
        configs (e.g. the overhead measurement's open-ended decode) only pass `validate`."""
        for name, (lo, hi) in LIMITS.items():
            value = getattr(self, name)
            if not lo <= value <= hi:
                raise ConfigError(f"{name}={value!r} is out of range: use {_range_text(name)}.")
        return self
