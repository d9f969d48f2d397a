"""The target's verify cost on this machine: a forward-time curve (milliseconds against verified tokens), measured
with the LM head's cost per row read, and what identifies the hardware and model it belongs to."""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

import torch

from ..base.errors import CallStopped
from ..models.hardware import device_description
from ..models.target import TargetModel, causal_allowed, truncate_cache_layer
from .cost_model import CANDIDATE_BUDGETS

CURVE_CONTEXT = 256


@dataclass
class ForwardCurve:
    """Median milliseconds of one target forward over n new tokens (hidden states only), and of the LM head over
    n rows, at a fixed context length; both non-decreasing in n."""

    key: str
    sizes: list[int]
    ms: list[float]
    context: int
    measured: str = ""
    post_ms: list[float] | None = None
    busy_load: float = 0.0  # the CPU load average when it was measured, if other work kept the CPU busy (else 0)

    def due_again(self, device: torch.device | None = None) -> bool:
        """Measured while the machine was busy, and it is quiet now: measure again (and refit what used it)."""
        return bool(self.busy_load) and not machine_busy(device)

    @staticmethod
    def _interp(xs: list[int], ys: list[float], n: float) -> float:
        """Piecewise-linear interpolation; beyond the last size, the last segment's slope."""
        if n <= xs[0]:
            return ys[0]
        for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
            if n <= x1:
                return y0 + (y1 - y0) * (n - x0) / (x1 - x0)
        if len(xs) == 1:
            return ys[-1]
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        return ys[-1] + slope * (n - xs[-1])

    def at(self, n: float) -> float:
        """The forward's milliseconds for n verified tokens."""
        return self._interp(self.sizes, self.ms, n)

    def post_at(self, n: float) -> float:
        """The LM head's milliseconds for n rows (0 for curves measured without it)."""
        return self._interp(self.sizes, self.post_ms, n) if self.post_ms else 0.0

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict) -> "ForwardCurve":
        post = obj.get("post_ms")
        return cls(
            key=obj["key"],
            sizes=[int(s) for s in obj["sizes"]],
            ms=[float(m) for m in obj["ms"]],
            context=int(obj["context"]),
            measured=obj.get("measured", ""),
            post_ms=[float(m) for m in post] if post else None,
            busy_load=float(obj.get("busy_load", 0.0)),
        )


def non_decreasing(values: Sequence[float]) -> list[float]:
    """The closest non-decreasing sequence in least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, c1), (m2, c2) = blocks[-2], blocks[-1]
            blocks[-2:] = [[(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2]]
    return [m for m, c in blocks for _ in range(int(c))]


# What a curve measures; a curve cached under another version measured something else and is measured again.
CURVE_VERSION = "verify v3: forward to hidden states + LM head on the rows read, without per-row work"


def curve_key(target: TargetModel) -> str:
    """Device + model shape + dtype + quantization + torch version: what a forward's cost depends on."""
    c = target.config
    model = (
        f"{getattr(c, 'model_type', '?')} h{target.hidden_size} l{getattr(c, 'num_hidden_layers', '?')} "
        f"a{getattr(c, 'num_attention_heads', '?')}/{getattr(c, 'num_key_value_heads', '?')} "
        f"i{getattr(c, 'intermediate_size', '?')} v{target.vocab_size}"
    )
    return (
        f"{device_description(target.device)} | {model} | {target.dtype} {target.quantization} | "
        f"torch {torch.__version__} | {CURVE_VERSION}"
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def machine_busy(device: torch.device | None = None) -> float:
    """The 1-minute load average if other work keeps this machine's CPUs busy, else 0.0. Timings taken then are
    too slow and would be cached as this machine's, so a curve measured busy is measured again once it is quiet.
    (The app's own decoding uses half the cores, below the threshold; a GPU's forward is not measured this way.)"""
    if device is not None and device.type != "cpu":
        return 0.0
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):  # no load average on this platform: assume quiet
        return 0.0
    return load if load >= max(1.25, 0.75 * (os.cpu_count() or 1)) else 0.0


@torch.inference_mode()
def measure_forward_curve(
    target: TargetModel,
    sizes: Sequence[int] = CANDIDATE_BUDGETS,
    context: int = CURVE_CONTEXT,
    repeats: int = 5,
    seed: int = 0,
    cancel=None,
) -> ForwardCurve:
    """Time the verify forward (n tokens after a `context`-token cache, to the hidden states) and the LM head over
    n rows, for each n; sizes are visited in a shuffled order per repeat so drift in
    machine speed spreads over all of them; the median is kept. Setting `cancel` (an Event) stops it between two
    timings with CallStopped (a call's cap: nothing half-measured is kept)."""
    sizes = sorted({int(s) for s in sizes if s >= 1} | {1})
    busy = machine_busy(target.device)  # read before our own work adds to the load
    context = max(1, min(context, target.max_context - max(sizes) - 1))
    gen = torch.Generator().manual_seed(seed)
    vocab = target.vocab_size
    cache = target.new_cache()
    target.forward(
        torch.randint(0, vocab, (context,), generator=gen),
        torch.arange(context),
        causal_allowed(context, 0),
        cache,
        logits="none",
    )
    layers = len(cache.layers)

    def once(n: int) -> tuple[float, float]:
        tokens = torch.randint(0, vocab, (n,), generator=gen)
        _sync(target.device)
        t0 = time.perf_counter()
        out = target.forward(tokens, context + torch.arange(n), causal_allowed(n, context), cache, logits="none")
        _sync(target.device)
        t1 = time.perf_counter()
        # The LM head over the n rows (to float32 on the CPU): what depends on how many rows verification reads.
        # The per-row work after it (argmax at the slots acceptance visits, log-normalisers of the parents' rows) is
        # the same whichever rows go through the head, and the calibration decode's fixed overhead already holds it.
        target.logits(out.hidden)
        t2 = time.perf_counter()
        for i in range(layers):
            truncate_cache_layer(cache, i, context)
        return (t1 - t0) * 1000.0, (t2 - t1) * 1000.0

    for n in (1, max(sizes), 1):  # warm-up
        once(n)
    times: dict[int, list[tuple[float, float]]] = {n: [] for n in sizes}
    rng = random.Random(seed)
    for _ in range(repeats):
        order = list(sizes)
        rng.shuffle(order)
        for n in order:
            if cancel is not None and cancel.is_set():
                raise CallStopped("measuring the forward-time curve")
            times[n].append(once(n))
    forward = [statistics.median(t[0] for t in times[n]) for n in sizes]
    post = [statistics.median(t[1] for t in times[n]) for n in sizes]
    return ForwardCurve(
        key=curve_key(target),
        sizes=sizes,
        ms=non_decreasing(forward),
        context=context,
        measured=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        post_ms=non_decreasing(post),
        busy_load=busy,
    )
