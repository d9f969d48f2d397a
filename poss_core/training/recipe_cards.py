"""Where a recipe's drafts came from: each method's chain of steps, and the lineage its model card records."""

from __future__ import annotations

import json
from pathlib import Path

from ..base.errors import ConfigError
from .recipe_file import LAYER_SOURCE, PACKAGE_ROOT, Recipe, Step

TEACHER_FORCED = {"eagle", "matched"}  # methods trained on the target's true features at one position


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


def print_lineages(recipe: Recipe) -> None:
    """Every method's chain of steps, with the optimizer steps behind it."""
    for method in sorted({m for s in recipe.steps for m in s.methods}):
        chain = lineage(recipe, method)
        print(f"{method}: {sum(s.steps for s, _ in chain):,} steps")
        for step, who in chain:
            print(f"  {step.name} ({who}, {step.steps:,})")
