"""The one registry of decoding methods: name, label, colour, trained or not, and how to build its decoder.

Plain decoding is `plain` everywhere (CLI, benchmark files, app, charts). A draft method is named after its preset's
draft (`eagle`, `poss1`, `poss2`, `poss3`, `matched`, ...). `pld` (prompt lookup) and `assisted` (a smaller model of
the preset drafts) are transformers' own speculative `generate`: speculative decoding without a trained draft,
offered beside the drafts so a class sees what training buys."""

from __future__ import annotations

from dataclasses import dataclass

from ..base.errors import ConfigError
from ..decoding.config import DecodeConfig
from ..decoding.decoder import PlainDecoder, SpeculativeDecoder
from ..decoding.hf_generate import HFGenerateDecoder
from ..decoding.oracle import OracleDecoder
from ..models.draft import DraftModel
from ..models.loading import load_draft_by_name, load_preset_target
from ..models.presets import DraftRef, Preset, resolve_draft_name
from ..models.target import TargetModel

PLAIN = "plain"
PLAIN_HF = "plain-hf"  # transformers' own `generate`: the benchmark's second plain baseline
# Plain decoding of a second copy of the target in another precision (`plain-float32` beside a bf16 run): a speed
# baseline of the benchmark only; a numerically different model, so the identity check leaves it out.
OTHER_PRECISION_PLAIN = ("plain-float32", "plain-bfloat16", "plain-float16")

# transformers' own speculative generate, no trained draft: prompt lookup (offered with every preset) and assisted
# generation (offered where the preset names a smaller model with the target's tokenizer, `Preset.assistant`).
PLD = "pld"
ASSISTED = "assisted"
TRAINING_FREE = (PLD, ASSISTED)

PLAIN_COLOR = "#999999"
# Okabe-Ito: distinguishable with the common colour-vision deficiencies; methods no table names take the next one.
OKABE_ITO = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#999999"]
_SHORT_AND_COLOR = {
    "eagle": ("EAGLE", "#0072B2"),
    "poss1": ("POSS-1", "#E69F00"),
    "poss2": ("POSS-2", "#009E73"),
    "poss3": ("POSS-3", "#CC79A7"),
    "matched": ("Matched", "#56B4E9"),
    "hass": ("HASS", "#8C6BB1"),
    "eagle-reproduce": ("EAGLE (retrained)", "#F0E442"),
    "oracle": ("Oracle", "#D55E00"),
    PLD: ("Prompt lookup", "#A6761D"),
    ASSISTED: ("Assisted", "#332288"),
}
# The ceiling: a "draft" that is the target's own continuation (known from a plain run of the same prompt), so every
# round accepts up to the depth. Offered with every preset beside its drafts (`lane_methods`), never trained.
ORACLE = "oracle"


@dataclass(frozen=True)
class Method:
    """A way to decode: plain (the target alone) or speculative with one of a preset's drafts."""

    name: str  # what CLIs, files and the app call it
    label: str  # what it is, e.g. "POSS-2 (3 specialists)" (checkboxes, report tables)
    short: str  # chart legends and lane titles, e.g. "POSS-2"
    color: str
    trained: bool = True  # False: a random stand-in draft (nothing trained is bundled yet)
    draft: DraftRef | None = None  # None: plain decoding (or the oracle)
    oracle: bool = False  # the target's own continuation as the draft: the ceiling, not a method to deploy
    hf_mode: str = ""  # decoded by transformers' generate in this mode (plain, pld, assisted); "" = this engine
    assistant: str = ""  # the assisted method's smaller model (a Hugging Face id, folder or builtin:NAME)

    @property
    def plain(self) -> bool:
        return self.draft is None and not self.oracle and self.hf_mode in ("", "plain")


PLAIN_METHODS = {
    PLAIN: Method(PLAIN, "Plain decoding (target only)", "Plain", PLAIN_COLOR),
    PLAIN_HF: Method(
        PLAIN_HF, "Plain decoding (transformers generate)", "Plain (generate)", "#666666", hf_mode="plain"
    ),
    **{
        p: Method(p, f"Plain decoding ({p[6:]} copy of the target)", f"Plain ({p[6:]})", "#bbbbbb")
        for p in OTHER_PRECISION_PLAIN
    },
}
ORACLE_METHOD = Method(ORACLE, "Oracle (the target's own continuation)", "Oracle", "#D55E00", oracle=True)
PLD_METHOD = Method(PLD, "Prompt lookup (no draft model)", *_SHORT_AND_COLOR[PLD], hf_mode="pld")


def assisted_method(preset: Preset) -> Method:
    """Assisted generation with the preset's smaller model; ConfigError (why, and what to use) where it has none."""
    if not preset.assistant:
        why = preset.assistant_note or "it names no smaller model with the target's tokenizer (Preset.assistant)"
        raise ConfigError(
            f"method {ASSISTED!r} is not available for preset {preset.name!r}: {why}. Use {PLD} "
            f"(prompt lookup, no draft model) instead, or a preset with an assistant."
        )
    name = preset.assistant.split(":", 1)[-1].rstrip("/").rsplit("/", 1)[-1]
    return Method(
        ASSISTED,
        f"Assisted (smaller model: {name})",
        *_SHORT_AND_COLOR[ASSISTED],
        hf_mode="assisted",
        assistant=preset.assistant,
    )


def is_plain(name: str) -> bool:
    """Plain decoding of any kind: the baselines speed-ups are measured against."""
    return name in PLAIN_METHODS


def uses_draft(name: str) -> bool:
    """A method that decodes with a draft model of the preset (not plain decoding, the oracle, prompt lookup or
    assisted generation)."""
    return not is_plain(name) and name not in (ORACLE, *TRAINING_FREE)


def draft_method(name: str, ref: DraftRef) -> Method:
    short, color = _SHORT_AND_COLOR.get(name, (ref.title or name, OKABE_ITO[len(name) % 7]))
    return Method(name, ref.title or name, short, color, ref.trained, ref)


def preset_methods(preset: Preset) -> dict[str, Method]:
    """What a preset offers: plain decoding first, then its drafts in the preset's order."""
    return {PLAIN: PLAIN_METHODS[PLAIN], **{n: draft_method(n, ref) for n, ref in preset.drafts.items()}}


def lane_methods(preset: Preset) -> dict[str, Method]:
    """What a comparison can run: the preset's methods, prompt lookup, assisted generation where the preset names a
    smaller model, then the oracle (the ceiling any draft could reach)."""
    assisted = {ASSISTED: assisted_method(preset)} if preset.assistant else {}
    return {**preset_methods(preset), PLD: PLD_METHOD, **assisted, ORACLE: ORACLE_METHOD}


def get_method(preset: Preset, name: str) -> Method:
    """A method by name: plain decoding of any kind, the oracle, prompt lookup, assisted generation, a preset's
    draft, or a draft given as random:KIND, hub:ID or a folder (raises ConfigError naming what is valid)."""
    if name in PLAIN_METHODS:
        return PLAIN_METHODS[name]
    if name == ORACLE:
        return ORACLE_METHOD
    if name == PLD:
        return PLD_METHOD
    if name == ASSISTED:
        return assisted_method(preset)
    return draft_method(name, resolve_draft_name(preset, name))


def label_of(name: str, preset: Preset | None = None) -> str:
    """A method's label without loading anything (the name itself when nothing knows it)."""
    if name in PLAIN_METHODS:
        return PLAIN_METHODS[name].label
    if name == ORACLE:
        return ORACLE_METHOD.label
    if name == PLD:
        return PLD_METHOD.label
    if name == ASSISTED:
        return assisted_method(preset).label if preset is not None and preset.assistant else "Assisted generation"
    if preset is not None and name in preset.drafts:
        return draft_method(name, preset.drafts[name]).label
    return name


def short_of(name: str) -> str:
    if name in PLAIN_METHODS:
        return PLAIN_METHODS[name].short
    return _SHORT_AND_COLOR.get(name, (name, ""))[0]


def color_of(name: str) -> str | None:
    """The method's colour, or None for a method the registry does not know (a chart picks the next free one)."""
    if name in PLAIN_METHODS:
        return PLAIN_METHODS[name].color
    return _SHORT_AND_COLOR.get(name, (None, None))[1]


def decode_config(
    preset: Preset | None,
    depth: int | None = None,
    top_k: int | None = None,
    tree_budget: int | None = None,
    **settings,
) -> DecodeConfig:
    """A DecodeConfig: the tree settings given, else the preset's (else DecodeConfig's defaults); `settings` are the
    rest (temperature, top_p, max_new_tokens, seed, depth_stop, head_rows). Checked against the settings table
    (settings.BOUNDS), the bounds the app uses too (ConfigError names a bad field)."""

    def pick(value, name: str):
        if value is not None:
            return value
        return getattr(preset, name) if preset is not None else getattr(DecodeConfig, name)

    return DecodeConfig.of(
        depth=pick(depth, "depth"), top_k=pick(top_k, "top_k"), tree_budget=pick(tree_budget, "tree_budget"), **settings
    )


def load_draft(
    method: Method,
    target: TargetModel,
    depth: int,
    positions_per_specialist: int | None = None,
    allow_other_target: bool = False,
) -> DraftModel:
    """The draft of a draft method, for this target (a random draft of its kind while it is untrained)."""
    if method.draft is None:
        raise ConfigError(f"method {method.name!r} is plain decoding: it has no draft.")
    ref = method.draft
    return load_draft_by_name(
        ref.source,
        target,
        depth=depth,
        positions_per_specialist=positions_per_specialist or ref.positions_per_specialist,
        allow_other_target=allow_other_target,
    )


def load_assistant(method: Method, target: TargetModel, quantization: str = "auto") -> TargetModel:
    """The assisted method's smaller model, loaded as targets are, in the target's precision and on its device."""
    if not method.assistant:
        raise ConfigError(f"method {method.name!r} has no assistant model.")
    return load_preset_target(
        method.assistant, quantization=quantization, device=str(target.device), dtype=target.dtype
    )


def build_decoder(
    method: Method,
    target: TargetModel,
    config: DecodeConfig,
    draft: DraftModel | None = None,
    assistant: TargetModel | None = None,
) -> PlainDecoder | SpeculativeDecoder | HFGenerateDecoder:
    """The decoder every caller uses: plain decoding, the oracle, transformers' generate (plain, prompt lookup,
    assisted), or speculative decoding with the method's draft (draft and assistant loaded here unless given, e.g.
    from a cache)."""
    if method.oracle:
        return OracleDecoder(target, config)
    if method.hf_mode:
        if method.assistant and assistant is None:
            assistant = load_assistant(method, target)
        return HFGenerateDecoder(target, config, method.hf_mode, assistant)
    if method.plain:
        return PlainDecoder(target, config)
    return SpeculativeDecoder(target, draft if draft is not None else load_draft(method, target, config.depth), config)


def oracle_config(config: DecodeConfig) -> DecodeConfig:
    """The oracle's settings under `--tree-budget auto`: the bare chain (the depth's tokens plus the root), its best
    budget, since filler nodes are never accepted and only make the verify pass longer."""
    return config.changed(tree_budget=config.depth + 1, depth_stop=0.0)


def with_budget_choice(config: DecodeConfig, choice) -> DecodeConfig:
    """`config` with what `--tree-budget auto` chose (a `BudgetChoice`): budget, depth if it chose one, depth stop
    and how verification reads the LM head."""
    return config.changed(
        tree_budget=choice.budget,
        depth=choice.depth or config.depth,
        depth_stop=choice.depth_stop,
        head_rows=choice.head_rows,
    )
