"""Streaming groups in DataLoader workers: an ``IterableDataset`` that splits batches, not items.

A ``Sequential`` source, or any source with ``dataloader(..., streaming=True)``, is not
indexed: every worker calls the source itself and forms the same global sequence of
batches — consecutive items, or items passed through a bounded shuffle buffer seeded from
(seed, epoch) when ``shuffle=True``. Global batch ``b`` belongs to rank ``b % world_size``;
a rank's ``j``-th batch is computed by worker ``j % num_workers`` only, and torch hands
batches out from the workers in turn, so every sample is delivered exactly once per epoch
and a rank receives its batches **in order**, identical for any number of workers (a naive
``IterableDataset`` yields every item once *per worker*). Items should be light (paths,
rows): every worker reads all of them and computes only its own batches.

Resume: a saved position is the number of batches a rank has served; on resume, workers
skip those batches by replaying only the item bookkeeping (no per-sample node runs
again), with any number of workers. The ranks must be the same.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from flowdata.chunk import PassSpec
from flowdata.discover import Program
from flowdata.errors import NodeError, describe, user_traceback
from flowdata.loader import Batch, ProgramNodes, compute_batch, compute_columns
from flowdata.node import Node
from flowdata.sample import sample_seed

__all__ = ["StreamDataset"]


class StreamDataset(ProgramNodes, IterableDataset[Any]):
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
        self.emit_batches = False  # flowdata.DataLoader asks for collated batches
        self._keep_nodes(program, nodes)

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

    def batches(self) -> Iterator[tuple[int, list[int], list[Any]]]:
        """This rank's batches of the epoch, ``(number on this rank, indices, items)``, not computed.

        Every process forms the same global sequence of batches (after the seeded shuffle
        buffer); global batch ``b`` belongs to rank ``b % world_size``.
        """
        exclude = self.exclude
        stream: Iterator[tuple[int, Any]] = ((i, x) for i, x in enumerate(self._items()) if i not in exclude)
        if self.shuffle:
            stream = _shuffled(stream, self.shuffle_buffer, random.Random(sample_seed(self.seed, self.epoch, -3)))
        b = 0
        indices: list[int] = []
        items: list[Any] = []
        for i, x in stream:
            indices.append(i)
            items.append(x)
            if len(indices) == self.batch_size:
                if b % self.world_size == self.rank:
                    yield b // self.world_size, indices, items
                indices, items = [], []
                b += 1
        if indices and not self.drop_last and b % self.world_size == self.rank:
            yield b // self.world_size, indices, items

    def __iter__(self) -> Iterator[Any]:
        """Collated :class:`Batch` objects for ``flowdata.DataLoader``; for any other consumer,
        one dict of outputs per sample (as the nodes returned them)."""
        for batch in self._batches_computed():
            if self.emit_batches:
                yield batch
            else:
                if batch.failure is not None or batch.skipped:
                    from flowdata.loader import _sample_error

                    failure = batch.failure or batch.skipped[0]
                    raise _sample_error(failure, self.spec.group, self.spec.number, batch.worker)
                yield from batch.data

    def _batches_computed(self) -> Iterator[Batch]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        start = self.skip_batches
        for j, indices, items in self.batches():
            # torch asks the workers in turn, starting with worker 0: worker w makes the
            # batches start + w, start + w + workers, ... so they arrive in order.
            if j < start or (j - start) % workers != worker:
                continue  # another worker's, or served before the resume: not computed
            if self.emit_batches:
                yield compute_batch(self, indices, items, self.epoch)
            else:
                result = compute_columns(self, indices, items, self.epoch)
                rows = [{k: result.columns[k][n] for k in self.outputs} for n in range(len(result.indices))] if result.failure is None else []
                yield Batch(rows, list(result.indices), result.skipped, result.failure, result.node_seconds, result.worker)


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
