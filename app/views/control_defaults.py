"""The values the controls start with, per preset and per machine, and what the Precision and Quantization settings
mean on this machine."""

from __future__ import annotations

import os
from typing import Any

from poss_core.models.hardware import cpu_bf16_units
from poss_core.models.presets import Preset
from poss_core.models.quantization import CPU_PLAIN_SPEED_RANGE
from poss_core.runtime import methods

PRESET_SETTINGS = ("depth", "top_k", "tree_budget", "max_new_tokens")  # what ui_defaults sets per preset
# Max new tokens to start with: room for a typical answer to end on its own (measured: docs/results.md, "The app's
# lanes").
ANSWER_TOKENS = 160


def ui_defaults(preset: Preset) -> dict[str, Any]:
    """Tree settings for the UI: the paper's on a GPU; a smaller tree on a CPU, where verifying it costs more. Every
    draft lane drafts the same tree by default (no fitted budget, no depth stop), so the lanes compare like for like
    and every specialist drafts every round; "Fastest tree for this machine" (`auto_budget`) is a choice."""
    cpu = preset.device == "cpu"
    return {
        "depth": preset.depth,
        "top_k": min(preset.top_k, 8) if cpu else preset.top_k,
        "tree_budget": min(preset.tree_budget, 32) if cpu else preset.tree_budget,
        "max_new_tokens": ANSWER_TOKENS,
        "auto_budget": False,
    }


def initial_precision(requested: str, gpu: bool, bf16_units: str | None) -> str:
    """The Precision setting `python app.py` starts with: what --dtype asks for, except that `auto` on a CPU with bf16
    units starts in bfloat16, where the draft lanes are measurably faster than plain decoding (fp32 on such a CPU
    showed no speed-up in the app: README, "What you see"); on a CPU every precision keeps the lanes identical to
    plain decoding (row-invariant attention), so bfloat16 costs no exactness."""
    if requested == "auto" and not gpu and bf16_units:
        return "bfloat16"
    return requested


def cpu_lanes_exact() -> bool:
    """Whether a CPU target runs row-invariant attention, which keeps every lane identical to plain decoding in every
    precision: the default, unless `python app.py --attention sdpa` (or POSS_ATTENTION=sdpa) chose speed."""
    return (os.environ.get("POSS_ATTENTION") or "row-invariant").replace("_", "-") == "row-invariant"


def precision_note(gpu: bool) -> str:
    """The Precision setting's explanation, for this machine."""
    if gpu:
        return (
            "auto = bfloat16 on a GPU with bf16 units, float16 on an older one (a T4); float32 shows token-for-token "
            "identity with plain decoding"
        )
    units = cpu_bf16_units()
    speed = (
        f"this CPU has {units}, so bfloat16 is faster here"
        if units
        else "this CPU has no native bf16 units, so bfloat16 may be slower here"
    )
    if not cpu_lanes_exact():
        return (
            f"auto = float32 on a CPU, where every lane is identical to plain decoding; bfloat16: {speed}, and with "
            f"transformers' sdpa attention (--attention sdpa) a bf16 lane may part from plain decoding at a rounding "
            f"near-tie, which its badge says"
        )
    return (
        f"auto = float32 on a CPU. On a CPU every precision keeps every lane identical to plain decoding, token for "
        f"token (the target's attention is row-invariant: a row's logits are the same bits alone or among tree "
        f"siblings); bfloat16: {speed}"
    )


def precision_hint(gpu: bool) -> str:
    """The Precision setting's one line in the Settings panel (precision_note, in the About tab, says the rest)."""
    if gpu:
        return "auto = bfloat16 on a GPU with bf16 units, float16 on an older one"
    units = cpu_bf16_units()
    exact = "every precision identical to plain" if cpu_lanes_exact() else "bf16 may part at near-ties"
    return f"auto = float32 on a CPU; {exact}; " + ("bfloat16 is faster here" if units else "no bf16 units here")


def quantization_hint(gpu: bool) -> str:
    """The Quantization setting's one line in the Settings panel (quantization_note, in the About tab)."""
    if gpu:
        return "auto quantizes only a target too big for the GPU"
    return "auto = none on a CPU, where 8-bit and 4-bit save memory, not time"


def quantization_note(gpu: bool) -> str:
    """The Quantization setting's explanation, for this machine: what it costs here, said plainly."""
    if gpu:
        return (
            "auto quantizes only when the target would not fit the GPU (8-bit, else 4-bit NF4); the drafts stay "
            "unquantized, and every lane is verified by the quantized target itself (identical to its plain "
            "decoding up to rounding near-ties, and int8's rounding noise in 8-bit)"
        )
    return (
        "auto = none on a CPU. 8-bit and 4-bit run the target through bitsandbytes, as a GPU short of memory "
        f"would: on a CPU they save memory but are slower (plain decoding at {CPU_PLAIN_SPEED_RANGE} float32's "
        "tokens/s), the first run loads another copy of the target, and the drafts were trained on the "
        "full-precision target, "
        "so acceptance changes (measured τ: 8-bit lower, 4-bit higher). 4-bit lanes stay identical to plain "
        "decoding of the same quantized target; 8-bit ones can "
        "part from it where int8's rounding noise decides between two close tokens, and their badge says so"
    )


def method_choices(preset: Preset) -> list[tuple[str, str]]:
    """(label, value) pairs for the methods a preset offers, plain decoding first: each method's label, with
    "(untrained)" after a draft that is a random stand-in (nothing trained is bundled for it yet)."""
    return [
        (m.label if m.trained else f"{m.label} (untrained)", name) for name, m in methods.lane_methods(preset).items()
    ]
