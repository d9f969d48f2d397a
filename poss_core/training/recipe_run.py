"""What a recipe runs: the data, training and held-out commands of its folders and steps, run in order, each skipped
when its output exists, so an interrupted run resumes where it stopped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..base.errors import ConfigError, PossError
from .recipe_file import PACKAGE_ROOT, DataFolder, Recipe, Step

TRAIN_MODULE = "poss_core.training.train"
DATA_MODULE = "poss_core.training.data"
EVAL_MODULE = "poss_core.training.evaluate"


# ----- paths ---------------------------------------------------------------------------------------------------------
def step_dir(runs: Path, step: Step | str) -> Path:
    return runs / (step if isinstance(step, str) else step.name)


def export_dir(runs: Path, step: Step | str) -> Path:
    """The folder holding one subfolder per method that the step trained."""
    return step_dir(runs, step) / "export"


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
