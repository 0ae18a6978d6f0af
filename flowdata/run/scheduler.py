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
  and streams its samples through the :class:`~flowdata.run.engine.Engine`.

Every Collect node fed by a pass reads one shared stream of its chunks (see
:mod:`flowdata.run.consumers`): plain Collect functions each in their own thread,
reductions together in one more (see :mod:`flowdata.run.folding`). A Collect function
that stops early stops the upstream work, unless a reduction still needs every sample.

A **batch node** fed by pass ``k`` is computed like a Collect node, by running the pass:
it reads the pass's values in sample order, cut into batches of ``batch_size``, and its
value is the list of its value on each batch (see :mod:`flowdata.run.batches`).

A source that takes ``Collect[...]`` parameters closes one group and opens the next: when
its own group is opened, the closed group's pass is run as a stream feeding it.

Under ``torch.distributed`` (the engine has :class:`~flowdata.run.distributed.ranks.Ranks`), a pass
whose consumers are reductions over an index is shared: each rank computes its run of
whole blocks, and the reducers are chained across the ranks in block order; any other
pass is computed whole by every rank. Each step that may fail on one rank runs inside
``ranks.together``, so that every rank raises and none waits (see :mod:`flowdata.run.distributed.ranks`).

The training iterator builds on the same object: it asks for the whole values a pass
reads (:meth:`Run.pass_whole`, statistics included) and opens sources through
:meth:`Run.open_source`, so both see the same values, errors and skips.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from flowdata.run.caching.passcache import PassCache
from flowdata.discover import Program
from flowdata.errors import FlowdataError, InputError, NodeError, describe, user_traceback
from flowdata.graph import Graph
from flowdata.node import Node, Role
from flowdata.plan import Analysis, GroupPlan, PassPlan, Plan
from flowdata.report import Report, Skip
from flowdata.run.batches import BatchStep, batch_step, collate_rows, consume_batches
from flowdata.run.caching.keys import ReductionCache
from flowdata.run.consumers import JobThread, Tee, call_collect, collect_arguments, reduce_all, run_jobs
from flowdata.run.executors import Executor, InlineExecutor, resolve_executor
from flowdata.run.folding import Folder
from flowdata.run.kernel import ChunkResult, FoldSpec, PassSpec, failure_of, return_type_error
from flowdata.run.engine import Engine
from flowdata.run.recorder import OnError, Recorder
from flowdata.run.distributed.ranks import Ranks, skips_payload
from flowdata.run.caching.samplecache import SampleCache
from flowdata.run.sources.adapters import IterableSource, Source, as_source, call_source
from flowdata.typecheck import contradicts

__all__ = ["FROM_SOURCE", "Run", "execute", "run_sample"]

_log = logging.getLogger("flowdata")


class _FromSource:
    """The item of ``run_sample()`` when none was given: read from the source."""

    def __repr__(self) -> str:
        return "FROM_SOURCE"


FROM_SOURCE: Any = _FromSource()


class Run:
    """One call: its values and how to compute them.

    Args:
        graph: The graph.
        analysis: Roles and groups.
        plan: What the call computes.
        values: Inputs and overrides supplied by the caller.
        engine: Runs the passes (executor, error policy, report).
        cache: Where reduction results are kept between calls, or None.
        batch_size: Samples per batch for batch nodes computed by ``execute()``.
    """

    def __init__(
        self,
        graph: Graph,
        analysis: Analysis,
        plan: Plan,
        values: Mapping[str, Any],
        engine: Engine,
        cache: ReductionCache | None = None,
        batch_size: int = 32,
    ):
        self.graph = graph
        self.analysis = analysis
        self.plan = plan
        self.values: dict[str, Any] = dict(values)
        self.engine = engine
        self.cache = cache
        self.batch_size = batch_size
        self.reducers: dict[str, Any] = {}
        self._sources: dict[str, Source] = {}

    @classmethod
    def open(
        cls,
        graph: Graph,
        analysis: Analysis,
        program: Program,
        plan: Plan,
        values: Mapping[str, Any],
        executor: Executor,
        recorder: Recorder,
        *,
        chunk_size: int | None = None,
        cache_dir: str | None = None,
        timeout: float | None = None,
        samples: SampleCache | None = None,
        batch_size: int = 32,
        rank: int = 0,
        world_size: int = 1,
        ranks: Ranks | None = None,
    ) -> Run:
        """A call wired for running: its engine (executor, recorder, timeout, sample cache,
        ranks) and its reduction cache. ``execute()``, ``run_sample()`` and the loaders'
        statistics pass all start here, so a pass runs alike whichever asked for it."""
        engine = Engine(program, graph.nodes, executor, recorder, chunk_size=chunk_size, rank=rank,
                        world_size=world_size, timeout=timeout, ranks=ranks, samples=samples)
        cache = ReductionCache(PassCache(cache_dir), graph.nodes, program) if cache_dir is not None else None
        return cls(graph, analysis, plan, values, engine, cache, batch_size)

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
                value = node.fn(**kwargs)
            except Exception as exc:
                raise _node_error(node, exc) from exc.with_traceback(user_traceback(exc.__traceback__))
            if contradicts(value, node.type):  # named here, not at the consumer it would break
                raise _node_error(node, return_type_error(node, value))
            self.values[name] = value
        elif role in (Role.COLLECT, Role.BATCH):
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

    def pass_whole(self, pass_: PassPlan) -> dict[str, Any]:
        """The whole values a pass reads (computing them, earlier passes included)."""
        return {n: self.value(n) for n in pass_.needs if n in self.graph.nodes or n in self.values}

    def batch_step(self, pass_: PassPlan, outputs: Sequence[str]) -> BatchStep:
        """The batch nodes of ``pass_`` with the whole values they read (computed now),
        handing back ``outputs``."""
        made = set(pass_.batches)
        whole = {p.name: self.value(p.name) for b in pass_.batches for p in self.graph.nodes[b].params
                 if not p.batch and p.name not in made and (p.name in self.graph.nodes or p.name in self.values)}
        return batch_step(self.graph.nodes, pass_.batches, whole, outputs, self.engine.recorder.report)

    def collected(self) -> dict[str, Any]:
        """The Collect results computed so far (what a loader shows as ``stats``)."""
        return {name: self.values[name] for g in self.plan.groups for name in g.collects if name in self.values}

    # --- sources --------------------------------------------------------------------------

    def use_source(self, group: str, source: Source) -> None:
        """Reads ``group``'s items from ``source`` from now on (an index built from them)."""
        self._sources[group] = source

    def open_source(self, group: GroupPlan) -> Source:
        """Calls the source function; a source that collects is fed by the group it closes."""
        if group.source in self._sources:
            return self._sources[group.source]
        node = self.graph.nodes[group.source]
        if group.source in self.values:  # the source overridden with its items
            given = as_source(node, self.values[group.source])
            self._sources[group.source] = given
            return given
        whole = self.pass_whole(group.passes[0])
        kwargs = {p.name: whole[p.name] for p in node.params if not p.collect and p.name in whole}
        closed = self.analysis.closes.get(node.name)
        cleanup: Callable[[], None] = _nothing
        if closed is not None:
            kwargs, cleanup = self._feed_from(closed, node, kwargs)
        try:
            source = call_source(node, kwargs)
        except BaseException:
            cleanup()
            raise
        if cleanup is _nothing:
            return source
        if source.index() is not None:
            cleanup()  # the function has read what it wanted
            return source
        return IterableSource(node, _then(source.open(), cleanup))

    def _feed_from(
        self, closed: str, source: Node, kwargs: dict[str, Any]
    ) -> tuple[dict[str, Any], Callable[[], None]]:
        """Streams a pass of group ``closed`` into the Collect parameters of ``source``.

        Other Collect nodes fed by the same pass and not yet computed share the stream.
        """
        group = self.plan.group(closed)
        pass_ = group.pass_of(source.name)
        plain, folds = self._consumers(pass_, exclude=source.name)
        jobs = self._jobs(plain, folds, group, pass_)
        tee = Tee(self._chunks(group, pass_, [source, *plain], folds), readers=1 + len(jobs),
                  capacity=_capacity(group))
        threads = [JobThread(job, tee, i + 1) for i, job in enumerate(jobs)]
        for t in threads:
            t.start()
        try:
            kwargs = {**kwargs, **collect_arguments(source, tee, 0)}
        except BaseException:
            tee.close(0)
            raise
        done = False

        def cleanup() -> None:
            nonlocal done
            if done:
                return
            done = True
            tee.close(0)
            for t in threads:
                while t.is_alive():
                    t.join(0.5)  # in slices: a Ctrl-C is noticed (see executors._wait)
            for t in threads:
                t.reraise()
            self._keep(plain, folds, [t.result for t in threads])

        return kwargs, cleanup

    # --- passes ---------------------------------------------------------------------------

    def _run_pass(self, group: GroupPlan, pass_: PassPlan) -> None:
        plain, folds = self._consumers(pass_)
        wanted = [b for b in pass_.batches if b in self.plan.outputs and b not in self.values]
        step = self.batch_step(pass_, wanted) if wanted else None
        ranks = self.engine.ranks
        if ranks is not None and (plain or folds) and step is None:
            self._run_pass_ranks(group, pass_, plain, folds, ranks)
            return
        key = loaded = None
        if self.cache is not None and folds:
            key, loaded = self._cached(group, pass_, folds)
        if loaded is not None:
            self._keep([], folds, [loaded[0]])
            self.engine.recorder.restore(loaded[1])
            folds = []
        if not plain and not folds and step is None:
            return
        jobs = self._jobs(plain, folds, group, pass_)
        if step is not None:  # read by a job of its own, after the plain Collect functions'
            jobs.insert(len(plain), functools.partial(_batch_job, step, self.batch_size, group.source))
        tee = Tee(self._chunks(group, pass_, plain, folds), readers=len(jobs), capacity=_capacity(group))
        results = run_jobs(jobs, tee)
        if step is not None:
            self.values.update(results.pop(len(plain)))
        self._keep(plain, folds, results)
        if key is not None and folds:
            self._save(key, group, pass_, folds)

    def _cached(
        self, group: GroupPlan, pass_: PassPlan, folds: Sequence[FoldSpec]
    ) -> tuple[str | None, tuple[dict[str, Any], list[Skip]] | None]:
        """The pass's cache key and what the cache holds under it (None: compute the pass)."""
        assert self.cache is not None
        key = self.cache.key(group, pass_, folds, self.pass_whole(pass_), lambda: self.open_source(group),
                             chained=group.source in self.analysis.closes)
        loaded = self.cache.load(key, folds, _where(group, pass_)) if key is not None else None
        if loaded is not None and loaded[1] and not self.engine.recorder.skip:
            loaded = None  # stored by a run that skipped samples: under "raise", they must raise
        return key, loaded

    def _save(self, key: str, group: GroupPlan, pass_: PassPlan, folds: Sequence[FoldSpec]) -> None:
        assert self.cache is not None
        self.cache.save(key, folds, self.reducers, _where(group, pass_), {"group": group.source, "pass": pass_.number},
                        self.engine.recorder.skips_of(group.source))

    def _run_pass_ranks(
        self, group: GroupPlan, pass_: PassPlan, plain: list[Node], folds: list[FoldSpec], ranks: Ranks
    ) -> None:
        """A pass under ``torch.distributed``, shared between the ranks when it can be (see
        :mod:`flowdata.run.distributed.ranks`): every step that may fail on one rank runs inside
        ``ranks.together``, so a failure anywhere raises everywhere and no rank waits."""
        where, recorder = _where(group, pass_), self.engine.recorder
        key = None
        if self.cache is not None and folds:
            (key, loaded), hits = ranks.together(where, lambda _: self._cached(group, pass_, folds),
                                                 flag=lambda found: found[1] is not None)
            if all(hits):  # one rank missing it (a disk of its own): every rank computes the pass
                assert loaded is not None
                self._keep([], folds, [loaded[0]])
                recorder.restore(loaded[1])
                folds = []
                if not plain:
                    return

        def compute(check: Callable[[], None]) -> tuple[str | None, list[Any], list[Folder]]:
            source = self.open_source(group)
            why = _unshared(group, plain, folds, source)
            part = ranks.share(len(source.index())) if why is None else None  # type: ignore[arg-type]
            folders = [_folder(self.graph.nodes[f.node], f, keep_blocks=part is not None and ranks.rank > 0
                               and not getattr(f.reducer.cls, "exact", False)) for f in folds]
            tee = Tee(_checked(self._chunks(group, pass_, plain, folds, part), check),
                      readers=len(plain) + (1 if folds else 0), capacity=_capacity(group))
            return why, run_jobs(self._jobs(plain, folds, group, pass_, folders), tee), folders

        (why, results, folders), _ = ranks.together(where, compute)
        every = [[Skip(**s) for s in json.loads(b)] for b in ranks.gather(skips_payload(recorder.skips_of(group.source)))]
        if why is None:
            results[-1] = {f.node: ranks.chain(where, folder.total, folder.merged_into,
                                               f.reducer.cls.from_state_dict)
                           for f, folder in zip(folds, folders, strict=True)}
        else:
            _log.info("%s is computed whole by every rank: %s", where, why)
            _same_skips(every, where, why, ranks.world_size)
        self._keep(plain, folds, results)
        recorder.restore([s for rank_skips in every for s in rank_skips], "on other ranks")
        if key is not None and folds:
            # One rank writes; the others wait, then read it -- and write it where they cannot
            # see it (a cache_dir on a disk of their own).
            if ranks.rank == 0:
                self._save(key, group, pass_, folds)
            ranks.barrier()
            if ranks.rank > 0 and self.cache is not None and self.cache.load(key, folds, where) is None:
                self._save(key, group, pass_, folds)

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
                folds.append(FoldSpec(c, node.collect_params[0].name, node.reducer, options, node.location))
        return plain, folds

    def _jobs(
        self, plain: Sequence[Node], folds: Sequence[FoldSpec], group: GroupPlan, pass_: PassPlan,
        folders: list[Folder] | None = None,
    ) -> list[Callable[[Tee, int], Any]]:
        jobs: list[Callable[[Tee, int], Any]] = [
            functools.partial(call_collect, node, self._whole_args(node, skip_collect=True)) for node in plain
        ]
        if folds:
            recorder = self.engine.recorder

            def bad(spec: FoldSpec, index: int, item: Any, error: BaseException) -> None:
                failure = dataclasses.replace(failure_of(self.graph.nodes[spec.node], index, item, error),
                                              reproduce=spec.column)
                recorder.failed(group.source, pass_.number, failure, counted=True)

            if folders is None:
                folders = [_folder(self.graph.nodes[f.node], f) for f in folds]
            jobs.append(functools.partial(reduce_all, folders, bad=bad))
        return jobs

    def _keep(self, plain: Sequence[Node], folds: Sequence[FoldSpec], results: Sequence[Any]) -> None:
        for node, result in zip(plain, results, strict=False):
            self.values[node.name] = result
        if folds:
            reducers: dict[str, Any] = results[-1]
            for f in folds:
                self.reducers[f.node] = reducers[f.node]
                self.values[f.node] = _result_of(self.graph.nodes[f.node], reducers[f.node])

    def _chunks(
        self, group: GroupPlan, pass_: PassPlan, plain: Sequence[Node], folds: Sequence[FoldSpec] = (),
        part: tuple[int, int] | None = None,
    ) -> Iterator[ChunkResult]:
        """Eagerly computes what the pass reads, then returns the lazy stream of its chunks
        (with ``part``: of the samples ``start..stop - 1`` only)."""
        whole = self.pass_whole(pass_)
        wanted = tuple(
            dict.fromkeys([p.name for c in plain for p in c.collect_params] + list(pass_.outputs))
        )
        spec = PassSpec(group.source, pass_.number, pass_.computes, wanted, folds=tuple(folds))
        if group.kind == "sequential":
            return self.engine.in_order(spec, whole, self.open_source(group))
        return self.engine.stream(spec, whole, self.open_source(group), part)

    # --- one sample -------------------------------------------------------------------------

    def sample(self, group: GroupPlan, pass_: PassPlan, index: int, item: Any = FROM_SOURCE) -> dict[str, Any]:
        """Runs one sample through ``pass_`` and returns the pass's outputs (``item``: the
        sample's item as given, or read from the source)."""
        whole = self.pass_whole(pass_)
        if item is FROM_SOURCE:
            opened = self.open_source(group).keyed()  # a source in shards numbers its own samples
            try:
                item = _nth(opened, index, group.source)
            finally:
                close = getattr(opened, "close", None)
                if close is not None:
                    close()
        spec = PassSpec(group.source, pass_.number, pass_.computes, pass_.outputs)
        result = self.engine.one(spec, whole, index, item)
        values = {o: result.columns[o][0] if o != group.source else item for o in pass_.outputs}
        if pass_.batches:  # batch nodes run on a batch of this one sample (first dimension 1)
            step = self.batch_step(pass_, [o for o in self.plan.outputs if o in pass_.batches])
            values.update(step(collate_rows({r: [values[r]] for r in step.reads}), [index],
                               lambda: f"a batch of sample {index} alone"))
        return {o: values[o] for o in self.plan.outputs if o in values}


def _capacity(group: GroupPlan) -> int:
    # A Sequential sample is not pulled before every consumer took the one before it.
    return 1 if group.kind == "sequential" else 4


def _folder(node: Node, spec: FoldSpec, keep_blocks: bool = False) -> Folder:
    try:
        return Folder(spec, keep_blocks)
    except Exception as exc:  # the reducer's constructor refused the node's options
        raise _node_error(node, exc) from exc.with_traceback(user_traceback(exc.__traceback__))


def _unshared(group: GroupPlan, plain: Sequence[Node], folds: Sequence[FoldSpec], source: Source) -> str | None:
    """Why the ranks cannot share a pass (each computes it whole), or None when they can."""
    if plain:
        return (f"plain Collect function(s) {', '.join(repr(n.name) for n in plain)} read every value "
                "(a reduction shares the work)")
    if group.kind == "sequential" or source.index() is None:
        return f"source '{group.source}' is a stream, not an index"
    for f in folds:
        if not (hasattr(f.reducer.cls, "state_dict") and hasattr(f.reducer.cls, "from_state_dict")):
            return f"reducer {f.reducer.cls.__name__} of '{f.node}' has no state_dict/from_state_dict"
    return None


def _checked(chunks: Iterator[ChunkResult], check: Callable[[], None]) -> Iterator[ChunkResult]:
    """The chunks, stopping with ``check()``'s error as soon as another rank has failed."""
    try:
        check()
        for chunk in chunks:
            yield chunk
            check()
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def _same_skips(every: Sequence[Sequence[Skip]], where: str, why: str, world_size: int) -> None:
    """Raises (alike on every rank) when ranks that each computed a whole pass skipped
    different samples: their results would differ."""
    sets = [{s.index for s in rank_skips} for rank_skips in every]
    if all(one == sets[0] for one in sets):
        return
    union = set().union(*sets)
    odd = sorted(i for i in union if any(i not in one for one in sets))
    lines = [f"  sample {i}: skipped on rank(s) {', '.join(str(r) for r, one in enumerate(sets) if i in one)} only"
             for i in odd[:5]]
    raise FlowdataError(
        f"the {world_size} ranks skipped different samples in {where}, which every rank computed whole "
        f"({why}), so their results differ:\n" + "\n".join(lines) + ("\n  ..." if len(odd) > 5 else "")
        + "\n  fix: make the failure happen on every rank (a transient read error: retry inside the node), "
        "or compute the Collect result with a reduction, which the ranks share"
    )


def _then(items: Iterator[Any], cleanup: Callable[[], None]) -> Iterator[Any]:
    try:
        yield from items
    finally:
        cleanup()


def _where(group: GroupPlan, pass_: PassPlan) -> str:
    return f"pass {pass_.number} of group '{group.source}'"


def _batch_job(step: BatchStep, batch_size: int, group: str, tee: Tee, r: int) -> dict[str, list[Any]]:
    """Reader ``r`` of a pass, computing ``step`` on its batches (see consume_batches)."""

    def chunks() -> Iterator[ChunkResult]:
        while (chunk := tee.next(r)) is not None:
            yield chunk

    try:
        return consume_batches(step, batch_size, chunks(), group)
    finally:
        tee.close(r)


def _nth(items: Iterable[tuple[int, Any]], index: int, source: str) -> Any:
    """The item of sample ``index`` among ``(index, item)`` pairs in increasing order; past
    the end, an error that says how many samples there are."""
    count, last = 0, -1
    for i, item in items:
        if i == index:
            return item
        if i > index:
            raise InputError(f"source '{source}' has no sample {index}: its samples skip from {last} to {i}\n"
                             "  fix: ask for one of the indices it has")
        count, last = count + 1, i
    if not count:
        raise InputError(f"source '{source}' has no sample {index}: it yields no samples with these inputs\n"
                         "  fix: check the inputs that say what it reads")
    ends = f"0 to {last}" if last == count - 1 else f"up to {last}"
    raise InputError(f"source '{source}' has no sample {index}: it has {count} sample{'s' if count != 1 else ''} "
                     f"(indices {ends})\n  fix: ask for an index from {ends}")


def _nothing() -> None:
    return None


def _node_error(node: Node, exc: BaseException) -> NodeError:
    return NodeError(node.name, node.location, describe(exc))


def _result_of(node: Node, reducer: Any) -> Any:
    try:
        return reducer.result()
    except Exception as exc:
        raise _node_error(node, exc) from exc.with_traceback(user_traceback(exc.__traceback__))


def execute(
    graph: Graph,
    analysis: Analysis,
    program: Program,
    plan: Plan,
    values: Mapping[str, Any],
    *,
    executor: object = None,
    chunk_size: int | None = None,
    cache_dir: str | None = None,
    on_error: OnError = "raise",
    report: Report | None = None,
    timeout: float | None = None,
    samples: SampleCache | None = None,
    batch_size: int = 32,
) -> dict[str, Any]:
    """Computes a plan's outputs (``Driver.execute()``); closes an executor it made itself."""
    ex, owned = resolve_executor(executor)
    try:
        run = Run.open(graph, analysis, program, plan, values, ex,
                       Recorder(report if report is not None else Report(), on_error), chunk_size=chunk_size,
                       cache_dir=cache_dir, timeout=timeout, samples=samples, batch_size=batch_size)
        return {o: run.value(o) for o in plan.outputs}
    finally:
        close = getattr(ex, "close", None) if owned else None
        if close is not None:
            close()


def run_sample(
    graph: Graph,
    analysis: Analysis,
    program: Program,
    plan: Plan,
    values: Mapping[str, Any],
    group: str,
    index: int,
    item: Any = FROM_SOURCE,
    samples: SampleCache | None = None,
) -> dict[str, Any]:
    """One sample through its group's output pass, in this process (``Driver.run_sample()``)."""
    g = plan.group(group)
    pass_ = next(p for p in g.passes if p.outputs)
    run = Run.open(graph, analysis, program, plan, values, InlineExecutor(), Recorder(Report()), samples=samples)
    return run.sample(g, pass_, index, item)
