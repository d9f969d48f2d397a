"""What a comparison runs, as asked (`RunSpec`: the prompt, the methods, the preset and every run setting), and that
spec checked and resolved (`Resolved`) by `RunSpec.resolve`, the one way in: all `compare.start` and
`compare.fit_budgets` take."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from ..base import settings
from ..base.errors import ConfigError
from ..decoding.config import DecodeConfig, check_messages
from ..models.hardware import cuda_available
from ..models.presets import Preset, get_preset
from . import methods
from .model_cache import ModelCache

MAX_LANES = 3


@dataclass
class RunSpec:
    """What a comparison runs, as asked: the prompt (text or chat messages), the methods (one lane each), the preset's
    name, and every run setting of the settings table (`settings.RUN`, in its order, defaults included: a test holds
    the fields to the table). Nothing is checked until `resolve`, which returns the spec typed; a saved run records
    `to_json()`."""

    prompt: str | list[dict]
    methods: list[str]
    preset: str
    temperature: float = 0.0
    top_p: float = 1.0
    depth: int = 6
    top_k: int = 10
    tree_budget: int = 60
    max_new_tokens: int = 128
    seed: int = 0
    auto_budget: bool = False
    precision: str = "auto"
    quantization: str = "auto"

    def messages(self) -> list[dict]:
        if isinstance(self.prompt, str):
            return [{"role": "user", "content": self.prompt}]
        return list(self.prompt)

    def resolve(self, most_new_tokens: int | None = None, preset_order: bool = False) -> Resolved:
        """Check the spec once, before anything loads (ConfigError or PromptError for settings no lane could run
        with), and resolve what every step of the run reads: the spec typed as the decoder takes it (a slider's 4.0
        becomes 4), its preset, decoding config and offered methods. `most_new_tokens` is a server's cap on one
        run's answer (the app's `--max-new-tokens`); `preset_order` puts the lanes in the preset's order (the app's
        lanes, whatever order the boxes were ticked in)."""
        check_messages(self.prompt)
        self._check_methods()
        if not isinstance(self.preset, str):
            raise ConfigError(f"preset={self.preset!r}: give a preset's name.")
        values = settings.checked({name: getattr(self, name) for name in settings.RUN})  # typed and in bounds, once
        preset = get_preset(self.preset)
        offered = self._offered(preset)
        lanes = sorted(self.methods, key=list(offered).index) if preset_order else list(self.methods)
        spec = replace(self, methods=lanes, **values)
        _check_server_cap(spec.max_new_tokens, most_new_tokens)
        return Resolved(spec, preset, spec.decode_config(), offered)

    def decode_config(self) -> DecodeConfig:
        """The decoding settings of this spec, by name; the depth stop and the LM head's rows are the engine's own
        (their defaults: a fitted budget sets them per lane)."""
        return DecodeConfig(
            temperature=self.temperature,
            top_p=self.top_p,
            depth=self.depth,
            top_k=self.top_k,
            tree_budget=self.tree_budget,
            max_new_tokens=self.max_new_tokens,
            seed=self.seed,
        )

    def _check_methods(self) -> None:
        """A list of one to MAX_LANES method names (which of them the preset offers is checked with the preset)."""
        if not isinstance(self.methods, list) or not all(isinstance(m, str) for m in self.methods):
            raise ConfigError(f"methods={self.methods!r}: give a list of method names (e.g. plain, eagle, poss2).")
        if not self.methods:
            raise ConfigError("no method chosen: pick two or three (e.g. Plain, EAGLE and POSS-2).")
        if len(self.methods) > MAX_LANES:
            raise ConfigError(f"{len(self.methods)} methods chosen: pick at most {MAX_LANES} lanes.")

    def _offered(self, preset: Preset) -> dict[str, methods.Method]:
        """The methods `preset` offers, once every chosen one is among them and this machine can run the preset."""
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
        return offered

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

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


def _check_server_cap(asked: int, most: int | None) -> None:
    """Refuse more new tokens than a server gives one run (None: no cap beyond the setting's own bound)."""
    if most is not None and asked > most:
        raise ConfigError(
            f"max_new_tokens={asked} is more than this server gives one run "
            f"({most}, so that every visitor gets a turn): ask for {most} or fewer."
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
