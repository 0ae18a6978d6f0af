"""The torch datasets of the training iterator: a pass's per-sample work in DataLoader workers.

Every dataset computes *whole batches* with the engine's kernel, through the pass's
:class:`~flowdata.run.executors.worker.PassContext` (:class:`PassWork`), column by column,
and rebuilds the nodes once per worker process; all pickle as plain data (module names,
config, values), so they work under ``spawn``.

- :class:`PassDataset` (map-style) holds the item index; the loader's sampler
  (:class:`~flowdata.loader.order.EpochBatches`) decides which samples form each batch.
- :class:`~flowdata.loader.lanes.LaneDataset` (a source in shards, e.g. a
  ``datasets.IterableDataset``), in its own module: every consumer reads only its own
  lanes of shards.
- :class:`StreamDataset` (streaming: a ``Sequential`` source or ``streaming=True``) opens
  the source in every worker; every worker forms the same global sequence of batches
  (:func:`~flowdata.loader.order.stream_batches`), and a rank's ``j``-th batch is computed
  by worker ``j % num_workers`` only. torch hands batches out from the workers in turn, so
  every sample is delivered exactly once per epoch and a rank receives its batches in
  order, identical for any number of workers (a naive ``IterableDataset`` yields every
  item once *per worker*). Items should be light (paths, rows): every worker reads all of
  them and computes only its own batches. Resume skips served batches by replaying only
  the item bookkeeping.

Failures travel back as data inside the :class:`~flowdata.loader.wire.Batch` (a failing
sample, or a failing source as a ``NodeError``), for the loader to report through the
engine's :class:`~flowdata.run.recorder.Recorder`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any

from torch.utils.data import Dataset, IterableDataset, get_worker_info

from flowdata.discover import Program
from flowdata.errors import FlowdataError, NodeError, describe, user_traceback
from flowdata.node import Node
from flowdata.run import (ChunkResult, Failure, ItemIndex, PassContext, PassSpec, Task, call_source, failure_error,
                          guarded_take)
from flowdata.loader.order import EpochOrder, stream_batches
from flowdata.loader.position import Position, count
from flowdata.loader.wire import Batch, CollateError, collate

__all__ = ["BatchView", "PassDataset", "PassWork", "StreamDataset", "StreamWork"]

Collate = Callable[[list[dict[str, Any]]], Any]


class PassWork:
    """What every dataset computes: a pass's outputs for a batch of samples, through the
    same :class:`~flowdata.run.executors.worker.PassContext` an executor's workers compute
    chunks with.

    Pickles without the nodes, which each worker rebuilds from the program once.
    """

    def __init__(
        self,
        program: Program,
        spec: PassSpec,
        whole: Mapping[str, Any],
        outputs: Sequence[str],
        seed: int,
        skip: bool,
        collate_fn: Collate | None,
        nodes: Mapping[str, Node] | None,
    ):
        self.outputs = tuple(outputs)
        self.seed = seed
        self.collate_fn = collate_fn
        self.context = PassContext(program, dataclasses.replace(spec, want=self.outputs, seed=seed, folds=()), whole,
                                   skip, nodes=nodes)

    @property
    def program(self) -> Program:
        """How the workers rebuild the nodes."""
        return self.context.program

    @property
    def spec(self) -> PassSpec:
        """The pass the epochs compute (its ``epoch`` set per batch)."""
        return self.context.spec

    @property
    def whole(self) -> dict[str, Any]:
        """The whole values the pass reads."""
        return self.context.whole

    @property
    def skip(self) -> bool:
        """Whether a failing sample is left out (``on_error="skip"``)."""
        return self.context.skip

    @property
    def nodes(self) -> Mapping[str, Node]:
        """The nodes, rebuilt from the program once per worker process."""
        return self.context.nodes

    def columns(self, indices: list[int], items: Sequence[Any], epoch: int) -> ChunkResult:
        """The pass over samples, uncollated."""
        info = get_worker_info()
        worker = "main" if info is None else f"{info.id} (pid {os.getpid()})"
        return self.context.compute(Task.of(indices, items), worker, epoch=epoch)

    def batch(self, indices: list[int], items: Sequence[Any], epoch: int) -> Batch:
        """The pass over one batch of samples, collated (the loader's path).

        ``indices`` may say how many of its last samples repeat one to even out the ranks
        (:class:`~flowdata.loader.order.EpochIndices`); the batch counts those delivered.
        """
        result = self.columns(indices, items, epoch)
        padding, remainder = getattr(indices, "padding", 0), getattr(indices, "remainder", -1)
        if padding and result.skipped:  # a repeated sample that failed is not delivered either
            failed = {f.index for f in result.skipped}
            padding = sum(1 for i in indices[len(indices) - padding :] if i not in failed)
        data: Any = result.columns
        if result.failure is None:
            try:
                data = collate(self.outputs, self.collate_fn, result.columns, len(result.indices))
            except CollateError as err:
                # Sent as data: the loader raises it in the main process, at any worker count.
                what = ("collate_fn raised on the batch of samples" if err.output == "collate_fn" else
                        f"output '{err.output}' could not be collated into a batch of samples")
                error = FlowdataError(
                    f"{what} {list(result.indices)} (group '{self.spec.group}'): {describe(err.cause)}\n"
                    "  fix: make every sample's value the same shape and type (pad ragged tensors, no None "
                    "among numbers), or pass a collate_fn that can batch them"
                )
                error.__cause__ = err.cause
                return Batch(None, list(result.indices), result.skipped, None, result.node_seconds, result.worker,
                             error=error, cache=result.cache, notes=result.notes)
        out = Batch.of(result, data)
        out.padding, out.remainder = padding, remainder
        return out

    def _rows(self, result: ChunkResult) -> list[dict[str, Any]]:
        """One dict of outputs per sample; a failing or skipped sample raises ``SampleError``."""
        if result.notes:  # no loader around it (dataset() under a plain DataLoader): said here
            from flowdata.run import say

            say(result.notes)
        failure = result.failure or (result.skipped[0] if result.skipped else None)
        if failure is not None:
            raise self.error(failure, result.worker)
        return [{k: result.columns[k][n] for k in self.outputs} for n in range(len(result.indices))]

    def error(self, failure: Failure, worker: str) -> NodeError:
        """The error of a failure, as the engine words it."""
        return failure_error(failure, self.spec.group, self.spec.number, worker)

    def unpicklable(self) -> str | None:
        """What keeps the dataset from being sent to DataLoader workers that are not forked
        (``spawn``, ``forkserver``), and how to fix it; None when it pickles."""
        import pickle

        parts = [(f"'{name}' (a {type(value).__name__}), read by group '{self.spec.group}',", value,
                  "return a picklable value (no lambdas, open files or locks)") for name, value in self.whole.items()]
        parts.append(("the collate_fn", self.collate_fn, "pass a module-level function as collate_fn"))
        for what, value, fix in parts:
            try:
                pickle.dumps(value)
            except Exception as exc:
                return f"{what} cannot be pickled: {describe(exc)}\n  fix: {fix}"
        return None


class PassDataset(PassWork, Dataset[dict[str, Any]]):
    """The per-sample work of one pass as a map-style torch ``Dataset``.

    Args:
        program: How to rebuild the nodes (module names and config).
        spec: The pass: nodes to compute and outputs to return.
        whole: Whole values the pass reads (once nodes, inputs, statistics).
        index: The group's items.
        outputs: Output names, in batch order.
        seed: Seed of ``sample_rng``.
        skip: Leave failing samples out of the batch instead of failing it.
        collate_fn: A user collate function taking a list of per-sample dicts, or None to
            collate column by column (tensors stacked, numbers to tensors, strings to lists).
        nodes: The nodes, in this process.
    """

    def __init__(
        self,
        program: Program,
        spec: PassSpec,
        whole: Mapping[str, Any],
        index: ItemIndex,
        outputs: Sequence[str],
        seed: int,
        skip: bool,
        collate_fn: Collate | None = None,
        nodes: Mapping[str, Node] | None = None,
    ):
        super().__init__(program, spec, whole, outputs, seed, skip, collate_fn, nodes)
        self.index = index

    def __len__(self) -> int:
        return len(self.index)

    def _take(self, indices: list[int]) -> Sequence[Any]:
        """The items of ``indices``; an index that raises is the source's ``NodeError``."""
        return guarded_take(self.index, indices, self.nodes[self.spec.group])

    def __getitem__(self, i: int) -> dict[str, Any]:
        """One sample's outputs (epoch 0), as the nodes returned them (not collated)."""
        return self.rows(self._positions([i]), 0)[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Several samples' outputs, computed column by column (a plain torch DataLoader
        calls this with a batch of indices, then its own ``collate_fn``)."""
        return self.rows(self._positions(indices), getattr(indices, "epoch", 0))

    def _positions(self, indices: Sequence[int]) -> list[int]:
        """Sample indices, a negative one counted from the end as a list counts it.

        One rule for every index kind: each adapter answered a position past the end its
        own way (an ``IndexError``, a ``NodeError`` of the source, an empty row), and a
        negative one became its sample index (another ``sample_rng``) or an error.
        """
        size = len(self.index)
        positions = []
        for i in indices:
            p = int(i)
            if not -size <= p < size:
                raise IndexError(f"sample {p} is out of range: the dataset has {size} samples (0 to {size - 1})")
            positions.append(p % size)
        return positions

    def rows(self, indices: list[int], epoch: int) -> list[dict[str, Any]]:
        """Outputs of ``indices`` as one dict per sample; a failing sample raises ``SampleError``."""
        return self._rows(self.columns(indices, self._take(indices), epoch))

    def compute(self, indices: list[int], epoch: int) -> Batch:
        """Runs the pass over ``indices`` and collates the outputs (the loader's path).

        A failing source comes back as data (torch would re-raise a worker's exception as a
        ``RuntimeError`` of its text).
        """
        try:
            items = self._take(indices)
        except NodeError as exc:
            return Batch(None, [], [], None, {}, "", error=exc)
        return self.batch(indices, items, epoch)


class BatchView(Dataset[Batch]):
    """What ``flowdata.DataLoader`` fetches from: whole collated batches with their report."""

    def __init__(self, base: PassDataset):
        self.base = base

    def __len__(self) -> int:
        return len(self.base)

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        return self.base.compute(indices if isinstance(indices, list) else list(indices), getattr(indices, "epoch", 0))

    def __getitem__(self, i: int) -> Batch:
        return self.base.compute([int(i)], 0)


class StreamWork(Position, PassWork, IterableDataset[Any]):
    """What both streaming datasets share: how a batch is delivered (collated for
    ``flowdata.DataLoader``, one dict per sample otherwise), and the position of the epoch,
    which a stream owns (:class:`~flowdata.loader.position.Position`): its workers cut the
    epoch into batches and skip those served before a resume.

    Args:
        program: How to rebuild the nodes in a worker.
        spec: The pass (the group's last pass, which yields the outputs).
        whole: Whole values the pass and the source read.
        outputs: Output names.
        order: The order of the epochs (its ``seed`` also seeds ``sample_rng``), and the
            epoch to start with.
        skip: Leave failing samples out instead of failing the batch.
        collate_fn: Optional user collate function over a list of per-sample dicts.
        nodes: The nodes, in this process.
        exclude: Samples skipped in an earlier pass, left out of every epoch.
        collated: Yield whole collated :class:`~flowdata.loader.wire.Batch` objects (what
            ``flowdata.DataLoader`` reads), not one dict per sample (any other consumer).
    """

    def __init__(
        self,
        program: Program,
        spec: PassSpec,
        whole: Mapping[str, Any],
        outputs: Sequence[str],
        order: EpochOrder,
        *,
        skip: bool,
        collate_fn: Collate | None,
        nodes: Mapping[str, Node] | None = None,
        exclude: frozenset[int] = frozenset(),
        collated: bool = False,
    ):
        super().__init__(program, spec, whole, outputs, order.seed, skip, collate_fn, nodes)
        self.order = order
        self.exclude = exclude
        self.collated = collated

    def identity(self) -> dict[str, Any]:
        o = self.order
        return {"shuffle_buffer": o.shuffle_buffer, "streaming": True, "seed": o.seed, "shuffle": o.shuffle,
                "batch_size": o.batch_size, "rank": o.rank, "world_size": o.world_size, "drop_last": o.drop_last}

    def _compute(self, indices: list[int], items: list[Any]) -> Batch:
        """One batch computed: collated (the loader's path), or its rows."""
        if self.collated:
            return self.batch(indices, items, self.order.epoch)
        return Batch(self._rows(self.columns(indices, items, self.order.epoch)), [], [], None, {}, "")

    def _computed(self) -> Iterator[Batch]:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Any]:
        """Collated :class:`Batch` objects for ``flowdata.DataLoader``; for any other consumer,
        one dict of outputs per sample (as the nodes returned them)."""
        try:
            for batch in self._computed():
                if self.collated:
                    yield batch
                elif batch.error is not None:
                    raise batch.error
                else:
                    yield from batch.data
        except FlowdataError as exc:
            if not self.collated:
                raise
            # A failing source: sent as data, so that the loader raises it as it is (torch
            # re-raises a worker's exception as a RuntimeError of its text).
            yield Batch(None, [], [], None, {}, "", error=exc)


class StreamDataset(StreamWork):
    """A streaming pass: the source is opened in each worker (see the module docstring).

    Arguments as :class:`StreamWork`'s. Its position is the epoch and the batches served;
    a resume skips those by replaying only the item bookkeeping.
    """

    _skip = 0  # batches the next iteration skips (served before a resume), across workers
    _remainder = 0  # of an evened epoch, once its last batch was delivered

    def identity(self) -> dict[str, Any]:
        o = self.order
        return {**super().identity(), **({"even_batches": o.even} if o.world_size > 1 else {})}

    @property
    def remainder(self) -> int:
        return self._remainder

    def delivered(self, batch: Batch) -> None:
        super().delivered(batch)
        if batch.remainder >= 0:  # the epoch's last round, evened out: its samples
            self._remainder = batch.remainder

    def _begin(self, order: EpochOrder, served: int, saved: Mapping[str, Any]) -> None:
        if served:
            held = self._holds(order, served)
            if held < served:
                raise FlowdataError(
                    f"cannot resume: the saved position is impossible (version {saved.get('version')!r}, epoch "
                    f"{order.epoch!r}, batches_served {served!r} of {held} batches in that epoch of the stream of "
                    f"source '{self.spec.group}')\n"
                    "  fix: pass a state_dict() of a flowdata.DataLoader as it was saved, over the same data"
                )
        self._skip, self._remainder = served, 0

    def _holds(self, order: EpochOrder, served: int) -> int:
        """The batches this rank's stream holds in ``order``'s epoch, counted up to
        ``served``: its items are read in this process (nothing is computed), as far as a
        resume at ``served`` reads them in each worker anyway; an endless stream stops there."""
        batches = self.batches(order)
        held = 0
        try:
            for _ in batches:
                held += 1
                if held >= served:
                    break
            return held
        finally:
            batches.close()  # the source's generator ends here, not when collected

    def _items(self) -> Iterator[Any]:
        source = self.nodes[self.spec.group]
        kwargs = {p.name: self.whole[p.name] for p in source.params if p.name in self.whole}
        return call_source(source, kwargs).open()

    def batches(self, order: EpochOrder | None = None) -> Generator[tuple[int, list[int], list[Any]], None, None]:
        """This rank's batches of the epoch (``order``'s, else the current one), ``(number on
        this rank, indices, items)``, not computed."""
        yield from stream_batches(self._items(), order or self.order, self.exclude)

    def _computed(self) -> Iterator[Batch]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        start = self._skip
        for j, indices, items in self.batches():
            # torch asks the workers in turn, starting with worker 0: worker w makes the
            # batches start + w, start + w + workers, ... so they arrive in order.
            if j < start or (j - start) % workers != worker:
                continue  # another worker's, or served before the resume: not computed
            yield self._compute(indices, items)
