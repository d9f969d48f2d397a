"""Recipes: the data, stages and phases that produce a preset's drafts, run as one resumable command each.

    python -m poss_core.training.recipe data    --config configs/drafts/smollm2-135m.toml   # rebuild the data folders
    python -m poss_core.training.recipe train   --config configs/drafts/smollm2-135m.toml   # every stage, resumable
    python -m poss_core.training.recipe heldout --config configs/drafts/smollm2-135m.toml \\
        --drafts assets/drafts/smollm2-135m                                                  # score on held-out slices
    python -m poss_core.training.recipe show    --config configs/drafts/smollm2-135m.toml   # the commands, nothing run

A recipe (TOML) lists data folders (`[[data]]`: the committed token ids they rebuild from, or the
`poss_core.training.data` flags that make them) and stages (`[[stage]]`, each with phases `[[stage.phase]]`: the
methods a phase trains and the `poss_core.training.train` flags it uses, over the `[train]` defaults). A stage's
drafts are the previous stage's, overlaid by every method its phases trained (later phases win), and land in
RUNS/STAGE/drafts/METHOD. Every step runs the package's own CLI in a subprocess (its progress bar shows) and is
skipped when its output exists, so an interrupted run resumes where it stopped."""

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

from ..errors import ConfigError, PossError, run_cli

TRAIN_MODULE = "poss_core.training.train"
BUNDLED = "bundled"  # an init reference: the recipe's committed drafts (`bundle`), e.g. the shipped EAGLE layer
DATA_MODULE = "poss_core.training.data"
EVAL_MODULE = "poss_core.training.evaluate"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
# Flags the recipe sets itself: a phase or [train] table naming one is a mistake worth a clear error.
RESERVED = {"methods", "out", "export", "init_from", "specialists_from", "data", "preset"}


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
class Phase:
    """One training run per method, all from the same initial drafts, on the same data and batches."""
    stage: str
    name: str
    methods: list[str]
    data: list[str]
    steps: int
    init: str = ""
    specialists_from: str = ""
    flags: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.stage}/{self.name}"


@dataclass
class Stage:
    name: str
    phases: list[Phase]
    note: str = ""


@dataclass
class Recipe:
    path: Path
    preset: str
    data_root: Path
    runs: Path
    bundle: Path
    data: list[DataFolder]
    stages: list[Stage]

    def folder(self, name: str) -> DataFolder:
        for d in self.data:
            if d.name == name:
                return d
        raise ConfigError(f"{self.path}: data folder {name!r} is not a [[data]] entry "
                          f"(known: {', '.join(d.name for d in self.data)}).")

    def stage_index(self, name: str) -> int:
        for i, s in enumerate(self.stages):
            if s.name == name:
                return i
        raise ConfigError(f"{self.path}: no stage named {name!r} (stages: {', '.join(s.name for s in self.stages)}).")


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
        raise ConfigError(f"{where} sets {', '.join(bad)}: the recipe sets those itself (use the phase's methods, "
                          "data, init and specialists_from keys).")
    return table


def load_recipe(path: str | Path) -> Recipe:
    """Parse and check a recipe file: every reference (data names, init stages) must resolve."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"recipe {path} does not exist (the bundled one is configs/drafts/smollm2-135m.toml).")
    try:
        raw = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not valid TOML: {e}") from e
    defaults = _flags(dict(raw.get("train", {})), f"{path} [train]")
    default_data = _str_list(defaults.pop("data", []), "[train] data") if "data" in defaults else []
    data = []
    for i, d in enumerate(raw.get("data", [])):
        if "name" not in d:
            raise ConfigError(f"{path}: [[data]] entry {i + 1} has no name.")
        data.append(DataFolder(name=d["name"], args=_str_list(d.get("args", []), f"data {d['name']} args"),
                               tokens=d.get("tokens", ""), heldout=bool(d.get("heldout", False)),
                               max_shards=int(d.get("max_shards", 0)),
                               eval_args=_str_list(d.get("eval_args", []), f"data {d['name']} eval_args"),
                               note=d.get("note", "")))
        if not data[-1].tokens and not data[-1].args:
            raise ConfigError(f"{path}: data {d['name']!r} has neither tokens nor args: say how it is built.")
    stages = []
    for s in raw.get("stage", []):
        name = s.get("name") or f"stage-{len(stages) + 1}"
        phases = []
        for p in s.get("phase", []):
            known = {"name", "methods", "data", "steps", "init", "specialists_from", "note"}
            flags = _flags({k: v for k, v in p.items() if k not in known}, f"{path} {name} phase {p.get('name')}")
            if "steps" not in p and "steps" not in defaults:
                raise ConfigError(f"{path}: {name} phase {p.get('name')!r} has no steps.")
            phases.append(Phase(stage=name, name=str(p.get("name", len(phases) + 1)),
                                methods=_str_list(p.get("methods", []), f"{name} methods"),
                                data=_str_list(p.get("data", default_data), f"{name} data"),
                                steps=int(p.get("steps", defaults.get("steps", 0))),
                                init=p.get("init", ""), specialists_from=p.get("specialists_from", ""),
                                flags={**{k: v for k, v in defaults.items() if k != "steps"}, **flags}))
            if not phases[-1].methods:
                raise ConfigError(f"{path}: {name} phase {phases[-1].name!r} trains no methods.")
        stages.append(Stage(name=name, phases=phases, note=s.get("note", "")))
    recipe = Recipe(path=path, preset=raw.get("preset", "smollm2-135m"), data_root=Path(raw.get("data_root", "data")),
                    runs=Path(raw.get("runs", f"runs/{path.stem}")), bundle=Path(raw.get("bundle", "")),
                    data=data, stages=stages)
    check_references(recipe)
    return recipe


def check_references(recipe: Recipe) -> None:
    """Every phase's data names exist, and every init reference points back in the recipe (never forward)."""
    seen_phases: set[str] = set()
    for i, stage in enumerate(recipe.stages):
        for phase in stage.phases:
            for name in phase.data:
                recipe.folder(name)
            for ref in (phase.init, phase.specialists_from):
                if not ref:
                    continue
                if ref == BUNDLED:
                    if not recipe.bundle or str(recipe.bundle) in ("", "."):
                        raise ConfigError(f"{recipe.path}: {phase.key} starts from the bundle, but the recipe names "
                                          "no bundle folder.")
                elif ref == "previous":
                    if i == 0:
                        raise ConfigError(f"{recipe.path}: {phase.key} starts from 'previous' but is in the first "
                                          "stage.")
                elif "/" in ref:
                    if ref not in seen_phases:
                        raise ConfigError(f"{recipe.path}: {phase.key} starts from {ref!r}, which is no earlier "
                                          "phase.")
                elif recipe.stage_index(ref) >= i:
                    raise ConfigError(f"{recipe.path}: {phase.key} starts from stage {ref!r}, which is not earlier.")
            seen_phases.add(phase.key)


# ----- paths ---------------------------------------------------------------------------------------------------------
def phase_dir(runs: Path, phase: Phase) -> Path:
    return runs / phase.stage / phase.name


def stage_drafts(runs: Path, stage: str) -> Path:
    return runs / stage / "drafts"


def resolve(recipe: Recipe, runs: Path, stage_i: int, ref: str) -> Path:
    """A phase's init reference as the folder holding one subfolder per method: "previous" (the stage before),
    "STAGE" (its drafts), "STAGE/PHASE" (that phase's export) or "bundled" (the recipe's committed drafts)."""
    if ref == BUNDLED:
        return recipe.bundle
    if ref == "previous":
        return stage_drafts(runs, recipe.stages[stage_i - 1].name)
    if "/" in ref:
        stage, phase = ref.split("/", 1)
        return runs / stage / phase / "export"
    return stage_drafts(runs, ref)


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


def train_command(recipe: Recipe, runs: Path, stage_i: int, phase: Phase, method: str, max_steps: int = 0) -> list[str]:
    where = phase_dir(runs, phase)
    flags = dict(phase.flags)
    steps = min(phase.steps, max_steps) if max_steps else phase.steps
    if max_steps:
        flags["final_eval"] = "none"  # a smoke run checks that training starts, not what it scores
    cmd = [sys.executable, "-m", TRAIN_MODULE, "--preset", recipe.preset, "--methods", method,
           "--data", *[str(recipe.data_root / n) for n in phase.data], "--steps", str(steps),
           *flag_args(flags), "--out", str(where / "run"), "--export", str(where / "export")]
    if phase.init:
        cmd += ["--init-from", str(resolve(recipe, runs, stage_i, phase.init))]
    if phase.specialists_from:
        cmd += ["--specialists-from", str(resolve(recipe, runs, stage_i, phase.specialists_from))]
    return cmd


def show(cmd: list[str]) -> str:
    return " ".join(["python" if c == sys.executable else c for c in cmd])


def run_step(cmd: list[str], label: str, dry_run: bool) -> None:
    print(f"[recipe] {label}: {show(cmd)}", flush=True)
    if dry_run:
        return
    env = dict(os.environ)  # the package importable from any working directory
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    code = subprocess.call(cmd, env=env)
    if code != 0:
        raise PossError(f"{label} failed (exit {code}); rerun the same command to resume from where it stopped.")


# ----- the three procedures ------------------------------------------------------------------------------------------
def needed_data(recipe: Recipe, until: str | None) -> list[str]:
    last = recipe.stage_index(until) if until else len(recipe.stages) - 1
    return sorted({n for s in recipe.stages[: last + 1] for p in s.phases for n in p.data})


def build_data(recipe: Recipe, only: list[str], max_shards: int, dry_run: bool, tokens_only: bool = False) -> None:
    """Every data folder in order (later ones may exclude earlier ones); a folder whose shards exist is skipped by the
    data CLI itself, so a rerun resumes."""
    unknown = sorted(set(only) - {d.name for d in recipe.data})
    if unknown:
        raise ConfigError(f"--only {', '.join(unknown)}: not a data folder of {recipe.path}.")
    todo = [d for d in recipe.data if not only or d.name in only]
    for i, d in enumerate(todo, 1):
        run_step(data_command(recipe, d, max_shards=max_shards, tokens_only=tokens_only),
                 f"data {i}/{len(todo)} {d.name}", dry_run)


def assemble_stage(recipe: Recipe, runs: Path, stage_i: int) -> Path:
    """RUNS/STAGE/drafts: the previous stage's drafts with this stage's trained methods laid over them."""
    stage = recipe.stages[stage_i]
    out = stage_drafts(runs, stage.name)
    tmp = out.with_name("drafts.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if stage_i > 0:
        prev = stage_drafts(runs, recipe.stages[stage_i - 1].name)
        for m in sorted(prev.iterdir()) if prev.is_dir() else []:
            shutil.copytree(m, tmp / m.name)
    for phase in stage.phases:
        for method in phase.methods:
            shutil.rmtree(tmp / method, ignore_errors=True)
            shutil.copytree(phase_dir(runs, phase) / "export" / method, tmp / method)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def train_stages(recipe: Recipe, runs: Path, until: str | None, max_steps: int, dry_run: bool) -> Path | None:
    """Each stage's phases, method by method, then the stage's drafts. A method whose export exists is done."""
    last = recipe.stage_index(until) if until else len(recipe.stages) - 1
    missing = [n for n in needed_data(recipe, until) if not list((recipe.data_root / n).glob("shard-*.safetensors"))]
    if missing and not dry_run:
        raise PossError(f"data folder(s) {', '.join(missing)} under {recipe.data_root}/ have no shards: run "
                        f"python -m poss_core.training.recipe data --config {recipe.path} first.")
    out = None
    for i, stage in enumerate(recipe.stages[: last + 1]):
        if (stage_drafts(runs, stage.name)).is_dir():
            print(f"[recipe] {stage.name}: done ({stage_drafts(runs, stage.name)})", flush=True)
            out = stage_drafts(runs, stage.name)
            continue
        for phase in stage.phases:
            for method in phase.methods:
                if (phase_dir(runs, phase) / "export" / method / "config.json").is_file():
                    continue
                run_step(train_command(recipe, runs, i, phase, method, max_steps),
                         f"{phase.key} {method} ({phase.steps} steps)", dry_run)
        if not dry_run:
            out = assemble_stage(recipe, runs, i)
            print(f"[recipe] {stage.name}: drafts in {out}", flush=True)
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
            raise PossError(f"held-out slice {folder} has no shards: run python -m poss_core.training.recipe data "
                            f"--config {recipe.path} --only {d.name} first.")
        path = out / f"{d.name}.json"
        cmd = [sys.executable, "-m", EVAL_MODULE, "--preset", recipe.preset, "--data", str(folder), "--drafts",
               *drafts, "--methods", methods, "--unroll", "decoding", "--threads", str(threads), *d.eval_args,
               "--out", str(path)]
        run_step(cmd, f"held-out {d.name}", dry_run)
        written.append(path)
    return written


# ----- CLI -----------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m poss_core.training.recipe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    def common(q):
        q.add_argument("--config", default="configs/drafts/smollm2-135m.toml", help="the recipe (TOML)")
        q.add_argument("--dry-run", action="store_true", help="print the commands without running them")

    d = sub.add_parser("data", help="build every data folder (from committed token ids where the recipe has them)")
    common(d)
    d.add_argument("--only", nargs="+", default=[], metavar="NAME", help="just these data folders")
    d.add_argument("--max-shards", type=int, default=0, metavar="N",
                   help="build at most N shards per folder (a quick smoke run; 0 = all)")
    d.add_argument("--tokens-only", action="store_true",
                   help="write the rows without the target's features: minutes instead of hours, and training "
                        "computes each batch's features as it uses them (worth it for a run of a few hundred steps)")
    t = sub.add_parser("train", help="train every stage in order (resumable)")
    common(t)
    t.add_argument("--until", default=None, metavar="STAGE", help="stop after this stage (e.g. stage-1)")
    t.add_argument("--max-steps", type=int, default=0, metavar="N",
                   help="cap every phase at N steps (a smoke run; it trains under RUNS-max-steps-N, never RUNS)")
    t.add_argument("--runs", default=None, help="where the stages train (default: the recipe's runs)")
    h = sub.add_parser("heldout", help="score drafts on the recipe's held-out slices")
    common(h)
    h.add_argument("--drafts", nargs="+", required=True, help="folders holding one subfolder per method")
    h.add_argument("--methods", default="eagle,poss2,poss3,matched")
    h.add_argument("--threads", type=int, default=2)
    h.add_argument("--out", default="results/heldout", help="folder for one JSON per held-out slice")
    s = sub.add_parser("show", help="print the recipe's stages and the commands they run")
    common(s)
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
        out = train_stages(recipe, runs, args.until, args.max_steps, args.dry_run)
        if out and not args.dry_run:
            print(json.dumps({"drafts": str(out)}))
    elif args.command == "heldout":
        paths = heldout(recipe, args.drafts, args.methods, Path(args.out), args.threads, args.dry_run)
        if not args.dry_run:
            print(heldout_table(paths))
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
            lines += ["| slice | drafts | draft | " + " | ".join(f"k={k}" for k in range(1, depth + 1)) + " |",
                      "|---|---|---|" + "---|" * depth]
        for r in report["results"]:
            lines.append(f"| {path.stem} ({report['sequences']}) | {r['drafts']} | {r['label']} | "
                         + " | ".join(f"{x:.3f}" for x in r["top1_by_position"]) + " |")
    return "\n".join(lines)


def print_recipe(recipe: Recipe) -> None:
    print(f"recipe {recipe.path}: preset {recipe.preset}, data under {recipe.data_root}/, stages under {recipe.runs}/")
    for d in recipe.data:
        how = f"from {d.tokens}" if d.tokens else "by its command"
        print(f"  data {d.name}{' (held out)' if d.heldout else ''}: {how}")
        print(f"    {show(data_command(recipe, d))}")
    for i, stage in enumerate(recipe.stages):
        print(f"  {stage.name}: {stage.note}")
        for phase in stage.phases:
            for method in phase.methods:
                print(f"    {show(train_command(recipe, recipe.runs, i, phase, method))}")


if __name__ == "__main__":
    sys.exit(main())
