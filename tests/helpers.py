"""Shared builders for tests: tiny targets, random and quickly trained drafts."""

from __future__ import annotations

import contextlib
import io
import random
from dataclasses import dataclass

import torch

from poss_core.models.draft import DraftModel, DraftSpec, draft_config_from_target
from poss_core.models.target import TargetModel
from poss_core.training.trainer import TrainConfig, TrainSequence, make_batch, train


def greedy_reference(target: TargetModel, ids: list[int], max_new_tokens: int) -> list[int]:
    """The target's own `generate(do_sample=False)`, cut after the first EOS like our decoders."""
    x = torch.tensor([ids])
    out = target.model.generate(
        x,
        attention_mask=torch.ones_like(x),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=sorted(target.eos_ids) or None,
        pad_token_id=0,
    )[0, len(ids) :].tolist()
    for i, t in enumerate(out):
        if t in target.eos_ids:
            return out[: i + 1]
    return out


def self_distilled(target: TargetModel, n: int = 64, prompt_len: int = 8, new: int = 48, seed: int = 0):
    """Sequences the target wrote itself, with its features: tiny self-distillation data."""
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(5, target.vocab_size, (n, prompt_len), generator=g)
    with torch.no_grad():
        out = target.model.generate(prompts, max_new_tokens=new, do_sample=False, pad_token_id=0, eos_token_id=None)
        hidden = target.model(out, output_hidden_states=True).hidden_states[-1]
    mask = torch.zeros(out.shape[1])
    mask[prompt_len:] = 1
    return [TrainSequence(out[i], hidden[i], mask) for i in range(n)]


def batches(seqs, size: int = 16, seed: int = 0):
    rng = random.Random(seed)
    while True:
        yield make_batch(rng.sample(seqs, size))


def trained_draft(
    target: TargetModel, spec: DraftSpec, steps: int = 150, positions: int = 1, seed: int = 1, draft_vocab=None
) -> DraftModel:
    torch.manual_seed(seed)
    draft = DraftModel(draft_config_from_target(target.config), spec, draft_vocab).float()
    draft.bind_target(target.input_embedding_weight(), target.lm_head_weight())
    train(draft, batches(self_distilled(target)), TrainConfig(steps=steps, lr=3e-3, positions=positions))
    return draft.eval()


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_main(main, args: list[str]) -> CliResult:
    """A CLI's `main(argv)` in this process, its exit code and both streams captured: what `python -m MODULE ARGS`
    gives, without the few seconds a new interpreter spends importing torch (the slow tier runs real processes)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse's own errors
            code = e.code if isinstance(e.code, int) else 1
    return CliResult(code, out.getvalue(), err.getvalue())


# Plotly's label subset: a link, a styled span that can draw over the chart, bold; and a hover-template variable.
PLOTLY_MARKUP = '<a href="https://evil.example">x</a><span style="position:absolute">s</span><b>b</b>%{fullData.uid}'


def plotly_strings(fig) -> list[str]:
    """Every string in a figure as Plotly receives it (names, texts, hover templates, categories, titles)."""
    out = []

    def walk(obj):
        if isinstance(obj, str):
            out.append(obj)
        elif isinstance(obj, dict):
            for value in obj.values():
                walk(value)
        elif isinstance(obj, (list, tuple)):
            for value in obj:
                walk(value)
        elif hasattr(obj, "tolist"):
            walk(obj.tolist())

    walk(fig.to_plotly_json())
    return out


def assert_shown_as_text(fig, escaped: str = "&lt;a href") -> None:
    """No markup from the data reaches Plotly, and the data is there, escaped."""
    strings = plotly_strings(fig)
    for tag in ("<a ", "<span", "<b>", "%{fullData"):
        assert not any(tag in s for s in strings), (tag, [s for s in strings if tag in s][:3])
    assert any(escaped in s for s in strings)
