"""The batches a run trains and scores on: global batches every process draws alike (row indices into the training
rows, or whole padded batches), and the held-out rows in batches of 8."""

from __future__ import annotations

import random
from collections.abc import Iterator

from .features import FeatureFill
from .trainer import RowBatch, TrainSequence, make_batch


def batch_indices(lengths: list[int], tokens_per_batch: int, seed: int) -> Iterator[list[int]]:
    """The rows of each global batch (indices into `lengths`), in a seeded endless order: rows are added until a batch
    holds `tokens_per_batch` tokens, and a row longer than a whole batch (a long document) is a batch of its own:
    padding every other row to its length would multiply the cost of the batch it landed in. It depends on the
    token counts alone, so every process (and every feature source) draws the same batches."""
    rng = random.Random(seed)
    order: list[int] = []
    while True:
        batch, used = [], 0
        while used < tokens_per_batch:
            if not order:
                order = list(range(len(lengths)))
                rng.shuffle(order)
            i = order.pop()
            if lengths[i] > tokens_per_batch:
                yield [i]
                continue
            batch.append(i)
            used += lengths[i]
        yield batch


class GlobalBatches:
    """An endless, seeded stream of global batches (row indices into `seqs`); `skip` passes over the batches a
    resumed run already used."""

    def __init__(self, seqs: list[TrainSequence], tokens_per_batch: int, seed: int):
        self.seqs = seqs
        self._rows = batch_indices([int(s.input_ids.numel()) for s in seqs], tokens_per_batch, seed)

    def __iter__(self) -> "GlobalBatches":
        return self

    def __next__(self) -> list[int]:
        return next(self._rows)

    def skip(self, n: int) -> None:
        for _ in range(n):
            next(self._rows)


class TokenBatches:
    """The global batches of `GlobalBatches` as whole padded batches (one process, no split). `fill` gives rows of a
    tokens-only folder their features as each batch is made (the batches are the same either way)."""

    def __init__(self, seqs: list[TrainSequence], tokens_per_batch: int, seed: int, fill: FeatureFill | None = None):
        self._batches = GlobalBatches(seqs, tokens_per_batch, seed)
        self._fill = fill or (lambda rows: rows)

    def __iter__(self) -> "TokenBatches":
        return self

    def __next__(self) -> RowBatch:
        return make_batch(self._fill([self._batches.seqs[i] for i in next(self._batches)]))

    def skip(self, n: int) -> None:
        self._batches.skip(n)


def token_batches(
    seqs: list[TrainSequence], tokens_per_batch: int, seed: int, fill: FeatureFill | None = None
) -> TokenBatches:
    return TokenBatches(seqs, tokens_per_batch, seed, fill)


class HeldoutBatches:
    """The held-out rows in batches of 8, their features fetched each time they are scored (nothing kept)."""

    def __init__(self, rows: list[TrainSequence], fill: FeatureFill, device):
        self.rows, self.fill, self.device = rows, fill, device

    def __iter__(self):
        for i in range(0, len(self.rows), 8):
            yield make_batch(self.fill(self.rows[i : i + 8])).to(self.device)
