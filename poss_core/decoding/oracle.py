"""The oracle: speculative decoding whose "draft" is the target's own continuation, known from a plain run of the same
prompt. Every round proposes the next `depth` tokens of it, so every round accepts up to the depth: its speed is the
most any draft can reach with this engine, on this machine, at these settings (the ceiling the benchmark divides by).

The continuation is computed once per prompt (`prepare`, untimed: the benchmark calls it before its clock starts, and
`generate` calls it before its first round) and reused. Drafting costs no model call; the tree is the chain of the
next tokens, padded with filler siblings (never accepted) up to the tree budget when `pad_to_budget` is set, so the
verify pass has the same size as a real draft's tree of that budget."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from ..models.target import TargetModel
from .config import DecodeConfig
from .decoder import PlainDecoder, SpeculativeDecoder
from .tree import DraftTree


class _OracleState:
    """What the oracle keeps between rounds: the tokens committed after the prompt (the decoder's `add_rows` feeds
    every round's accepted tokens and bonus, the first call the prompt's rows and the first token)."""

    def __init__(self, prompt_len: int) -> None:
        self.skip = prompt_len - 1  # the first add_rows carries ids[1:] before the first new token
        self.emitted: list[int] = []

    def add_rows(self, tokens: torch.Tensor, features: torch.Tensor) -> None:
        new = tokens.tolist()
        drop = min(self.skip, len(new))
        self.skip -= drop
        self.emitted.extend(new[drop:])


class OracleDecoder(SpeculativeDecoder):
    """Speculative decoding with a perfect draft: the target's own continuation of the prompt."""

    method = "oracle"

    def __init__(self, target: TargetModel, config: DecodeConfig, pad_to_budget: bool = True) -> None:
        config.validate()
        self.target = target
        self.config = config
        self.draft = None
        self._stats_depth = config.depth
        self.pad_to_budget = pad_to_budget
        self._continuations: dict[tuple[int, ...], list[int]] = {}  # shared by copies (the benchmark copies lanes)

    def prepare(self, input_ids: Sequence[int]) -> list[int]:
        """The target's own continuation of `input_ids` (plain decoding with this config), computed once."""
        key = tuple(int(t) for t in input_ids)
        known = self._continuations.get(key)
        want = self.config.max_new_tokens
        if known is not None and (len(known) >= want or (known and known[-1] in self.target.eos_ids)):
            return known
        plain = PlainDecoder(self.target, replace(self.config, max_new_tokens=want))
        summary = list(plain.generate(list(key)))[-1]
        self._continuations[key] = list(summary.token_ids)
        return self._continuations[key]

    def generate(self, input_ids: Sequence[int], cancel=None):
        self._current = self.prepare(input_ids)
        return super().generate(input_ids, cancel)

    def _new_state(self, ids: torch.Tensor) -> _OracleState:
        return _OracleState(int(ids.numel()))

    def _draft_tree(self, state: _OracleState, depth: int) -> DraftTree:
        emitted, cont = state.emitted, self._current
        n = len(emitted)
        chain = cont[n:n + depth] if cont[:n] == emitted else []  # after a divergence nothing is known
        budget = self.config.tree_budget - 1 if self.pad_to_budget else len(chain)
        chain = chain[:budget]
        return oracle_tree(chain, max(budget, len(chain)), depth, self.target.vocab_size, self.target.hidden_size)


def oracle_tree(chain: list[int], size: int, depth: int, vocab_size: int, hidden_size: int) -> DraftTree:
    """The chain as nodes 0..m-1 (each the child of the one before, draft probability 1), then `size - m` filler
    leaves: siblings of the chain's nodes (children of the root and of chain nodes, shallowest first), each a token
    other than the chain's at that depth, scored below the chain so verification tries the chain first."""
    m = len(chain)
    tokens, parents, depths, scores = list(chain), list(range(-1, m - 1)), list(range(1, m + 1)), [0.0] * m
    fill, j = size - m, 1
    slots = min(depth, m + 1)  # filler may hang below the root and below chain nodes, staying within the depth
    while fill > 0:
        for level in range(slots):
            if fill == 0:
                break
            true = chain[level] if level < m else -1
            tok = (true + j) % vocab_size if true >= 0 else (j - 1) % vocab_size
            tokens.append(tok)
            parents.append(level - 1)
            depths.append(level + 1)
            scores.append(-float(j))
            fill -= 1
        j += 1
    k = len(tokens)
    as_long = lambda v: torch.tensor(v, dtype=torch.long)  # noqa: E731
    score = torch.tensor(scores, dtype=torch.float32)
    return DraftTree(as_long(tokens).reshape(k), as_long(parents).reshape(k), as_long(depths).reshape(k), score,
                     score.exp(), torch.zeros(k, dtype=torch.long), None, torch.zeros(k, hidden_size),
                     torch.zeros(k, dtype=torch.bool))
