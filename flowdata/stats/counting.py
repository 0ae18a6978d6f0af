"""Counting reducers: Vocabulary, Count, MinMax and Histogram.

Each follows the reducer contract of :mod:`flowdata.reduce`: ``update``, ``merge``,
``result``, ``state_dict`` / ``from_state_dict``, and pickles.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from flowdata.stats.welford import StatsError, as_float64

if TYPE_CHECKING:
    import torch

__all__ = ["Count", "Histogram", "HistogramCounts", "MinMax", "Range", "Vocab", "Vocabulary"]


@dataclass(frozen=True)
class Vocab:
    """A token vocabulary: ``tokens[i]`` has index ``i`` and was seen ``counts[i]`` times.

    Tokens are ordered by descending count, ties broken by the token itself (numbers
    numerically, strings lexicographically), so the order never depends on arrival order.
    """

    tokens: tuple[Any, ...]
    counts: tuple[int, ...]
    index: Mapping[Any, int] = field(init=False, repr=False, compare=False)
    _ids: dict[Any, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ids = {t: i for i, t in enumerate(self.tokens)}
        object.__setattr__(self, "_ids", ids)  # read by ids(): a dict's get is a tenth of a mappingproxy's
        object.__setattr__(self, "index", MappingProxyType(ids))

    def __reduce__(self) -> tuple[Any, ...]:
        # The index is derived (and a mappingproxy does not pickle): rebuild it.
        return (Vocab, (self.tokens, self.counts))

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, token: Any) -> int:
        try:
            return self.index[token]
        except KeyError:
            raise KeyError(f"token {token!r} is not in the vocabulary of {len(self)} tokens") from None

    def __contains__(self, token: object) -> bool:
        return token in self.index

    def get(self, token: Any, default: int = -1) -> int:
        """The index of ``token``, or ``default`` when it is unknown."""
        return self._ids.get(token, default)

    def ids(self, tokens: Iterable[Any], default: int = -1) -> list[int]:
        """The index of each token, ``default`` for an unknown one (a document's tokens at once)."""
        get = self._ids.get
        return [get(t, default) for t in tokens]


def _tie_key(item: tuple[Any, int]) -> tuple[int, str, Any]:
    token, count = item
    return (-count, type(token).__name__, token)


class Vocabulary:
    """Counts tokens; the result is a :class:`Vocab`.

    Args:
        min_count: Tokens seen fewer times are left out.
        max_size: Keep at most this many tokens (the most frequent).

    A value is one token (``str``, ``int``, ``bool``) or an iterable of tokens (a list of
    words, say). Tokens must all be strings or all be integers, so that state_dict stays
    plain arrays.
    """

    exact = True  # integer counts (or minima and maxima): merged in any grouping alike

    def __init__(self, min_count: int = 1, max_size: int | None = None):
        self.min_count = int(min_count)
        self.max_size = None if max_size is None else int(max_size)
        self.counts: Counter[Any] = Counter()

    def update(self, value: Any) -> None:
        """Counts one token or every token of an iterable."""
        if isinstance(value, (str, int, np.integer)):
            self.counts[value.item() if isinstance(value, np.integer) else value] += 1
        elif isinstance(value, Iterable):
            self.counts.update(value)
        else:
            raise StatsError(f"Vocabulary counts tokens (str or int) or iterables of them, got {type(value).__name__}")

    def fold(self, values: Sequence[Any]) -> None:
        """Counts a block of values: an Arrow column of tokens (or of lists of tokens, a
        :class:`~flowdata.columns.ArrowValues`) in one ``pyarrow.compute.value_counts``; any
        other values one by one, as :meth:`update` counts them."""
        counted = _arrow_counts(values)
        if counted is not None:
            self.counts.update(counted)
            return
        kinds = {type(v) for v in values}
        if kinds == {str}:  # one token each: counted in one call
            self.counts.update(values)
        elif kinds == {list}:  # lists of tokens (a document's words): every token in one call
            self.counts.update(itertools.chain.from_iterable(values))
        else:
            for v in values:
                self.update(v)

    def merge(self, other: Vocabulary) -> Vocabulary:
        """Adds another vocabulary's counts; returns self."""
        self.counts.update(other.counts)
        return self

    def result(self) -> Vocab:
        """The vocabulary, most frequent first, ties in token order."""
        kept = sorted((kv for kv in self.counts.items() if kv[1] >= self.min_count), key=_tie_key)
        if self.max_size is not None:
            kept = kept[: self.max_size]
        return Vocab(tuple(t for t, _ in kept), tuple(c for _, c in kept))

    def state_dict(self) -> dict[str, np.ndarray]:
        """Tokens and counts as arrays (string or integer tokens)."""
        tokens = list(self.counts)
        kinds = {type(t) for t in tokens}
        if kinds - {str} and kinds - {int, bool}:
            raise StatsError(f"Vocabulary.state_dict needs all-str or all-int tokens, got {sorted(k.__name__ for k in kinds)}")
        return {
            "tokens": np.array(tokens, dtype=str if str in kinds else np.int64),
            "counts": np.array([self.counts[t] for t in tokens], dtype=np.int64),
            "min_count": np.array(self.min_count),
            "max_size": np.array(-1 if self.max_size is None else self.max_size),
        }

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> Vocabulary:
        """A Vocabulary restored from :meth:`state_dict`."""
        size = int(np.asarray(state["max_size"]))
        v = cls(int(np.asarray(state["min_count"])), None if size < 0 else size)
        v.counts = Counter({t.item(): int(c) for t, c in zip(np.asarray(state["tokens"]), np.asarray(state["counts"]), strict=True)})
        return v


def _arrow_counts(values: Sequence[Any]) -> dict[Any, int] | None:
    """Token counts of an Arrow column of strings, integers or booleans (or lists of them),
    without a Python object per value; None for other values, or a column with a missing
    value (counted one by one, so that the missing one is named)."""
    from flowdata.columns import ArrowValues

    if not isinstance(values, ArrowValues):
        return None
    import pyarrow as pa
    import pyarrow.compute as pc

    data = values.data
    if data.null_count:
        return None
    kind = data.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        data = pc.list_flatten(data)
        kind = data.type
        if data.null_count:
            return None
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind)
            or pa.types.is_boolean(kind)):
        return None
    counted = pc.value_counts(data)
    if isinstance(counted, pa.ChunkedArray):
        counted = counted.combine_chunks()
    return dict(zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist(), strict=True))


class Count:
    """Counts values (samples); the result is an ``int``."""

    exact = True  # integer counts (or minima and maxima): merged in any grouping alike

    def __init__(self) -> None:
        self.n = 0

    def update(self, value: Any) -> None:
        """Counts one value."""
        self.n += 1

    def fold(self, values: Sequence[Any]) -> None:
        """Counts a block of values."""
        self.n += len(values)

    def merge(self, other: Count) -> Count:
        """Adds another count; returns self."""
        self.n += other.n
        return self

    def result(self) -> int:
        """The number of values."""
        return self.n

    def state_dict(self) -> dict[str, np.ndarray]:
        """The count."""
        return {"n": np.array(self.n, dtype=np.int64)}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> Count:
        """A Count restored from :meth:`state_dict`."""
        c = cls()
        c.n = int(np.asarray(state["n"]))
        return c


@dataclass(frozen=True)
class Range:
    """Elementwise minimum and maximum (float64 tensors)."""

    min: torch.Tensor
    max: torch.Tensor


class MinMax:
    """Minimum and maximum; ``dim`` as :class:`~flowdata.stats.Welford`'s: axes of the
    stacked batch, axis 0 being the samples (``@reduce(MinMax, dim=0)``: elementwise
    across samples; ``dim=None``: one overall minimum and maximum)."""

    exact = True  # integer counts (or minima and maxima): merged in any grouping alike

    def __init__(self, dim: int | Sequence[int] | None = None):
        from flowdata.stats.welford import Welford

        self._w = Welford(dim)

    def update(self, batch: Any) -> None:
        """Folds a batch in (axis 0: its samples)."""
        self._w.update(batch)

    def fold(self, values: Sequence[Any]) -> None:
        """Folds samples (stacked along a new axis 0)."""
        self._w.fold(values)

    def check_samples(self) -> None:
        """Raises unless ``dim`` reduces the sample axis (see ``Welford.check_samples``)."""
        self._w.check_samples()

    def merge(self, other: MinMax) -> MinMax:
        """Folds another MinMax in; returns self."""
        self._w.merge(other._w)
        return self

    def result(self) -> Range:
        """The minimum and maximum."""
        stats = self._w.result()
        return Range(stats.min, stats.max)

    def state_dict(self) -> dict[str, np.ndarray]:
        """The state as arrays."""
        return self._w.state_dict()

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> MinMax:
        """A MinMax restored from :meth:`state_dict`."""
        from flowdata.stats.welford import Welford

        m = cls()
        m._w = Welford.from_state_dict(state)
        return m


@dataclass(frozen=True)
class HistogramCounts:
    """Counts per bin: ``counts[i]`` values fell in ``[edges[i], edges[i + 1])``; the last bin
    is closed. ``below`` and ``above`` count values outside the edges; NaNs are ``nan``."""

    edges: torch.Tensor
    counts: torch.Tensor
    below: int
    above: int
    nan: int


class Histogram:
    """A histogram with fixed bin edges (so partial histograms merge exactly).

    Args:
        edges: Increasing bin edges (at least two).
    """

    exact = True  # integer counts (or minima and maxima): merged in any grouping alike

    def __init__(self, edges: Sequence[float]):
        self.edges = np.asarray(edges, dtype=np.float64)
        if self.edges.ndim != 1 or self.edges.size < 2 or not np.all(np.diff(self.edges) > 0):
            raise StatsError(f"Histogram edges must be at least two increasing numbers, got {list(edges)!r}")
        self.counts = np.zeros(self.edges.size - 1, dtype=np.int64)
        self.outside = np.zeros(3, dtype=np.int64)  # below, above, nan

    def update(self, value: Any) -> None:
        """Bins every element of a value."""
        x = as_float64(value).ravel()
        nan = np.isnan(x)
        x = x[~nan]
        self.outside += (int((x < self.edges[0]).sum()), int((x > self.edges[-1]).sum()), int(nan.sum()))
        self.counts += np.histogram(x, bins=self.edges)[0]

    def merge(self, other: Histogram) -> Histogram:
        """Adds another histogram with the same edges; returns self."""
        if not np.array_equal(self.edges, other.edges):
            raise StatsError("cannot merge histograms with different edges")
        self.counts += other.counts
        self.outside += other.outside
        return self

    def result(self) -> HistogramCounts:
        """Counts per bin, and outside the edges."""
        import torch

        below, above, nan = (int(v) for v in self.outside)
        return HistogramCounts(torch.from_numpy(self.edges.copy()), torch.from_numpy(self.counts.copy()), below, above, nan)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Edges and counts."""
        return {"edges": self.edges.copy(), "counts": self.counts.copy(), "outside": self.outside.copy()}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> Histogram:
        """A Histogram restored from :meth:`state_dict`."""
        h = cls(np.asarray(state["edges"]).tolist())
        h.counts = np.array(state["counts"], dtype=np.int64)
        h.outside = np.array(state["outside"], dtype=np.int64)
        return h
