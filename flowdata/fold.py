"""Completing reductions in the main process, in sample order.

Chunks arrive in sample order, each carrying, per reduction, one reducer for every fold
block that lies wholly inside it (folded where the samples were computed) and the
*loose* values of the samples outside those blocks. A :class:`Folder` folds loose values
into their blocks as they complete — with the same function a worker uses — and merges
finished blocks into the total strictly in block order. The arithmetic is therefore the
same whatever the chunking or the number of workers: results are bitwise identical.
"""

from __future__ import annotations

from typing import Any

from flowdata.chunk import ChunkResult, FoldSpec
from flowdata.reduce import BLOCK, fold_values

__all__ = ["Folder"]


class Folder:
    """Accumulates one reduction over a pass; :meth:`result` gives the node's value."""

    def __init__(self, spec: FoldSpec):
        self.spec = spec
        self.total = spec.fresh()
        self._next = 0  # the next block to merge into the total
        self._ready: dict[int, Any] = {}
        self._pending: dict[int, list[Any]] = {}

    def add(self, chunk: ChunkResult) -> None:
        """Takes the folds and loose values of one chunk (chunks in sample order)."""
        for b, reducer in chunk.folds.get(self.spec.node, ()):
            self._ready[b] = reducer
        indices, values = chunk.loose.get(self.spec.node, ((), ()))
        for i, value in zip(indices, values, strict=True):
            self._pending.setdefault(i // BLOCK, []).append(value)
        # A block is complete once a chunk has covered its last index (skipped samples
        # leave gaps, so blocks are not counted by their number of values).
        for b in sorted(self._pending):
            if (b + 1) * BLOCK <= chunk.span[1]:
                self._ready[b] = fold_values(self.spec.fresh(), self._pending.pop(b))
        self._advance()

    def _advance(self) -> None:
        while self._next in self._ready:
            self.total.merge(self._ready.pop(self._next))
            self._next += 1

    def finish(self) -> Any:
        """Folds the last, partial block and returns the reducer holding everything."""
        for b in sorted(self._pending):
            self._ready[b] = fold_values(self.spec.fresh(), self._pending.pop(b))
        self._advance()
        return self.total
