"""Decoding settings, validated before any model work."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class DecodeConfig:
    """What one decode does. `depth` is the number of draft positions per round; `tree_budget` counts the root."""

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

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def validate(self) -> None:
        """Raise ConfigError naming the first value out of its range."""
        checks = [
            ("depth", self.depth, self.depth >= 1, "an integer >= 1"),
            ("top_k", self.top_k, self.top_k >= 1, "an integer >= 1"),
            ("tree_budget", self.tree_budget, self.tree_budget >= 2, "an integer >= 2 (the root plus at least one node)"),
            ("temperature", self.temperature, self.temperature >= 0.0, "a number >= 0 (0 means greedy)"),
            ("top_p", self.top_p, 0.0 < self.top_p <= 1.0, "a number in (0, 1]"),
            ("max_new_tokens", self.max_new_tokens, self.max_new_tokens >= 1, "an integer >= 1"),
            ("depth_stop", self.depth_stop, 0.0 <= self.depth_stop < 1.0,
             "a probability in [0, 1) (0 drafts every round `depth` deep)"),
            ("head_rows", self.head_rows, self.head_rows in ("read", "all"), "'read' or 'all'"),
        ]
        for name, value, ok, valid in checks:
            if isinstance(value, bool) or not ok:
                raise ConfigError(f"{name}={value!r} is out of range: use {valid}.")
        for name in ("depth", "top_k", "tree_budget", "max_new_tokens", "seed"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{name}={value!r} must be an integer.")
