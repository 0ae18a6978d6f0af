"""What runs where samples are computed: the per-process node cache and the chunk task.

Nodes travel to other processes as a :class:`~flowdata.discover.Program` (module names
and config); each process rebuilds them once and keeps them here, whichever kind of
worker it is -- an executor's pool worker or a torch DataLoader worker. A pass reaches a
worker as a :class:`PassContext`, sent once per worker by the executor; each chunk is then
only its sample indices and items (:class:`Task`), or, for a source in shards, the shard
to read there (:class:`ShardRead`).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import pickle
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flowdata.discover import Program, load_program
from flowdata.errors import describe
from flowdata.node import Node
from flowdata.run.chunking import MAX_CHUNK, ChunkSizer, chunked, chunked_index, chunked_keyed
from flowdata.run.kernel import ChunkResult, PassSpec, portable, run_chunk

__all__ = ["Chunks", "PassContext", "ShardRead", "ShardTasks", "Task", "nodes_for", "run_shard", "run_task"]

_NODES: dict[bytes, Mapping[str, Node]] = {}


def nodes_for(program: Program) -> Mapping[str, Node]:
    """The nodes of ``program``, rebuilt once per process."""
    key = pickle.dumps(program)
    nodes = _NODES.get(key)
    if nodes is None:
        nodes = _NODES[key] = load_program(program)
    return nodes


class PassContext:
    """One pass as its workers need it: the program, the pass, its whole values, the policy.

    Pickles without the nodes, which each process rebuilds from the program (the nodes'
    callables may be closures made by Hamilton's modifiers).
    """

    def __init__(
        self,
        program: Program,
        spec: PassSpec,
        whole: Mapping[str, Any],
        skip: bool,
        nodes: Mapping[str, Node] | None = None,
    ):
        self.program = program
        self.spec = spec
        self.whole = dict(whole)
        self.skip = skip
        self._nodes = nodes
        self.local = nodes is not None  # in the process that made it (nodes did not travel)

    def __getstate__(self) -> dict[str, Any]:
        return {"program": self.program, "spec": self.spec, "whole": self.whole, "skip": self.skip}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    @property
    def nodes(self) -> Mapping[str, Node]:
        """The nodes, rebuilt in this process on first use when they did not travel."""
        if self._nodes is None:
            self._nodes = nodes_for(self.program)
        return self._nodes

    def compute(self, task: Task, worker: str, epoch: int | None = None) -> ChunkResult:
        """Computes one task of the pass in this process (``epoch``: the epoch's draws of
        ``sample_rng``, for a loader's batch), named as computed by ``worker``."""
        spec = self.spec if epoch is None or epoch == self.spec.epoch else dataclasses.replace(self.spec, epoch=epoch)
        assert not isinstance(task.items, ShardRead)
        return run_chunk(self.nodes, spec, self.whole, task.indices, task.items, worker=worker, skip=self.skip,
                         span=task.span)

    def describe_unpicklable(self) -> str:
        """Which whole value keeps the context from being sent to another process."""
        for name, value in self.whole.items():
            try:
                pickle.dumps(value)
            except Exception as exc:
                return (
                    f"'{name}' (a {type(value).__name__}) is read by group '{self.spec.group}' but cannot "
                    f"be sent to worker processes: {describe(exc)}\n"
                    "  fix: return a picklable value (no lambdas, open files or locks), or use "
                    "executor='inline'"
                )
        for key, value in self.program.config.items():
            try:
                pickle.dumps(value)
            except Exception as exc:
                return (
                    f"the graph's config cannot be sent to worker processes: '{key}' (a "
                    f"{type(value).__name__}): {describe(exc)}\n"
                    "  fix: use picklable config values, or executor='inline'"
                )
        return "the pass cannot be sent to worker processes\n  fix: use executor='inline'"


@dataclass(frozen=True)
class Task:
    """One chunk: the range of sample indices it covers, the samples kept, their items."""

    span: tuple[int, int]
    indices: Sequence[int]
    items: Sequence[Any] | ShardRead

    @classmethod
    def of(cls, indices: Sequence[int], items: Sequence[Any]) -> Task:
        """A task of samples in any order (a loader's batch): its span from first to last."""
        return cls((indices[0], indices[-1] + 1) if len(indices) else (0, 0), indices, items)


@dataclass(frozen=True)
class ShardRead:
    """The items of a :class:`Task` over a whole shard of a source in shards: read where
    the task runs, so that shards are read in parallel (see :func:`run_shard`).

    ``want_items`` asks for the delivered items back (a consumer reads the source's items).
    """

    data: Any
    num_shards: int
    shard: int
    exclude: frozenset[int] = frozenset()
    want_items: bool = False


def run_task(context: PassContext, task: Task) -> ChunkResult:
    """Computes one chunk of a pass (the function every executor maps)."""
    if isinstance(task.items, ShardRead):
        return run_shard(context, task.span, task.items)
    local = context.local
    result = context.compute(task, "main" if local else f"pid {os.getpid()}")
    if not local:
        result.failure = portable(result.failure)
        result.skipped = [f for f in map(portable, result.skipped) if f is not None]
    return result


def run_shard(context: PassContext, span: tuple[int, int], read: ShardRead) -> ChunkResult:
    """Reads one shard and computes it through the same chunk loop as the engine
    (:class:`Chunks`: memory stays bounded), into one result: columns and folded pieces in
    index order."""
    from flowdata.run.sources.sharded import ShardedSource

    spec = context.spec
    source = ShardedSource(context.nodes[spec.group], read.data)
    source.num_shards = read.num_shards
    total = ChunkResult([], {}, span=span)
    back: list[Any] = []
    chunks = Chunks(source.rows(read.shard), keyed=True, exclude=read.exclude, align=bool(spec.folds))
    # An empty chunk at the shard's start, computed only for a shard without rows: it gives
    # the result its (empty) columns, which the pass's consumers read.
    for task in itertools.chain(chunks, [Task((span[0], span[0]), [], [])]):
        if chunks.cut and not task.indices and task.span[0] == task.span[1]:
            break
        part = run_task(context, task)
        chunks.observe(task, part)
        total.absorb(part)
        if part.failure is not None:
            break
        # The items come back when a consumer reads them; else only those of loose values
        # (a reducer that cannot fold one names its item), None for the others.
        loose = set() if read.want_items else {at for p in part.pieces.values() for kind, at, _ in p if kind != "block"}
        kept = set(part.indices)
        items = task.items
        assert not isinstance(items, ShardRead)
        back.extend(x if read.want_items or i in loose else None for i, x in zip(task.indices, items) if i in kept)
    total.items = back
    return total


class Chunks:
    """The one chunk loop: a pass's items cut into :class:`Task` s, each sized by what the
    chunks before it took (:class:`~flowdata.run.chunking.ChunkSizer`). The engine cuts a
    pass with it on any executor; a worker reading a shard cuts the shard with it.

    Args:
        items: The items, or ``(index, item)`` pairs when ``keyed`` (a source in shards:
            indices may jump, and a chunk never spans a jump).
        keyed: Whether ``items`` are pairs.
        exclude: Samples skipped in an earlier pass: left out, their indices kept in the span.
        chunk_size: A fixed size (``chunk_size=``), or None to adapt.
        align: Align chunks to the blocks reductions fold.
    """

    def __init__(self, items: Iterator[Any], *, keyed: bool, exclude: frozenset[int] = frozenset(),
                 chunk_size: int | None = None, align: bool = False):
        self._sizer = ChunkSizer(chunk_size, MAX_CHUNK, align=align)
        self._items = items
        self._cut: Iterator[tuple[tuple[int, int], list[int], Sequence[Any]]] = (
            (chunked_keyed if keyed else chunked)(items, self._sizer.next_size, exclude))
        self.cut = 0  # tasks cut so far

    @classmethod
    def over(cls, take: Callable[[list[int]], Sequence[Any]], start: int, stop: int, *,
             exclude: frozenset[int] = frozenset(), chunk_size: int | None = None, align: bool = False) -> Chunks:
        """The chunks of the samples ``start..stop - 1`` of an index, each chunk's items read
        at once by ``take`` (:func:`~flowdata.run.chunking.chunked_index`)."""
        chunks = cls(iter(()), keyed=False, chunk_size=chunk_size, align=align)
        chunks._cut = chunked_index(take, start, stop, chunks._sizer.next_size, exclude)
        return chunks

    def __iter__(self) -> Iterator[Task]:
        return self

    def __next__(self) -> Task:
        span, indices, items = next(self._cut)
        self.cut += 1
        return Task(span, indices, items)

    def observe(self, task: Task, result: ChunkResult) -> None:
        """Learns from a computed task: the next chunks' size follows."""
        self._sizer.observe(result.seconds, len(task.indices), result.sample_bytes)

    def close(self) -> None:
        """Closes the items (a source's generator)."""
        close = getattr(self._items, "close", None)
        if close is not None:
            close()


class ShardTasks:
    """A pass over a source in shards as one task per shard, each read where it runs
    (:class:`ShardRead`); the engine takes them as it takes :class:`Chunks`."""

    def __init__(self, data: Any, num_shards: int, exclude: frozenset[int], want_items: bool):
        from flowdata.run.sources.sharded import SHARD_STRIDE

        self._tasks = iter([Task((s * SHARD_STRIDE, (s + 1) * SHARD_STRIDE), (), ShardRead(
            data, num_shards, s, exclude, want_items)) for s in range(num_shards)])

    def __iter__(self) -> Iterator[Task]:
        return self

    def __next__(self) -> Task:
        return next(self._tasks)

    def observe(self, task: Task, result: ChunkResult) -> None:
        """Nothing to learn: a shard's chunks are sized where it is read."""

    def close(self) -> None:
        """Nothing to close: the shards are opened where they are read."""
