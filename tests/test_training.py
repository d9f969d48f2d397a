"""Training: losses fall, POSS unrolls on detached predictions, checkpoints and data resume."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import batches, self_distilled

from poss_core.models.draft import DraftModel, DraftSpec, draft_config_from_target
from poss_core.training import trainer
from poss_core.training.losses import LossWeights
from poss_core.training.shards import read_shards
from poss_core.training.trainer import TrainConfig, loss_on_batch, make_batch, train

ROOT = Path(__file__).resolve().parents[1]


def fresh(target, spec, seed=0):
    torch.manual_seed(seed)
    d = DraftModel(draft_config_from_target(target.config), spec).float()
    d.bind_target(target.input_embedding_weight(), target.lm_head_weight())
    return d


@pytest.mark.slow  # a hundred training steps: the quick tier stays under 90 s
def test_short_training_lowers_the_loss(tiny_target):
    seqs = self_distilled(tiny_target, n=32)
    held = make_batch(seqs[:8])
    for spec, positions in [(DraftSpec("eagle", 1), 1), (DraftSpec("poss", 3, 2), 6), (DraftSpec("stacked", 2), 1)]:
        draft = fresh(tiny_target, spec)
        cfg = TrainConfig(steps=60, lr=3e-3, positions=positions, weights=LossWeights.named("hass"))
        before = float(loss_on_batch(draft, held, cfg)[0].detach())
        history = train(draft, batches(seqs[8:], size=8), cfg)
        after = float(loss_on_batch(draft, held, cfg)[0].detach())
        assert after < 0.95 * before, (spec.label, before, after)
        assert len(history) == 60 and len(history[-1]["positions"]) == positions


def test_bf16_mixed_precision_trains_and_keeps_fp32_weights(tiny_target):
    seqs = self_distilled(tiny_target, n=24)
    held = make_batch(seqs[:6])
    draft = fresh(tiny_target, DraftSpec("poss", 2, 3))
    cfg = TrainConfig(steps=40, lr=3e-3, positions=4, autocast="bfloat16")
    before = float(loss_on_batch(draft, held, cfg)[0].detach())
    train(draft, batches(seqs[6:], size=6), cfg)
    after = float(loss_on_batch(draft, held, cfg)[0].detach())
    assert after < 0.95 * before, (before, after)
    assert all(p.dtype == torch.float32 for p in draft.parameters())  # master weights stay fp32


def test_the_loss_ignores_prompt_rows(tiny_target):
    """Only answer rows (mask 1) carry a loss: changing the target's features on a prompt row changes nothing."""
    draft = fresh(tiny_target, DraftSpec("eagle", 1))
    batch = make_batch(self_distilled(tiny_target, n=4))
    cfg = TrainConfig(positions=1)
    row = (batch.mask[0] == 0).nonzero()[0].item()
    base = float(loss_on_batch(draft, batch, cfg)[0].detach())
    batch.target_features[0, row] += 5.0
    assert float(loss_on_batch(draft, batch, cfg)[0].detach()) == base
    answer = (batch.mask[0] == 1).nonzero()[0].item()
    batch.target_features[0, answer] += 5.0
    assert float(loss_on_batch(draft, batch, cfg)[0].detach()) != base


def test_poss_step_j_reads_detached_predictions_of_step_j_minus_1(tiny_target, monkeypatch):
    draft = fresh(tiny_target, DraftSpec("poss", 3, 2))
    batch = make_batch(self_distilled(tiny_target, n=4))
    calls = []
    original = draft.run_specialist

    def spy(group, tokens, features, position_ids, attention_mask, cache=None):
        out = original(group, tokens, features, position_ids, attention_mask, cache)
        calls.append((group, features, out))
        return out

    monkeypatch.setattr(draft, "run_specialist", spy)
    steps = trainer.unroll(draft, batch, steps=6)
    assert [g for g, _, _ in calls] == [0, 0, 1, 1, 2, 2]  # specialist j // n predicts step j
    assert torch.equal(calls[0][1], batch.features)  # step 0 reads the target's features
    for j in range(1, 6):
        features, prev_out = calls[j][1], calls[j - 1][2]
        assert torch.equal(features[:, 1:], prev_out[:, :-1].detach())  # row r reads row r-1's prediction
        assert torch.equal(features[:, :1], batch.features[:, :1])
        assert not features.requires_grad  # detached: no gradient flows back into step j-1
        assert prev_out.requires_grad
    assert len(steps) == 6


@pytest.mark.parametrize("spec", [DraftSpec("poss", 3, 2), DraftSpec("stacked", 3)])
def test_decoding_unroll_gives_each_chain_the_context_decoding_gives_it(tiny_target, spec):
    """Step j for the chain anchored at row t, run directly: the specialist reads the true rows 0..t, then the
    chain's own rows t+1..t+j-1 (features predicted by the previous steps), causally. The stacked blocks of
    `decoding_unroll` must give the same prediction for every anchor at once."""
    draft = fresh(tiny_target, spec).eval()
    batch = make_batch(self_distilled(tiny_target, n=2))
    with torch.no_grad():
        steps = trainer.decoding_unroll(draft, batch, steps=4)
        assert trainer.decoding_unroll(draft, batch, steps=1)[0][1].allclose(
            trainer.unroll(draft, batch, 1)[0][1], atol=1e-5
        )
        for anchor in (0, 3, 7):
            chain = []  # predicted features of this chain, step by step
            for j in range(1, 5):
                rows = anchor + j  # true rows 0..anchor, then j-1 chain rows
                feats = torch.cat([batch.features[:1, : anchor + 1]] + [f[None, None] for f in chain], dim=1)
                causal = torch.ones(rows, rows, dtype=torch.bool).tril()
                x = draft.run_specialist(
                    draft.specialist_of(j),
                    batch.tokens[:1, :rows],
                    feats,
                    batch.positions[:1, :rows],
                    trainer.float_mask(causal, feats.dtype),
                )
                chain.append(x[0, -1])
                group, pred = steps[j - 1]
                assert group == draft.specialist_of(j)
                assert torch.allclose(pred[0, anchor + j - 1], x[0, -1], atol=1e-4)
    # Not the training unroll from step 2 on: there every context feature is a prediction.
    assert not torch.allclose(steps[1][1], trainer.unroll(draft, batch, 2)[1][1], atol=1e-4)


def test_training_with_the_decoding_unroll_lowers_its_loss_and_keeps_steps_apart(tiny_target):
    """POSS trained on the context decoding gives it (HASS's context alignment): the loss falls, and no gradient
    flows from a step back into the previous step's prediction (the earlier rows it reads are detached)."""
    seqs = self_distilled(tiny_target, n=24)
    held = make_batch(seqs[:6])
    draft = fresh(tiny_target, DraftSpec("poss", 2, 2))
    cfg = TrainConfig(steps=40, lr=3e-3, positions=4, unroll="decoding", noise=0.05)
    before = float(loss_on_batch(draft, held, cfg)[0].detach())
    train(draft, batches(seqs[6:], size=6), cfg)
    after = float(loss_on_batch(draft, held, cfg)[0].detach())
    assert after < 0.95 * before, (before, after)

    steps = trainer.decoding_unroll(draft, held, steps=3)
    # Step 3 is specialist 1; a loss on step 3 alone must leave specialist 0 (which made steps 1-2) untouched.
    assert [g for g, _ in steps] == [0, 0, 1]
    draft.zero_grad(set_to_none=True)
    steps[2][1].sum().backward()
    assert all(p.grad is None or not p.grad.any() for p in draft.layers[0].parameters())
    assert any(p.grad is not None and p.grad.any() for p in draft.layers[1].parameters())


def _run(module, *args):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # the data and training CLIs end to end
def test_data_cli_resumes_without_duplicates_and_trainer_resumes(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(f"Prompt number {i}: say something." for i in range(10)))
    out = tmp_path / "data"
    args = [
        "--preset",
        "tiny-random",
        "--prompts",
        str(prompts),
        "--batch-size",
        "4",
        "--max-new-tokens",
        "12",
        "--out",
        str(out),
    ]
    r = _run("poss_core.training.data", *args)
    assert r.returncode == 0, r.stderr
    first = {f.name: f.read_bytes() for f in out.glob("shard-*.safetensors")}
    assert len(first) == 3
    card = (out / "data_card.json").read_text()
    assert json.loads(card)["built_now"] == 3
    # A rerun over a finished folder builds nothing and keeps the card of the run that built it.
    r = _run("poss_core.training.data", *args)
    assert json.loads(r.stdout.splitlines()[-1])["built_now"] == 0
    assert (out / "data_card.json").read_text() == card
    # Simulate an interruption: one shard never finished (only its partial file exists).
    (out / "shard-00001.safetensors").rename(out / "shard-00001.partial")
    r = _run("poss_core.training.data", *args)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1])["built_now"] == 1
    again = {f.name: f.read_bytes() for f in out.glob("shard-*.safetensors")}
    assert again.keys() == first.keys()
    seqs = read_shards(out)
    assert len(seqs) == 10
    assert len({tuple(s.input_ids.tolist()) for s in seqs}) == 10  # no row twice
    # A fresh machine with only the small token files rebuilds the feature shards without generating again.
    for f in out.glob("shard-*.safetensors"):
        f.unlink()
    r = _run("poss_core.training.data", *args)
    assert json.loads(r.stdout.splitlines()[-1])["from_saved_tokens"] == 3
    rebuilt = read_shards(out)
    assert [s.input_ids.tolist() for s in rebuilt] == [s.input_ids.tolist() for s in seqs]
    assert all(torch.allclose(a.hidden.float(), b.hidden.float(), atol=0.05) for a, b in zip(rebuilt, seqs))

    run_dir = tmp_path / "run"
    train = [
        "--preset",
        "tiny-random",
        "--data",
        str(out),
        "--methods",
        "eagle,poss2",
        "--tokens-per-batch",
        "120",
        "--draft-vocab",
        "30",
        "--save-every",
        "3",
        "--out",
        str(run_dir),
    ]
    assert _run("poss_core.training.train", *train, "--steps", "3", "--final-eval", "none").returncode == 0
    first = json.loads((run_dir / "poss2" / "final" / "model_card.json").read_text())
    assert not any(k.startswith("heldout_top1") for k in first)  # an intermediate stage skips the evaluation
    r = _run("poss_core.training.train", *train, "--steps", "6", "--final-eval", "decoding")
    assert r.returncode == 0, r.stderr
    steps = [json.loads(line)["step"] for line in (run_dir / "poss2" / "loss_log.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3, 4, 5]  # resumed at step 3, nothing repeated
    card = json.loads((run_dir / "poss2" / "final" / "model_card.json").read_text())
    assert card["steps"] == 6 and len(card["heldout_top1_by_position_decoding"]) == 6
    assert "heldout_top1_by_position" not in card
    meta = json.loads((run_dir / "poss2" / "final" / "poss_draft.json").read_text())
    assert meta["positions_per_specialist"] == 2 and 0 < len(meta["draft_vocab"]) <= 30


@pytest.mark.slow  # the data and training CLIs end to end
def test_data_cli_exclude_adds_only_new_prompts(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(f"Question {i}: what comes next?" for i in range(10)))
    common = ["--preset", "tiny-random", "--prompts", str(prompts), "--batch-size", "4", "--max-new-tokens", "6"]
    first, second = tmp_path / "first", tmp_path / "second"
    assert _run("poss_core.training.data", *common, "--limit", "6", "--seed", "1", "--out", str(first)).returncode == 0
    r = _run("poss_core.training.data", *common, "--seed", "2", "--exclude", str(first), "--out", str(second))
    assert r.returncode == 0, r.stderr
    assert "6 of 10 prompts are already in" in r.stderr

    def prompt_ids(folder):
        return {tuple(s.input_ids[: int(s.loss_mask.nonzero()[0])].tolist()) for s in read_shards(folder)}

    a, b = prompt_ids(first), prompt_ids(second)
    assert len(a) == 6 and len(b) == 4 and not a & b  # together every prompt once
    # Without its token files (features only), the excluded folder is read from its shards, with the same result.
    import shutil

    shutil.rmtree(first / "tokens")
    from poss_core.training.prompts import prompts_in_folder

    assert prompts_in_folder(first) == a
    r = _run("poss_core.training.data", *common, "--exclude", str(first), str(second), "--out", str(tmp_path / "x"))
    assert r.returncode != 0 and "already in the --exclude folders" in r.stderr


@pytest.mark.slow  # the data and training CLIs end to end
def test_data_cli_long_prompts_with_an_instruction(tmp_path):
    from poss_core.models.tiny import tiny_tokenizer

    prompts = tmp_path / "docs.txt"
    long_docs = [f"Document {i}: " + "the river runs past the old mill and on to the sea. " * 3 for i in range(5)]
    prompts.write_text("\n".join(long_docs + ["short one", "tiny"]))
    out = tmp_path / "long"
    r = _run(
        "poss_core.training.data",
        "--preset",
        "tiny-random",
        "--prompts",
        str(prompts),
        "--batch-size",
        "4",
        "--max-new-tokens",
        "5",
        "--min-prompt-tokens",
        "100",
        "--max-prompt-tokens",
        "400",
        "--instruction",
        "Summarize:",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    assert "5 of 7 prompts are that long" in r.stderr
    tok = tiny_tokenizer()
    stored = [tok.decode(s.input_ids[: int(s.loss_mask.nonzero()[0])]) for s in read_shards(out, max_len=1000)]
    assert len(stored) == 5
    # Whole documents, the instruction first (the tiny tokenizer has no token for the blank line between them).
    assert all(p.startswith("<|user|>Summarize:") and "Document " in p and p.count("to the sea.") == 3 for p in stored)
    assert json.loads((out / "data_card.json").read_text())["max_prompt_tokens"] == 400
    # Cut shorter than its prompt, a document trains nothing and is left out; cut after it, it is kept.
    prompt_len = min(int(s.loss_mask.nonzero()[0]) for s in read_shards(out, max_len=1000))
    assert read_shards(out, max_len=prompt_len) == [] and len(read_shards(out, max_len=1000)) == 5
    # A sequence longer than a whole batch is batched alone; shorter ones share batches as before.
    from poss_core.training.batches import token_batches
    from poss_core.training.trainer import TrainSequence

    docs = read_shards(out, max_len=1000)
    h = docs[0].hidden.shape[-1]
    short = [TrainSequence(torch.arange(12), torch.zeros(12, h), torch.ones(12)) for _ in range(6)]
    seqs = docs[:1] + short
    stream = token_batches(seqs, tokens_per_batch=prompt_len - 20, seed=0)
    sizes = [next(stream).tokens.shape for _ in range(8)]
    long_len = int(docs[0].input_ids.numel()) - 1
    assert (1, long_len) in sizes and all(b > 1 or t == long_len for b, t in sizes)
    r = _run(
        "poss_core.training.data",
        "--preset",
        "tiny-random",
        "--prompts",
        str(prompts),
        "--min-prompt-tokens",
        "5000",
        "--out",
        str(tmp_path / "none"),
    )
    assert r.returncode != 0 and "lower --min-prompt-tokens" in r.stderr


@pytest.mark.slow  # the data and training CLIs end to end
def test_self_prompts_are_written_by_the_target_and_resume_identically(tmp_path):
    out = tmp_path / "data"
    args = [
        "--preset",
        "tiny-random",
        "--self-prompts",
        "8",
        "--batch-size",
        "4",
        "--max-new-tokens",
        "8",
        "--seed",
        "5",
        "--out",
        str(out),
    ]
    r = _run("poss_core.training.data", *args)
    assert r.returncode == 0, r.stderr
    path = out / "self_prompts.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [row["batch"] for row in rows] == [0, 1]
    written = [p for row in rows for p in row["prompts"]]
    assert written and all(len(p) >= 12 for p in written)
    assert len(read_shards(out)) == len(set(written))  # every distinct prompt was answered once
    # Interrupted after the first batch of prompts: the rerun writes the same second batch (per-batch seeds).
    path.write_text(json.dumps(rows[0]) + "\n")
    for f in list(out.glob("shard-*")) + list((out / "tokens").glob("*")):
        f.unlink()
    r = _run("poss_core.training.data", *args)
    assert r.returncode == 0, r.stderr
    assert [json.loads(line) for line in path.read_text().splitlines()] == rows
    # --exclude applies to self-written prompts too: the same seed writes the same prompts, all already answered.
    again = [a if a != str(out) else str(tmp_path / "again") for a in args]
    r = _run("poss_core.training.data", *again, "--exclude", str(out))
    n = len(set(written))
    assert r.returncode != 0 and f"{n} of {n} self-written prompts are already in" in r.stderr
    assert "no prompts are left" in r.stderr
    # Self-prompts need answers from the target, so the dataset-answers mode refuses them clearly.
    r = _run("poss_core.training.data", *args, "--answers", "dataset")
    assert r.returncode != 0 and "--self-prompts" in r.stderr


@pytest.mark.slow  # the data and training CLIs end to end
def test_training_continues_from_exported_drafts(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(f"Tell me about topic {i}." for i in range(8)))
    data = tmp_path / "data"
    assert (
        _run(
            "poss_core.training.data",
            "--preset",
            "tiny-random",
            "--prompts",
            str(prompts),
            "--batch-size",
            "4",
            "--max-new-tokens",
            "10",
            "--out",
            str(data),
        ).returncode
        == 0
    )
    common = ["--preset", "tiny-random", "--data", str(data), "--tokens-per-batch", "100", "--draft-vocab", "30"]
    first = tmp_path / "first"
    r = _run(
        "poss_core.training.train",
        *common,
        "--methods",
        "eagle,poss2",
        "--steps",
        "4",
        "--out",
        str(tmp_path / "run1"),
        "--export",
        str(first),
    )
    assert r.returncode == 0, r.stderr
    # lr 0: one more step changes nothing, so the continued drafts must hold exactly the first run's weights.
    r = _run(
        "poss_core.training.train",
        *common,
        "--methods",
        "eagle,poss2",
        "--steps",
        "1",
        "--lr",
        "0",
        "--init-from",
        str(first),
        "--out",
        str(tmp_path / "run2"),
    )
    assert r.returncode == 0, r.stderr
    from safetensors.torch import load_file

    for name in ("eagle", "poss2"):
        before = load_file(str(first / name / "model.safetensors"))
        after = load_file(str(tmp_path / "run2" / name / "final" / "model.safetensors"))
        assert before.keys() == after.keys()
        assert all(torch.equal(before[k].float(), after[k].float()) for k in before)
        card = json.loads((tmp_path / "run2" / name / "final" / "model_card.json").read_text())
        assert card["init"].startswith("continued from")
    r = _run(
        "poss_core.training.train",
        *common,
        "--methods",
        "poss3",
        "--steps",
        "1",
        "--init-from",
        str(first),
        "--out",
        str(tmp_path / "run3"),
    )
    assert r.returncode != 0 and "no trained 'poss3' draft" in r.stderr
    # The evaluation CLI compares drafts on full-vocabulary agreement with the target's real next token.
    r = _run(
        "poss_core.training.evaluate",
        "--preset",
        "tiny-random",
        "--data",
        str(data),
        "--drafts",
        str(first),
        "--methods",
        "eagle,poss2,poss3",
        "--depth",
        "4",
        "--out",
        str(tmp_path / "eval.json"),
    )
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "eval.json").read_text())
    assert [row["method"] for row in report["results"]] == ["eagle", "poss2"]  # poss3 is absent: skipped
    assert all(
        len(row["top1_by_position"]) == 4 and all(0 <= x <= 1 for x in row["top1_by_position"])
        for row in report["results"]
    )
    assert "| k=1 | k=2 | k=3 | k=4 |" in r.stdout and "skipping" in r.stderr


def test_full_vocabulary_agreement_counts_tokens_outside_the_draft_vocabulary_as_misses(tiny_target):
    from poss_core.training.evaluate import evaluate, target_next_tokens

    seqs = self_distilled(tiny_target, n=8)
    batches = [make_batch(seqs)]
    nxt = target_next_tokens(batches, tiny_target.lm_head_weight().detach().float())
    full = fresh(tiny_target, DraftSpec("poss", 3, 2))
    assert evaluate(full, batches, 4, nxt) == pytest.approx(evaluate(full, batches, 4))
    # A draft vocabulary holding only the tokens the draft itself predicts can never hit the rest.
    answers = torch.cat([s.input_ids[s.loss_mask.bool()] for s in seqs])
    common = torch.unique(answers)[:3]
    small = DraftModel(draft_config_from_target(tiny_target.config), DraftSpec("poss", 3, 2), common).float()
    small.load_state_dict(full.state_dict(), strict=False)
    small.bind_target(tiny_target.input_embedding_weight(), tiny_target.lm_head_weight())
    share = float(sum(int(t in set(common.tolist())) for t in answers)) / len(answers)
    assert all(x <= share + 0.05 for x in evaluate(small, batches, 4, nxt))


def test_specialists_can_start_from_a_trained_eagle_layer(tiny_target, tmp_path):
    """`--specialists-from`: every POSS specialist (and EAGLE itself) starts as a copy of the trained EAGLE layer."""
    from poss_core.base.errors import PossError
    from poss_core.models.checkpoint import save_draft
    from poss_core.training.drafts import make_draft, trained_eagle

    eagle = fresh(tiny_target, DraftSpec("eagle", 1), seed=3)
    save_draft(eagle, tmp_path / "eagle", tiny_target, dtype=torch.float32)
    init, note = trained_eagle(tmp_path, tiny_target)
    assert str(tmp_path / "eagle") in note
    poss = make_draft(tiny_target, "poss2", 6, None, init, seed=0)
    assert len(poss.layers) == 3
    for layer in poss.layers:
        assert torch.equal(layer.self_attn.q_proj.weight, eagle.layers[0].self_attn.q_proj.weight)
        assert torch.equal(layer.mlp.down_proj.weight, eagle.layers[0].mlp.down_proj.weight)
    assert torch.equal(poss.fc.weight, eagle.fc.weight)
    with pytest.raises(PossError, match="no trained 'eagle' draft"):
        trained_eagle(tmp_path / "nowhere", tiny_target)


def test_tokens_only_folder_trains_on_the_same_batches_with_features_computed_per_batch(tiny_target, tmp_path):
    """`data --tokens-only` writes no features; the trainer's fill computes each batch's from the target, so the
    batches (chosen from the tokens alone) and their features match a full folder's."""
    from poss_core.training.batches import token_batches
    from poss_core.training.features import feature_fill, features_batch
    from poss_core.training.shards import write_shard

    seqs = [s.input_ids.tolist() for s in self_distilled(tiny_target, n=12)]
    prompt_lens = [3] * len(seqs)
    full, tokens = tmp_path / "full", tmp_path / "tokens"
    for folder, hidden in ((full, features_batch(tiny_target, seqs)), (tokens, None)):
        folder.mkdir()
        write_shard(folder / "shard-00000.safetensors", seqs, prompt_lens, hidden)
    with_features, without = read_shards(full), read_shards(tokens)
    assert all(s.hidden is None for s in without) and all(s.hidden is not None for s in with_features)
    fill = feature_fill("builtin:tiny-random", torch.float32)
    a = token_batches(with_features, 60, seed=3)
    b = token_batches(without, 60, seed=3, fill=fill)
    for _ in range(4):
        x, y = next(a), next(b)
        assert torch.equal(x.tokens, y.tokens) and torch.equal(x.mask, y.mask)
        assert torch.allclose(x.features, y.features, atol=0.05)
        assert torch.allclose(x.target_features, y.target_features, atol=0.05)
