"""What runs where samples are computed: the per-process node cache and the chunk task.

Nodes travel to other processes as a :class:`~flowdata.discover.Program` (module names
and config); each process rebuilds them once and keeps them here, whichever kind of
worker it is -- an executor's pool worker or a torch DataLoader worker. A pass reaches a
worker as a :class:`PassContext`, sent once per worker by the executor; each chunk is then
only its sample indices and items (:class:`Task`), or, for a source in shards, the shard
to read there (:class:`ShardRead`).
"""

from __future__ import annotations

import itertools
import os
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flowdata.discover import Program, load_program
from flowdata.errors import describe
from flowdata.node import Node
from flowdata.run.kernel import ChunkResult, PassSpec, portable, run_chunk

__all__ = ["PassContext", "ShardRead", "Task", "nodes_for", "run_shard", "run_task"]

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
    result = run_chunk(
        context.nodes, context.spec, context.whole, task.indices, task.items,
        worker="main" if local else f"pid {os.getpid()}", skip=context.skip, span=task.span,
    )
    if not local:
        result.failure = portable(result.failure)
        result.skipped = [f for f in map(portable, result.skipped) if f is not None]
    return result


def run_shard(context: PassContext, span: tuple[int, int], read: ShardRead) -> ChunkResult:
    """Reads one shard and computes it in chunks sized as the engine sizes them (so memory
    stays bounded), into one result: columns and folded pieces in index order."""
    from flowdata.run.chunking import MAX_CHUNK, ChunkSizer, chunked_keyed
    from flowdata.run.sources.sharded import ShardedSource

    spec = context.spec
    source = ShardedSource(context.nodes[spec.group], read.data)
    source.num_shards = read.num_shards
    sizer = ChunkSizer(None, MAX_CHUNK, align=bool(spec.folds))
    total = ChunkResult([], {}, span=span)
    delivered: list[int] = []
    back: list[Any] = []
    chunks = chunked_keyed(source.rows(read.shard), sizer.next_size, read.exclude)
    ran = False
    # An empty chunk after the shard's, computed only for a shard without rows: it gives
    # the result its (empty) columns, which the pass's consumers read.
    for sub, indices, items in itertools.chain(chunks, [((span[0], span[0]), [], [])]):
        if ran and not indices and sub[0] == sub[1]:
            break
        ran = True
        part = run_task(context, Task(sub, indices, items))
        sizer.observe(part.seconds, len(indices), part.sample_bytes)
        total.skipped.extend(part.skipped)
        total.seconds += part.seconds
        total.worker = part.worker
        total.sample_bytes = max(total.sample_bytes, part.sample_bytes)
        for name, t in part.node_seconds.items():
            total.node_seconds[name] = total.node_seconds.get(name, 0.0) + t
        # The sample cache's counts and warnings travel with the shard's result, as with a
        # chunk's: the report counts the values this pass wrote, and a warning is said.
        for name, counts in part.cache.items():
            summed = total.cache.setdefault(name, [0] * len(counts))
            summed[:] = [a + b for a, b in zip(summed, counts, strict=True)]
        total.notes.extend(part.notes)
        if part.failure is not None:
            total.failure = part.failure
            break
        delivered.extend(part.indices)
        for name, values in part.columns.items():
            total.columns.setdefault(name, []).extend(values)
        for name, pieces in part.pieces.items():
            total.pieces.setdefault(name, []).extend(pieces)
        # The items come back when a consumer reads them; else only those of loose values
        # (a reducer that cannot fold one names its item), None for the others.
        loose = set() if read.want_items else {at for p in part.pieces.values() for kind, at, _ in p if kind != "block"}
        kept = set(part.indices)
        back.extend(x if read.want_items or i in loose else None for i, x in zip(indices, items) if i in kept)
    total.indices = delivered
    total.items = back
    return total
