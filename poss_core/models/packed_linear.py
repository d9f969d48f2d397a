"""Linear layers for the draft's decoding path with their weights packed once for oneDNN (bf16 on a CPU).

A bf16 `F.linear` on a CPU hands the weight to oneDNN, which reorders it into its blocked (AMX/VNNI) layout on every
call. The draft multiplies a handful of rows by each weight at every depth of every round, so that reorder costs
about as much as the product itself. Packing the weight once and calling oneDNN's linear with it gives the same
numbers (bf16 products are bit-identical here), faster: `python -m poss_core.bench linear` measures by how much
(docs/results.md, "Engine overhead").
Everything else (fp32, GPUs, builds without oneDNN, training with autograd) keeps `F.linear`."""

from __future__ import annotations

import torch
import torch.nn.functional as F

# oneDNN picks its blocking for this many rows: a top-k frontier (the product is right for any row count).
ROWS_HINT = 8


def packing_supported(weight: torch.Tensor) -> bool:
    """Whether `PackedLinear` packs this weight: a bf16 CPU tensor, with oneDNN's packed linear in this torch build."""
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.bfloat16
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


class PackedLinear:
    """y = x W^T + b for inference, with W packed for oneDNN where that is supported (`packing_supported`) and a
    plain `F.linear` otherwise, or if the packed call ever fails (then for good: the plain path is always right)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, pack: bool = True) -> None:
        self.weight = weight.detach()
        self.bias = None if bias is None else bias.detach()
        self.packed: torch.Tensor | None = None
        if pack and packing_supported(self.weight):
            try:
                with torch.no_grad():
                    self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.contiguous(), ROWS_HINT)
            except RuntimeError:
                self.packed = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None and x.dtype == torch.bfloat16 and not torch.is_grad_enabled():
            try:
                return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
            except RuntimeError:
                self.packed = None
        return F.linear(x, self.weight, self.bias)
