"""Every decoding and run setting, declared once: name, type, bounds, default, label and help.

From this one table come the bounds every entry point checks (`BOUNDS`), the app's Run controls
(`app/views/controls.py`), the command lines' flags (`add_flags`: `python -m poss_core.generate` and
`python -m poss_core.bench`), the `/compare` parameters (`app/actions/api.py`), the settings a comparison runs with and
a saved run records (`run_spec.RunSpec`), and the checks of `decoding.config.DecodeConfig`. `checked`, the one check,
turns loosely typed values (a slider's float, a JSON number) into the typed values the decoder takes, or raises a
ConfigError that names the field and what is valid.

A new decoding setting is one `Setting` here and one field of `DecodeConfig` (a test checks they agree; one offered to
the app or /compare is a field of `RunSpec` too), plus the engine code that uses it; every surface that offers it picks
it up from this table.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

# Where a setting is offered: the app's Run controls (and so /run, /step and saved runs), the /compare endpoint, and
# the two command lines. A setting on APP or API is part of a comparison's RunSpec.
APP, API, GENERATE, BENCH = "app", "api", "generate", "bench"
EVERYWHERE = frozenset({APP, API, GENERATE, BENCH})
COMMAND_LINES = frozenset({GENERATE, BENCH})


@dataclass(frozen=True)
class Setting:
    """One setting. `bounds` is what every entry point allows (the app's sliders span it); `open_low` / `open_high`
    exclude an end; `always_capped` applies the upper bound to the engine's own configs too (a probability), where
    the others cap only what a user asks for (`checked(..., capped=True)`: a run, the command lines; a DecodeConfig
    as the engine makes it is held to the uncapped bounds)."""

    name: str
    kind: type  # int, float, str or bool
    default: Any
    label: str  # the app control's label
    help: str  # what it does: flag help, the API's docs
    bounds: tuple[float, float] | None = None
    choices: tuple[str, ...] = ()
    decode: bool = True  # a field of DecodeConfig (else: how the target is loaded, or how the tree is chosen)
    offered: frozenset[str] = EVERYWHERE
    from_preset: bool = False  # a tree setting: the preset's value unless one is given
    open_low: bool = False
    open_high: bool = False
    always_capped: bool = False
    step: float = 1.0  # the app slider's step
    flag: str = ""  # the command lines' flag, when it is not --name-with-dashes

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def valid_text(self) -> str:
        """What is valid, in words ("an integer from 1 to 10", "one of auto, none, 8bit, 4bit")."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind is bool:
            return "true or false"
        kind = "an integer" if self.kind is int else "a number"
        lo, hi = (int(b) if self.kind is int else f"{b:g}" for b in self.bounds)
        if self.open_low or self.open_high:
            return (
                f"{kind} {'above' if self.open_low else 'from'} {lo} and "
                f"{'below' if self.open_high else 'at most'} {hi}"
            )
        return f"{kind} from {lo} to {hi}"

    def typed(self, value: Any) -> Any:
        """`value` as this setting's type: integral floats for integers (a number box sends 7.0), ints for floats;
        NaN, infinities, bools for numbers and anything else are refused, naming the field."""
        if self.choices or self.kind is bool:
            bad = ConfigError(f"{self.name}={value!r}: use {self.valid_text()}.")
        else:
            what = "an integer" if self.kind is int else "a number"
            bad = ConfigError(f"{self.name}={value!r} must be {what}: use {self.valid_text()}.")
        if self.kind is bool:
            if not isinstance(value, bool):
                raise bad
            return value
        if self.kind is str:
            if not isinstance(value, str) or (self.choices and value not in self.choices):
                raise bad
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        if not math.isfinite(float(value)):
            raise ConfigError(f"{self.name}={value!r} is not a finite number: use {self.valid_text()}.")
        if self.kind is float:
            return float(value)
        if isinstance(value, float):
            if not self.within(value, capped=True):  # say the range first: 1e9 is integral but far out
                raise ConfigError(f"{self.name}={value!r} is out of range: use {self.valid_text()}.")
            if not value.is_integer():
                raise bad
            return int(value)
        return value

    def within(self, value: float, capped: bool = True) -> bool:
        """Whether a number is inside the bounds (the upper one only when `capped` or `always_capped`)."""
        if self.bounds is None:
            return True
        lo, hi = self.bounds
        low_ok = value > lo if self.open_low else value >= lo
        high_ok = not (capped or self.always_capped) or (value < hi if self.open_high else value <= hi)
        return low_ok and high_ok

    def check(self, value: Any, capped: bool = True) -> Any:
        """The typed value, inside the bounds, or ConfigError naming the field and what is valid."""
        value = self.typed(value)
        if self.bounds is not None and not self.within(value, capped):
            raise ConfigError(f"{self.name}={value!r} is out of range: use {self.valid_text()}.")
        return value


QUANTIZATIONS = ("auto", "none", "8bit", "4bit")
# auto = the device's default (fp32 on a CPU; bf16 on GPUs with bf16 units, fp16 on older ones: hardware.auto_dtype);
# bf16 is faster on CPUs with bf16 units, and on a CPU every precision keeps every lane identical to plain decoding
# token for token (row-invariant attention, models/row_invariant.py); float16 is offered in the app on GPUs only
# (slow on CPUs, where the command lines still take it).
PRECISIONS = ("auto", "float32", "bfloat16", "float16")

# The upper bounds keep one call's work and memory bounded: the tree verified per round grows with depth, top_k and
# tree_budget, and a round's cost with the tokens already in the cache. In the app's order.
# fmt: off
_ALL = (
    Setting(
        "temperature", float, 0.0,
        label="Temperature",
        help="0 = greedy: every lane must match plain decoding; above 0, lossless sampling",
        bounds=(0.0, 2.0), step=0.05,
    ),
    Setting(
        "top_p", float, 1.0,
        label="Top-p",
        help="nucleus sampling's mass (1 = the whole distribution)",
        bounds=(0.0, 1.0), open_low=True, always_capped=True, step=0.05,
    ),
    Setting(
        "depth", int, 6,
        label="Depth (draft positions)",
        help="draft positions per round (default: the preset's)",
        bounds=(1, 10), from_preset=True,
    ),
    Setting(
        "top_k", int, 10,
        label="Top-k per node",
        help="children drafted per expanded node (default: the preset's)",
        bounds=(1, 20), from_preset=True,
    ),
    Setting(
        "tree_budget", int, 60,
        label="Tree budget (nodes verified, root included)",
        help="nodes verified per round, root included (default: the preset's)",
        bounds=(2, 256), from_preset=True,
    ),
    Setting(
        "max_new_tokens", int, 128,
        label="Max new tokens",
        help="the most tokens one answer may have",
        bounds=(1, 2048),
    ),
    Setting(
        "seed", int, 0,
        label="Seed",
        help="the sampling seed (every lane draws from the same one)",
        bounds=(0, 2**32 - 1),
    ),
    Setting(
        "auto_budget", bool, False,
        label="Fastest tree for this machine: each draft lane gets its own fitted budget and depth stop",
        help="fit each draft lane's tree budget and depth stop to this machine (tree_budget is then ignored)",
        decode=False, offered=frozenset({APP, API}),
    ),
    Setting(
        "precision", str, "auto",
        label="Precision (the target's dtype)",
        help="the target's precision: auto (fp32 on CPU; bf16 on GPUs with bf16 units, fp16 on older ones such as a "
        "T4) or a dtype; on a CPU with bf16 units bfloat16 is the fastest, and on a CPU every precision keeps every "
        "lane identical to plain decoding, token for token (row-invariant attention; on a GPU bf16/fp16 lanes may "
        "differ at rounding near-ties)",
        choices=PRECISIONS, decode=False, flag="--dtype",
    ),
    Setting(
        "quantization", str, "auto",
        label="Quantization (the target's weights)",
        help="the target's weights: auto (none unless the preset asks for it), none, or bitsandbytes 8bit / 4bit",
        choices=QUANTIZATIONS, decode=False, offered=EVERYWHERE,
    ),
    Setting(
        "depth_stop", float, 0.0,
        label="Depth stop",
        help="dynamic depth: stop drafting deeper once the best path's draft probability is below this (0: no "
        "depth stop; the node budget alone trims the tree)",
        bounds=(0.0, 1.0), open_high=True, always_capped=True, offered=COMMAND_LINES,
    ),
    Setting(
        "head_rows", str, "read",
        label="LM head rows",
        help="tree slots the target's LM head reads: the ones verification needs (a leaf's row in a second call "
        "when acceptance ends there), or all of them in one call",
        choices=("read", "all"), offered=frozenset({BENCH}),
    ),
)
# fmt: on
SETTINGS: dict[str, Setting] = {s.name: s for s in _ALL}
DECODE = tuple(s.name for s in _ALL if s.decode)  # DecodeConfig's fields
RUN = tuple(s.name for s in _ALL if s.offered & {APP, API})  # what a comparison runs with (RunSpec, saved runs)
BOUNDS: dict[str, tuple[float, float]] = {s.name: s.bounds for s in _ALL if s.bounds is not None}


def offered_on(surface: str) -> tuple[str, ...]:
    """The settings a surface offers, in the table's order."""
    return tuple(s.name for s in _ALL if surface in s.offered)


def checked(
    values: Mapping[str, Any], names: Iterable[str] | None = None, what: str = "a setting", capped: bool = True
) -> dict[str, Any]:
    """`values` typed as the decoder takes them and inside their bounds, in the table's order, or ConfigError naming
    the field and what is valid: the one check every way in uses (a run's `RunSpec.resolve`, a `DecodeConfig`, the
    command lines' `DecodeConfig.of`). A name not among `names` (every setting, unless given) is refused as not
    `what`; `capped` holds a value to the upper bound a user may ask for, where the engine's own configs may go past
    it (`Setting.always_capped` aside)."""
    allowed = tuple(SETTINGS) if names is None else tuple(names)
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        raise ConfigError(f"{unknown[0]!r} is not {what}: use {', '.join(allowed)}.")
    return {name: SETTINGS[name].check(values[name], capped) for name in SETTINGS if name in values}


def decoding(values: dict[str, Any]) -> dict[str, Any]:
    """The decoding settings among `values` (DecodeConfig's fields; the others load the target or choose the tree)."""
    return {name: v for name, v in values.items() if name in DECODE}


def defaults(names: tuple[str, ...] = RUN) -> dict[str, Any]:
    return {name: SETTINGS[name].default for name in names}


def add_flags(
    parser: argparse.ArgumentParser, surface: str, defaults: dict[str, Any] | None = None, **overrides: dict[str, Any]
) -> None:
    """The flags of the settings `surface` offers. A tree setting defaults to None (the preset's value); `defaults`
    gives a surface its own default (the benchmark answers 256 tokens); `overrides[name]` replaces argparse keywords
    of one flag (the benchmark's --tree-budget also takes 'auto')."""
    for name in offered_on(surface):
        s = SETTINGS[name]
        default = (defaults or {}).get(name, None if s.from_preset else s.default)
        if s.kind is bool:
            kwargs: dict[str, Any] = {"action": "store_true"}
        else:
            kwargs = {"type": s.kind, "default": default}
            if s.choices:
                kwargs["choices"] = list(s.choices)
        valid = f"; {s.valid_text()}" if s.bounds is not None else ""
        kwargs["help"] = f"{s.help}{valid}" + ("" if s.from_preset or default is None else f" (default {default})")
        kwargs.update(overrides.get(name, {}))
        parser.add_argument(s.option, dest=name, **kwargs)


def from_flags(args: argparse.Namespace, surface: str) -> dict[str, Any]:
    """The values of a surface's flags that were given or have a default (None, a preset's tree setting left to the
    preset, is left out)."""
    return {name: getattr(args, name) for name in offered_on(surface) if getattr(args, name, None) is not None}
