"""Does a target give a row the same bits alone, in chunks and among tree siblings? Measured, not assumed: random
token ids, a committed prefix, then the rest fed in steps of several sizes, and random draft trees whose root-to-leaf
path is compared with plain decoding of the same tokens; logits and features compared bit for bit with one forward
over everything (scripts/row_invariance.py prints it; tests/test_row_invariant.py asserts it)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .target import TargetModel, causal_allowed


@dataclass
class Case:
    """One way of feeding the rows: how many rows came out bit-identical to the reference, and the largest logit
    difference."""

    name: str
    rows: int
    equal: int
    max_diff: float

    @property
    def exact(self) -> bool:
        return self.equal == self.rows


def read_in(target: TargetModel, ids: torch.Tensor, chunks: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits and features of every row of `ids`, read in the given [begin, end) chunks with one cache."""
    cache, logits, hidden = target.new_cache(), [], []
    for begin, end in chunks:
        out = target.forward(ids[begin:end], torch.arange(begin, end), causal_allowed(end - begin, begin), cache)
        logits.append(out.logits.float().cpu())
        hidden.append(out.hidden.float().cpu())
    return torch.cat(logits), torch.cat(hidden)


def steps(begin: int, end: int, size: int) -> list[tuple[int, int]]:
    return [(i, min(end, i + size)) for i in range(begin, end, size)]


def random_tree(depths: int, width: int, gen: torch.Generator) -> tuple[list[int], list[int], list[int]]:
    """Parents and depths of a random tree (node 0 the root; parents before children, as an EAGLE tree has them) and
    the nodes of one root-to-leaf path `depths` deep: at each depth `width` nodes, the path's node the parent of one
    or more of them, the rest children of random nodes of the depth above (so the path's siblings are masked)."""
    parents, depth, path = [-1], [0], [0]
    for d in range(1, depths + 1):
        frontier = [i for i, dd in enumerate(depth) if dd == d - 1]
        first = len(parents)
        for j in range(width):
            pick = path[-1] if j == 0 else frontier[int(torch.randint(len(frontier), (1,), generator=gen))]
            parents.append(pick)
            depth.append(d)
        children = [i for i in range(first, len(parents)) if parents[i] == path[-1]]
        path.append(children[int(torch.randint(len(children), (1,), generator=gen))])
    return parents, depth, path


def _case(name: str, got: torch.Tensor, want: torch.Tensor) -> Case:
    diff = (got - want).abs().amax(-1)
    return Case(name, int(diff.numel()), int((diff == 0).sum()), float(diff.max()))


def tree_case(target: TargetModel, context: int, gen: torch.Generator) -> tuple[Case, Case]:
    """A random tree after `context` committed tokens, verified in one forward: its path's logits and features
    against plain decoding of the context and the path's tokens one row at a time."""
    parents, depth, path = random_tree(6, 5, gen)
    tokens = torch.randint(3, target.vocab_size, (len(parents),), generator=gen)
    context_ids = torch.randint(3, target.vocab_size, (context,), generator=gen)
    line = torch.cat([context_ids, tokens[path]])
    plain_logits, plain_hidden = read_in(target, line, [(0, context), *steps(context, len(line), 1)])
    cache = target.new_cache()
    target.forward(context_ids, torch.arange(context), causal_allowed(context, 0), cache, logits="none")
    size = len(parents)
    ancestors = torch.zeros(size, size, dtype=torch.bool)
    for i in range(size):
        j = i
        while j != -1:
            ancestors[i, j], j = True, parents[j]
    allowed = torch.ones(size, context + size, dtype=torch.bool)
    allowed[:, context:] = ancestors
    out = target.forward(tokens, context + torch.tensor(depth), allowed, cache)
    nodes = torch.tensor(path)
    name = f"tree of {size} after {context}"
    return (
        _case(name + " (logits)", out.logits.float().cpu()[nodes], plain_logits[context:]),
        _case(name + " (features)", out.hidden.float().cpu()[nodes], plain_hidden[context:]),
    )


def invariance(
    target: TargetModel, length: int = 150, prefix: int = 101, seed: int = 0, sizes: tuple[int, ...] = (1, 2, 3, 5, 16)
) -> list[Case]:
    """Every case: the rows after `prefix` fed in steps of each size, the prompt in chunks of 37, and three trees
    (no head block, one, several), each against one forward over all `length` rows (trees: plain decoding)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, target.vocab_size, (length,), generator=gen)
    full_logits, full_hidden = read_in(target, ids, [(0, length)])
    cases = []
    for size in sizes:
        logits, hidden = read_in(target, ids, [(0, prefix), *steps(prefix, length, size)])
        cases.append(_case(f"steps of {size} (logits)", logits[prefix:], full_logits[prefix:]))
        cases.append(_case(f"steps of {size} (features)", hidden[prefix:], full_hidden[prefix:]))
    logits, _ = read_in(target, ids, steps(0, length, 37))
    cases.append(_case("chunks of 37 (logits)", logits, full_logits))
    for context in (20, 70, prefix):
        cases.extend(tree_case(target, context, gen))
    return cases
