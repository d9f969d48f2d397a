"""What a comparison runs (`RunSpec`: the prompt, the methods, the preset and every run setting) and that spec checked
and resolved once (`Resolved`), which is all `compare.start` and `compare.fit_budgets` take."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..base import settings
from ..base.errors import ConfigError
from ..decoding.config import DecodeConfig, check_messages
from ..models.hardware import cuda_available
from ..models.presets import Preset, get_preset
from . import methods
from .model_cache import ModelCache

MAX_LANES = 3


class RunSpec(settings.ByName):
    """What a comparison runs: the prompt, the methods (one lane each), the preset, and every run setting of the
    settings table (`settings.RUN`: decoding, precision, quantization, fitted budget), read as attributes
    (`spec.depth`). A setting not given reads its declared default. `resolve()` checks it once (every value typed
    and within its bounds, the methods the preset offers); a saved run records `to_json()`."""

    def __init__(self, prompt: str | list[dict], methods: list[str], preset: str, **values: Any) -> None:
        unknown = sorted(set(values) - set(settings.RUN))
        if unknown:
            raise ConfigError(f"{unknown[0]!r} is not a setting of a comparison: use {', '.join(settings.RUN)}.")
        self.prompt, self.methods, self.preset = prompt, methods, preset
        self.values: dict[str, Any] = {**settings.defaults(settings.RUN), **values}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunSpec) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return f"RunSpec({self.to_json()!r})"

    def messages(self) -> list[dict]:
        if isinstance(self.prompt, str):
            return [{"role": "user", "content": self.prompt}]
        return list(self.prompt)

    def resolve(self) -> Resolved:
        """Check the spec once, before anything loads (ConfigError or PromptError for settings no lane could run
        with), typing every value as the decoder takes it (a slider's 4.0 becomes 4), and resolve what every step of
        the run reads: its preset, decoding config and offered methods."""
        check_messages(self.prompt)
        self._check_methods()
        if not isinstance(self.preset, str):
            raise ConfigError(f"preset={self.preset!r}: give a preset's name.")
        self.values = settings.checked(self.values)  # every value typed and in bounds, once
        config = DecodeConfig.from_checked(self.values)  # checked just now: not again
        preset = get_preset(self.preset)
        offered = methods.lane_methods(preset)
        for m in self.methods:
            if m == methods.ASSISTED:
                methods.get_method(preset, m)  # where the preset has no smaller model: why, and what to use
            if m not in offered:
                raise ConfigError(
                    f"method {m!r} is not available for preset {preset.name!r}: use {', '.join(offered)}."
                )
        if preset.device == "gpu" and not cuda_available():
            raise ConfigError(
                f"preset {preset.name!r} needs a GPU and this machine has none: use smollm2-135m (CPU) or tiny-random."
            )
        return Resolved(self, preset, config, offered)

    def _check_methods(self) -> None:
        """A list of one to MAX_LANES method names (which of them the preset offers is checked with the preset)."""
        if not isinstance(self.methods, list) or not all(isinstance(m, str) for m in self.methods):
            raise ConfigError(f"methods={self.methods!r}: give a list of method names (e.g. plain, eagle, poss2).")
        if not self.methods:
            raise ConfigError("no method chosen: pick two or three (e.g. Plain, EAGLE and POSS-2).")
        if len(self.methods) > MAX_LANES:
            raise ConfigError(f"{len(self.methods)} methods chosen: pick at most {MAX_LANES} lanes.")

    def to_json(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "methods": self.methods, "preset": self.preset, **self.values}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> RunSpec:
        """A spec from what `to_json` wrote: settings it lacks read their defaults, names it no longer has are
        dropped."""
        return cls(
            obj.get("prompt"),
            obj.get("methods"),
            obj.get("preset"),
            **{k: v for k, v in obj.items() if k in settings.RUN},
        )


@dataclass(frozen=True)
class Resolved:
    """A checked spec and what it names, resolved once: the preset, the decoding config, the methods it offers."""

    spec: RunSpec
    preset: Preset
    config: DecodeConfig
    offered: dict[str, methods.Method]

    def draft_methods(self) -> list[methods.Method]:
        return [self.offered[m] for m in self.spec.methods if methods.uses_draft(m)]

    def target(self, models: ModelCache):
        return models.target(self.preset, self.spec.quantization, self.spec.precision)

    def draft(self, models: ModelCache, method: methods.Method, target):
        return models.draft(self.preset, method, target, self.spec.quantization, self.spec.precision)

    def assistant(self, models: ModelCache, method: methods.Method, target):
        return models.assistant(self.preset, method, target, self.spec.quantization, self.spec.precision)
