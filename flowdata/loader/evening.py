"""Evening out a stream in shards between ranks, at run time.

Under a process group each rank reads only its own lanes of a stream in shards
(:mod:`flowdata.loader.lanes`), whose lengths are not known ahead: ranks may get different
numbers of batches, and a step all ranks take together (DDP's gradient all-reduce,
Accelerate's ``gather``) would then pair one rank's step with another's next epoch, or
wait for ever. With ``even_batches`` (the default) the loader evens the ranks out as it
goes (:class:`Evening`):

- **One exchange per step.** Before each batch is delivered, the ranks exchange one small
  tensor (``4 x world_size`` integers, one ``all_reduce(MAX)`` on a gloo group of
  flowdata's own, never the training's): for every rank whether it has a batch, its rows,
  whether it holds a batch to repeat, and whether it failed.
- **Padding.** While any rank has a batch, every rank delivers one of the largest size:
  a rank whose batch is shorter repeats its rows (from the first on, cyclically) at its
  end; a rank with none left delivers a padding batch, the rows of the first batch it
  served this epoch repeated. When no rank has a batch, all stop together. So every rank
  takes the same number of steps with the same batch sizes, and every real row is still
  delivered exactly once across the ranks.
- **A rank with nothing to repeat** (it served no batch yet this epoch, e.g. after a
  resume past its last batch, or a rank whose lanes are empty) receives the batch of the
  lowest rank that has one at that step, by one broadcast, which every rank joins only at
  such a step (all ranks see who needs one).
- **Marking.** Padding rows are the last rows of a batch, counted like an indexed source's:
  ``loader.padding(b)`` and ``report.padded``. Accelerate's ``remainder`` is 0 when nothing
  was padded, the real rows of the last step when only the last step was padded and its
  real rows come first in rank order (what ``gather_for_metrics()`` keeps), and -1
  otherwise: ``gather_for_metrics()`` then returns the padding too (Accelerate logs it),
  and the rows to keep are those ``loader.padding(b)`` marks real.
- **Failures.** A rank whose loader raises tells the others in the next exchange, and they
  raise a ``RankError`` naming it, instead of waiting for it.

Padding repeats rows of an already collated batch: tensors and numpy arrays (batch first),
dicts per key, lists and tuples of leaves as rows (lists of batched tensors per field).
Anything else cannot be repeated and is a ``FlowdataError`` naming its type.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

from flowdata.errors import FlowdataError, RankError, describe
from flowdata.loader.wire import Batch
from flowdata.run import Ranks, exchange, step_group

__all__ = ["Evening", "repeat_rows", "rows_of"]

_WHERE = "evening out the ranks' batches of source '{}'"


class Evening:
    """Evens out one loader's stream in shards between the ranks (see the module docstring).

    Batches that repeat rows only carry no lane; the loader's position counts them as the
    batches served that no lane served (``padding_batches`` of ``state_dict()``).

    Attributes:
        remainder: What Accelerate's ``gather_for_metrics()`` keeps of the last step (see
            the module docstring); known once the epoch's last step has been exchanged.
    """

    def __init__(self, ranks: Ranks, source: str):
        self.rank = ranks.rank
        self.world_size = ranks.world_size
        self.source = source
        self.ranks = Ranks(ranks.rank, ranks.world_size, step_group())
        self.remainder = 0
        self._ended = True

    # --- one epoch ------------------------------------------------------------------------

    def begin(self) -> None:
        """An epoch starts: from here on, a failure on this rank is told to the others."""
        self._ended = False
        self.remainder = 0

    def batches(self, it: Iterator[Batch]) -> Iterator[Batch]:
        """``it``'s batches, evened out: as many on every rank, of the same sizes."""
        self._ended = False
        try:
            yield from self._evened(it)
        except GeneratorExit:  # the epoch was left (on every rank, or the training is broken anyway)
            self._ended = True
            raise

    def _evened(self, it: Iterator[Batch]) -> Iterator[Batch]:
        stash: Batch | None = None
        padded_before = False  # a step before the last one exchanged padded a rank
        last: list[int] = []
        while True:
            try:
                batch = next(it, None)
                if batch is not None and batch.error is not None:
                    raise batch.error.with_traceback(None)
                rows = rows_of(batch.data) if batch is not None else 0
            except BaseException:
                self.fail()
                raise
            sizes, stashed = self.exchange(batch is not None, rows, stash is not None)
            has = [s >= 0 for s in sizes]
            if not any(has):
                self._ended = True
                self.remainder = _remainder(last, padded_before)
                return
            if last and max(last) * len(last) != sum(max(0, s) for s in last):
                padded_before = True
            last = [max(0, s) for s in sizes]
            target = max(last)
            needers = [r for r in range(self.world_size) if last[r] == 0 and not stashed[r] and target > 0]
            if needers:  # ranks with nothing to repeat: the lowest rank with rows gives its batch
                donor = next(r for r in range(self.world_size) if last[r] > 0)
                given = self._give(donor, batch if self.rank == donor else None)
                if self.rank in needers:
                    stash = given
            if batch is not None:
                if stash is None and rows > 0:
                    stash = _kept(batch)
                if rows < target:
                    batch = _padded(batch, stash if rows == 0 else batch, target - rows, self.source)
                yield batch
            else:
                assert stash is not None or target == 0
                yield _padding_batch(stash, target, self.source)

    def fail(self) -> None:
        """Tells the other ranks, in the exchange they wait in, that this rank failed (once;
        nothing once the epoch ended)."""
        if self._ended:
            return
        self._ended = True
        try:
            self.exchange(False, 0, False, failed=True)
        except Exception:  # the others are gone too: this rank raises its own error anyway
            pass

    # --- the exchanges --------------------------------------------------------------------

    def exchange(self, has: bool, rows: int, stashed: bool, failed: bool = False) -> tuple[list[int], list[bool]]:
        """Every rank's rows (-1: no batch) and whether it holds a batch to repeat."""
        import torch
        import torch.distributed as dist

        w, r = self.world_size, self.rank
        mine = torch.zeros(4 * w, dtype=torch.int64)
        mine[r] = 1 if has else 0
        mine[w + r] = rows
        mine[2 * w + r] = 1 if stashed else 0
        mine[3 * w + r] = 1 if failed else 0
        where = _WHERE.format(self.source)
        with exchange(self.ranks, where):
            dist.all_reduce(mine, op=dist.ReduceOp.MAX, group=self.ranks.group)
        every = [int(x) for x in mine.tolist()]
        lost = [p for p in range(w) if every[3 * w + p] and p != r]
        if lost and not failed:
            self._ended = True
            raise RankError(lost[0], w, where, "its loader raised an error while the epoch was iterated")
        sizes = [every[w + p] if every[p] else -1 for p in range(w)]
        return sizes, [bool(every[2 * w + p]) for p in range(w)]

    def _give(self, donor: int, batch: Batch | None) -> Batch:
        """The donor's batch, on every rank (one broadcast of its pickle)."""
        from flowdata.run import FAILED, OK

        status, message = OK, b""
        if batch is not None:
            try:
                message = pickle.dumps((batch.data, batch.indices), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:
                status, message = FAILED, (
                    f"its batch, to repeat on a rank that has none, cannot be pickled ({describe(exc)})").encode()
        where = _WHERE.format(self.source)
        with exchange(self.ranks, where):
            status, message = self.ranks._broadcast(donor, status, message)
        if status != OK:
            self._ended = True
            raise RankError(donor, self.world_size, where, message.decode(errors="replace"),
                            fix="return picklable values from the nodes and collate_fn, or build the loader with "
                                "even_batches=False")
        data, indices = pickle.loads(message)
        return Batch(data, list(indices), [], None, {}, f"rank {donor}")


def _remainder(last: list[int], padded_before: bool) -> int:
    """Accelerate's ``remainder`` of an epoch whose last step had ``last`` real rows per rank."""
    if not last:
        return 0
    target = max(last)
    if all(s == target for s in last):
        return -1 if padded_before else 0
    shorter = [k for k, s in enumerate(last) if s < target]
    prefix = all(last[k] == 0 for k in shorter[1:])  # full ranks, then one partial, then empty ones
    return sum(last) if prefix and not padded_before and shorter[0] + len(shorter) == len(last) else -1


def _kept(batch: Batch) -> Batch:
    """A copy of a batch's data and indices, to repeat later (the training loop may change the
    tensors it is given in place)."""
    return Batch(_copied(batch.data), list(batch.indices), [], None, {}, batch.worker)


def _copied(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, dict):
        return {k: _copied(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        items = [_copied(v) for v in x]
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
    copy = getattr(x, "copy", None)
    return copy() if callable(copy) else x


def _padded(batch: Batch, source: Batch | None, extra: int, name: str) -> Batch:
    """``batch`` with ``extra`` rows of ``source`` repeated at its end (counted as padding)."""
    assert source is not None
    n = rows_of(source.data)
    take = [k % n for k in range(extra)]
    own = rows_of(batch.data)
    if own == 0:  # an empty batch (every sample skipped): the repeated rows only
        data = repeat_rows(source.data, take, name)
    elif source is batch:
        data = repeat_rows(batch.data, list(range(own)) + take, name)
    else:
        data = _joined(batch.data, repeat_rows(source.data, take, name), name)
    batch.data = data
    batch.indices = list(batch.indices) + [source.indices[k] for k in take if k < len(source.indices)]
    batch.padding += extra
    return batch


def _padding_batch(stash: Batch | None, rows: int, name: str) -> Batch:
    """A batch of ``rows`` rows of ``stash`` repeated, all of them padding."""
    if stash is None:  # every rank's batch was empty: an empty one
        return Batch({}, [], [], None, {}, "", padding=0)
    n = rows_of(stash.data)
    take = [k % n for k in range(rows)] if n else []
    indices = [stash.indices[k] for k in take if k < len(stash.indices)]
    return Batch(repeat_rows(stash.data, take, name), indices, [], None, {}, "", padding=rows)


# --- rows of a collated batch ---------------------------------------------------------------


def _cannot(x: Any, name: str, why: str) -> FlowdataError:
    return FlowdataError(
        f"source '{name}' is a stream in shards evened out between the ranks by repeating rows of a collated "
        f"batch, but the batch holds a {type(x).__name__} whose rows cannot be repeated ({why})\n"
        "  fix: collate into tensors, numpy arrays, dicts, lists or tuples (batch first), or build the loader "
        "with even_batches=False (ranks then get different numbers of batches)"
    )


def _is_leaf(x: Any) -> bool:
    import torch

    return not isinstance(x, (torch.Tensor, dict, list, tuple)) and not hasattr(x, "shape")


def rows_of(x: Any) -> int:
    """The number of rows of a collated batch (its first batched value's)."""
    import torch

    if isinstance(x, torch.Tensor) or hasattr(x, "shape"):
        shape = tuple(x.shape)
        return int(shape[0]) if shape else 0
    if isinstance(x, dict):
        for v in x.values():
            return rows_of(v)
        return 0
    if isinstance(x, (list, tuple)):
        if not x or all(_is_leaf(v) for v in x):
            return len(x)
        return rows_of(x[0])
    return 0


def repeat_rows(x: Any, rows: list[int], name: str = "?") -> Any:
    """The rows ``rows`` of a collated batch, in that order (see the module docstring)."""
    import torch

    if isinstance(x, torch.Tensor):
        if x.dim() == 0:
            raise _cannot(x, name, "a tensor with no batch dimension")
        return x[torch.tensor(rows, dtype=torch.long)] if rows else x[:0]
    if isinstance(x, dict):
        return {k: repeat_rows(v, rows, name) for k, v in x.items()}
    if hasattr(x, "shape") and hasattr(x, "take"):  # a numpy array
        if not tuple(x.shape):
            raise _cannot(x, name, "an array with no batch dimension")
        return x.take(rows, axis=0)
    if isinstance(x, (list, tuple)):
        if all(_is_leaf(v) for v in x):
            picked = [x[k] for k in rows]
        else:  # fields, each batched (default_collate of tuples)
            picked = [repeat_rows(v, rows, name) for v in x]
        return type(x)(*picked) if hasattr(x, "_fields") else type(x)(picked)
    raise _cannot(x, name, "not a tensor, array, dict, list or tuple")


def _joined(a: Any, b: Any, name: str) -> Any:
    """Two collated batches of the same structure, rows of ``a`` then rows of ``b``."""
    import torch

    if isinstance(a, torch.Tensor):
        return torch.cat([a, b])
    if isinstance(a, dict):
        return {k: _joined(v, b[k], name) for k, v in a.items()}
    if hasattr(a, "shape") and hasattr(a, "take"):
        import numpy as np

        return np.concatenate([a, b])
    if isinstance(a, (list, tuple)):
        if all(_is_leaf(v) for v in a) and all(_is_leaf(v) for v in b):
            joined = list(a) + list(b)
        else:
            joined = [_joined(u, v, name) for u, v in zip(a, b, strict=True)]
        return type(a)(*joined) if hasattr(a, "_fields") else type(a)(joined)
    raise _cannot(a, name, "not a tensor, array, dict, list or tuple")
