"""Training through accelerate: one process trains the plain loop's weights bit for bit, micro-batches and ranks split
the same global batch, a killed run resumes as if never stopped, online features equal stored ones, and bad launches,
targets and data folders get clear errors. The two-process runs (torchrun) are in the full tier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import run_main, self_distilled
from safetensors.torch import load_file

from poss_core.training import loop
from poss_core.training.distributed import Layout, assign_rows
from poss_core.training.features import features_batch, index_shards, stored_features
from poss_core.training.shards import read_shards, write_shard
from poss_core.training.train import main as train_main

ROOT = Path(__file__).resolve().parents[1]
COMMON = ["--preset", "tiny-random", "--tokens-per-batch", "200", "--draft-vocab", "40", "--threads", "1"]


@pytest.fixture(scope="module")
def data(tiny_target, tmp_path_factory) -> dict[str, Path]:
    """The same rows twice: with the target's features (fp32 forward, stored in bf16) and as token ids only."""
    root = tmp_path_factory.mktemp("train-data")
    seqs = [s.input_ids.tolist() for s in self_distilled(tiny_target, n=32, new=40)]
    seqs = [s[: 20 + (i * 7) % 29] for i, s in enumerate(seqs)]  # lengths 20..48: shares differ in tokens
    folders = {"full": root / "full", "tokens": root / "tokens"}
    for name, folder in folders.items():
        folder.mkdir()
        for k in range(4):
            rows = seqs[k * 8 : (k + 1) * 8]
            hidden = features_batch(tiny_target, rows) if name == "full" else None
            write_shard(folder / f"shard-{k:05d}.safetensors", rows, [8] * len(rows), hidden)
    return folders


def train(out: Path, folder: Path, *flags: str) -> dict[str, torch.Tensor]:
    """Train in this process; returns the last checkpoint's weights per method (keys `METHOD/NAME`)."""
    r = run_main(train_main, [*COMMON, "--data", str(folder), "--out", str(out), "--final-eval", "none", *flags])
    assert r.returncode == 0, r.stderr
    return weights_of(out)


def weights_of(out: Path) -> dict[str, torch.Tensor]:
    found = {}
    for state in sorted(out.glob("*/state/model.safetensors")):
        found.update({f"{state.parent.parent.name}/{k}": v for k, v in load_file(str(state)).items()})
    assert found, f"no checkpoint under {out}"
    return found


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def test_one_process_through_the_accelerator_gives_the_plain_loops_weights_bit_for_bit(data, tiny_target, tmp_path):
    """The bundled drafts' recipe runs in one process: through accelerate it must train exactly what the plain loop
    (`trainer.optimizer_step` on whole batches, noise from the global generator) trains, bf16 autocast included."""
    from poss_core.training.batches import token_batches
    from poss_core.training.drafts import make_draft
    from poss_core.training.trainer import TrainConfig, make_optimizer, optimizer_step, trainable

    got = train(tmp_path / "run", data["full"], "--methods", "poss2", "--steps", "5", "--autocast", "bfloat16")
    seqs = index_shards(data["full"])
    import random

    random.Random(0).shuffle(seqs)
    from poss_core.training.drafts import build_draft_vocab

    train_seqs = seqs[1:]  # 3% of 32 rounds to one held-out row
    vocab = build_draft_vocab(train_seqs, 40, set(tiny_target.eos_ids))
    init = make_draft(tiny_target, "eagle", 6, vocab, None, 0)
    draft = make_draft(tiny_target, "poss2", 6, vocab, init, 0)
    cfg = TrainConfig(steps=5, lr=1e-3, noise=0.05, positions=6, autocast="bfloat16")
    params = trainable(draft)
    opt = make_optimizer(params, cfg)
    torch.manual_seed(0)
    batches = token_batches(train_seqs, 200, 0, fill=stored_features)
    for step in range(5):
        optimizer_step(draft, opt, params, next(batches), cfg, step)
    expected = {f"poss2/draft.{k}": v for k, v in draft.state_dict().items() if not k.startswith(("head_", "draft_v"))}
    assert {k for k in got} == set(expected)
    assert all(torch.equal(got[k], expected[k]) for k in expected)


def test_micro_batches_train_the_global_batchs_weights(data, tmp_path):
    """Gradient accumulation splits each process's share as ranks split the global batch (the loss scaled to the
    global batch's answer rows, each row's noise its own): the weights stay those of the whole batch."""
    whole = train(tmp_path / "k1", data["full"], "--methods", "eagle,poss2", "--steps", "6", "--save-every", "6")
    split = train(tmp_path / "k3", data["full"], "--methods", "eagle,poss2", "--steps", "6", "--grad-accum", "3")
    assert max_difference(whole, split) < 1e-5


def test_ranks_share_every_global_batch_disjointly_and_in_balance():
    lengths = [48, 20, 31, 45, 27, 38, 22]
    for processes in (1, 2, 3):
        shares = [Layout(r, processes, 2).my_rows(lengths) for r in range(processes)]
        flat = [i for rank in shares for micro in rank for i in micro]
        assert sorted(flat) == list(range(len(lengths)))  # every row once, on exactly one rank
    assert assign_rows(lengths, 1) == [list(range(len(lengths)))]  # one share: the batch in its order
    tokens = [sum(lengths[i] for i in share) for share in assign_rows(lengths, 2)]
    assert abs(tokens[0] - tokens[1]) <= max(lengths)
    assert Layout(1, 2, 1).my_rows([40]) == [[]]  # a one-row batch leaves the other rank an empty share


def test_a_killed_run_resumes_to_the_uninterrupted_weights(data, tmp_path, monkeypatch):
    flags = ["--methods", "poss2", "--steps", "6", "--save-every", "2", "--log-rows"]
    through = train(tmp_path / "through", data["full"], *flags)
    real_step, calls = loop.global_step, {"n": 0}

    def dies_at_step_5(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:  # after the checkpoint at 4 steps, mid-way to the next
            raise RuntimeError("killed")
        return real_step(*args, **kwargs)

    monkeypatch.setattr(loop, "global_step", dies_at_step_5)
    r = run_main(train_main, [*COMMON, "--data", str(data["full"]), "--out", str(tmp_path / "killed"), *flags])
    assert r.returncode != 0 and "killed" in r.stderr
    assert json.loads((tmp_path / "killed/poss2/state/progress.json").read_text()) == {"step": 4}
    monkeypatch.setattr(loop, "global_step", real_step)
    resumed = train(tmp_path / "killed", data["full"], *flags)
    assert max_difference(through, resumed) == 0.0
    rows = [json.loads(line)["step"] for line in (tmp_path / "killed/poss2/rows-rank0.jsonl").read_text().splitlines()]
    assert rows == [0, 1, 2, 3, 4, 5]  # the log was flushed with the checkpoint: nothing repeated


def test_online_features_equal_stored_ones_bit_for_bit(data, tmp_path):
    """fp32 on the CPU: the frozen target's features computed per batch, rounded to the stored precision, are the
    shards' own, so the trained weights are identical."""
    online = train(tmp_path / "on", data["tokens"], "--methods", "poss2", "--steps", "4", "--features", "online",
                   "--features-dtype", "float32")  # fmt: skip
    offline = train(tmp_path / "off", data["full"], "--methods", "poss2", "--steps", "4", "--features", "offline")
    assert max_difference(online, offline) == 0.0


def test_offline_rows_keep_their_features_in_the_shards_until_batched(data):
    indexed, loaded = index_shards(data["full"]), read_shards(data["full"])
    assert all(s.hidden is None and s.origin is not None for s in indexed)
    filled = stored_features(indexed)
    assert len(filled) == len(loaded)
    assert all(
        torch.equal(a.hidden, b.hidden) and torch.equal(a.input_ids, b.input_ids) for a, b in zip(filled, loaded)
    )


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--data", "/nonexistent/data"], "data folder /nonexistent/data does not exist"),
        (["--features", "offline", "--data", "TOKENS"], "holds token ids only"),
        (["--accelerate-config", "configs/accelerate/8gpu-ddp.yaml"], "is for 8 process(es) but this run has 1"),
        (["--accelerate-config", "configs/accelerate/1gpu.yaml"], "no CUDA device"),
        (["--accelerate-config", "configs/accelerate/cpu.yaml", "--autocast", "none"], "sets mixed_precision bf16"),
        (["--target", "BERT"], "is a 'bert' model"),
        (["--target", "/nonexistent/model"], "no model configuration found"),
    ],
)
def test_bad_launches_targets_and_data_get_clear_errors(data, tmp_path, flags, needle):
    if "BERT" in flags:
        from transformers import BertConfig

        BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(
            tmp_path / "bert"
        )
    flags = [str(tmp_path / "bert") if f == "BERT" else str(data["tokens"]) if f == "TOKENS" else f for f in flags]
    args = [*COMMON, "--data", str(data["full"]), "--out", str(tmp_path / "o"), "--steps", "1", *flags]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        r = run_main(train_main, args)
    finally:
        os.chdir(cwd)
    assert r.returncode == 2 and needle in r.stderr, r.stderr


@pytest.mark.parametrize("family", ["qwen2", "mistral"])
def test_any_llama_like_hugging_face_target_trains_a_draft_of_its_sizes(family, data, tmp_path):
    """A Qwen2- or Mistral-architecture folder as --target: the draft takes its hidden size, heads and RoPE, and
    trains online from the token ids."""
    from transformers import AutoModelForCausalLM, MistralConfig, Qwen2Config

    from poss_core.models.tiny import tiny_tokenizer

    tok = tiny_tokenizer()
    kinds = {"qwen2": Qwen2Config, "mistral": MistralConfig}
    config = kinds[family](
        vocab_size=len(tok), hidden_size=48, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, rope_theta=20_000.0, eos_token_id=2,
    )  # fmt: skip
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / family)
    tok.save_pretrained(tmp_path / family)
    args = ["--target", str(tmp_path / family), "--methods", "eagle", "--steps", "2", "--features", "online"]
    args += ["--features-dtype", "float32", "--export", str(tmp_path / "export")]
    train(tmp_path / "run", data["tokens"], *args)
    saved = json.loads((tmp_path / "export" / "eagle" / "config.json").read_text())
    assert (saved["hidden_size"], saved["num_attention_heads"], saved["num_key_value_heads"]) == (48, 4, 2)
    rope = saved.get("rope_parameters") or {"rope_theta": saved.get("rope_theta")}
    assert rope["rope_theta"] == 20_000.0


def test_the_llama3_recipe_prints_its_plan_with_memory_per_gpu(capsys):
    from poss_core.training.recipe import main as recipe_main

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        assert recipe_main(["train", "--config", "configs/drafts/llama3-8b-instruct.toml", "--dry-run"]) == 0
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert "accelerate launch --config_file configs/accelerate/8gpu-ddp.yaml" in out
    assert "hidden 4096, 32 layers" in out and "memory per GPU, GiB (derived" in out
    rows = [line for line in out.splitlines() if line.startswith("| poss2 |")]
    assert rows and 20 < float(rows[0].split("|")[-2]) < 80  # bf16 target (15 GiB) plus the draft: fits an 80 GB GPU


# ----- two processes (torchrun): the full tier --------------------------------------------------------------------
def torchrun(nproc: int, module: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "-m", module, *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def rows_by_rank(run: Path, method: str) -> list[dict[int, list[int]]]:
    out = []
    for f in sorted((run / method).glob("rows-rank*.jsonl")):
        out.append({json.loads(line)["step"]: json.loads(line)["rows"] for line in f.read_text().splitlines()})
    return out


@pytest.mark.slow  # two processes started by torchrun
def test_two_ranks_train_the_one_process_weights_on_disjoint_halves(data, tmp_path):
    flags = [*COMMON, "--data", str(data["full"]), "--methods", "eagle,poss2", "--steps", "20", "--save-every", "10"]
    flags += ["--final-eval", "none", "--log-rows"]
    r = torchrun(2, "poss_core.training.train", *flags, "--out", str(tmp_path / "two"))
    assert r.returncode == 0, r.stderr[-3000:]
    one = train(tmp_path / "one", data["full"], *flags[len(COMMON) + 2 :])
    diff = max_difference(one, weights_of(tmp_path / "two"))
    assert diff < 1e-5, diff
    for method in ("eagle", "poss2"):
        ranks, single = rows_by_rank(tmp_path / "two", method), rows_by_rank(tmp_path / "one", method)[0]
        assert len(ranks) == 2 and all(len(r) == 20 for r in ranks)  # both ranks ran every step
        for step in range(20):
            # Together the ranks' rows are the global batch, each of its rows on one rank only (a row can be in a
            # batch twice where the seeded order starts a new pass over the data).
            a, b = ranks[0][step], ranks[1][step]
            assert sorted(a + b) == single[step] and a and b
        assert sum(len(ranks[1][s]) for s in range(20)) > 0
    card = json.loads((tmp_path / "two/poss2/final/model_card.json").read_text())
    assert card["data"]["processes"] == 2


@pytest.mark.slow  # two processes started by torchrun, one of them killed
def test_two_ranks_killed_and_resumed_equal_the_uninterrupted_run(data, tmp_path):
    flags = [*COMMON, "--data", str(data["full"]), "--methods", "poss2", "--steps", "12", "--save-every", "4"]
    flags += ["--final-eval", "none"]
    assert torchrun(2, "poss_core.training.train", *flags, "--out", str(tmp_path / "through")).returncode == 0
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "poss_core.training.train"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([*cmd, *flags, "--out", str(tmp_path / "killed")], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    progress = tmp_path / "killed/poss2/state/progress.json"
    import time

    deadline = time.time() + 300
    while not progress.is_file() and time.time() < deadline:
        time.sleep(0.05)
    proc.kill()  # torchrun and, with it, both ranks, somewhere after the first checkpoint
    proc.wait()
    step = json.loads(progress.read_text())["step"]
    assert step in (4, 8), step
    r = torchrun(2, "poss_core.training.train", *flags, "--out", str(tmp_path / "killed"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert max_difference(weights_of(tmp_path / "through"), weights_of(tmp_path / "killed")) == 0.0


@pytest.mark.slow  # two processes started by torchrun
def test_the_data_command_on_two_processes_writes_what_one_writes(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(f"Prompt number {i}: say something." for i in range(10)))
    common = ["--preset", "tiny-random", "--prompts", str(prompts), "--batch-size", "2", "--max-new-tokens", "10"]
    common += ["--temperature", "0.8", "--seed", "3"]
    r = torchrun(2, "poss_core.training.data", *common, "--out", str(tmp_path / "two"))
    assert r.returncode == 0, r.stderr[-3000:]
    r = run_main(
        __import__("poss_core.training.data", fromlist=["main"]).main, [*common, "--out", str(tmp_path / "one")]
    )
    assert r.returncode == 0, r.stderr
    one = {f.name: f.read_bytes() for f in (tmp_path / "one").glob("shard-*.safetensors")}
    two = {f.name: f.read_bytes() for f in (tmp_path / "two").glob("shard-*.safetensors")}
    assert len(one) == 5 and one == two
    card = json.loads((tmp_path / "two" / "data_card.json").read_text())
    assert card["processes"] == 2 and card["built_now"] == 5
    assert sorted(card["shards_by_process"]) == [2, 3]  # both processes built shards
