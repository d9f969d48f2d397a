"""Lossless sampling on constructed trees with peaked target distributions (p = 0.6 / 0.3 / 0.1 and the like), where
a wrong verifier is far off: the first emitted token, and the token after an accepted first node, must follow the
target's distribution. Three plausible bugs of the verifier are kept here as mutants, each of which this check must
catch: no renormalisation after a rejection, the bonus token from the unmodified distribution, and acceptance by the
draft ratio p/q (as if the draft sampled its proposals instead of taking its top-k)."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import chisquare

from poss_core.decoding import verify
from poss_core.decoding.tree import DraftTree

V = 8
DRAWS = 12_000  # quick tier; the slow tier runs THOROUGH_DRAWS
THOROUGH_DRAWS = 60_000
PASS_P = 1e-3  # the real verifier must not look this unlikely
CATCH_P = 1e-6  # a mutant must look at least this unlikely in one of the checks


def tree_of(nodes: list[tuple[int, int, float]]) -> DraftTree:
    """A tree from (token, parent, draft probability) in best-first order (scores fall with the index)."""
    m = len(nodes)
    parents = torch.tensor([p for _, p, _ in nodes])
    depths = []
    for _, p, _ in nodes:
        depths.append(1 if p < 0 else depths[p] + 1)
    return DraftTree(
        tokens=torch.tensor([t for t, _, _ in nodes]),
        parents=parents,
        depths=torch.tensor(depths),
        scores=-torch.arange(m, dtype=torch.float) - 1.0,
        draft_probs=torch.tensor([q for *_, q in nodes]),
        specialists=torch.zeros(m, dtype=torch.long),
        root_feature=torch.zeros(1),
        node_features=torch.zeros(m, 1),
        has_feature=torch.zeros(m, dtype=torch.bool),
    )


def dist(*p: float) -> torch.Tensor:
    out = torch.zeros(V)
    out[: len(p)] = torch.tensor(p)
    return out / out.sum()


# Slot 0 is the root, slot i + 1 node i. The draft puts the target's second choice first at the root, so a verifier
# must reject it most of the time and renormalise before trying the next child.
TREES = {
    "two-children": (
        tree_of([(1, -1, 0.5), (0, -1, 0.3), (3, 0, 0.6), (2, 0, 0.3)]),
        torch.stack(
            [
                dist(0.6, 0.3, 0.1),
                dist(0.05, 0.05, 0.7, 0.2),
                dist(0.25, 0.25, 0.5),
                dist(0.1, 0.1, 0.1, 0.7),
                dist(0.5, 0.5),
            ]
        ),
    ),
    "top-choice-first": (
        tree_of([(0, -1, 0.5), (1, -1, 0.3), (2, 0, 0.6), (3, 0, 0.2), (0, 1, 0.7)]),
        torch.stack(
            [
                dist(0.6, 0.3, 0.1),
                dist(0.1, 0.1, 0.5, 0.3),
                dist(0.2, 0.3, 0.5),
                dist(1, 1, 1),
                dist(0.1, 0.2, 0.3, 0.4),
                dist(0.5, 0.5),
            ]
        ),
    ),
}


def _chi2(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of counts against probs; a count where the probability is 0 makes it 0 (impossible outcome)."""
    if bool(((probs == 0) & (counts > 0)).any()):
        return 0.0
    keep = probs > 0
    obs, exp = counts[keep].double(), (probs[keep] * counts.sum()).double()
    return float(chisquare(obs.numpy(), (exp * obs.sum() / exp.sum()).numpy()).pvalue)


def losslessness_check(tree: DraftTree, probs: torch.Tensor, draws: int, seed: int = 0) -> dict:
    """Draw `draws` verifications through `verify.verify_sampling` (whatever it is now) and test the first emitted
    token against the root's distribution and the second against that of the most accepted first node."""
    gen = torch.Generator().manual_seed(seed)
    first = torch.zeros(V)
    second: dict[int, torch.Tensor] = {}
    for _ in range(draws):
        path, bonus = verify.verify_sampling(tree, probs, gen)
        toks = tree.tokens[path].tolist() + [bonus]
        first[toks[0]] += 1
        if path:
            second.setdefault(path[0], torch.zeros(V))[toks[1]] += 1
    node, counts = max(second.items(), key=lambda kv: kv[1].sum())
    return {
        "first_p": _chi2(first, probs[0]),
        "first_tv": 0.5 * float((first / first.sum() - probs[0]).abs().sum()),
        "second_n": int(counts.sum()),
        "second_p": _chi2(counts, probs[node + 1]),
        "second_tv": 0.5 * float((counts / counts.sum() - probs[node + 1]).abs().sum()),
    }


# ---------------------------------------------------------------- mutants of verify_sampling


def _mutant(renormalise: bool = True, bonus_from_residual: bool = True, draft_ratio: bool = False):
    def verify_sampling(tree, probs, generator):
        tokens, kids, path, slot = tree.tokens.tolist(), tree.children(), [], 0
        while True:
            p = probs[slot].clone()
            accepted = None
            for child in kids[slot]:
                x = tokens[child]
                px = float(p[x])
                if draft_ratio:
                    px = min(1.0, px / float(tree.draft_probs[child]))
                if px <= 0.0:
                    continue
                if float(torch.rand((), generator=generator)) < px:
                    accepted = child
                    break
                p[x] = 0.0
                total = float(p.sum())
                if total <= 0.0:  # as the real verifier: rounding left nothing, fall back to the full distribution
                    p = probs[slot].clone()
                    break
                if renormalise:
                    p /= total
            if accepted is None:
                return path, int(torch.multinomial(p if bonus_from_residual else probs[slot], 1, generator=generator))
            path.append(accepted)
            slot = accepted + 1

    return verify_sampling


MUTANTS = {
    "no renormalisation after a rejection": _mutant(renormalise=False),
    "bonus from the unmodified distribution": _mutant(bonus_from_residual=False),
    "draft-ratio acceptance": _mutant(draft_ratio=True),
}


@pytest.mark.parametrize("name", list(TREES))
def test_the_verifier_follows_peaked_target_distributions(name):
    tree, probs = TREES[name]
    r = losslessness_check(tree, probs, DRAWS)
    assert r["second_n"] >= 1000, "the second-token check must run on enough accepted first nodes"
    assert r["first_p"] > PASS_P and r["second_p"] > PASS_P, r
    assert r["first_tv"] < 0.02 and r["second_tv"] < 0.04, r


@pytest.mark.parametrize("mutant", list(MUTANTS))
@pytest.mark.parametrize("name", list(TREES))
def test_the_check_catches_each_mutant(name, mutant, monkeypatch):
    tree, probs = TREES[name]
    monkeypatch.setattr(verify, "verify_sampling", MUTANTS[mutant])
    r = losslessness_check(tree, probs, DRAWS)
    print(
        f"\n[mutant] {mutant} on {name}: first p={r['first_p']:.2g} TV={r['first_tv']:.3f}; second "
        f"(n={r['second_n']}) p={r['second_p']:.2g} TV={r['second_tv']:.3f}"
    )
    assert min(r["first_p"], r["second_p"]) < CATCH_P, f"{mutant} was not caught: {r}"


def test_the_mutant_verifiers_equal_the_real_one_when_unmutated():
    """The mutants share the real verifier's code path: unmutated, they draw exactly what it draws."""
    same = _mutant()
    for tree, probs in TREES.values():
        g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
        assert [verify.verify_sampling(tree, probs, g1) for _ in range(300)] == [
            same(tree, probs, g2) for _ in range(300)
        ]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TREES))
def test_thorough_peaked_losslessness_and_mutants(name, monkeypatch):
    tree, probs = TREES[name]
    r = losslessness_check(tree, probs, THOROUGH_DRAWS, seed=11)
    print(f"\n[real] {name}: {r}")
    assert r["first_p"] > PASS_P and r["second_p"] > PASS_P and r["second_n"] >= 5000, r
    for mutant, fn in MUTANTS.items():
        monkeypatch.setattr(verify, "verify_sampling", fn)
        m = losslessness_check(tree, probs, THOROUGH_DRAWS, seed=11)
        print(f"[mutant] {mutant} on {name}: {m}")
        assert min(m["first_p"], m["second_p"]) < CATCH_P, (mutant, m)
    assert math.isfinite(r["first_tv"])
