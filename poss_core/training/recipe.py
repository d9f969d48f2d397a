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
import sys
from pathlib import Path

from ..base.errors import ConfigError, run_cli
from .recipe_cards import cards, print_lineages
from .recipe_file import Recipe, load_recipe
from .recipe_run import build_data, data_command, heldout, heldout_table, show, train_command, train_steps


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
