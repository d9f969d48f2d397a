"""A recipe file (TOML) read and checked: its data folders, data mixes and training steps, every reference resolved."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..base.errors import ConfigError
from ..models.presets import DEFAULT_PRESET

# The checkout (or site-packages) holding the package: commands import it from there, cards name paths from it.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
# Flags the recipe sets itself: a step or [train] table naming one is a mistake worth a clear error.
RESERVED = {"methods", "out", "export", "init_from", "data", "preset"}
STEP_KEYS = {"name", "methods", "data", "steps", "init", "specialists_from", "note"}
LAYER_SOURCE = "eagle"  # specialists_from copies this method's trained layer


@dataclass
class DataFolder:
    """One data folder: built from committed token ids (`tokens`) or by the data CLI with `args`."""

    name: str
    args: list[str] = field(default_factory=list)
    tokens: str = ""
    heldout: bool = False
    max_shards: int = 0
    eval_args: list[str] = field(default_factory=list)
    note: str = ""


@dataclass
class Step:
    """One training run per method, all from the same starting drafts, on the same data and batches."""

    name: str
    methods: list[str]
    data: list[str]
    steps: int
    mix: str = ""  # the [mix] the data was named by, if any
    init: str = ""
    specialists_from: str = ""
    flags: dict = field(default_factory=dict)
    note: str = ""


@dataclass
class Recipe:
    """A recipe as read: where its data, runs and bundled drafts live, its folders, mixes and steps in order."""

    path: Path
    preset: str
    data_root: Path
    runs: Path
    bundle: Path
    data: list[DataFolder]
    steps: list[Step]
    mixes: dict[str, list[str]] = field(default_factory=dict)
    launch: str = ""  # an accelerate config: every training runs under `accelerate launch` with it

    def folder(self, name: str) -> DataFolder:
        for d in self.data:
            if d.name == name:
                return d
        raise ConfigError(
            f"{self.path}: data folder {name!r} is not a [[data]] entry "
            f"(known: {', '.join(d.name for d in self.data)})."
        )

    def step_index(self, name: str) -> int:
        for i, s in enumerate(self.steps):
            if s.name == name:
                return i
        raise ConfigError(
            f"{self.path}: no step named {name!r} (python -m poss_core.training.recipe show lists them: "
            f"{', '.join(s.name for s in self.steps)})."
        )

    def step(self, name: str) -> Step:
        return self.steps[self.step_index(name)]


# ----- reading a recipe ----------------------------------------------------------------------------------------------
def _str_list(value, where: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise ConfigError(f"{where} must be a list of strings, not {value!r}.")
    return [str(v) for v in value]


def _flags(table: dict, where: str) -> dict:
    bad = sorted(set(table) & RESERVED)
    if bad:
        raise ConfigError(
            f"{where} sets {', '.join(bad)}: the recipe sets those itself (use the step's methods, "
            "data, init and specialists_from keys)."
        )
    return table


def _expand(names: list[str], mixes: dict[str, list[str]]) -> list[str]:
    """Data names with every mix replaced by its folders, in order, each folder once."""
    out: list[str] = []
    for n in names:
        for folder in mixes.get(n, [n]):
            if folder not in out:
                out.append(folder)
    return out


def _read_mixes(raw: dict, path: Path) -> dict[str, list[str]]:
    """[mix] NAME = [folders or earlier mixes]: each expanded to its folders."""
    mixes: dict[str, list[str]] = {}
    for name, value in raw.get("mix", {}).items():
        mixes[name] = _expand(_str_list(value, f"{path} mix {name}"), mixes)
    return mixes


def _read_step(s: dict, i: int, defaults: dict, mixes: dict[str, list[str]], path: Path) -> Step:
    name = str(s.get("name") or "")
    if not name:
        raise ConfigError(f"{path}: [[step]] {i + 1} has no name: name it by what it does.")
    flags = _flags({k: v for k, v in s.items() if k not in STEP_KEYS}, f"{path} step {name}")
    if "steps" not in s and "epochs" not in flags:
        raise ConfigError(f"{path}: step {name!r} has neither steps nor epochs.")
    data = _str_list(s.get("data", []), f"step {name} data")
    step = Step(
        name=name,
        methods=_str_list(s.get("methods", []), f"step {name} methods"),
        data=_expand(data, mixes),
        steps=int(s.get("steps", 0)),  # 0: `epochs` sets them when the data is read
        mix=data[0] if len(data) == 1 and data[0] in mixes else "",
        init=s.get("init", ""),
        specialists_from=s.get("specialists_from", ""),
        flags={**defaults, **flags},
        note=s.get("note", ""),
    )
    if not step.methods:
        raise ConfigError(f"{path}: step {name!r} trains no methods.")
    if step.init and step.specialists_from:
        raise ConfigError(f"{path}: step {name!r} sets both init and specialists_from: a step starts from one.")
    return step


# What a recipe file may hold (anything else is refused, naming it).
RECIPE_KEYS = {"preset", "data_root", "runs", "bundle", "launch", "train", "data", "mix", "step"}


def load_recipe(path: str | Path) -> Recipe:
    """Parse and check a recipe file: every reference (data names, starting steps) must resolve."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"recipe {path} does not exist (the bundled one is configs/drafts/smollm2-135m.toml).")
    try:
        raw = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not valid TOML: {e}") from e
    unknown = sorted(set(raw) - RECIPE_KEYS)
    if unknown:
        raise ConfigError(
            f"{path}: {unknown[0]!r} is not part of a recipe: use {', '.join(sorted(RECIPE_KEYS))} "
            f"(each phase of training is a [[step]] with a name saying what it does)."
        )
    defaults = _flags(dict(raw.get("train", {})), f"{path} [train]")
    data = []
    for i, d in enumerate(raw.get("data", [])):
        if "name" not in d:
            raise ConfigError(f"{path}: [[data]] entry {i + 1} has no name.")
        data.append(
            DataFolder(
                name=d["name"],
                args=_str_list(d.get("args", []), f"data {d['name']} args"),
                tokens=d.get("tokens", ""),
                heldout=bool(d.get("heldout", False)),
                max_shards=int(d.get("max_shards", 0)),
                eval_args=_str_list(d.get("eval_args", []), f"data {d['name']} eval_args"),
                note=d.get("note", ""),
            )
        )
        if not data[-1].tokens and not data[-1].args:
            raise ConfigError(f"{path}: data {d['name']!r} has neither tokens nor args: say how it is built.")
    mixes = _read_mixes(raw, path)
    steps = [_read_step(s, i, defaults, mixes, path) for i, s in enumerate(raw.get("step", []))]
    recipe = Recipe(
        path=path,
        preset=raw.get("preset", DEFAULT_PRESET),
        data_root=Path(raw.get("data_root", "data")),
        runs=Path(raw.get("runs", f"runs/{path.stem}")),
        bundle=Path(raw.get("bundle", "")),
        data=data,
        steps=steps,
        mixes=mixes,
        launch=str(raw.get("launch", "")),
    )
    check_references(recipe)
    return recipe


def check_references(recipe: Recipe) -> None:
    """Step names are unique, every data name exists, and every step starts from an earlier step that trained what
    it needs (its own methods for init, the EAGLE layer for specialists_from)."""
    earlier: dict[str, Step] = {}
    for step in recipe.steps:
        if step.name in earlier:
            raise ConfigError(f"{recipe.path}: two steps are named {step.name!r}.")
        for name in step.data:
            recipe.folder(name)
        for ref, needs in ((step.init, step.methods), (step.specialists_from, [LAYER_SOURCE])):
            if not ref:
                continue
            if ref not in earlier:
                raise ConfigError(f"{recipe.path}: step {step.name!r} starts from {ref!r}, which is no earlier step.")
            missing = [m for m in needs if m not in earlier[ref].methods]
            if missing:
                raise ConfigError(
                    f"{recipe.path}: step {step.name!r} starts from {ref!r}, which does not train {', '.join(missing)}."
                )
        earlier[step.name] = step
