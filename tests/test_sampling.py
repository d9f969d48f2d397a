"""Sampling verification is lossless: seeded draws through the tree follow the target's own distribution."""

import pytest
import torch
from scipy.stats import chisquare

from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import SpeculativeDecoder, encode_prompt
from poss_core.decoding.tree import build_tree
from poss_core.decoding.verify import target_distribution, verify_sampling
from poss_core.models.draft import DraftState
from poss_core.models.loading import random_draft
from poss_core.models.target import causal_allowed

DRAWS = 4000


def _tree_and_probs(target, draft, temperature, top_p):
    ids = torch.tensor(encode_prompt(target.tokenizer, "Sample something for me, please."))
    cache = target.new_cache()
    out = target.forward(ids, torch.arange(len(ids)), causal_allowed(len(ids), 0), cache, logits="last")
    root = int(out.logits[-1].argmax())
    state = DraftState(draft)
    state.add_rows(torch.cat([ids[1:], torch.tensor([root])]), out.hidden)
    tree = build_tree(draft, state, depth=3, top_k=4, tree_budget=20)
    n = len(ids) + 1
    allowed = torch.ones(tree.size + 1, n + tree.size, dtype=torch.bool)
    allowed[:, n - 1 :] = tree.ancestors()
    vout = target.forward(
        torch.cat([torch.tensor([root]), tree.tokens]),
        n - 1 + torch.cat([torch.zeros(1, dtype=torch.long), tree.depths]),
        allowed,
        cache,
    )
    return tree, target_distribution(vout.logits, temperature, top_p)


def _first_two(tree, path, bonus):
    toks = tree.tokens[path].tolist() + [bonus]
    return toks[0], (toks[1] if len(toks) > 1 else None)


def _chi2(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of observed counts against probabilities (rare outcomes pooled so expectations are >= 5)."""
    expected = probs * counts.sum()
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum()[None]]).double()
    exp = torch.cat([expected[big], expected[~big].sum()[None]]).double()
    if exp[-1] < 1e-9:
        obs, exp = obs[:-1], exp[:-1]
    exp = exp * obs.sum() / exp.sum()
    return float(chisquare(obs.numpy(), exp.numpy()).pvalue)


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.8)])
@pytest.mark.parametrize("draft_kind", ["trained", "bad"])
def test_next_token_distribution_is_the_targets(tiny_target, trained_drafts, temperature, top_p, draft_kind):
    draft = trained_drafts["eagle"] if draft_kind == "trained" else random_draft(tiny_target, "poss2")
    tree, probs = _tree_and_probs(tiny_target, draft, temperature, top_p)
    gen = torch.Generator().manual_seed(1234)
    first = torch.zeros(probs.shape[1])
    second_given = {}
    accepted_draws = 0
    for _ in range(DRAWS):
        path, bonus = verify_sampling(tree, probs, gen)
        accepted_draws += bool(path)
        a, b = _first_two(tree, path, bonus)
        first[a] += 1
        if path and b is not None:
            second_given.setdefault(path[0], []).append(b)
    assert _chi2(first, probs[0]) > 1e-3
    if draft_kind == "trained":
        assert accepted_draws > DRAWS // 20, "the test must exercise accepted paths"
    # The token after an accepted first node follows the target's distribution at that node.
    node, seconds = max(second_given.items(), key=lambda kv: len(kv[1]), default=(None, []))
    if len(seconds) >= 500:
        counts = torch.bincount(torch.tensor(seconds), minlength=probs.shape[1]).float()
        assert _chi2(counts, probs[node + 1]) > 1e-3


def test_top_p_never_emits_outside_the_nucleus(tiny_target, trained_drafts):
    tree, probs = _tree_and_probs(tiny_target, trained_drafts["eagle"], 1.0, 0.5)
    gen = torch.Generator().manual_seed(7)
    for _ in range(500):
        path, bonus = verify_sampling(tree, probs, gen)
        slot = 0
        for node in path:
            assert probs[slot, tree.tokens[node]] > 0
            slot = node + 1
        assert probs[slot, bonus] > 0


def test_sampling_decode_is_reproducible_with_a_seed(tiny_target, trained_drafts):
    ids = encode_prompt(tiny_target.tokenizer, "Once upon a time")
    cfg = DecodeConfig(temperature=0.8, top_p=0.9, max_new_tokens=30, seed=5)
    runs = [
        list(SpeculativeDecoder(tiny_target, trained_drafts["eagle"], cfg).generate(ids))[-1].token_ids
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    other = list(
        SpeculativeDecoder(
            tiny_target, trained_drafts["eagle"], DecodeConfig(temperature=0.8, top_p=0.9, max_new_tokens=30, seed=6)
        ).generate(ids)
    )
    assert other[-1].token_ids != runs[0]
