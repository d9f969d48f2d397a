"""The 4-bit kernel choice: row-independent on a CPU and bitsandbytes' faster kernels on a GPU unless asked otherwise
($POSS_4BIT_KERNEL), a bad value refused by name, and the row-independent forward used off the CPU computing a row
alike alone and among sixty, as the layer's own dequantize-and-multiply does (checked here on the CPU)."""

from __future__ import annotations

import pytest
import torch

from poss_core.base.errors import ConfigError
from poss_core.models.loading import load_preset_target
from poss_core.models.quantization import KERNEL_ENV, dequantized_forward, kernel_choice, use_kernels


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory, tiny_target):
    folder = tmp_path_factory.mktemp("tiny_model")
    tiny_target.model.save_pretrained(folder)
    tiny_target.tokenizer.save_pretrained(folder)
    return str(folder)


def test_auto_keeps_rows_apart_on_a_cpu_and_takes_the_fast_kernels_on_a_gpu(monkeypatch):
    monkeypatch.delenv(KERNEL_ENV, raising=False)
    assert kernel_choice("cpu") == "row-independent"
    assert kernel_choice("cuda") == "fast"
    monkeypatch.setenv(KERNEL_ENV, "row-independent")
    assert kernel_choice("cuda") == "row-independent"
    assert kernel_choice("cuda", "fast") == "fast"  # asked beats the environment
    monkeypatch.setenv(KERNEL_ENV, "quick")
    with pytest.raises(ConfigError, match=f"{KERNEL_ENV}='quick' is unknown: use one of auto, row-independent, fast"):
        kernel_choice("cpu")


def test_a_cpu_4bit_target_says_which_kernels_it_uses(saved_tiny, monkeypatch):
    monkeypatch.delenv(KERNEL_ENV, raising=False)
    target = load_preset_target(saved_tiny, quantization="4bit", device="cpu")
    assert target.kernel == "row-independent"
    assert not any(getattr(m, "support_avx512bf16_for_cpu", False) for m in target.model.modules())
    assert load_preset_target(saved_tiny, quantization="none", device="cpu").kernel is None


def test_the_row_independent_forward_computes_a_row_alike_alone_and_among_sixty(saved_tiny, monkeypatch):
    monkeypatch.delenv(KERNEL_ENV, raising=False)
    target = load_preset_target(saved_tiny, quantization="4bit", device="cpu")
    layers = [m for m in target.model.modules() if type(m).__name__ == "Linear4bit"]
    assert layers
    g = torch.Generator().manual_seed(0)
    for layer in layers:
        forward = dequantized_forward(layer)
        x = torch.randn(60, layer.in_features, generator=g)
        with torch.inference_mode():
            batched, own = forward(x), layer(x)
            alone = torch.cat([forward(x[i : i + 1]) for i in range(len(x))])
        scale = own.abs().max()
        assert batched.shape == own.shape and batched.dtype == x.dtype
        assert (batched - alone).abs().max() <= 1e-5 * scale, "a row's result depends on the other rows"
        assert (batched - own).abs().max() <= 1e-5 * scale, "not the layer's own dequantize-and-multiply"


class _FakeWeight:
    quant_state = object()
    device = torch.device("cuda")


class _FakeGpuLayer(torch.nn.Module):
    """Stands for a 4-bit layer on a GPU (only what use_kernels reads), so the choice can be checked without one."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = _FakeWeight()
        self.bias = None


@pytest.mark.parametrize("kernel, patched", [("row-independent", True), ("fast", False), (None, False)])
def test_on_a_gpu_only_the_row_independent_choice_replaces_bitsandbytes_forward(kernel, patched, monkeypatch):
    monkeypatch.delenv(KERNEL_ENV, raising=False)
    model = torch.nn.Sequential(_FakeGpuLayer())
    before = model[0].forward
    assert use_kernels(model, kernel) == (kernel or "fast")
    assert ("forward" in vars(model[0])) is patched
    assert (model[0].forward != before) is patched
