"""The local scheduler behind ``Driver.execute()`` and ``Driver.run_sample()``.

How a call runs
---------------
Values are computed on demand, starting from the requested outputs:

- a **once node** is called when first needed, with its whole-valued arguments;
- a **Collect node** of group ``g`` fed by pass ``k`` is computed by *running that pass*:
  every needed, not yet computed Collect node fed by the same pass is computed in the same
  run, so the samples are computed once for all of them (one shared pass);
- a **pass** first computes the whole values it reads (once nodes, inputs, and Collect
  results of earlier passes, which recursively runs those passes), then opens the source
  and streams the samples through the per-sample nodes in *chunks* of consecutive samples
  (see :mod:`flowdata.chunk`). Parallel groups send chunks to the executor; Sequential
  groups run in the calling thread one sample at a time, in order.

Consumers
---------
Every Collect node fed by a pass reads one shared stream of its chunks (see
:mod:`flowdata.stream`): plain Collect functions each in their own thread, reductions
together in one more (see :mod:`flowdata.fold`). A Collect function that stops early stops
the upstream work, unless a reduction still needs every sample.

A source that takes ``Collect[...]`` parameters closes one group and opens the next: when
its own group runs a pass, the closed group's pass is run as a stream feeding it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import pickle
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any

from flowdata.cache import PassCache, digest, fingerprint_items, source_text
from flowdata.chunk import ChunkResult, FoldSpec, PassSpec, run_chunk, worker_task
from flowdata.discover import Program
from flowdata.errors import FlowdataError, InputError, NodeError, SampleError, describe, user_traceback
from flowdata.executors import Executor, InlineExecutor
from flowdata.fold import Folder
from flowdata.graph import Graph
from flowdata.node import Node, Role
from flowdata.plan import Analysis, GroupPlan, PassPlan, Plan
from flowdata.reduce import BLOCK
from flowdata.report import Report, Skip
from flowdata.stream import MAX_CHUNK, ChunkSizer, JobThread, Tee, chunked, collect_iterables, run_jobs

__all__ = ["Run"]

_log = logging.getLogger("flowdata")

_INLINE_MAX_CHUNK = 512


class Run:
    """One ``execute()`` (or ``run_sample()``) call: its values and how to compute them.

    Args:
        graph: The graph.
        analysis: Roles and groups.
        program: How workers rebuild the nodes.
        plan: What the call computes.
        values: Inputs and overrides supplied by the caller.
        executor: Where Parallel chunks run.
        chunk_size: Fixed samples per chunk, or None to adapt.
        cache: Where reduction results are kept between calls, or None.
        on_error: ``"raise"`` stops at the first failing sample; ``"skip"`` leaves it out
            of every pass alike and records it in ``report``.
        report: Where to record samples seen and skipped, and node timings.
    """

    def __init__(
        self,
        graph: Graph,
        analysis: Analysis,
        program: Program,
        plan: Plan,
        values: Mapping[str, Any],
        executor: Executor,
        chunk_size: int | None = None,
        cache: PassCache | None = None,
        on_error: str = "raise",
        report: Report | None = None,
    ):
        self.graph = graph
        self.analysis = analysis
        self.program = program
        self.plan = plan
        self.values: dict[str, Any] = dict(values)
        self.executor = executor
        self.chunk_size = chunk_size
        self._program_bytes: bytes | None = None
        self.cache = cache
        self._reducers: dict[str, Any] = {}
        self._keys: dict[tuple[str, int], str] = {}
        self.on_error = on_error
        self.report = report if report is not None else Report()
        self._skips: dict[str, set[int]] = {}
        self._logged: set[tuple[str, int]] = set()
        self.sources: dict[str, Any] = {}
        self.on_chunk: Callable[[int], None] | None = None

    # --- whole values ---------------------------------------------------------------------

    def value(self, name: str) -> Any:
        """The whole value ``name`` (input, override, once node or Collect result)."""
        if name in self.values:
            return self.values[name]
        role = self.analysis.roles.get(name)
        if role is Role.ONCE:
            node = self.graph.nodes[name]
            kwargs = self._whole_args(node)
            try:
                self.values[name] = node.fn(**kwargs)
            except Exception as exc:
                raise _node_error(node, exc) from exc.with_traceback(user_traceback(exc.__traceback__))
        elif role is Role.COLLECT:
            group = self.plan.group(self.analysis.group_of[name])
            self._run_pass(group, group.pass_of(name))
        else:
            raise InputError(f"'{name}' is not a whole value in this call")
        return self.values[name]

    def _whole_args(self, node: Node, skip_collect: bool = False) -> dict[str, Any]:
        kwargs = {}
        for p in node.params:
            if skip_collect and p.collect:
                continue
            if p.name in self.values or p.name in self.graph.nodes:
                kwargs[p.name] = self.value(p.name)
            elif not p.optional:
                raise InputError(f"missing input '{p.name}' for '{node.name}' ({node.location})")
        return kwargs

    # --- passes ---------------------------------------------------------------------------

    def _run_pass(self, group: GroupPlan, pass_: PassPlan) -> None:
        plain, folds = self._consumers(pass_)
        if self.cache is not None and folds:
            folds = self._from_cache(group, pass_, folds)
        if not plain and not folds:
            return
        tee = Tee(self._chunks(group, pass_, plain, folds), readers=len(plain) + (1 if folds else 0))
        results = run_jobs(self._jobs(plain, folds), tee)
        self._keep(plain, folds, results)
        if self.cache is not None and folds:
            self._to_cache(group, pass_, folds)

    def _consumers(self, pass_: PassPlan, exclude: str = "") -> tuple[list[Node], list[FoldSpec]]:
        """The Collect nodes a pass still has to feed: plain ones, and reductions."""
        plain: list[Node] = []
        folds: list[FoldSpec] = []
        for c in pass_.feeds:
            if c == exclude or c in self.values or self.analysis.roles[c] is not Role.COLLECT:
                continue
            node = self.graph.nodes[c]
            if node.reducer is None:
                plain.append(node)
            else:
                options = self._whole_args(node, skip_collect=True)
                folds.append(FoldSpec(c, node.collect_params[0].name, node.reducer, options))
        return plain, folds

    def _jobs(self, plain: Sequence[Node], folds: Sequence[FoldSpec]) -> list[Callable[[Tee, int], Any]]:
        jobs: list[Callable[[Tee, int], Any]] = [
            functools.partial(_call_collect, node, self._whole_args(node, skip_collect=True)) for node in plain
        ]
        if folds:
            jobs.append(functools.partial(_reduce_all, [Folder(f) for f in folds]))
        return jobs

    def _keep(self, plain: Sequence[Node], folds: Sequence[FoldSpec], results: Sequence[Any]) -> None:
        for node, result in zip(plain, results, strict=False):
            self.values[node.name] = result
        if folds:
            reducers: dict[str, Any] = results[-1]
            for f in folds:
                self._reducers[f.node] = reducers[f.node]
                self.values[f.node] = _result_of(self.graph.nodes[f.node], reducers[f.node])

    def _chunks(
        self, group: GroupPlan, pass_: PassPlan, plain: Sequence[Node], folds: Sequence[FoldSpec] = ()
    ) -> Iterator[ChunkResult]:
        """Eagerly computes what the pass reads, then returns the lazy stream of its chunks."""
        whole = self._pass_whole(pass_)
        wanted = tuple(
            dict.fromkeys([p.name for c in plain for p in c.collect_params] + list(pass_.outputs))
        )
        spec = PassSpec(group.source, pass_.number, pass_.computes, wanted, folds=tuple(folds))
        items, cleanup = self._open_source(group, whole)
        return self._stream(group, pass_, spec, whole, items, cleanup)

    def _pass_whole(self, pass_: PassPlan) -> dict[str, Any]:
        return {n: self.value(n) for n in pass_.needs if n in self.graph.nodes or n in self.values}

    # --- the pass cache ---------------------------------------------------------------------

    def _cache_key(self, group: GroupPlan, pass_: PassPlan, folds: Sequence[FoldSpec]) -> str | None:
        """The key of a pass's reductions, or None when the pass cannot be cached."""
        if group.kind == "sequential" or self.analysis.closes.get(group.source):
            return None  # endless streams and sources fed by another group are not fingerprinted
        if self._keys.get((group.source, pass_.number)) is None:
            whole = self._pass_whole(pass_)
            items, cleanup = self._open_source(group, whole)
            try:
                items_digest, count = fingerprint_items(items)
            finally:
                close = getattr(items, "close", None)
                if close is not None:
                    close()
                cleanup()
            code = [source_text(self.graph.nodes[n].origin) for n in (group.source, *pass_.computes)]
            self._keys[(group.source, pass_.number)] = digest(
                ["flowdata-pass", 1, group.source, pass_.number, items_digest, count, code,
                 sorted(whole.items()), sorted(self.program.config.items(), key=repr)]
            )
        base = self._keys[(group.source, pass_.number)]
        parts = [
            (f.node, f.column, source_text(self.graph.nodes[f.node].origin),
             f"{f.reducer.cls.__module__}.{f.reducer.cls.__qualname__}", sorted(f.reducer.options.items()),
             sorted(f.options.items()))
            for f in folds
        ]
        return digest([base, parts])

    def _from_cache(self, group: GroupPlan, pass_: PassPlan, folds: list[FoldSpec]) -> list[FoldSpec]:
        """Loads the reductions of a pass from the cache; returns those still to compute."""
        assert self.cache is not None
        key = self._cache_key(group, pass_, folds)
        if key is None:
            return folds
        states = self.cache.load(key, [f.node for f in folds])
        if states is None:
            return folds
        for f in folds:
            restore = getattr(f.reducer.cls, "from_state_dict", None)
            if restore is None:
                return folds
            reducer = restore(states[f.node])
            self._reducers[f.node] = reducer
            self.values[f.node] = _result_of(self.graph.nodes[f.node], reducer)
        _log.info(
            "pass %d of group '%s' skipped: %s loaded from the cache (key %s)",
            pass_.number, group.source, ", ".join(f.node for f in folds), key[:12],
        )
        return []

    def _to_cache(self, group: GroupPlan, pass_: PassPlan, folds: list[FoldSpec]) -> None:
        assert self.cache is not None
        key = self._cache_key(group, pass_, folds)
        if key is None or any(not hasattr(f.reducer.cls, "from_state_dict") for f in folds):
            return
        states = {f.node: self._reducers[f.node].state_dict() for f in folds}
        entry = self.cache.store(key, states, {"group": group.source, "pass": pass_.number})
        _log.info("pass %d of group '%s': %s stored in the cache at %s", pass_.number, group.source,
                  ", ".join(f.node for f in folds), entry)

    def source_value(self, group: GroupPlan) -> Any:
        """What the source returns (a list, a generator, ...), not yet iterated."""
        node = self.graph.nodes[group.source]
        whole = self._pass_whole(group.passes[0])
        kwargs = {p.name: whole[p.name] for p in node.params if not p.collect and p.name in whole}
        try:
            return node.fn(**kwargs)
        except Exception as exc:
            raise _node_error(node, exc) from exc.with_traceback(user_traceback(exc.__traceback__))

    def _open_source(
        self, group: GroupPlan, whole: Mapping[str, Any]
    ) -> tuple[Iterator[Any], Callable[[], None]]:
        """Calls the source; a source that collects is fed by a pass of the group it closes."""
        node = self.graph.nodes[group.source]
        if group.source in self.sources:  # an index built from the source already
            return _guarded(iter(self.sources[group.source]), node), _nothing
        kwargs = {p.name: whole[p.name] for p in node.params if not p.collect and p.name in whole}
        closed = self.analysis.closes.get(node.name)
        cleanup: Callable[[], None] = _nothing
        if closed is not None:
            kwargs, cleanup = self._feed_from(closed, node, kwargs)
        try:
            items = node.fn(**kwargs)
        except Exception as exc:
            cleanup()
            raise _node_error(node, exc) from exc.with_traceback(user_traceback(exc.__traceback__))
        if not isinstance(items, Iterable):
            cleanup()
            raise NodeError(
                node.name,
                node.location,
                f"a source must return an iterable of samples, got {type(items).__name__}; "
                "fix: 'yield' the items or return a list",
            )
        return _guarded(iter(items), node), cleanup

    def _feed_from(
        self, closed: str, source: Node, kwargs: dict[str, Any]
    ) -> tuple[dict[str, Any], Callable[[], None]]:
        """Streams a pass of group ``closed`` into the Collect parameters of ``source``.

        Other Collect nodes fed by the same pass and not yet computed share the stream.
        """
        group = self.plan.group(closed)
        pass_ = group.pass_of(source.name)
        plain, folds = self._consumers(pass_, exclude=source.name)
        jobs = self._jobs(plain, folds)
        tee = Tee(self._chunks(group, pass_, [source, *plain], folds), readers=1 + len(jobs))
        threads = [JobThread(job, tee, i + 1) for i, job in enumerate(jobs)]
        for t in threads:
            t.start()
        kwargs = {**kwargs, **collect_iterables(source, tee, 0)}

        def cleanup() -> None:
            tee.close(0)
            for t in threads:
                t.join()
            for t in threads:
                t.reraise()
            self._keep(plain, folds, [t.result for t in threads])

        return kwargs, cleanup

    def _stream(
        self,
        group: GroupPlan,
        pass_: PassPlan,
        spec: PassSpec,
        whole: Mapping[str, Any],
        items: Iterator[Any],
        cleanup: Callable[[], None],
    ) -> Iterator[ChunkResult]:
        nodes = self.graph.nodes
        skip = self.on_error == "skip"
        exclude = frozenset(self._skips.get(group.source, ()))
        try:
            if group.kind == "sequential":
                for span, indices, chunk in chunked(items, lambda: 1, exclude):
                    yield self._checked(group, pass_, run_chunk(nodes, spec, whole, indices, chunk, skip=skip, span=span))
                return
            inline = isinstance(self.executor, InlineExecutor) or not spec.computes
            sizer = ChunkSizer(
                self.chunk_size, _INLINE_MAX_CHUNK if inline else MAX_CHUNK, BLOCK if spec.folds else 1
            )
            if inline:
                # Also when the pass computes nothing per sample: items need no round trip.
                for span, indices, chunk in chunked(items, sizer.next_size, exclude):
                    result = self._checked(
                        group, pass_, run_chunk(nodes, spec, whole, indices, chunk, skip=skip, span=span)
                    )
                    sizer.observe(result, chunk)
                    del chunk
                    yield result
                return
            # Workers hand back computed columns only; the items stay here.
            remote = dataclasses.replace(spec, want=tuple(w for w in spec.want if w != spec.group))
            key = uuid.uuid4().bytes
            program = self._program()
            ctx = _pickled_context(remote, whole)
            in_flight: deque[tuple[list[int], list[Any]]] = deque()

            def tasks() -> Iterator[tuple[bytes, bytes, bytes, tuple[int, int], list[int], list[Any], bool]]:
                for span, idx, chunk in chunked(items, sizer.next_size, exclude):
                    in_flight.append((idx, chunk))
                    yield key, program, ctx, span, idx, chunk, skip

            results = self.executor.map(worker_task, tasks())
            try:
                for result in results:
                    idx, chunk = in_flight.popleft()
                    if spec.group in spec.want:
                        kept = set(result.indices)
                        result.columns[spec.group] = (
                            chunk if len(kept) == len(idx) else [x for i, x in zip(idx, chunk) if i in kept]
                        )
                    sizer.observe(result, chunk)
                    del chunk
                    yield self._checked(group, pass_, result)
            finally:
                close = getattr(results, "close", None)
                if close is not None:
                    close()
        finally:
            close_items = getattr(items, "close", None)
            if close_items is not None:
                close_items()
            cleanup()

    def _program(self) -> bytes:
        if self._program_bytes is None:
            try:
                self._program_bytes = pickle.dumps(self.program)
            except Exception as exc:
                raise FlowdataError(
                    f"the graph's config cannot be sent to worker processes: {describe(exc)}\n"
                    "  fix: use picklable config values, or executor='inline'"
                ) from exc
        return self._program_bytes

    def _checked(self, group: GroupPlan, pass_: PassPlan, result: ChunkResult) -> ChunkResult:
        """Records a chunk in the report; raises its failure, if it has one."""
        skips = [
            Skip(s.index, s.item, s.node, s.detail, group.source, pass_.number) for s in result.skipped
        ]
        if skips:
            self._skips.setdefault(group.source, set()).update(s.index for s in skips)
            for s in skips:
                if (s.group, s.index) not in self._logged:
                    self._logged.add((s.group, s.index))
                    _log.warning("group '%s', pass %d: skipped %s", group.source, pass_.number, s)
        self.report.add(group.source, len(result.indices), result.node_seconds, skips)
        if self.on_chunk is not None:
            self.on_chunk(len(result.indices) + len(skips))
        f = result.failure
        if f is None:
            return result
        if f.reduction:
            node = self.graph.nodes[f.node]
            raise NodeError(node.name, node.location, f"{f.detail} (while folding {f.item})") from (
                f.error if f.error is not None else RuntimeError(f.detail)
            )
        err = SampleError(
            f.node, f.location, f.detail, index=f.index, item=f.item,
            group=group.source, pass_=pass_.number, worker=result.worker,
        )
        cause = f.error if f.error is not None else RuntimeError(f.detail)
        if result.worker != "main":
            cause.add_note(f"traceback in worker ({result.worker}):\n{f.traceback_text.rstrip()}")
        raise err from cause

    # --- one sample -------------------------------------------------------------------------

    def sample(self, group: GroupPlan, pass_: PassPlan, index: int, item: Any, has_item: bool) -> dict[str, Any]:
        """Runs one sample through ``pass_`` and returns the pass's outputs."""
        whole = {n: self.value(n) for n in pass_.needs if n in self.graph.nodes or n in self.values}
        if not has_item:
            items, cleanup = self._open_source(group, whole)
            try:
                item = _nth(items, index, group.source)
            finally:
                close = getattr(items, "close", None)
                if close is not None:
                    close()
                cleanup()
        spec = PassSpec(group.source, pass_.number, pass_.computes, pass_.outputs)
        result = self._checked(group, pass_, run_chunk(self.graph.nodes, spec, whole, [index], [item]))
        return {o: result.columns[o][0] for o in pass_.outputs}


def _guarded(items: Iterator[Any], source: Node) -> Iterator[Any]:
    """The source's items; an error raised while producing one is the source's error."""
    index = 0
    try:
        while True:
            try:
                item = next(items)
            except StopIteration:
                return
            except Exception as exc:
                raise NodeError(
                    source.name, source.location, f"{describe(exc)} (while producing sample {index})"
                ) from exc.with_traceback(user_traceback(exc.__traceback__))
            yield item
            index += 1
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()


def _pickled_context(spec: PassSpec, whole: Mapping[str, Any]) -> bytes:
    """The pass and its whole values as bytes, sent with every chunk (unpickled once per worker)."""
    try:
        return pickle.dumps((spec, dict(whole)), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        for name, value in whole.items():
            try:
                pickle.dumps(value)
            except Exception as exc:
                raise FlowdataError(
                    f"'{name}' (a {type(value).__name__}) is read by group '{spec.group}' but cannot "
                    f"be sent to worker processes: {describe(exc)}\n"
                    "  fix: return a picklable value (no lambdas, open files or locks), or use "
                    "executor='inline'"
                ) from exc
        raise


def _nth(items: Iterator[Any], index: int, source: str) -> Any:
    for i, item in enumerate(islice(items, index + 1)):
        if i == index:
            return item
    raise InputError(f"source '{source}' has no sample {index}: it ended before it")


def _nothing() -> None:
    return None


def _node_error(node: Node, exc: BaseException) -> NodeError:
    return NodeError(node.name, node.location, describe(exc))


def _call_collect(node: Node, args: dict[str, Any], tee: Tee, r: int) -> Any:
    try:
        return node.fn(**args, **collect_iterables(node, tee, r))
    except FlowdataError:
        raise
    except Exception as exc:
        raise _node_error(node, exc) from exc.with_traceback(user_traceback(exc.__traceback__))
    finally:
        tee.close(r)


def _reduce_all(folders: list[Folder], tee: Tee, r: int) -> dict[str, Any]:
    """Reads every chunk of the pass (reductions never stop early) into the folders."""
    try:
        while (chunk := tee.next(r)) is not None:
            for folder in folders:
                folder.add(chunk)
        return {f.spec.node: f.finish() for f in folders}
    finally:
        tee.close(r)


def _result_of(node: Node, reducer: Any) -> Any:
    try:
        return reducer.result()
    except Exception as exc:
        raise _node_error(node, exc) from exc.with_traceback(user_traceback(exc.__traceback__))


