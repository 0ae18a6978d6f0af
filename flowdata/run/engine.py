"""The pass engine: source -> chunks -> executor -> checked chunks, for every kind of run.

:class:`Engine` runs one pass of a group: it cuts the source's items into chunks with the
one chunk loop (:class:`~flowdata.run.executors.worker.Chunks`), maps
:func:`~flowdata.run.executors.worker.run_task` over them on the executor it was given --
any executor, the inline one included, behind one contract -- with the pass sent once as a
:class:`~flowdata.run.executors.worker.PassContext`, and yields the computed chunks in
sample order, each checked by the :class:`~flowdata.run.recorder.Recorder`. ``execute()``,
``run_sample()`` and the statistics pass of both loaders run their passes here; the
loaders' epochs run the same kernel in DataLoader workers and hand their batches to the
same recorder.

A ``Sequential`` group runs in this process, one sample at a time, in order (its samples
may depend on what a consumer did with the previous one): with one consumer, in the
calling thread; with several, in whichever consumer's thread asks for the next sample.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from flowdata.discover import Program
from flowdata.columns import take
from flowdata.errors import WorkerDied
from flowdata.node import Node
from flowdata.run.caching.samplecache import SampleCache
from flowdata.run.deadline import Stuck, Watch
from flowdata.run.distributed.ranks import Ranks
from flowdata.run.executors import Executor, InlineExecutor
from flowdata.run.executors.worker import Chunks, PassContext, ShardRead, ShardTasks, Task, run_task
from flowdata.run.kernel import ChunkResult, Failure, PassSpec, failure_of
from flowdata.run.recorder import Recorder
from flowdata.run.sequential import SequentialStream
from flowdata.run.sources.contract import Source, guarded_take

__all__ = ["Engine"]

_INLINE = InlineExecutor()


class Engine:
    """Runs passes over sources for one call (see the module docstring).

    Args:
        program: How other processes rebuild the nodes.
        nodes: The nodes, in this process.
        executor: Where chunks of a ``Parallel`` group run.
        recorder: The policy and the report.
        chunk_size: Fixed samples per chunk, or None to adapt.
        rank: This process's rank among ``world_size``.
        world_size: Number of ranks.
        timeout: Seconds one node may spend on one sample (see :mod:`~flowdata.run.deadline`).
        ranks: The ranks of ``torch.distributed`` that share passes (see
            :mod:`~flowdata.run.distributed.ranks`), or None: this process computes every pass whole.
        samples: The nodes whose per-sample values are cached (``cache=``), or None.
    """

    def __init__(
        self,
        program: Program,
        nodes: Mapping[str, Node],
        executor: Executor,
        recorder: Recorder,
        chunk_size: int | None = None,
        rank: int = 0,
        world_size: int = 1,
        timeout: float | None = None,
        ranks: Ranks | None = None,
        samples: SampleCache | None = None,
    ):
        self.ranks = ranks
        self.samples = samples
        self.timeout = timeout
        self.program = program
        self.nodes = nodes
        self.executor = executor
        self.recorder = recorder
        self.chunk_size = chunk_size
        self.rank = rank
        self.world_size = world_size

    def _prepared(self, spec: PassSpec, whole: Mapping[str, Any]) -> PassSpec:
        """The pass with this call's timeout and the cached nodes it computes."""
        if self.timeout is not None:
            spec = dataclasses.replace(spec, timeout=self.timeout)
        if self.samples is not None:
            spec = self.samples.attach(spec, self.nodes, whole, self.program.config)
        return spec

    def stream(self, spec: PassSpec, whole: Mapping[str, Any], source: Source,
               part: tuple[int, int] | None = None) -> Iterator[ChunkResult]:
        """The checked chunks of one pass of a ``Parallel`` group over ``source``, in sample
        order, lazily.

        Args:
            spec: The pass.
            whole: Whole values it reads.
            source: The group's items.
            part: Only the samples ``start..stop - 1`` of an indexed source (a rank's share).
        """
        spec = self._prepared(spec, whole)
        group = spec.group
        index = source.index()
        if index is not None:  # each chunk's items read at once (a table's rows as one record batch)
            node = self.nodes[group]
            start, stop = part if part is not None else (0, len(index))
            return self._parallel(spec, whole, Chunks.over(
                functools.partial(guarded_take, index, source=node), start, stop,
                exclude=self.recorder.skipped(group), chunk_size=self.chunk_size, align=bool(spec.folds)))
        assert part is None, "ranks share the passes of an indexed source only"
        shards = source.shards()
        if shards is not None:  # its own sample indices; its shards read in parallel
            workers = getattr(self.executor, "num_workers", 1)
            if (spec.computes and not isinstance(self.executor, InlineExecutor) and shards.num_shards >= workers
                    and _picklable(shards.data)):
                return self._parallel(spec, whole, ShardTasks(shards.data, shards.num_shards,
                                                              self.recorder.skipped(group), group in spec.want))
            return self._parallel(spec, whole, self._chunks(spec, source.keyed(), keyed=True))
        return self._parallel(spec, whole, self._chunks(spec, source.open(), keyed=False))

    def in_order(self, spec: PassSpec, whole: Mapping[str, Any], source: Source) -> Iterator[ChunkResult]:
        """The samples of one pass of a ``Sequential`` group, one at a time, in order, in this
        process (see :mod:`flowdata.run.sequential`)."""
        return self._sequential(self._prepared(spec, whole), whole, source.open())

    def _chunks(self, spec: PassSpec, items: Iterator[Any], keyed: bool) -> Chunks:
        return Chunks(items, keyed=keyed, exclude=self.recorder.skipped(spec.group), chunk_size=self.chunk_size,
                      align=bool(spec.folds))

    def _parallel(self, spec: PassSpec, whole: Mapping[str, Any], fresh: Chunks | ShardTasks) -> Iterator[ChunkResult]:
        """The tasks of ``fresh`` computed on the executor: chunks of items, or one task per
        shard, read where it runs (:func:`~flowdata.run.executors.worker.run_shard`)."""
        group = spec.group
        # Workers in other processes that a node does not let go of are ended by a watch.
        watch = Watch(spec.timeout) if spec.timeout is not None and spec.computes and not isinstance(
            self.executor, InlineExecutor) else None
        try:
            # Items stay here: workers hand back computed columns only.
            remote = dataclasses.replace(spec, want=tuple(w for w in spec.want if w != group),
                                         watch=watch.folder if watch is not None else None)
            # Workers get only what the computed nodes read: a value read by the source alone
            # (a stream with .map(lambda ...), which cannot be pickled) stays here.
            read = {p.name for name in spec.computes for p in self.nodes[name].params}
            context = PassContext(self.program, remote, {k: v for k, v in whole.items() if k in read},
                                  self.recorder.skip, nodes=self.nodes)
            # A pass that computes nothing per sample needs no round trip for its items.
            executor = self.executor if spec.computes else _INLINE
            redo: deque[Task] = deque()  # chunks lost with a worker that was ended, computed again first
            in_flight: deque[Task] = deque()

            def tasks() -> Iterator[Task]:
                while True:
                    task = redo.popleft() if redo else next(fresh, None)
                    if task is None:
                        return
                    in_flight.append(task)
                    yield task

            while True:
                results = executor.map(run_task, tasks(), context=context)
                try:
                    for result in results:
                        task = in_flight.popleft()
                        if isinstance(task.items, ShardRead):  # the worker read the shard
                            if result.failure is None and group in spec.want:
                                result.columns[group] = list(result.items)
                            del task
                            yield self.recorder.check(group, spec.number, result)
                            continue
                        chunk = task.items  # a list, or a table's rows as one record batch
                        if result.failure is None:
                            kept = chunk if len(result.indices) == len(task.indices) else _kept(
                                task.indices, chunk, result.indices)
                            result.items = kept
                            if group in spec.want:  # the items themselves asked for: one by one
                                result.columns[group] = kept if isinstance(kept, list) else list(kept)
                        fresh.observe(task, result)
                        del chunk, task
                        yield self.recorder.check(group, spec.number, result)
                    return
                except WorkerDied:
                    stuck = watch.take() if watch is not None else []
                    if not stuck:
                        raise
                    for one in stuck:  # raises under "raise"
                        self._timed_out(spec, one, in_flight)
                    # Every chunk the ended pool held is computed again, in order, by new workers.
                    again = [_without(t, stuck) for t in in_flight if len(t.indices) or isinstance(
                        t.items, ShardRead)] + list(redo)
                    redo.clear()
                    redo.extend(again)
                    in_flight.clear()
                finally:
                    close = getattr(results, "close", None)
                    if close is not None:
                        close()
        finally:
            if watch is not None:
                watch.close()
            fresh.close()

    def _timed_out(self, spec: PassSpec, stuck: Stuck, in_flight: deque[Task]) -> None:
        """Reports the sample a worker was ended on; under ``"skip"`` leaves it out of its chunk."""
        name = spec.computes[stuck.position]
        for k, task in enumerate(in_flight):
            if stuck.index in task.indices and not isinstance(task.items, ShardRead):
                pos = list(task.indices).index(stuck.index)
                item = task.items[pos]
                in_flight[k] = Task(task.span, [*task.indices[:pos], *task.indices[pos + 1 :]],
                                    [*task.items[:pos], *task.items[pos + 1 :]])
                break
        else:
            item = "?"  # in a shard read by the worker that was ended (see _without)
        assert spec.timeout is not None
        failure = failure_of(self.nodes[name], stuck.index, item,
                             stuck.error(spec.timeout, "worker process", " and replaced"))
        worker = f"pid {stuck.pid}"
        self.recorder.failed(spec.group, spec.number, failure, worker)

    def _sequential(self, spec: PassSpec, whole: Mapping[str, Any], items: Iterator[Any]) -> Iterator[ChunkResult]:
        """One sample at a time, in this process (see :mod:`flowdata.run.sequential`)."""
        rec, group = self.recorder, spec.group

        def report(delivered: int, seconds: list[float]) -> None:
            rec.record(group, spec.number, delivered, dict(zip(spec.computes, seconds, strict=True)), [], None, "main")

        def failed(f: Failure) -> None:
            # A skip is recorded and the stream goes on; under "raise" this raises.
            rec.failed(group, spec.number, f)

        def checked(result: ChunkResult) -> None:
            rec.check(group, spec.number, result)

        stream = SequentialStream(self.nodes, spec, whole, items, rec.skipped(group), report, failed, checked,
                                  rec.skip)
        return stream  # type: ignore[return-value]  # one-sample chunks read like ChunkResults

    def one(self, spec: PassSpec, whole: Mapping[str, Any], index: int, item: Any) -> ChunkResult:
        """One sample through a pass, in this process (``run_sample()``)."""
        if self.samples is not None:
            spec = self.samples.attach(spec, self.nodes, whole, self.program.config)
        context = PassContext(self.program, spec, whole, False, nodes=self.nodes)
        result = run_task(context, Task((index, index + 1), [index], [item]))
        return self.recorder.check(spec.group, spec.number, result)


def _picklable(data: Any) -> bool:
    """Whether a stream can travel to the pool's workers (``stream.map(lambda ...)`` cannot:
    its shards are then read here, and only their rows travel)."""
    import pickle

    try:
        pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return False
    return True


def _without(task: Task, stuck: list[Stuck]) -> Task:
    """A shard's task to compute again, without the samples a worker was ended on."""
    if not isinstance(task.items, ShardRead):
        return task
    lo, hi = task.span
    out = {one.index for one in stuck if lo <= one.index < hi}
    return dataclasses.replace(task, items=dataclasses.replace(task.items, exclude=task.items.exclude | out))


def _kept(indices: Sequence[int], items: Sequence[Any], kept: Sequence[int]) -> Sequence[Any]:
    keep = set(kept)
    return take(items, [p for p, i in enumerate(indices) if i in keep])
