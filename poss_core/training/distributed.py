"""Training over one process or many through accelerate: the Accelerator a run uses, a launch checked against its
accelerate config, and each global batch split into every process's share (and each share into micro-batches).

The global batch does not depend on the number of processes: every process draws the same seeded stream of global
batches from the token ids alone, takes its own rows of each, and scales its loss so that DDP's average of the
processes' gradients is the gradient of the global batch's mean loss."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..base.errors import ConfigError

# accelerate's mixed-precision names -> the trainer's autocast names (fp16 would need a gradient scaler: refused)
MIXED_PRECISION = {"no": "none", "bf16": "bfloat16"}


def resolve_autocast(flag: str | None, launched_with: str | None = None) -> str:
    """The run's mixed precision: `--autocast` when given, else what `accelerate launch` set (its config's
    mixed_precision), else none; a flag that contradicts the launch is refused."""
    launched_with = launched_with if launched_with is not None else os.environ.get("ACCELERATE_MIXED_PRECISION")
    from_launch = None
    if launched_with:
        if launched_with not in MIXED_PRECISION:
            raise ConfigError(
                f"accelerate's mixed_precision is {launched_with!r}: the trainer supports "
                f"{', '.join(MIXED_PRECISION)} (bf16 keeps fp32 master weights; fp16 would need a loss scaler)."
            )
        from_launch = MIXED_PRECISION[launched_with]
    if flag is None:
        return from_launch or "none"
    if from_launch is not None and from_launch != flag:
        raise ConfigError(
            f"--autocast {flag} contradicts the accelerate launch's mixed_precision {launched_with}: "
            f"give the same precision in both (or leave --autocast out to follow the launch)."
        )
    return flag


def make_accelerator():
    """The Accelerator of a training run, on CUDA where present. Without CUDA it is told so (`cpu=True`): only then
    does accelerate join the processes torchrun started into one CPU group (gloo). Mixed precision is the trainer's
    own autocast around the loss (`TrainConfig.autocast`), the same in one process or many, so accelerate's is
    left off. Buffers are not broadcast at every forward: the draft's only buffers are the target's LM head rows and
    RoPE tables, identical on every process and large (a vocabulary times the hidden size)."""
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs

    return Accelerator(
        cpu=not torch.cuda.is_available(),
        mixed_precision="no",
        kwargs_handlers=[DistributedDataParallelKwargs(broadcast_buffers=False)],
    )


def read_launch_config(path: str | Path) -> dict:
    """An accelerate config file (YAML, as `accelerate config` writes it)."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--accelerate-config {path} does not exist (the project's are in configs/accelerate/).")
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"--accelerate-config {path} is not valid YAML: {err}") from err
    if not isinstance(config, dict):
        raise ConfigError(f"--accelerate-config {path} is not an accelerate config (a YAML mapping).")
    return config


def check_launch(config: dict, path: str | Path, processes: int, autocast: str, cuda: bool) -> None:
    """Refuse a run whose processes, devices or precision differ from the accelerate config it names: a run meant
    for eight GPUs that started as one process would otherwise train an eighth of every batch's rows per step,
    eight times slower, without a word."""
    want = int(config.get("num_processes", 1) or 1)
    if want != processes:
        raise ConfigError(
            f"{path} is for {want} process(es) but this run has {processes}: start it with "
            f"accelerate launch --config_file {path} -m poss_core.training.train ... (or torchrun --nproc_per_node "
            f"{want} -m poss_core.training.train ...)."
        )
    kind = str(config.get("distributed_type", "NO"))
    if kind in ("FSDP", "DEEPSPEED"):
        raise ConfigError(
            f"{path} is a {kind} config: this trainer runs DDP (the draft is small enough to hold whole on every "
            f"GPU). For a target that does not fit one GPU, spread it over the GPUs of one process "
            f"(POSS_DEVICE_MAP=auto with configs/accelerate/1gpu.yaml), or store its features offline first."
        )
    if kind == "MULTI_GPU" or (kind == "NO" and config.get("use_cpu") is False):
        if not cuda:
            raise ConfigError(
                f"{path} is a config for GPUs, and this machine has no CUDA device: use configs/accelerate/cpu.yaml "
                f"here (or torchrun --nproc_per_node N for several CPU processes)."
            )
    mixed = config.get("mixed_precision")
    if mixed is not None and MIXED_PRECISION.get(str(mixed)) != autocast:
        raise ConfigError(
            f"{path} sets mixed_precision {mixed} but this run's --autocast is {autocast}: give the same precision "
            f"in both."
        )


def assign_rows(lengths: list[int], shares: int) -> list[list[int]]:
    """Rows of a global batch (by their token counts) dealt into `shares` shares of about equal tokens: longest first,
    each to the lightest share (the lower index on a tie); each share keeps the batch's order. One share is the batch
    itself, in its order."""
    load = [0] * shares
    dealt: list[list[int]] = [[] for _ in range(shares)]
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        k = min(range(shares), key=lambda k: (load[k], k))
        dealt[k].append(i)
        load[k] += lengths[i]
    return [sorted(d) for d in dealt]


@dataclass(frozen=True)
class Layout:
    """Where this process stands: its rank among `processes`, and the micro-batches each process splits its share of
    every global batch into (gradient accumulation)."""

    rank: int = 0
    processes: int = 1
    micro_batches: int = 1

    def my_rows(self, lengths: list[int]) -> list[list[int]]:
        """This process's micro-batches of a global batch (row indices into it; some may be empty)."""
        shares = assign_rows(lengths, self.processes * self.micro_batches)
        return shares[self.rank * self.micro_batches : (self.rank + 1) * self.micro_batches]


def global_noise(shape: tuple[int, int, int], noise: float, device: torch.device | str) -> torch.Tensor | None:
    """EAGLE's uniform input noise for a whole global batch [B, T, H], drawn from the default generator of `device`
    as the single-process trainer draws it; every process draws it alike and slices its rows."""
    if noise <= 0:
        return None
    return (torch.rand(shape, dtype=torch.float32, device=device) - 0.5) * 2 * noise
