"""`python -m poss_core.bench report FOLDER [--limit N --out OTHER]`: a results folder's tables, JSONL and report
written again from its records.jsonl (the first N questions of each dataset with --limit), after a check that its
summary.json is a benchmark's."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from ..base.errors import ConfigError, PossError
from ..base.settings import BOUNDS
from ..results.analysis import subset_identity
from ..results.records import first_questions, read_records, read_summary, records_in
from .report import write_outputs


def report_main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m poss_core.bench report",
        description="Rebuild tables, JSONL and HTML from a results folder's records.jsonl.",
    )
    p.add_argument("folder")
    p.add_argument("--plotlyjs", choices=["inline", "cdn"], default="inline")
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        help="only the first N questions of each dataset (a larger run read as a smaller one); needs --out",
    )
    p.add_argument("--out", default=None, help="write the rebuilt report here instead of into FOLDER")
    args = p.parse_args(argv)
    folder = Path(args.folder)
    if args.limit is not None and (args.out is None or Path(args.out).resolve() == folder.resolve()):
        raise PossError("--limit rebuilds a smaller report: give --out with another folder, so the full records stay.")
    summary = checked_summary(folder / "summary.json")
    records = read_records(records_in(folder))
    meta, identity = summary["meta"], summary.get("identity")
    if args.limit is not None:
        records = first_questions(records, args.limit)
        meta = {
            **meta,
            "notes": list(meta.get("notes", []))
            + [
                f"Rebuilt from {folder}'s records: the first {args.limit} questions of each dataset "
                f"(python -m poss_core.bench report {folder} --limit {args.limit} --out {args.out})."
            ],
        }
        identity = subset_identity(identity, records) if identity is not None else None
    out = Path(args.out) if args.out else folder
    out.mkdir(parents=True, exist_ok=True)
    paths = write_outputs(
        out, records, meta, int(summary["depth"]), identity, plotlyjs=True if args.plotlyjs == "inline" else "cdn"
    )
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def checked_summary(path: Path) -> dict:
    """A results folder's summary.json with what a report needs (its run's `meta` and the `depth`), else a
    ConfigError saying what to give instead (an empty or foreign file is not a KeyError)."""
    rebuild = "give a folder written by `python -m poss_core.bench ... --out DIR`"
    if not path.is_file():
        raise ConfigError(f"{path} does not exist: {rebuild}.")
    try:
        summary = read_summary(path)
    except (ValueError, AttributeError, TypeError, KeyError) as err:  # not JSON, or JSON of another shape
        raise ConfigError(f"{path} is not a benchmark summary ({type(err).__name__}): {rebuild}.") from None
    lo, hi = BOUNDS["depth"]
    meta, depth = (summary.get("meta"), summary.get("depth")) if isinstance(summary, dict) else (None, None)
    if not isinstance(meta, dict) or not (isinstance(depth, int) and lo <= depth <= hi):
        raise ConfigError(
            f'{path} is not a benchmark summary (it needs the run\'s "meta" and a "depth" from '
            f"{lo} to {hi}): {rebuild}."
        )
    return summary
