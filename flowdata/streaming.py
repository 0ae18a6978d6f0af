"""Streaming groups in DataLoader workers: an ``IterableDataset`` sharded without duplicates.

A ``Sequential`` source, or any source with ``dataloader(..., streaming=True)``, is not
indexed: every worker of every rank calls the source itself and keeps the items whose
position ``i`` satisfies ``i % shards == shard``, where ``shard = rank * num_workers +
worker_id`` and ``shards = world_size * num_workers``. Each item is therefore delivered
exactly once per epoch, however many workers and ranks there are (a naive
``IterableDataset`` yields every item once *per worker*). Items should be light (paths,
rows): every shard reads all of them and computes only its own.

With ``shuffle=True`` each shard passes its items through a bounded shuffle buffer
(``shuffle_buffer`` items) seeded from (seed, epoch, shard). Batches are formed inside
the worker and computed column by column, like the map-style loader.

Order and resume: torch hands out batches from the workers in turn, so for a given
seed, number of workers and ranks the batch sequence is fixed. A saved position is the
number of batches served; on resume each worker skips its share of them by replaying
only the item bookkeeping (no per-sample node runs again). Resuming needs the same number
of workers and ranks, and is exact except within the last ``num_workers`` batches of an
epoch, where workers run out unevenly.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from flowdata.chunk import PassSpec
from flowdata.discover import Program, load_program
from flowdata.errors import NodeError, describe, user_traceback
from flowdata.loader import _NODES, Batch, compute_batch
from flowdata.node import Node
from flowdata.sample import sample_seed

__all__ = ["StreamDataset"]


class StreamDataset(IterableDataset[Batch]):
    """A streaming pass: the source is iterated in each worker, sharded by item position.

    Args:
        program: How to rebuild the nodes in a worker.
        spec: The pass (the group's last pass, which yields the outputs).
        whole: Whole values the pass and the source read.
        outputs: Output names.
        seed: Seed of the shuffle buffer and of ``sample_rng``.
        skip: Leave failing samples out instead of failing the batch.
        collate_fn: Optional user collate function over a list of per-sample dicts.
        batch_size: Samples per batch.
        drop_last: Drop each shard's last incomplete batch.
        shuffle: Pass items through a seeded shuffle buffer.
        shuffle_buffer: Items the buffer holds.
        rank: This process's rank.
        world_size: Number of ranks.
    """

    def __init__(
        self,
        program: Program,
        spec: PassSpec,
        whole: Mapping[str, Any],
        outputs: Sequence[str],
        *,
        seed: int,
        skip: bool,
        collate_fn: Callable[[list[dict[str, Any]]], Any] | None,
        batch_size: int,
        drop_last: bool,
        shuffle: bool,
        shuffle_buffer: int,
        rank: int,
        world_size: int,
        nodes: Mapping[str, Node] | None = None,
    ):
        self.program = program
        self.spec = spec
        self.whole = dict(whole)
        self.outputs = tuple(outputs)
        self.seed = seed
        self.skip = skip
        self.collate_fn = collate_fn
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.shuffle = shuffle
        self.shuffle_buffer = max(1, shuffle_buffer)
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self.skip_batches = 0  # batches already served (resume), across workers
        self.exclude: frozenset[int] = frozenset()  # samples skipped in an earlier pass
        self._nodes = nodes
        import pickle

        self._program_key = pickle.dumps(program)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_nodes"] = None
        return state

    def _get_nodes(self) -> Mapping[str, Node]:
        if self._nodes is None:
            nodes = _NODES.get(self._program_key)
            if nodes is None:
                nodes = _NODES[self._program_key] = load_program(self.program)
            self._nodes = nodes
        return self._nodes

    def _items(self) -> Iterator[Any]:
        source = self._get_nodes()[self.spec.group]
        kwargs = {p.name: self.whole[p.name] for p in source.params if p.name in self.whole}
        try:
            items = source.fn(**kwargs)
        except Exception as exc:
            raise NodeError(source.name, source.location, describe(exc)) from exc.with_traceback(
                user_traceback(exc.__traceback__)
            )
        return iter(items)

    def _shard(self) -> tuple[int, int, int, int]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        return self.rank * workers + worker, self.world_size * workers, worker, workers

    def batches(self) -> Iterator[tuple[list[int], list[Any]]]:
        """This shard's batches of (indices, items), before any computation."""
        shard, shards, _, _ = self._shard()
        exclude = self.exclude
        mine: Iterator[tuple[int, Any]] = (
            (i, x) for i, x in enumerate(self._items()) if i % shards == shard and i not in exclude
        )
        if self.shuffle:
            mine = _shuffled(mine, self.shuffle_buffer, random.Random(sample_seed(self.seed, self.epoch, -3 - shard)))
        indices: list[int] = []
        items: list[Any] = []
        for i, x in mine:
            indices.append(i)
            items.append(x)
            if len(indices) == self.batch_size:
                yield indices, items
                indices, items = [], []
        if indices and not self.drop_last:
            yield indices, items

    def __iter__(self) -> Iterator[Batch]:
        _, _, worker, workers = self._shard()
        # Batches are served by the workers in turn: this worker served every
        # `workers`-th of the first `skip_batches`.
        skip = len(range(worker, self.skip_batches, workers))
        for n, (indices, items) in enumerate(self.batches()):
            if n < skip:
                continue  # already served before the resume: not computed again
            yield compute_batch(self, indices, items, self.epoch)


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


def prepare_stream(
    run: Any,
    group: Any,
    pass_: Any,
    outputs: Sequence[str],
    *,
    seed: int,
    skip: bool,
    collate_fn: Callable[[list[dict[str, Any]]], Any] | None,
    batch_size: int = 1,
    drop_last: bool = False,
    shuffle: bool = False,
    shuffle_buffer: int = 1024,
    rank: int = 0,
    world_size: int = 1,
) -> tuple[StreamDataset, list[int], dict[str, Any]]:
    """Computes what the pass reads (statistics included) and makes the stream dataset."""
    whole = {n: run.value(n) for n in pass_.needs if n in run.graph.nodes or n in run.values}
    stats = {name: run.values[name] for g in run.plan.groups for name in g.collects if name in run.values}
    spec = PassSpec(group.source, pass_.number, pass_.computes, tuple(outputs), seed=seed)
    dataset = StreamDataset(
        run.program, spec, whole, outputs, seed=seed, skip=skip, collate_fn=collate_fn,
        batch_size=batch_size, drop_last=drop_last, shuffle=shuffle, shuffle_buffer=shuffle_buffer,
        rank=rank, world_size=world_size, nodes=run.graph.nodes,
    )
    dataset.exclude = frozenset(run._skips.get(group.source, ()))
    return dataset, [], stats
