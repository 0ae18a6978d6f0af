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

import bisect
import os
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from flowdata.columns import Column, Stacked
from flowdata.errors import FlowdataError
from flowdata.reduce import BLOCK, fold_values
from flowdata.run import scratch
from flowdata.run.chunking import approx_bytes

__all__ = ["FOLD_BYTES", "KEEP_BYTES", "BlockError", "Folder", "KeptBlocks", "Piece", "UnitCutter", "ValueFoldError",
           "fold_block", "pieces_of"]

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


class ValueFoldError(BlockError):
    """The reducer could not fold one sample's value: the sample at ``index`` (the cause
    is the reducer's error, worded from the other samples' side)."""

    def __init__(self, block: int, index: int):
        super().__init__(block)
        self.index = index


OnBad = Callable[[int, BaseException], None]
"""Called with a sample index and the reducer's error when its value cannot be folded:
raises to stop, or returns to leave the value out."""


def _culprit(spec: Any, values: Sequence[Any]) -> tuple[int, BaseException] | None:
    """Which of a unit's values (that failed to fold together) is to blame, and the error.

    The values are folded one by one: the first that fails is to blame -- unless it is the
    second and the values after the first fold together, which makes the first one the odd
    value out (its error is then worded from the others' side).
    """
    reducer = spec.fresh()
    for p, v in enumerate(values):
        try:
            fold_values(reducer, [v])
        except Exception as exc:
            if p == 1 and len(values) > 2 and _folds(spec, values[1:3]):
                try:
                    fold_values(spec.fresh(), [values[1], values[0]])
                except Exception as first:
                    return 0, first
            return p, exc
    return None


def _folds(spec: Any, values: Sequence[Any]) -> bool:
    try:
        fold_values(spec.fresh(), values)
    except Exception:
        return False
    return True


class UnitCutter:
    """Folds one block's values, in index order, unit by unit (see the module docstring).

    A value the reducer cannot fold is found (by its sample index) and handed to
    ``on_bad``, which raises or lets the unit be folded without it; without ``on_bad`` it
    raises :class:`ValueFoldError`.
    """

    __slots__ = ("_block", "_bytes", "_indices", "_on_bad", "_pending", "_spec", "state")

    def __init__(self, spec: Any, block: int, on_bad: OnBad | None = None):
        self._spec = spec
        self._block = block
        self._on_bad = on_bad
        self.state: Any = None
        self._pending: list[Any] = []
        self._indices: list[int] = []
        self._bytes = 0

    def add_value(self, value: Any, nbytes: int, index: int) -> None:
        """Takes the next value of the block (sample ``index``)."""
        if self._pending and self._bytes + nbytes > FOLD_BYTES:
            self._flush()
        self._pending.append(value)
        self._indices.append(index)
        self._bytes += nbytes

    def add_run(self, values: Sequence[Any], indices: Sequence[int]) -> None:
        """Takes the next values of the block as one unit (a slice of a column whose unit
        boundaries :func:`fold_block` worked out from the values alone)."""
        self._flush()
        self._pending, self._indices = values, list(indices)  # type: ignore[assignment]
        self._flush()

    def add_unit(self, reducer: Any) -> None:
        """Takes the next unit, already folded (one large value)."""
        self._flush()
        self._merge(reducer)

    def finish(self) -> Any:
        """The block's reducer, or None when no value came."""
        self._flush()
        return self.state

    def _flush(self) -> None:
        while self._pending:
            try:
                unit = fold_values(self._spec.fresh(), self._pending)
            except Exception:
                found = _culprit(self._spec, self._pending)
                if found is None:
                    raise
                pos, cause = found
                if self._on_bad is None:
                    raise ValueFoldError(self._block, self._indices[pos]) from cause
                self._on_bad(self._indices[pos], cause)
                self._pending = list(self._pending)  # a column's run: its values one by one now
                del self._pending[pos], self._indices[pos]
                continue
            self._pending, self._indices, self._bytes = [], [], 0
            self._merge(unit)

    def _merge(self, reducer: Any) -> None:
        if self.state is None:
            self.state = reducer
        else:
            self.state.merge(reducer)


def fold_block(spec: Any, values: Sequence[Any], indices: Sequence[int], block: int) -> Any:
    """The reducer of one block's values (None when there are none); ``indices`` are theirs.

    Raises:
        ValueFoldError: a value the reducer cannot fold, by its sample index.
    """
    cutter = UnitCutter(spec, block)
    step = _column_step(spec, values)
    if step is not None:  # a column: its units cut without a look at each value
        for a in range(0, len(values), step):
            cutter.add_run(values[a : a + step], indices[a : a + step])
        return cutter.finish()
    for v, i in zip(values, indices, strict=True):
        cutter.add_value(v, approx_bytes(v), i)
    return cutter.finish()


def _column_step(spec: Any, values: Sequence[Any]) -> int | None:
    """How many values of a column make one unit, or None for values to cut one by one.

    Units are cut by the values alone (:class:`UnitCutter`), so a column must be cut as its
    values would be: the rows of a stacked tensor or array all have the same size, so a unit
    is ``FOLD_BYTES // size`` of them (or one, for a row that alone reaches it); a reducer
    whose merge is exact (``exact = True``) gives the same result however its values are
    grouped, so any values (a column or a list) are one unit for it.
    """
    if not len(values):
        return None
    if getattr(spec.reducer.cls, "exact", False):
        return len(values)
    if not isinstance(values, Column):
        return None
    if isinstance(values, Stacked):
        size = approx_bytes(values[0])
        return max(1, FOLD_BYTES // size) if 0 < size < FOLD_BYTES else 1
    return None


def pieces_of(spec: Any, span: tuple[int, int], indices: Sequence[int], values: Sequence[Any]) -> list[Piece]:
    """What a chunk covering ``span`` hands back for one reduction (see :data:`Piece`).

    ``indices`` are the surviving samples of the chunk, ascending; ``values`` theirs.
    """
    start, stop = span
    pieces: list[Piece] = []
    pos, n = 0, len(indices)
    # A reducer whose merge is exact (integer counts, min/max: ``exact = True`` on its
    # class) gives the same result however blocks are grouped: the chunk's whole blocks are
    # merged here, into its first one (the others travel as empty blocks), so the main
    # process merges one reducer per chunk instead of one per block.
    exact = bool(getattr(spec.reducer.cls, "exact", False))
    into: Any = None
    first, last = -(-start // BLOCK), stop // BLOCK  # the whole blocks: first..last - 1
    whole = _whole_blocks(spec, indices, values, first, last) if exact and last > first else _NONE
    at_once = _blocks_at_once(spec, indices, values, first, last) if not exact and last > first else {}
    for b in range(start // BLOCK, -(-stop // BLOCK)):
        lo, hi = b * BLOCK, (b + 1) * BLOCK
        end = pos
        while end < n and indices[end] < hi:
            end += 1
        try:
            if lo >= start and hi <= stop and whole is not _NONE:
                pieces.append(("block", b, whole if b == first else None))  # folded at once, below
            elif b in at_once:
                pieces.append(("block", b, at_once[b]))
            elif lo >= start and hi <= stop:
                state = fold_block(spec, values[pos:end], indices[pos:end], b)
                if exact and state is not None:
                    if into is None:
                        into = state
                    else:
                        into.merge(state)
                        state = None
                pieces.append(("block", b, state))
            else:
                for i, v in zip(range(pos, end), values[pos:end], strict=True):  # a column's slice: only its rows made
                    if approx_bytes(v) >= FOLD_BYTES:
                        pieces.append(("unit", indices[i], fold_values(spec.fresh(), [v])))
                    else:
                        pieces.append(("value", indices[i], v))
        except ValueFoldError:
            raise
        except Exception as exc:
            raise BlockError(b) from exc
        pos = end
    return pieces


_NONE: Any = object()


def _whole_blocks(spec: Any, indices: Sequence[int], values: Sequence[Any], first: int, last: int) -> Any:
    """The values of blocks ``first..last - 1`` of an exact reducer folded at once (one
    call for a chunk's column), or ``_NONE`` when that fails: the blocks are then folded one
    by one, which names the block or the sample at fault."""
    a, z = bisect.bisect_left(indices, first * BLOCK), bisect.bisect_left(indices, last * BLOCK)
    if z == a:
        return None
    try:
        return fold_block(spec, values[a:z], indices[a:z], first)
    except Exception:
        return _NONE


def _blocks_at_once(spec: Any, indices: Sequence[int], values: Sequence[Any], first: int, last: int) -> dict[int, Any]:
    """Blocks ``first..last - 1`` of a stacked column, each folded into its own reducer by
    the reducer's ``fold_blocks`` in one call (each the block's reducer as :func:`fold_block`
    makes it, bit for bit); empty when the reducer has none, a block lacks a sample (skipped)
    or a block would be cut into several units."""
    if not isinstance(values, Stacked) or not hasattr(spec.reducer.cls, "fold_blocks"):
        return {}
    a, z = bisect.bisect_left(indices, first * BLOCK), bisect.bisect_left(indices, last * BLOCK)
    if z - a != (last - first) * BLOCK or _column_step(spec, values) < BLOCK:  # type: ignore[operator]
        return {}
    try:
        states = spec.fresh().fold_blocks(values[a:z], BLOCK)
    except Exception:  # folded block by block instead, which names the block or sample at fault
        return {}
    return {} if states is None else dict(zip(range(first, last), states, strict=True))


KEEP_BYTES = 256 << 20
"""Bytes of block states :class:`KeptBlocks` holds in memory; the later ones wait on disk."""


class KeptBlocks:
    """Block reducers kept in order, for a merge later. Past ``budget`` bytes of state,
    the later ones wait on disk as their ``state_dict`` (no pickle) in a scratch folder and
    are restored, bit for bit, when read back.

    Args:
        budget: Bytes of states held in memory (default :data:`KEEP_BYTES`).
    """

    def __init__(self, budget: int | None = None):
        self.budget = KEEP_BYTES if budget is None else budget
        self._held: list[Any] = []
        self._bytes = 0
        self._folder: str | None = None
        self._spilled: list[tuple[type[Any], str]] = []

    def append(self, state: Any) -> None:
        """Keeps the next block's reducer."""
        size = sum(int(getattr(a, "nbytes", 0)) for a in state.state_dict().values())
        if not self._spilled and self._bytes + size <= self.budget:
            self._held.append(state)
            self._bytes += size
            return
        from flowdata.run.caching.codec import encode_value

        if self._folder is None:
            self._folder = scratch.make("blocks")
            weakref.finalize(self, scratch.remove, self._folder)
        path = os.path.join(self._folder, f"{len(self._spilled)}.state")
        with open(path, "wb") as f:
            f.write(encode_value(state.state_dict()))
        self._spilled.append((type(state), path))

    def __len__(self) -> int:
        return len(self._held) + len(self._spilled)

    def __iter__(self) -> Iterator[Any]:
        """The reducers in the order they came (those on disk restored one at a time)."""
        from flowdata.run.caching.codec import decode_value

        yield from self._held
        for cls, path in self._spilled:
            with open(path, "rb") as f:
                yield cls.from_state_dict(decode_value(f.read()))
            os.remove(path)


class Folder:
    """Completes one reduction over a pass in the main process; chunks arrive in order.

    ``on_bad`` is told of a loose value the reducer cannot fold (see :class:`UnitCutter`).
    With ``keep_blocks``, the blocks' reducers are kept in order (:attr:`blocks`) instead of
    merged into :attr:`total`: a rank that merges them later into the total of the ranks
    before it (see :mod:`~flowdata.run.distributed.ranks`).
    """

    def __init__(self, spec: Any, keep_blocks: bool = False):
        self.spec = spec
        self.blocks: KeptBlocks | None = KeptBlocks() if keep_blocks else None
        self.on_bad: OnBad | None = None  # set by the consumer that applies on_error
        self.total = spec.fresh()
        check = getattr(self.total, "check_samples", None)
        if check is not None:  # options given by whole values, unknown when the graph was built
            check()
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
                cutter = self._open[at // BLOCK] = UnitCutter(self.spec, at // BLOCK, self.on_bad)
            try:
                if kind == "unit":
                    cutter.add_unit(x)
                else:
                    cutter.add_value(x, approx_bytes(x), at)
            except (BlockError, FlowdataError):  # FlowdataError: what on_bad raised
                raise
            except Exception as exc:
                raise BlockError(at // BLOCK) from exc
        self._covered = max(self._covered, span[1])
        self._advance(self._covered // BLOCK)

    @property
    def open_from(self) -> int:
        """The first sample index whose block is not folded into the total yet."""
        return self._next * BLOCK

    def _advance(self, complete: int) -> None:
        while self._next < complete:
            b = self._next
            try:
                if b in self._whole:
                    state = self._whole.pop(b)
                elif b in self._open:
                    state = self._open.pop(b).finish()
                else:
                    # Every sample of the block was skipped, or the indices jump over it (a
                    # source in shards): go on at the next block that has values.
                    later = [k for k in (*self._whole, *self._open) if k > b]
                    self._next = min(min(later, default=complete), complete)
                    continue
                if state is not None:
                    if self.blocks is not None:
                        self.blocks.append(state)
                    else:
                        self.total.merge(state)
            except (BlockError, FlowdataError):  # FlowdataError: what on_bad raised
                raise
            except Exception as exc:
                raise BlockError(b) from exc
            self._next += 1

    def finish(self) -> Any:
        """Folds the last, partial block and returns the reducer holding everything (with
        ``keep_blocks``: an empty one; the blocks are in :attr:`blocks`)."""
        last = max([-(-self._covered // BLOCK), *(b + 1 for b in self._whole), *(b + 1 for b in self._open)])
        self._advance(last)
        return self.total

    def merged_into(self, total: Any) -> Any:
        """``total`` with what this folder holds merged in, block after block; returns it."""
        for state in self.blocks if self.blocks is not None else [self.total]:
            total.merge(state)
        return total
