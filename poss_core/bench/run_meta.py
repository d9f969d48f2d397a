"""What a benchmark run records about itself: the command, date, hardware, software, settings, tree budgets, questions
and notes (the report's header, and the facts the evidence summary keeps as values)."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
from collections.abc import Sequence
from datetime import datetime, timezone

import torch
import transformers

from ..base.paths import project_root
from ..decoding.config import DecodeConfig
from ..models.hardware import device_description
from ..models.presets import Preset
from .runner import BenchLane


def _hardware(target) -> str:
    return device_description(target.device) + f", {platform.system()} {platform.machine()}"


def load_average() -> float | None:
    """The 1-minute load average (None where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def _load_text(start: float | None, end: float | None) -> str:
    """Other work on the machine shows in the timings: say how busy it was."""
    if start is None or end is None:
        return ""
    return f"; 1-minute load average {start:.1f} before loading, {end:.1f} at the end"


def _git_commit() -> str | None:
    """The checkout's commit (with "+changes" when files differ from it), or None outside a git checkout."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=project_root(), capture_output=True, text=True, timeout=10
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        return (commit + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def _software() -> str:
    return f"Python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}"


def run_meta(
    args,
    argv: Sequence[str],
    preset: Preset,
    target,
    lanes: Sequence[BenchLane],
    questions,
    base_cfg: DecodeConfig,
    budget: int | str,
    skipped: list[str],
    load_start: float | None,
) -> dict:
    """What the report says about the run: command, date, hardware, software, settings, budgets, questions, notes."""
    settings = (
        f"depth {base_cfg.depth}, top-k {base_cfg.top_k}, temperature {args.temperature}, top-p {args.top_p}, "
        f"max new tokens {args.max_new_tokens}, runs {args.runs}, seed {args.seed}"
    )
    if base_cfg.depth_stop and budget != "auto":
        settings += f", dynamic depth stop below p {base_cfg.depth_stop:g}"
    if args.head_rows == "all":
        settings += ", the target's LM head over every tree slot"
    if budget == "auto":
        source = (
            f"first {args.calibration_prompts} prompts of {' '.join(args.calibration_data)}"
            if args.calibration_data
            else "the built-in prompts"
        )
        chosen = "; ".join(f"{m.name} → {m.budget_choice.describe()}" for m in lanes if m.budget_choice is not None)
        budget_text = f"auto (calibrated on {source}, {args.calibration_tokens} new tokens each): {chosen}"
    else:
        budget_text = f"{budget} (fixed)"
    untrained = [m.name for m in lanes if not m.trained]
    notes = (
        [
            f"Untrained (random) drafts: {', '.join(untrained)}. Their acceptance and speed say nothing about POSS; "
            f"they show what the machinery costs."
        ]
        if untrained
        else []
    )
    n_turns = sum(len(q.turns) for q in questions)
    return {
        "preset": preset.name,
        "model_id": preset.name,
        "command": "python -m poss_core.bench " + shlex.join(list(argv)),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hardware": _hardware(target) + _load_text(load_start, load_average()),
        "software": _software(),
        "target": f"{preset.description}, {str(target.dtype).replace('torch.', '')} on {target.device.type} "
        f"(quantization: {target.quantization})",
        "settings": settings,
        "budget": budget_text,
        "questions": f"{len(questions)} questions, {n_turns} turns from "
        f"{', '.join(dict.fromkeys(q.dataset for q in questions))}"
        + (f" (first {args.limit} per dataset)" if args.limit else ""),
        "labels": {m.name: m.label for m in lanes},
        "budgets": {m.name: m.budget for m in lanes if m.budget is not None},
        "budget_choices": {m.name: m.budget_choice.to_json() for m in lanes if m.budget_choice is not None},
        "skipped": skipped,
        "notes": notes,
        # The same facts as values, for the evidence summary (poss_core.results.evidence).
        "dtype": str(target.dtype).replace("torch.", ""),
        "threads": torch.get_num_threads(),
        "git_commit": _git_commit(),
        "run_settings": {
            "depth": base_cfg.depth,
            "top_k": base_cfg.top_k,
            "tree_budget": budget,
            "max_new_tokens": args.max_new_tokens,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "runs": args.runs,
            "seed": args.seed,
            "limit": args.limit,
        },
    }
