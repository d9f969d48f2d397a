"""What identity with plain decoding a target's numerics allow, and why; and where a lane parts from plain decoding,
the plain target's own logit margin there, classified as a rounding near-tie or a real mismatch.

Greedy speculative decoding reproduces plain decoding exactly when a row's result does not depend on the other rows
of the forward: the tree's batched verify pass and plain decoding's one-token step then give the same bits. The
engine's row-invariant attention (row_invariant.py) with its one-row padding makes that hold on a CPU in float32,
bfloat16 and float16, measured bit for bit (tests/test_row_invariant.py): there any divergence is a mismatch. Where
it is not measured or not reached (transformers' own sdpa attention, 8-bit, 4-bit in half precision, a GPU), a batched
and a one-token forward may round differently, so two tokens whose logits are within a few units in the last place
can swap: a near-tie, which the badge and the benchmark name with its margin."""

from __future__ import annotations

from dataclasses import dataclass

import torch

NEAR_TIE, MISMATCH = "near-tie", "mismatch"


@dataclass(frozen=True)
class Numerics:
    """What a target's forward promises: `exact` row independence, or identity up to `tolerance` (a logit margin
    below which a one-token and a batched forward may pick different tokens), with the reason in words."""

    exact: bool
    tolerance: float
    why: str
    tie: str = "a rounding near-tie"  # what a divergence within the tolerance is called, in a few words


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def rounding_tolerance(dtype) -> float:
    """How far apart two logits may be and still swap under rounding between a batched and a one-token forward:
    a few units in the last place of bf16/fp16 at the logits' scale (|logit| ~ 10-30), a hair in fp32."""
    return {"bfloat16": 0.5, "float16": 0.0625}.get(_dtype_name(dtype), 0.01)


# How far apart plain's two best logits were where an 8-bit lane parted from plain decoding: up to 1.65 on
# SmolLM2-135M (scripts/benchmark.py quantized); a margin beyond this is no int8 rounding effect.
INT8_TOLERANCE = 2.0


def target_numerics(
    device_type: str, dtype, quantization: str = "none", kernel: str | None = None, row_invariant: bool = False
) -> Numerics:
    """The identity a target of this device, compute dtype and quantization mode allows. `kernel` is a 4-bit
    target's (quantization.py): None means the default for the device (row-independent on a CPU, fused on a GPU).
    `row_invariant`: the target runs row-invariant attention (row_invariant.py), exact on a CPU in every precision."""
    name = _dtype_name(dtype)
    tol = rounding_tolerance(dtype)
    if row_invariant and device_type == "cpu" and quantization == "none":
        return Numerics(
            True,
            0.0,
            f"{name} on a CPU with row-invariant attention: a row's logits are the same bits alone, in a prompt chunk "
            "or among tree siblings, so identity with plain decoding is exact and any difference is a mismatch",
        )
    if quantization == "8bit":
        return Numerics(
            False,
            max(INT8_TOLERANCE, tol),
            (
                "8-bit: each row's activations are rounded to int8 on their own (LLM.int8 without the outlier split, "
                "so other rows never change a row's inputs), but the last-digit float differences between a batched "
                "verify pass and a one-token step (attention over more rows) can flip one of those roundings, and "
                f"layer after layer that grows into logit differences of up to about {INT8_TOLERANCE:g}: a lane can "
                "part from plain decoding where plain's two best tokens are that close (the quantization's batch "
                "dependence, not a bug)"
            ),
            "int8 rounding noise",
        )
    # On a GPU bitsandbytes' fused kernel serves a few rows and dequantize-and-multiply many, unless the
    # row-independent kernel was chosen; on a CPU the row-independent path is the default.
    fused = quantization == "4bit" and device_type == "cuda" and kernel != "row-independent"
    quant = (
        "; NF4 weights are dequantized and multiplied in the compute dtype, whatever the number of rows"
        if quantization == "4bit" and not fused
        else ""
    )
    if name in ("bfloat16", "float16"):
        why = (
            f"{name}: a batched verify pass and a one-token plain step round differently, so two tokens whose "
            f"logits are within about {tol:g} can swap (a rounding near-tie; float32 gives exact identity)"
        )
        if fused:
            why += (
                "; bitsandbytes' NF4 kernel for a few rows and its dequantize-and-multiply for many also round "
                "differently"
            )
        return Numerics(False, tol, why + quant)
    if device_type != "cpu":
        return Numerics(
            False,
            tol,
            f"{name} on {device_type}: batched and one-token kernels may accumulate in "
            f"another order, so a near-tie within {tol:g} can swap" + quant,
        )
    why = (
        "float32 on a CPU: a row's result is the same alone or in a batch (up to accumulation order, far below "
        "any margin seen), so identity is exact"
    )
    return Numerics(True, tol, why + quant)


def numerics_of(hardware: dict[str, str]) -> Numerics:
    """The numerics of the target a comparison ran on, from its hardware record (device, dtype, quantization), so
    a saved run's badges say what its own target allowed."""
    device = str(hardware.get("device", "cpu")).split(" ")[0].split(":")[0] or "cpu"
    return target_numerics(
        device,
        hardware.get("dtype") or "float32",
        hardware.get("quantization") or "none",
        row_invariant=hardware.get("attention") == "row_invariant",
    )


@dataclass(frozen=True)
class Divergence:
    """Where a lane first parts from plain decoding (0-based token `index`), the plain target's logit of its own
    token minus the lane's (None: not measured, e.g. a replay), and what that makes it."""

    index: int
    margin: float | None
    kind: str  # NEAR_TIE or MISMATCH
    reason: str
    tolerance: float = 0.0
    tie: str = "a rounding near-tie"


def classify_divergence(index: int, margin: float | None, numerics: Numerics) -> Divergence:
    """A near-tie when the plain target's margin is within the numerics' tolerance; otherwise a mismatch (a bug:
    verification is meant to be lossless). Without a margin (a replay), low-precision numerics give the benefit of
    the doubt and say so; exact numerics do not."""
    if margin is None:
        if numerics.exact:
            return Divergence(
                index, None, MISMATCH, f"margin not measured, and not expected ({numerics.why})", numerics.tolerance
            )
        return Divergence(
            index, None, NEAR_TIE, f"margin not measured; {numerics.why}", numerics.tolerance, numerics.tie
        )
    if numerics.tolerance > 0 and abs(margin) <= numerics.tolerance:
        return Divergence(
            index,
            margin,
            NEAR_TIE,
            f"plain's logit margin there is {margin:.2g}, within {numerics.tolerance:g}: {numerics.why}",
            numerics.tolerance,
            numerics.tie,
        )
    what = "no rounding explains it" if numerics.tolerance == 0 else "not a rounding near-tie"
    reason = f"plain's logit margin there is {margin:.3g}, {what} ({numerics.why})"
    return Divergence(index, margin, MISMATCH, reason, numerics.tolerance)


def plain_margin(target, prompt_ids: list[int], want: list[int], index: int, got: int | None = None) -> float:
    """Where a method first diverged, the plain target's logit of its own token minus that of the method's token
    (top-1 minus top-2 when the method's output simply ended there): ~0 means a numerical near-tie, a large margin
    a real bug."""
    ids = torch.tensor([list(prompt_ids) + list(want[:index])], device=target.device)
    with torch.inference_mode():
        logits = target.model(ids).logits[0, -1].float()
    if got is not None and index < len(want):
        return float(logits[want[index]] - logits[got])
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


def first_difference(tokens: list[int], plain_tokens: list[int]) -> int | None:
    """The first index where two token lists differ (None: equal as far as both go)."""
    n = min(len(tokens), len(plain_tokens))
    return next((i for i in range(n) if tokens[i] != plain_tokens[i]), None)


def identity_divergence(target, prompt_ids: list[int], tokens: list[int], plain_tokens: list[int]) -> Divergence | None:
    """Where a greedy lane's tokens first part from plain decoding's on the same prompt, classified by the plain
    target's margin there against what its numerics allow (None: identical). A lane that stopped early or went on
    counts as parting where the shorter one ended (its margin is plain's top-1 minus top-2 there)."""
    i = first_difference(tokens, plain_tokens)
    if i is None:
        if len(tokens) == len(plain_tokens):
            return None
        i = min(len(tokens), len(plain_tokens))
    got = tokens[i] if i < len(tokens) and i < len(plain_tokens) else None
    margin = plain_margin(target, prompt_ids, plain_tokens, i, got)
    return classify_divergence(i, margin, target.numerics)
