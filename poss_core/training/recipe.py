"""Recipes: the data and the named training steps that produce a preset's drafts, run as one resumable command each.

    python -m poss_core.training.recipe data    --config configs/drafts/smollm2-135m.toml   # rebuild the data folders
    python -m poss_core.training.recipe train   --config configs/drafts/smollm2-135m.toml   # every step, resumable
    python -m poss_core.training.recipe heldout --config configs/drafts/smollm2-135m.toml \\
        --drafts assets/drafts/smollm2-135m                                                  # score on held-out slices
    python -m poss_core.training.recipe show    --config configs/drafts/smollm2-135m.toml   # the commands, nothing run
    python -m poss_core.training.recipe cards   --config configs/drafts/smollm2-135m.toml   # each draft's lineage

A recipe (TOML) lists data folders (`[[data]]`: the committed token ids they rebuild from, or the
`poss_core.training.data` flags that make them), named data mixes (`[mix]`: lists of folders, or of earlier mixes)
and training steps (`[[step]]`, in order: a name, the methods it trains, its data, its steps, where it starts
(`init` or `specialists_from`: an earlier step's name) and any `poss_core.training.train` flags over the `[train]`
defaults). A step trains each method in RUNS/STEP/run/METHOD and exports it to RUNS/STEP/export/METHOD; after the last
step run, RUNS/STEP/drafts holds every method's latest draft. Every training runs the package's own CLI in a
subprocess (its progress bar shows) and is skipped when its export exists, so an interrupted run resumes where it
stopped."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..base.errors import ConfigError, PossError, run_cli
from ..models.presets import DEFAULT_PRESET

TRAIN_MODULE = "poss_core.training.train"
DATA_MODULE = "poss_core.training.data"
EVAL_MODULE = "poss_core.training.evaluate"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
# Flags the recipe sets itself: a step or [train] table naming one is a mistake worth a clear error.
RESERVED = {"methods", "out", "export", "init_from", "data", "preset"}
STEP_KEYS = {"name", "methods", "data", "steps", "init", "specialists_from", "note"}
TEACHER_FORCED = {"eagle", "matched"}  # methods trained on the target's true features at one position
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


# ----- paths ---------------------------------------------------------------------------------------------------------
def step_dir(runs: Path, step: Step | str) -> Path:
    return runs / (step if isinstance(step, str) else step.name)


def export_dir(runs: Path, step: Step | str) -> Path:
    """The folder holding one subfolder per method that the step trained."""
    return step_dir(runs, step) / "export"


# ----- lineage -------------------------------------------------------------------------------------------------------
def lineage(recipe: Recipe, method: str, until: str | None = None) -> list[tuple[Step, str]]:
    """The steps behind `method`'s latest draft as of step `until` (default: the last), oldest first, each with the
    method whose weights it trained: init continues the same method, specialists_from copies the EAGLE layer."""
    last = recipe.step_index(until) if until else len(recipe.steps) - 1
    trained = [s for s in recipe.steps[: last + 1] if method in s.methods]
    if not trained:
        raise ConfigError(f"{recipe.path}: no step up to {recipe.steps[last].name!r} trains {method!r}.")
    chain, step, who = [], trained[-1], method
    while True:
        chain.append((step, who))
        if step.init:
            step = recipe.step(step.init)
        elif step.specialists_from:
            step, who = recipe.step(step.specialists_from), LAYER_SOURCE
        else:
            return chain[::-1]


def step_record(step: Step, who: str) -> dict:
    """One step of a lineage as a model card records it."""
    f = step.flags
    start = (
        f"continues {step.init}"
        if step.init
        else f"every layer a copy of {step.specialists_from}'s EAGLE layer"
        if step.specialists_from
        else f"a fresh initial layer (seed {f.get('seed', 0)})"
    )
    forced = who in TEACHER_FORCED
    return {
        "step": step.name,
        "method": who,
        "steps": step.steps,
        "start": start,
        "data": step.mix or step.data,
        "objective": "teacher-forced" if forced else "unrolled",
        "unroll": None if forced else f.get("unroll"),
        "loss": f.get("loss"),
        "lr": f.get("lr"),
        "batch_seed": f.get("batch_seed", f.get("seed", 0)),
        "max_len": f.get("max_len"),
    }


def card_lineage(recipe: Recipe, method: str, measured: bool = True) -> dict:
    """What a bundled draft's model card says of where it came from: data, steps, objective and unroll, step by
    step, from the recipe; `measured` says whether the card has held-out figures."""
    chain = lineage(recipe, method)
    return {
        "recipe": _repo_path(recipe.path),
        "total_steps": sum(s.steps for s, _ in chain),
        "heldout": HELDOUT_NOTE if measured else HELDOUT_MISSING,
        "data_mixes": {s.mix: s.data for s, _ in chain if s.mix},
        "steps": [step_record(s, who) for s, who in chain],
    }


def _repo_path(path: Path) -> str:
    """`path` as the repository names it (relative to its root) when it lies inside it."""
    try:
        return path.resolve().relative_to(PACKAGE_ROOT).as_posix()
    except ValueError:
        return path.as_posix()


HELDOUT_NOTE = (
    "heldout_top1_by_position_decoding: top-1 agreement with the target by draft position on the "
    "training sequences held out of every draft's training (seed 0's split), decoding unroll"
)
HELDOUT_MISSING = (
    "heldout_top1_by_position_decoding is null: not measured yet (python -m "
    "poss_core.training.evaluate on the last step's held-out split, or the step with final_eval)"
)


def card_text(card: dict) -> str:
    """A model card as JSON, each lineage step and data mix on one line so the chain reads top to bottom."""
    lin = card.get("lineage")
    if not lin:
        return json.dumps(card, indent=2) + "\n"
    inline = {f"@{i}@": v for i, v in enumerate([*lin["data_mixes"].values(), *lin["steps"]])}
    marks = iter(inline)
    shown = {
        **card,
        "lineage": {
            **lin,
            "data_mixes": {k: next(marks) for k in lin["data_mixes"]},
            "steps": [next(marks) for _ in lin["steps"]],
        },
    }
    text = json.dumps(shown, indent=2)
    for mark, value in inline.items():
        text = text.replace(json.dumps(mark), json.dumps(value))
    return text + "\n"


def _with_heldout_slot(card: dict) -> dict:
    """The card with its held-out figures' key present (null when not measured), where the trainer puts it."""
    if "heldout_top1_by_position_decoding" in card:
        return card
    out = {}
    for key, value in card.items():
        out[key] = value
        if key == "seconds_this_run":
            out["heldout_top1_by_position_decoding"] = None
    return {**out, "heldout_top1_by_position_decoding": None} if len(out) == len(card) else out


def cards(recipe: Recipe, root: Path, write: bool) -> list[str]:
    """Each bundled draft's model card with its "lineage" from the recipe; with `write`, the cards updated in place
    (a card without held-out figures records them as missing: null). Returns the methods whose card differs."""
    stale = []
    for folder in sorted(p for p in (root / recipe.bundle).iterdir() if (p / "model_card.json").is_file()):
        path = folder / "model_card.json"
        card = json.loads(path.read_text())
        measured = bool(card.get("heldout_top1_by_position_decoding"))
        new = {**_with_heldout_slot(card), "lineage": card_lineage(recipe, folder.name, measured)}
        if card_text(new) != path.read_text():
            stale.append(folder.name)
            if write:
                path.write_text(card_text(new))
    return stale


# ----- commands ------------------------------------------------------------------------------------------------------
def flag_args(flags: dict) -> list[str]:
    """`{"tokens_per_batch": 1024, "autocast": "bfloat16"}` -> `--tokens-per-batch 1024 --autocast bfloat16`."""
    out = []
    for key, value in flags.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            out += [flag] if value else []
        elif isinstance(value, list):
            out += [flag, *map(str, value)]
        else:
            out += [flag, str(value)]
    return out


def data_command(recipe: Recipe, d: DataFolder, max_shards: int = 0, tokens_only: bool = False) -> list[str]:
    """The data CLI call that (re)builds one folder: from its committed token ids when it has them (`tokens_only`:
    without the target's features, which the trainer then computes per batch)."""
    out = recipe.data_root / d.name
    args = [] if d.tokens else list(d.args)
    # --exclude names data folders of the recipe
    if "--exclude" in args:
        i = args.index("--exclude") + 1
        while i < len(args) and not args[i].startswith("--"):
            args[i] = str(recipe.data_root / recipe.folder(args[i]).name)
            i += 1
    cmd = [sys.executable, "-m", DATA_MODULE, "--preset", recipe.preset, *args, "--out", str(out)]
    if d.tokens:
        cmd += ["--from-ids", d.tokens, *_dtype_of(d.args)]
    shards = min((x for x in (d.max_shards, max_shards) if x), default=0)  # the smaller cap that is set
    if shards:
        cmd += ["--max-shards", str(shards)]
    if tokens_only:
        cmd += ["--tokens-only"]
    return cmd


def _dtype_of(args: list[str]) -> list[str]:
    """The generation dtype of a folder's original command: its features are rebuilt in the same precision."""
    return ["--dtype", args[args.index("--dtype") + 1]] if "--dtype" in args else []


def train_args(recipe: Recipe, runs: Path, step: Step, methods: list[str], max_steps: int = 0) -> list[str]:
    """The training CLI's arguments for a step's methods."""
    flags = dict(step.flags)
    steps = min(step.steps or max_steps, max_steps) if max_steps else step.steps
    if max_steps:
        flags["final_eval"] = "none"  # a smoke run checks that training starts, not what it scores
        flags.pop("epochs", None)
    args = [
        "--preset",
        recipe.preset,
        "--methods",
        ",".join(methods),
        "--data",
        *[str(recipe.data_root / n) for n in step.data],
        *(["--steps", str(steps)] if steps else []),
        *flag_args(flags),
        "--out",
        str(step_dir(runs, step) / "run"),
        "--export",
        str(export_dir(runs, step)),
    ]
    if recipe.launch:
        args += ["--accelerate-config", recipe.launch]
    if step.init:
        args += ["--init-from", str(export_dir(runs, step.init))]
    if step.specialists_from:
        args += ["--specialists-from", str(export_dir(runs, step.specialists_from))]
    return args


def train_command(recipe: Recipe, runs: Path, step: Step, method: str, max_steps: int = 0) -> list[str]:
    """The command that trains one method of a step: in this interpreter, or under `accelerate launch` with the
    recipe's accelerate config."""
    if recipe.launch:
        start = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", recipe.launch, "-m"]
    else:
        start = [sys.executable, "-m"]
    return [*start, TRAIN_MODULE, *train_args(recipe, runs, step, [method], max_steps)]


def print_plans(recipe: Recipe, runs: Path, until: str | None) -> None:
    """Each step's plan (`train --dry-run`: the draft's layers and the memory per GPU, derived from the target's
    configuration), in this process: nothing loads."""
    from .train import main as train_main

    last = recipe.step_index(until) if until else len(recipe.steps) - 1
    for step in recipe.steps[: last + 1]:
        print(f"[recipe] plan of {step.name}:", flush=True)
        code = train_main([*train_args(recipe, runs, step, step.methods), "--dry-run"])
        if code != 0:
            raise PossError(f"the plan of step {step.name!r} could not be made (see the error above).")


def show(cmd: list[str]) -> str:
    text = " ".join(["python" if c == sys.executable else c for c in cmd])
    return text.replace("python -m accelerate.commands.launch", "accelerate launch")


def run_step(cmd: list[str], label: str, dry_run: bool) -> None:
    print(f"[recipe] {label}: {show(cmd)}", flush=True)
    if dry_run:
        return
    env = dict(os.environ)  # the package importable from any working directory
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    code = subprocess.call(cmd, env=env)
    if code != 0:
        raise PossError(f"{label} failed (exit {code}); rerun the same command to resume from where it stopped.")


# ----- the procedures ------------------------------------------------------------------------------------------------
def needed_data(recipe: Recipe, until: str | None) -> list[str]:
    last = recipe.step_index(until) if until else len(recipe.steps) - 1
    return sorted({n for s in recipe.steps[: last + 1] for n in s.data})


def build_data(recipe: Recipe, only: list[str], max_shards: int, dry_run: bool, tokens_only: bool = False) -> None:
    """Every data folder in order (later ones may exclude earlier ones); a folder whose shards exist is skipped by the
    data CLI itself, so a rerun resumes."""
    unknown = sorted(set(only) - {d.name for d in recipe.data})
    if unknown:
        raise ConfigError(f"--only {', '.join(unknown)}: not a data folder of {recipe.path}.")
    todo = [d for d in recipe.data if not only or d.name in only]
    for i, d in enumerate(todo, 1):
        run_step(
            data_command(recipe, d, max_shards=max_shards, tokens_only=tokens_only),
            f"data {i}/{len(todo)} {d.name}",
            dry_run,
        )


def assemble_drafts(recipe: Recipe, runs: Path, last: int) -> Path:
    """RUNS/STEP/drafts for step `last`: every method's latest export up to and including that step."""
    out = step_dir(runs, recipe.steps[last]) / "drafts"
    tmp = out.with_name("drafts.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    latest = {m: s for s in recipe.steps[: last + 1] for m in s.methods}  # later steps win
    for method, step in sorted(latest.items()):
        shutil.copytree(export_dir(runs, step) / method, tmp / method)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def step_length(step: Step) -> str:
    """How long a step trains, as its recipe says: optimizer steps, or epochs of its data."""
    return f"{step.steps} steps" if step.steps else f"{step.flags.get('epochs')} epochs"


def train_steps(recipe: Recipe, runs: Path, until: str | None, max_steps: int, dry_run: bool) -> Path | None:
    """Each step in order, method by method (a method whose export exists is done), then the drafts as of the last
    step run."""
    last = recipe.step_index(until) if until else len(recipe.steps) - 1
    missing = [n for n in needed_data(recipe, until) if not list((recipe.data_root / n).glob("shard-*.safetensors"))]
    if missing and not dry_run:
        raise PossError(
            f"data folder(s) {', '.join(missing)} under {recipe.data_root}/ have no shards: run "
            f"python -m poss_core.training.recipe data --config {recipe.path} first."
        )
    for step in recipe.steps[: last + 1]:
        todo = [m for m in step.methods if not (export_dir(runs, step) / m / "config.json").is_file()]
        if not todo:
            print(f"[recipe] {step.name}: done ({export_dir(runs, step)})", flush=True)
        for method in todo:
            run_step(
                train_command(recipe, runs, step, method, max_steps),
                f"{step.name} {method} ({step_length(step)})",
                dry_run,
            )
    if dry_run:
        print_plans(recipe, runs, until)
        return None
    out = assemble_drafts(recipe, runs, last)
    print(f"[recipe] drafts as of {recipe.steps[last].name}: {out}", flush=True)
    return out


def heldout(recipe: Recipe, drafts: list[str], methods: str, out: Path, threads: int, dry_run: bool) -> list[Path]:
    """Score drafts on every held-out slice of the recipe (decoding unroll); one JSON per slice under `out`."""
    slices = [d for d in recipe.data if d.heldout]
    if not slices:
        raise ConfigError(f"{recipe.path} marks no data folder heldout = true.")
    written = []
    for d in slices:
        folder = recipe.data_root / d.name
        if not dry_run and not list(folder.glob("shard-*.safetensors")):
            raise PossError(
                f"held-out slice {folder} has no shards: run python -m poss_core.training.recipe data "
                f"--config {recipe.path} --only {d.name} first."
            )
        path = out / f"{d.name}.json"
        cmd = [
            sys.executable,
            "-m",
            EVAL_MODULE,
            "--preset",
            recipe.preset,
            "--data",
            str(folder),
            "--drafts",
            *drafts,
            "--methods",
            methods,
            "--unroll",
            "decoding",
            "--threads",
            str(threads),
            *d.eval_args,
            "--out",
            str(path),
        ]
        run_step(cmd, f"held-out {d.name}", dry_run)
        written.append(path)
    return written


# ----- CLI -----------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m poss_core.training.recipe",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True)

    def common(q):
        q.add_argument("--config", default="configs/drafts/smollm2-135m.toml", help="the recipe (TOML)")
        q.add_argument("--dry-run", action="store_true", help="print the commands without running them")

    d = sub.add_parser("data", help="build every data folder (from committed token ids where the recipe has them)")
    common(d)
    d.add_argument("--only", nargs="+", default=[], metavar="NAME", help="just these data folders")
    d.add_argument(
        "--max-shards",
        type=int,
        default=0,
        metavar="N",
        help="build at most N shards per folder (a quick smoke run; 0 = all)",
    )
    d.add_argument(
        "--tokens-only",
        action="store_true",
        help="write the rows without the target's features: minutes instead of hours, and training "
        "computes each batch's features as it uses them (worth it for a run of a few hundred steps)",
    )
    t = sub.add_parser("train", help="run every training step in order (resumable)")
    common(t)
    t.add_argument(
        "--until",
        default=None,
        metavar="STEP",
        help="stop after this step (a name that `show` lists, e.g. teacher-forced-from-scratch)",
    )
    t.add_argument(
        "--max-steps",
        type=int,
        default=0,
        metavar="N",
        help="cap every step at N optimizer steps (a smoke run; it trains under RUNS-max-steps-N, never RUNS)",
    )
    t.add_argument("--runs", default=None, help="where the steps train (default: the recipe's runs)")
    h = sub.add_parser("heldout", help="score drafts on the recipe's held-out slices")
    common(h)
    h.add_argument("--drafts", nargs="+", required=True, help="folders holding one subfolder per method")
    h.add_argument("--methods", default="eagle,hass,poss1,poss2,poss3,matched")
    h.add_argument("--threads", type=int, default=2)
    h.add_argument("--out", default="results/heldout", help="folder for one JSON per held-out slice")
    s = sub.add_parser("show", help="print the recipe's steps and the commands they run")
    common(s)
    c = sub.add_parser(
        "cards",
        help="print each bundled draft's lineage (data, steps, objective, unroll) from the "
        "recipe; --write puts it in the drafts' model_card.json",
    )
    common(c)
    c.add_argument("--write", action="store_true", help="update the bundled model cards' lineage in place")
    return run_cli(run, p.parse_args(argv))


def run(args) -> int:
    recipe = load_recipe(args.config)
    if args.command == "data":
        if args.max_shards < 0:
            raise ConfigError(f"--max-shards must be 0 (all) or positive, not {args.max_shards}.")
        build_data(recipe, args.only, args.max_shards, args.dry_run, args.tokens_only)
    elif args.command == "train":
        if args.max_steps < 0:
            raise ConfigError(f"--max-steps must be 0 (the recipe's steps) or positive, not {args.max_steps}.")
        runs = Path(args.runs) if args.runs else recipe.runs
        if args.max_steps and not args.runs:
            runs = runs.with_name(f"{runs.name}-max-steps-{args.max_steps}")
        out = train_steps(recipe, runs, args.until, args.max_steps, args.dry_run)
        if out and not args.dry_run:
            print(json.dumps({"drafts": str(out)}))
    elif args.command == "heldout":
        paths = heldout(recipe, args.drafts, args.methods, Path(args.out), args.threads, args.dry_run)
        if not args.dry_run:
            print(heldout_table(paths))
    elif args.command == "cards":
        print_lineages(recipe)
        stale = cards(recipe, Path.cwd(), write=args.write and not args.dry_run)
        if stale:
            print(f"{'updated' if args.write and not args.dry_run else 'differ from the recipe'}: {', '.join(stale)}")
    else:
        print_recipe(recipe)
    return 0


def heldout_table(paths: list[Path]) -> str:
    """One row per slice and draft: top-1 agreement by position."""
    lines = []
    for path in paths:
        report = json.loads(path.read_text())
        depth = max(len(r["top1_by_position"]) for r in report["results"])
        if not lines:
            lines += [
                "| slice | drafts | draft | " + " | ".join(f"k={k}" for k in range(1, depth + 1)) + " |",
                "|---|---|---|" + "---|" * depth,
            ]
        for r in report["results"]:
            lines.append(
                f"| {path.stem} ({report['sequences']}) | {r['drafts']} | {r['label']} | "
                + " | ".join(f"{x:.3f}" for x in r["top1_by_position"])
                + " |"
            )
    return "\n".join(lines)


def print_lineages(recipe: Recipe) -> None:
    """Every method's chain of steps, with the optimizer steps behind it."""
    for method in sorted({m for s in recipe.steps for m in s.methods}):
        chain = lineage(recipe, method)
        print(f"{method}: {sum(s.steps for s, _ in chain):,} steps")
        for step, who in chain:
            print(f"  {step.name} ({who}, {step.steps:,})")


def print_recipe(recipe: Recipe) -> None:
    print(f"recipe {recipe.path}: preset {recipe.preset}, data under {recipe.data_root}/, steps under {recipe.runs}/")
    for d in recipe.data:
        how = f"from {d.tokens}" if d.tokens else "by its command"
        print(f"  data {d.name}{' (held out)' if d.heldout else ''}: {how}")
        print(f"    {show(data_command(recipe, d))}")
    for step in recipe.steps:
        print(f"  {step.name}: {step.note}")
        for method in step.methods:
            print(f"    {show(train_command(recipe, recipe.runs, step, method))}")


if __name__ == "__main__":
    sys.exit(main())
