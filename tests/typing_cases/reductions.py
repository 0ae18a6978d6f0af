"""The pages' node idioms as a mypy --strict / pyright user writes them, with no ignores:
reductions (``@reduce`` with each bundled reducer and a reducer of one's own), the
statistics types they return, built-ins, a batch node and a ``@vectorized`` node."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from flowdata import Batch, Collect, Parallel, reduce, vectorized
from flowdata.stats import Count, Histogram, HistogramCounts, Stats, Vocab, Vocabulary, Welford


def row(n: int) -> Parallel[int]:
    yield from range(n)


def feature(row: int) -> torch.Tensor:
    return torch.full((2, 3), float(row))


def word(row: int) -> str:
    return ["cat", "dog", "bird"][row % 3]


def jitter(row: int, sample_index: int, sample_rng: torch.Generator) -> float:
    return sample_index + float(torch.rand((), generator=sample_rng)) * 0.0


# The documented body of a reduction (docs/statistics.md): it raises, never `...`.
@reduce(Welford, dim=(0, 2))
def feature_stats(feature: Collect[torch.Tensor]) -> Stats:
    raise NotImplementedError("@reduce folds the values; the body is not called")


@reduce(Vocabulary, min_count=1)
def word_vocab(word: Collect[str]) -> Vocab:
    raise NotImplementedError("@reduce folds the values; the body is not called")


@reduce(Histogram)
def row_hist(row: Collect[int], edges: list[float]) -> HistogramCounts:
    raise NotImplementedError("@reduce folds the values; the body is not called")


@reduce(Count)
def rows(row: Collect[int]) -> int:
    raise NotImplementedError("@reduce folds the values; the body is not called")


class Longest:
    """A reducer of one's own (the contract of ``flowdata.reduce``): the longest word."""

    def __init__(self) -> None:
        self.best = ""

    def update(self, value: str) -> None:
        if len(value) > len(self.best) or (len(value) == len(self.best) and value < self.best):
            self.best = value

    def merge(self, other: Longest) -> Longest:
        self.update(other.best)
        return self

    def result(self) -> str:
        return self.best

    def state_dict(self) -> dict[str, npt.NDArray[Any]]:
        return {"best": np.array(self.best)}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, npt.NDArray[Any]]) -> Longest:
        reducer = cls()
        reducer.best = str(state["best"])
        return reducer


@reduce(Longest)
def longest(word: Collect[str]) -> str:
    raise NotImplementedError("@reduce folds the values; the body is not called")


def normalized(feature: torch.Tensor, feature_stats: Stats) -> torch.Tensor:
    # A Stats holds float64 tensors of the kept shape: [2] here, per channel.
    return (feature - feature_stats.mean[:, None]) / (feature_stats.std[:, None] + 1.0)


def label(word: str, word_vocab: Vocab) -> int:
    return word_vocab[word] if word in word_vocab else word_vocab.get(word)


def summary(feature_stats: Stats, word_vocab: Vocab, row_hist: HistogramCounts, rows: int, longest: str) -> str:
    means: list[float] = feature_stats.mean.tolist()
    return f"{means} {feature_stats.count.tolist()} {list(word_vocab.tokens)} {row_hist.counts.tolist()} {rows} {longest}"


@vectorized
def doubled(row: Sequence[int]) -> list[int]:
    return [2 * r for r in row]


def scaled(normalized: Batch[torch.Tensor], feature_stats: Stats) -> Batch[torch.Tensor]:
    # A batch node: the collated [batch, 2, 3] tensor, after the loader's collation.
    return normalized * feature_stats.count[0]


def row_labels(word: Batch[list[str]], sample_rng: Batch[list[torch.Generator]]) -> Batch[list[str]]:
    return [w.upper() for w, _ in zip(word, sample_rng)]
