"""The order of an epoch: which samples form each batch, decided in one place.

- :class:`EpochBatches` (map-style): a permutation seeded by (seed, epoch), sharded
  across ranks, cut into batches, in the main process. It is the only source of order, so
  batches are identical for any number of workers, and a resumed loader starts at batch
  ``k`` without computing the ``k`` batches before it. Under several ranks every rank gets
  the same number of batches of the same sizes (``even_batches``, the default), the last
  round padded with the epoch's first samples, as ``DistributedSampler`` pads.
- :func:`stream_batches` (streaming): every process forms the same global sequence of
  batches from the items -- consecutive items, or items passed through a bounded shuffle
  buffer seeded from (seed, epoch) -- and global batch ``b`` belongs to rank
  ``b % world_size``. Evened (``even``), the last, partial round of batches is re-cut as
  the indexed loader's is, once the end of the stream shows it is the last.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Sampler
from torch.utils.data.distributed import DistributedSampler

from flowdata.errors import check_rank, expect_int
from flowdata.loader.position import Position
from flowdata.sample import sample_seed

__all__ = ["EpochBatches", "EpochOrder", "EpochSampler", "cut_batches", "stream_batches"]


@dataclass(frozen=True)
class EpochOrder:
    """Which epoch, and everything that fixes the order of its batches: one value.

    Every part of the loader that orders samples (:class:`EpochBatches`,
    :func:`stream_batches`, the lanes of a stream in shards) reads it whole; a new epoch is
    a new value (:meth:`with_epoch`, :meth:`next_epoch`), never a field set from outside.

    Attributes:
        batch_size: Samples per batch.
        shuffle: Permute the samples every epoch (map-style), or pass a stream's items
            through a seeded shuffle buffer (and shuffle the order of its shards).
        seed: Seed of the shuffle (with the epoch).
        drop_last: Drop the last, partial round of batches (of each lane, in shards).
        even: Even out the ranks' batches by repeating a few samples (several ranks, no
            ``drop_last``; ``even_batches``).
        rank: This process's rank.
        world_size: Number of ranks.
        shuffle_buffer: Items a stream's shuffle buffer holds (at least 1).
        epoch: The epoch.
    """

    batch_size: int = 1
    shuffle: bool = False
    seed: int = 0
    drop_last: bool = False
    even: bool = True
    rank: int = 0
    world_size: int = 1
    shuffle_buffer: int = 1024
    epoch: int = 0

    def __post_init__(self) -> None:
        # A buffer of 0 items would hold nothing back: it is one item, as it always was.
        object.__setattr__(self, "shuffle_buffer", max(1, self.shuffle_buffer))

    def with_epoch(self, epoch: int) -> EpochOrder:
        """The same order in ``epoch``."""
        return dataclasses.replace(self, epoch=int(epoch))

    def next_epoch(self) -> EpochOrder:
        """The same order in the next epoch."""
        return self.with_epoch(self.epoch + 1)


class EpochIndices(list[int]):
    """A batch's sample indices, carrying the epoch to the worker (for ``sample_rng``) and
    how many of its last indices repeat a sample to even out the ranks (``padding``)."""

    epoch: int = 0
    padding: int = 0
    remainder: int = -1  # a stream's last round: its samples (see stream_batches)


class EpochBatches(Position, Sampler[list[int]]):
    """Which samples form each batch of an epoch, for one rank.

    Every epoch, the sample indices (minus those skipped in earlier passes) are permuted
    with a generator seeded from (seed, epoch) when ``shuffle``, then dealt to ranks in
    turn (rank ``r`` takes positions ``r, r + world_size, ...``), then cut into batches.

    - ``even`` (the default; it matters only for several ranks and no ``drop_last``): the
      permutation's full rounds (``batch_size * world_size`` samples each) are dealt in
      turn; the last, partial round of ``T`` samples is cut into ``world_size`` runs of
      ``ceil(T / world_size)``, rank ``r`` taking the ``r``-th, and the runs past the end
      are filled with the permutation's first samples. Every rank gets the same number of
      batches of the same sizes, ``ceil(len / world_size)`` samples in all (as
      ``DistributedSampler``), and fewer than ``world_size`` samples are repeated per epoch,
      each as one of the last rows of a rank's last batch (:meth:`padding`). The ranks'
      last batches, concatenated in rank order, are the last round's samples followed by
      the repeats: what Accelerate's ``gather_for_metrics`` truncates to ``T``
      (``remainder``).
    - not ``even``: every sample appears exactly once per epoch across ranks; ranks differ
      by at most one sample (so by at most one batch).
    - ``drop_last`` drops the last ``len % (batch_size * world_size)`` samples of the
      permutation, so that every rank gets the same number of full batches.

    Args:
        indices: The samples of every epoch (those skipped in earlier passes left out).
        order: The order, and the epoch to start with.

    It owns the epoch's position (:class:`~flowdata.loader.position.Position`): the state
    of a map-style loader is its epoch, batches served and what fixes the order.
    """

    def __init__(self, indices: Sequence[int], order: EpochOrder):
        expect_int("batch_size", order.batch_size, least=1, meaning="samples per batch")
        check_rank(order.rank, order.world_size)
        self.indices = torch.as_tensor(list(indices), dtype=torch.int64)
        self._contiguous = bool(torch.equal(self.indices, torch.arange(len(self.indices))))
        self.order = order
        self._start = 0  # first batch of the next iteration (resume)
        self.sampler: EpochSampler | None = None  # the sampler view frameworks drive (set by the loader)

    # --- the position ---------------------------------------------------------------------

    def identity(self) -> dict[str, Any]:
        o = self.order
        return {
            "streaming": False,
            "seed": o.seed,
            "shuffle": o.shuffle,
            "batch_size": o.batch_size,
            "num_samples": len(self.indices),
            "rank": o.rank,
            "world_size": o.world_size,
            "drop_last": o.drop_last,
            **({"even_batches": o.even} if o.world_size > 1 else {}),
        }

    def _batches(self) -> int | None:
        return len(self)

    def _begin(self, order: EpochOrder, served: int, saved: Mapping[str, Any]) -> None:
        self._start = served  # the permutation is recomputed from (seed, epoch): nothing else to keep

    def _mine(self) -> torch.Tensor:
        order = self.indices
        if self.order.shuffle:
            g = torch.Generator()
            g.manual_seed(sample_seed(self.order.seed, self.order.epoch, -1))
            perm = torch.randperm(len(order), generator=g)
            # With no sample skipped the indices are 0..n-1 and the permutation is the order.
            order = perm if self._contiguous else order[perm]
        if self.order.drop_last:
            # Every rank gets the same number of full batches (a DDP step waits for all
            # ranks): the last, partial round of batches is dropped for everyone.
            per_round = self.order.batch_size * self.order.world_size
            order = order[: len(order) - len(order) % per_round]
        elif self.evened:
            full, run = self._rounds()
            if run:
                # The last round in contiguous runs, rank r the r-th; positions past the end
                # wrap to the order's first samples (DistributedSampler's padding).
                lo = full + self.order.rank * run
                positions = torch.arange(lo, lo + run)
                positions = torch.where(positions < len(order), positions, (positions - len(order)) % len(order))
                return torch.cat([order[: full][self.order.rank :: self.order.world_size], order[positions]])
            return order[: full][self.order.rank :: self.order.world_size]
        return order[self.order.rank :: self.order.world_size]

    @property
    def evened(self) -> bool:
        """Whether the ranks are evened out by padding (several ranks, ``even``, no ``drop_last``)."""
        return self.order.even and self.order.world_size > 1 and not self.order.drop_last and len(self.indices) > 0

    def _rounds(self) -> tuple[int, int]:
        """Samples of the full rounds, and the length of each rank's run of the last round."""
        n = len(self.indices)
        tail = n % (self.order.batch_size * self.order.world_size)
        return n - tail, -(-tail // self.order.world_size)

    @property
    def remainder(self) -> int:
        """Samples of the last, partial round of batches across ranks (0: none): the
        ``remainder`` Accelerate's ``gather_for_metrics`` keeps of the ranks' last batches."""
        return len(self.indices) % (self.order.batch_size * self.order.world_size) if self.evened else 0

    def padded(self) -> int:
        """Samples this rank repeats per epoch to even out the ranks (the last rows of its
        last batch)."""
        if not self.evened:
            return 0
        full, run = self._rounds()
        return min(run, max(0, full + (self.order.rank + 1) * run - len(self.indices)))

    def padding(self, batch: int) -> int:
        """Rows at the end of batch ``batch`` of this rank's epoch that repeat a sample to
        even out the ranks: ``padded()`` for the last batch, 0 for the others."""
        return self.padded() if batch == len(self) - 1 else 0

    def batches(self) -> list[list[int]]:
        """Every batch of this epoch for this rank."""
        mine = self._mine().tolist()
        cut = [mine[i : i + self.order.batch_size] for i in range(0, len(mine), self.order.batch_size)]
        if self.order.drop_last and cut and len(cut[-1]) < self.order.batch_size:
            cut.pop()
        return cut

    def samples(self) -> int:
        """This rank's samples per epoch, counted without a permutation."""
        n = len(self.indices)
        if self.evened:
            full, run = self._rounds()
            return full // self.order.world_size + run
        if self.order.drop_last:
            n -= n % (self.order.batch_size * self.order.world_size)
        return max(0, -(-(n - self.order.rank) // self.order.world_size))

    def __len__(self) -> int:
        # A count needs no permutation (this runs at every epoch start, besides batches()).
        n = self.samples()
        return n // self.order.batch_size if self.order.drop_last else -(-n // self.order.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        start, self._start = self._start, 0
        cut = self.batches()
        for number in range(start, len(cut)):
            out = EpochIndices(cut[number])
            out.epoch = self.order.epoch
            out.padding = self.padding(number)
            yield out


class EpochSampler(DistributedSampler):  # type: ignore[type-arg]
    """This rank's samples of the current epoch, as a sampler: what ``loader.sampler`` is.

    Training frameworks look for a sampler to drive: Lightning calls ``set_epoch(epoch)``
    on ``loader.sampler`` (and ``loader.batch_sampler.sampler``) at every epoch, and, with
    several devices, replaces a sampler that is not a ``DistributedSampler`` by one. This
    one *is* a ``DistributedSampler`` (flowdata already deals every sample to exactly one
    rank), so it is kept, and its ``set_epoch`` selects the loader's epoch, as
    ``loader.set_epoch`` does. Iterating it gives the sample indices of this rank's epoch in
    batch order.
    """

    def __init__(self, batches: EpochBatches, on_set_epoch: Any = None):
        # DistributedSampler's own state is not used; set what its readers may look at.
        self.batches = batches
        self.on_set_epoch = on_set_epoch  # a weak reference to the loader's set_epoch
        self.dataset: Any = batches.indices
        self.shuffle = batches.order.shuffle
        self.seed = batches.order.seed
        self.drop_last = batches.order.drop_last

    @property
    def num_replicas(self) -> int:  # type: ignore[override]
        return self.batches.order.world_size

    @property
    def rank(self) -> int:  # type: ignore[override]
        return self.batches.order.rank

    @property
    def epoch(self) -> int:  # type: ignore[override]
        return self.batches.order.epoch

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch (the loader's ``set_epoch``)."""
        target = self.on_set_epoch() if self.on_set_epoch is not None else None
        if target is not None:
            target(epoch)
        else:
            self.batches.start_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        return (i for batch in self.batches.batches() for i in batch)

    def __len__(self) -> int:
        return self.batches.samples()


def stream_batches(
    items: Iterator[Any], order: EpochOrder, exclude: frozenset[int] = frozenset()
) -> Iterator[tuple[int, list[int], list[Any]]]:
    """One rank's batches of a streamed epoch: ``(number on this rank, indices, items)``.

    Samples in ``exclude`` (skipped in an earlier pass) are left out. Only the item
    bookkeeping happens here; nothing is computed. With ``order.even`` (several ranks, no
    ``drop_last``), every rank gets the same number of batches of the same sizes: the last
    round's batches are held until the stream ends, then cut as :class:`EpochBatches` cuts
    its last round; the indices of a batch with repeated samples are
    :class:`EpochIndices` whose ``padding`` counts them (their ``remainder`` is the last
    round's samples).
    """
    batch_size, world_size = order.batch_size, order.world_size
    stream: Iterator[tuple[int, Any]] = ((i, x) for i, x in enumerate(items) if i not in exclude)
    if order.shuffle:
        stream = _shuffled(stream, order.shuffle_buffer, random.Random(sample_seed(order.seed, order.epoch, -3)))
    cut = cut_batches(stream, batch_size, order.drop_last)
    if order.even and world_size > 1 and not order.drop_last:
        cut = _evened(cut, batch_size, world_size)
    for b, indices, batch in cut:
        if b % world_size == order.rank:
            yield b // world_size, indices, batch


def _evened(cut: Iterator[tuple[int, list[int], list[Any]]], batch_size: int,
            world_size: int) -> Iterator[tuple[int, list[int], list[Any]]]:
    """Global batches with the last, partial round re-cut into ``world_size`` runs of the
    same length, padded with the stream's first samples (see :class:`EpochBatches`)."""
    first: list[tuple[int, Any]] = []  # the padding: fewer than world_size samples are ever repeated
    pending: list[tuple[int, list[int], list[Any]]] = []
    for b, indices, items in cut:
        if len(first) < world_size:
            first.extend(list(zip(indices, items, strict=True))[: world_size - len(first)])
        pending.append((b, indices, items))
        if len(pending) == world_size and all(len(p[1]) == batch_size for p in pending):
            yield from pending  # a full round: as it is
            pending = []
    if not pending:
        return
    start = pending[0][0]
    tail = [(i, x) for _, indices, items in pending for i, x in zip(indices, items, strict=True)]
    size = len(tail)
    run = -(-size // world_size)
    for r in range(world_size):
        pairs = [tail[p] if p < size else first[(p - size) % len(first)] for p in range(r * run, (r + 1) * run)]
        out = EpochIndices(i for i, _ in pairs)
        out.padding = max(0, min(run, (r + 1) * run - size))
        out.remainder = size
        yield start + r, out, [x for _, x in pairs]


def cut_batches(
    pairs: Iterator[tuple[int, Any]], batch_size: int, drop_last: bool
) -> Iterator[tuple[int, list[int], list[Any]]]:
    """``(number, indices, items)`` of consecutive ``batch_size`` pairs; the last may be
    shorter, unless ``drop_last``."""
    n = 0
    indices: list[int] = []
    items: list[Any] = []
    for i, x in pairs:
        indices.append(i)
        items.append(x)
        if len(indices) == batch_size:
            yield n, indices, items
            n, indices, items = n + 1, [], []
    if indices and not drop_last:
        yield n, indices, items


def _shuffled(stream: Iterator[tuple[int, Any]], size: int, rng: random.Random) -> Iterator[tuple[int, Any]]:
    """A bounded shuffle buffer: fill it, then emit a random element for each new one."""
    buffer: list[tuple[int, Any]] = []
    for entry in stream:
        if len(buffer) < size:
            buffer.append(entry)
            continue
        j = rng.randrange(size)
        buffer[j], entry = entry, buffer[j]
        yield entry
    rng.shuffle(buffer)
    yield from buffer
