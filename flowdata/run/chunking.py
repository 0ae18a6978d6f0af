"""Cutting a source into chunks, and choosing their sizes.

A chunk is a run of consecutive sample indices: the unit of work sent to an executor.
:class:`ChunkSizer` starts with **one** sample, so a group whose samples are large never
holds more than one of them before it knows their size, then doubles the chunk while one
takes less than about 20 ms (tiny samples amortise the per-chunk cost; slow samples still
spread over the workers early) and keeps it under about 8 MB (estimated from the first
sample of each column). When reductions fold whole blocks where the samples are computed,
chunk boundaries are aligned to blocks once chunks are a block long.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from typing import Any

from flowdata.reduce import BLOCK

__all__ = ["MAX_CHUNK", "ChunkSizer", "approx_bytes", "chunked", "chunked_index", "chunked_keyed"]

MAX_CHUNK = 4096
_TARGET_SECONDS, TARGET_BYTES = 0.02, 8 << 20


def chunked(
    items: Iterator[Any], size: Callable[[int], int], exclude: frozenset[int] = frozenset()
) -> Iterator[tuple[tuple[int, int], list[int], list[Any]]]:
    """Cuts items into runs of consecutive sample indices: ``(span, indices, items)``.

    ``size(start)`` gives the length of the chunk starting at sample ``start``. Samples
    whose index is in ``exclude`` (skipped in an earlier pass) are left out of ``indices``
    and ``items`` but stay inside ``span``, so blocks keep their boundaries.
    """
    start = 0
    while True:
        chunk = list(islice(items, size(start)))
        if not chunk:
            return
        stop = start + len(chunk)
        if exclude:
            kept = [(i, x) for i, x in zip(range(start, stop), chunk, strict=True) if i not in exclude]
            yield (start, stop), [i for i, _ in kept], [x for _, x in kept]
        else:
            yield (start, stop), list(range(start, stop)), chunk
        start = stop


def chunked_index(
    take: Callable[[list[int]], Sequence[Any]], start: int, stop: int, size: Callable[[int], int],
    exclude: frozenset[int] = frozenset(),
) -> Iterator[tuple[tuple[int, int], list[int], Sequence[Any]]]:
    """:func:`chunked` for the samples ``start..stop - 1`` of an index: each chunk's items
    read at once by ``take`` (a table's rows come as one record batch, never a dict per row)."""
    lo = start
    while lo < stop:
        hi = min(stop, lo + size(lo))
        indices = [i for i in range(lo, hi) if i not in exclude] if exclude else list(range(lo, hi))
        yield (lo, hi), indices, take(indices) if indices else []
        lo = hi


def chunked_keyed(
    pairs: Iterator[tuple[int, Any]], size: Callable[[int], int], exclude: frozenset[int] = frozenset()
) -> Iterator[tuple[tuple[int, int], list[int], list[Any]]]:
    """:func:`chunked` for ``(index, item)`` pairs whose indices increase by one but may
    jump (a source in shards, :mod:`flowdata.run.sources.sharded`): a chunk never spans a jump."""
    nxt = next(pairs, None)
    while nxt is not None:
        start = nxt[0]
        want = size(start)
        indices, items = [nxt[0]], [nxt[1]]
        nxt = None
        while len(indices) < want:
            nxt = next(pairs, None)
            if nxt is None or nxt[0] != indices[-1] + 1:
                break
            indices.append(nxt[0])
            items.append(nxt[1])
            nxt = None
        else:
            nxt = next(pairs, None)
        span = (start, indices[-1] + 1)
        if exclude:
            kept = [(i, x) for i, x in zip(indices, items, strict=True) if i not in exclude]
            indices, items = [i for i, _ in kept], [x for _, x in kept]
        yield span, indices, items


class ChunkSizer:
    """Chooses how many samples go in the next chunk (see the module docstring).

    Args:
        fixed: A size given by the caller (``chunk_size=``), used as it is.
        limit: The largest chunk.
        align: Align chunk boundaries to blocks once chunks are a block long.
    """

    def __init__(self, fixed: int | None, limit: int, align: bool = False):
        self.fixed = fixed
        self.limit = limit
        self.align = align
        self.size = fixed or 1

    def next_size(self, start: int) -> int:
        """The length of the chunk that starts at sample ``start``."""
        size = self.size
        if self.align and not self.fixed and size >= BLOCK:
            end = (start + size) // BLOCK * BLOCK
            if end <= start:
                end = (start // BLOCK + 1) * BLOCK
            size = end - start
        return size

    def observe(self, seconds: float, n: int, per_sample_bytes: int) -> None:
        """Learns from a computed chunk of ``n`` samples that took ``seconds``."""
        if self.fixed or n == 0:
            return
        cap = max(1, TARGET_BYTES // max(per_sample_bytes, 1))
        if seconds < _TARGET_SECONDS and n >= self.size:
            self.size = min(self.size * 2, self.limit)
        self.size = max(1, min(self.size, cap))


def approx_bytes(value: Any) -> int:
    """A cheap estimate of the memory a value holds (buffers of arrays and tensors included).

    It depends on the value alone, so every process estimates the same value alike (the
    folding rule relies on it).
    """
    if isinstance(value, (bytes, bytearray, str, memoryview)):
        return len(value)
    try:
        nbytes = getattr(value, "nbytes", None)  # numpy arrays, torch tensors (torch >= 2.1)
    except RuntimeError:  # a sparse tensor: the buffers of its indices and values
        layout = str(getattr(value, "layout", ""))
        parts = ("_indices", "_values") if layout == "torch.sparse_coo" else ("values",)
        nbytes = sum(approx_bytes(getattr(value, p)()) for p in parts)
    if isinstance(nbytes, int):
        return nbytes
    if isinstance(value, (list, tuple)) and value:
        return 56 + len(value) * approx_bytes(value[0])
    if isinstance(value, dict) and value:
        k, v = next(iter(value.items()))
        return 232 + len(value) * (approx_bytes(k) + approx_bytes(v))
    return sys.getsizeof(value, 64)
