"""Verification reads the target's rows only where it needs them, and decides exactly as with every row."""

import time

import torch

from poss_core.decoding.tree import DraftTree
from poss_core.decoding.verify import SlotRows, target_distribution, verify_greedy, verify_sampling

V, H = 50, 8


def _tree(parents: list[int], tokens: list[int]) -> DraftTree:
    depths: list[int] = []
    for p in parents:
        depths.append(1 if p < 0 else depths[p] + 1)
    m = len(parents)
    z = torch.zeros(m)
    return DraftTree(
        torch.tensor(tokens),
        torch.tensor(parents),
        torch.tensor(depths),
        -torch.arange(m) / 10,
        z,
        torch.zeros(m, dtype=torch.long),
        None,
        torch.zeros(m, H),
        torch.zeros(m, dtype=torch.bool),
    )


def _random_case(seed: int) -> tuple[DraftTree, torch.Tensor, torch.Tensor]:
    """A random tree whose tokens often match the argmax of a random head at their parent (so paths get accepted)."""
    gen = torch.Generator().manual_seed(seed)
    m = int(torch.randint(1, 14, (), generator=gen))
    parents = [-1] + [int(torch.randint(-1, i, (), generator=gen)) for i in range(1, m)]
    hidden = torch.randn(m + 1, H, generator=gen)
    head = torch.randn(V, H, generator=gen)
    best = (hidden @ head.T).argmax(-1)
    tokens = [
        int(best[p + 1]) if torch.rand((), generator=gen) < 0.6 else int(torch.randint(0, V, (), generator=gen))
        for p in parents
    ]
    return _tree(parents, tokens), hidden, head


class CountingHead:
    def __init__(self, head: torch.Tensor) -> None:
        self.head, self.rows, self.calls = head, 0, 0

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        self.rows += int(hidden.shape[0])
        self.calls += 1
        return hidden @ self.head.T


def test_greedy_with_slot_rows_is_greedy_with_every_row_and_reads_only_what_it_needs():
    for seed in range(60):
        tree, hidden, head = _random_case(seed)
        full = hidden @ head.T
        counting = CountingHead(head)
        rows = SlotRows(counting, hidden, tree.parents)
        path, bonus = verify_greedy(tree, rows)
        assert (path, bonus) == verify_greedy(tree, full)
        with_children = set((tree.parents + 1).tolist())
        stop = path[-1] + 1 if path else 0
        assert counting.rows == rows.computed == len(with_children) + (stop not in with_children)
        assert counting.rows <= tree.size + 1
        # Each node's entry in its parent's row, as the views show it.
        assert torch.allclose(rows.at_nodes(tree.tokens), full[tree.parents + 1, tree.tokens], atol=1e-5)


def test_every_slot_rows_are_one_call_and_verify_the_same():
    for seed in range(20):
        tree, hidden, head = _random_case(seed)
        counting = CountingHead(head)
        rows = SlotRows(counting, hidden, tree.parents, every_slot=True)
        assert verify_greedy(tree, rows) == verify_greedy(tree, hidden @ head.T)
        assert counting.rows == rows.computed == tree.size + 1 and counting.calls == 1
        assert torch.allclose(rows.at_nodes(tree.tokens), (hidden @ head.T)[tree.parents + 1, tree.tokens], atol=1e-5)


def test_sampling_with_slot_rows_draws_exactly_what_every_row_would():
    for seed in range(30):
        tree, hidden, head = _random_case(seed)
        probs = target_distribution(hidden @ head.T, 0.8, 0.9)
        rows = SlotRows(lambda h: target_distribution(h @ head.T, 0.8, 0.9), hidden, tree.parents)
        for draw in range(5):
            a = verify_sampling(tree, rows, torch.Generator().manual_seed(draw))
            b = verify_sampling(tree, probs, torch.Generator().manual_seed(draw))
            assert a == b


def test_an_empty_tree_reads_only_the_root():
    hidden = torch.randn(1, H)
    counting = CountingHead(torch.randn(V, H))
    rows = SlotRows(counting, hidden, torch.zeros(0, dtype=torch.long))
    path, bonus = verify_greedy(DraftTree.empty(H), rows)
    assert path == [] and bonus == int((hidden @ counting.head.T).argmax()) and counting.rows == 1


def test_a_leaf_read_is_timed_as_the_targets_work_and_a_computed_row_is_not():
    """The decoder adds `lazy_ms` to the round's verify time: a leaf's second LM-head call is target work, not the
    engine's overhead."""
    tree, hidden, head = _random_case(3)
    counting = CountingHead(head)

    def slow(rows: torch.Tensor) -> torch.Tensor:
        time.sleep(0.02)
        return counting(rows)

    rows = SlotRows(slow, hidden, tree.parents)
    with_children = sorted(set((tree.parents + 1).tolist()))
    leaves = [s for s in range(tree.size + 1) if s not in with_children]
    assert leaves
    _ = rows[with_children[0]]
    assert rows.lazy_ms == 0.0
    _ = rows[leaves[0]]
    assert rows.lazy_ms >= 20.0
    first = rows.lazy_ms
    _ = rows[leaves[0]]  # read once, kept
    assert rows.lazy_ms == first


def test_log_norms_give_each_node_its_parents_log_probabilities():
    """Each node's target probability (what events show) is its entry of softmax(parent row), whichever rows the
    block holds (the rows with children, or every slot)."""
    for seed in range(20):
        tree, hidden, head = _random_case(seed)
        full = torch.softmax(hidden @ head.T, dim=-1)
        want = full[tree.parents + 1, tree.tokens]
        for every in (False, True):
            rows = SlotRows(lambda h: h @ head.T, hidden, tree.parents, every_slot=every)
            got = (rows.at_nodes(tree.tokens) - rows.log_norms()).exp()
            assert torch.allclose(got, want, atol=1e-6)
