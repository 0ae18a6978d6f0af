"""Folding reductions: fixed blocks, byte-bounded units, merged in a fixed order.

The arithmetic of a reduction is fixed by the data alone, never by chunking, executor or
worker count, so results are bitwise identical however a pass runs:

- samples are grouped in blocks of :data:`~flowdata.reduce.BLOCK` consecutive indices;
- inside a block, the surviving values are cut greedily, in index order, into *units* of
  at most :data:`FOLD_BYTES` (a value that alone reaches ``FOLD_BYTES`` is a unit of its
  own); each unit is folded into a fresh reducer;
- a block's reducer is its first unit's, with the later units merged into it in order;
- the result is a fresh reducer with the blocks merged into it in order. A block whose
  samples were all skipped is simply empty.

Where it runs: the kernel folds every block lying wholly inside its chunk, and every unit
of one large value, where the samples were computed (only reducers travel back). The other
values -- of blocks cut by chunk boundaries, as with small first chunks or a
``Sequential`` group -- travel as *loose* values, and the :class:`Folder` in the main
process cuts them into units by the same rule as they arrive. It never holds more than
about ``FOLD_BYTES`` of values per reduction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from flowdata.reduce import BLOCK, fold_values
from flowdata.run.chunking import approx_bytes

__all__ = ["FOLD_BYTES", "BlockError", "Folder", "Piece", "UnitCutter", "fold_block", "pieces_of"]

FOLD_BYTES = 8 << 20
"""Bytes of values folded at once at most. Fixed: changing it changes large values' results."""

Piece = tuple[str, int, Any]
"""What a chunk hands back for one reduction, in index order: ``("block", b, reducer or
None)`` for a whole block, ``("unit", i, reducer)`` for one large value folded alone, or
``("value", i, value)`` for a loose value."""


class BlockError(Exception):
    """A reducer raised while folding a block; the reducer's error is ``__cause__``."""

    def __init__(self, block: int):
        super().__init__(block)
        self.block = block

    @property
    def samples(self) -> str:
        """The block's sample indices, for messages."""
        return f"samples {self.block * BLOCK}..{self.block * BLOCK + BLOCK - 1}"


class UnitCutter:
    """Folds one block's values, in index order, unit by unit (see the module docstring)."""

    __slots__ = ("_bytes", "_pending", "_spec", "state")

    def __init__(self, spec: Any):
        self._spec = spec
        self.state: Any = None
        self._pending: list[Any] = []
        self._bytes = 0

    def add_value(self, value: Any, nbytes: int) -> None:
        """Takes the next value of the block."""
        if self._pending and self._bytes + nbytes > FOLD_BYTES:
            self._flush()
        self._pending.append(value)
        self._bytes += nbytes

    def add_unit(self, reducer: Any) -> None:
        """Takes the next unit, already folded (one large value)."""
        self._flush()
        self._merge(reducer)

    def finish(self) -> Any:
        """The block's reducer, or None when no value came."""
        self._flush()
        return self.state

    def _flush(self) -> None:
        if self._pending:
            unit = fold_values(self._spec.fresh(), self._pending)
            self._pending, self._bytes = [], 0
            self._merge(unit)

    def _merge(self, reducer: Any) -> None:
        if self.state is None:
            self.state = reducer
        else:
            self.state.merge(reducer)


def fold_block(spec: Any, values: Iterable[Any]) -> Any:
    """The reducer of one block's values (None when there are none)."""
    cutter = UnitCutter(spec)
    for v in values:
        cutter.add_value(v, approx_bytes(v))
    return cutter.finish()


def pieces_of(spec: Any, span: tuple[int, int], indices: Sequence[int], values: Sequence[Any]) -> list[Piece]:
    """What a chunk covering ``span`` hands back for one reduction (see :data:`Piece`).

    ``indices`` are the surviving samples of the chunk, ascending; ``values`` theirs.
    """
    start, stop = span
    pieces: list[Piece] = []
    pos, n = 0, len(indices)
    for b in range(start // BLOCK, -(-stop // BLOCK)):
        lo, hi = b * BLOCK, (b + 1) * BLOCK
        end = pos
        while end < n and indices[end] < hi:
            end += 1
        try:
            if lo >= start and hi <= stop:
                pieces.append(("block", b, fold_block(spec, values[pos:end])))
            else:
                for i in range(pos, end):
                    v = values[i]
                    if approx_bytes(v) >= FOLD_BYTES:
                        pieces.append(("unit", indices[i], fold_values(spec.fresh(), [v])))
                    else:
                        pieces.append(("value", indices[i], v))
        except Exception as exc:
            raise BlockError(b) from exc
        pos = end
    return pieces


class Folder:
    """Completes one reduction over a pass in the main process; chunks arrive in order."""

    def __init__(self, spec: Any):
        self.spec = spec
        self.total = spec.fresh()
        self._next = 0  # the next block to merge into the total
        self._covered = 0  # every sample index below this has been seen (or skipped)
        self._whole: dict[int, Any] = {}
        self._open: dict[int, UnitCutter] = {}

    def add(self, pieces: Iterable[Piece], span: tuple[int, int]) -> None:
        """Takes one chunk's pieces; ``span`` is the range of sample indices it covered."""
        for kind, at, x in pieces:
            if kind == "block":
                self._whole[at] = x
                continue
            cutter = self._open.get(at // BLOCK)
            if cutter is None:
                cutter = self._open[at // BLOCK] = UnitCutter(self.spec)
            try:
                if kind == "unit":
                    cutter.add_unit(x)
                else:
                    cutter.add_value(x, approx_bytes(x))
            except Exception as exc:
                raise BlockError(at // BLOCK) from exc
        self._covered = max(self._covered, span[1])
        self._advance(self._covered // BLOCK)

    def _advance(self, complete: int) -> None:
        while self._next < complete:
            b = self._next
            try:
                if b in self._whole:
                    state = self._whole.pop(b)
                elif b in self._open:
                    state = self._open.pop(b).finish()
                else:
                    state = None  # every sample of the block was skipped
                if state is not None:
                    self.total.merge(state)
            except Exception as exc:
                raise BlockError(b) from exc
            self._next += 1

    def finish(self) -> Any:
        """Folds the last, partial block and returns the reducer holding everything."""
        last = max([-(-self._covered // BLOCK), *(b + 1 for b in self._whole), *(b + 1 for b in self._open)])
        self._advance(last)
        return self.total
