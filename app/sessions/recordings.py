"""The Demo tab's example prompts and their recorded runs: one saved run (`saved_runs.py`'s JSONL) of the
default lanes per example and preset, bundled under assets/recordings/PRESET/, made by `scripts/record_examples.py`.
Clicking an example replays its recording at once, with the timing it was recorded with, and no model work: a
replay never waits behind live runs. Recordings are read on first use (not at start-up, so the cold start does not
grow) and kept, parsed and checked, for every later click."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from poss_core.models.presets import DEFAULT_PRESET
from poss_core.runtime import saved_runs
from poss_core.runtime.compare import Comparison

ASSETS = Path(__file__).resolve().parents[2] / "assets"
RECORDINGS_DIR = ASSETS / "recordings"
EXAMPLES: list[dict[str, str]] = json.loads((ASSETS / "examples" / "prompts.json").read_text(encoding="utf-8"))

_LOCK = threading.Lock()
_LOADED: dict[Path, Comparison] = {}  # a parsed recording per file: a handful of small files, kept for good


def example_label(example: dict[str, str]) -> str:
    """An example's button: its kind and a few words ("code: a palindrome check"), short enough that the six fit in
    two rows beside the settings on a projector."""
    words = example.get("label") or example["prompt"][:36].rstrip() + "…"
    return f"{example['family']}: {words}"


def recording_path(index: int, preset: str, folder: Path | None = None) -> Path:
    """Where example `index`'s recording for `preset` lives (what record_examples.py writes)."""
    family = EXAMPLES[index]["family"].lower().replace(" ", "-")
    return (folder or RECORDINGS_DIR) / preset / f"{index + 1:02d}-{family}.jsonl.gz"


def example_index(prompt: str) -> int | None:
    """The example whose prompt this is (exactly, as the Examples table fills the prompt box), else None."""
    text = (prompt or "").strip()
    return next((i for i, e in enumerate(EXAMPLES) if e["prompt"].strip() == text), None)


def recording_for(index: int, preset: str, folder: Path | None = None) -> Comparison | None:
    """The recorded run of example `index`: the one made on `preset` if bundled, else the default preset's; None
    when neither is. Parsed (and checked by the saved-run schema) once, then served from memory."""
    for name in dict.fromkeys((preset, DEFAULT_PRESET)):
        path = recording_path(index, name, folder)
        with _LOCK:
            if path in _LOADED:
                return _LOADED[path]
        if path.is_file():
            comp = saved_runs.load_run(path)
            with _LOCK:
                return _LOADED.setdefault(path, comp)
    return None


def loaded_runs() -> set[int]:
    """The ids of the recordings parsed so far: every tab shares them (a tab showing one holds no copy of its own)."""
    with _LOCK:
        return {id(c) for c in _LOADED.values()}


def hardware_line(comp: Comparison) -> str:
    """The machine a recording was made on, in a few words (its saved hardware: CPU, threads, dtype, the note)."""
    hw = comp.hardware or {}
    parts = [hw.get("cpu") or hw.get("device") or "unknown hardware", hw.get("dtype", "")]
    line = ", ".join(p for p in parts if p)
    if hw.get("recorded"):
        line += f", {hw['recorded']}"
    if hw.get("note"):
        line += f" ({hw['note']})"
    return line
