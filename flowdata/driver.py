"""Builder and Driver: a thin facade over the compiler (:mod:`flowdata.compiler`) and the
run side (:mod:`flowdata.run`)."""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar, overload

from flowdata.compiler import compile_modules, inputs_like_nodes, load_module
from flowdata.discover import Program, program_of
from flowdata.errors import (
    FlowdataError,
    GraphError,
    InputError,
    InputLikeNodeWarning,
    UnreadInputWarning,
)
from flowdata.graph import Graph
from flowdata.node import Node, Role
from flowdata.plan import Analysis, Plan, make_plan
from flowdata.report import Report, check_max_skipped
from flowdata.spelling import near

if TYPE_CHECKING:
    import torch

    from flowdata.loader import DataLoader, LaneDataset, PassDataset, StreamDataset
    from flowdata.run import SampleCache

__all__ = ["Builder", "Call", "Driver", "InputLikeNodeWarning", "UnreadInputWarning"]

P = ParamSpec("P")
R = TypeVar("R")
_MISSING: Any = object()


def _public(fn: Callable[P, R]) -> Callable[P, R]:
    """Re-raises flowdata's errors without flowdata's frames in front of the user's."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except FlowdataError as exc:
            raise exc.with_traceback(None) from exc.__cause__

    return wrapper


@dataclass(frozen=True)
class Call:
    """One call resolved against the graph (:meth:`Driver.resolve`): what every way of
    running it -- ``execute()``, ``run_sample()``, ``dataset()``, ``dataloader()`` -- starts
    from.

    Attributes:
        outputs: The outputs asked for, in order.
        values: The whole values the call is given: config, then inputs, then overrides.
        replaced: Nodes whose values the call gives (overrides, and inputs named like a node):
            they and what only they needed are not computed.
        plan: The call's plan (groups, passes, once nodes).
    """

    outputs: tuple[str, ...]
    values: Mapping[str, Any]
    replaced: tuple[str, ...]
    plan: Plan


class Builder:
    """Collects modules and config, then builds a :class:`Driver`.

    Each ``with_*`` call returns a new builder; a builder is never changed.
    """

    def __init__(
        self, modules: tuple[ModuleType, ...] = (), config: Mapping[str, Any] | None = None,
        module_overrides: bool = False,
    ):
        self._modules = modules
        self._config: Mapping[str, Any] = dict(config or {})
        self._module_overrides = module_overrides

    def with_modules(self, *modules: ModuleType | str) -> Builder:
        """Adds modules (objects, dotted names or ``.py`` paths) whose functions are nodes."""
        return Builder(self._modules + tuple(load_module(m) for m in modules), self._config, self._module_overrides)

    def with_config(self, config: Mapping[str, Any]) -> Builder:
        """Adds configuration (read by ``@config.when`` and other modifiers; also inputs)."""
        return Builder(self._modules, {**self._config, **config}, self._module_overrides)

    def allow_module_overrides(self) -> Builder:
        """Lets a node defined in a later module replace the one of the same name in an
        earlier module (as Hamilton's ``allow_module_overrides()``); without it, that is
        FD004 duplicate-node. The order of ``with_modules`` decides which one wins."""
        return Builder(self._modules, self._config, True)

    @_public
    def build(self) -> Driver:
        """Compiles the graph.

        Raises:
            GraphError: with every problem found, if there is any.
        """
        return Driver(self._modules, self._config, module_overrides=self._module_overrides)


def _warn_inputs_like_nodes(graph: Graph, config: Mapping[str, Any]) -> None:
    """Warns about each input spelt almost like a node (see :func:`inputs_like_nodes`)."""
    for message in inputs_like_nodes(graph, config):
        warnings.warn(message, InputLikeNodeWarning, stacklevel=_user_stacklevel())


def _user_stacklevel() -> int:
    """The stacklevel of the first frame outside flowdata (the user's call)."""
    here = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(here):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


class Driver:
    """A compiled graph and the ways to run it.

    Build one with :class:`Builder`. The graph and its analysis are immutable; every call
    makes its own plan.
    """

    def __init__(
        self, modules: Sequence[ModuleType], config: Mapping[str, Any] | None = None, *,
        module_overrides: bool = False,
    ):
        self.modules: tuple[ModuleType, ...] = tuple(modules)
        self.config: Mapping[str, Any] = MappingProxyType(dict(config or {}))
        compiled = compile_modules(self.modules, self.config, module_overrides)
        _warn_inputs_like_nodes(compiled.graph, self.config)  # a typo is often what the problems come from
        if compiled.problems:
            raise GraphError(compiled.problems)
        self.graph: Graph = compiled.graph
        self.analysis: Analysis = compiled.analysis
        self.program: Program = program_of(self.modules, self.config, module_overrides)
        from flowdata.run import scratch

        scratch.remove_stale()  # what a killed run left, whatever this one goes on to do

    @property
    def nodes(self) -> Mapping[str, Node]:
        """Every node, by name."""
        return self.graph.nodes

    def role(self, name: str) -> Role:
        """The role of a node or input."""
        if name in self.graph.inputs:
            return Role.INPUT
        return self.analysis.roles[name]

    def _check_source_overrides(self, outputs: Sequence[str], overrides: Mapping[str, Any]) -> None:
        """A source overridden with a list or tuple of items runs its group over them; with
        anything else (one item), it is refused with the call that does what was meant."""
        from flowdata.errors import short_repr

        def in_group(n: str, source: str) -> bool:
            return self.analysis.group_of.get(n) == source and self.analysis.roles.get(n) is Role.PER_SAMPLE

        for name, value in overrides.items():
            if self.analysis.roles.get(name) is not Role.SOURCE or isinstance(value, (list, tuple)):
                continue  # not a source, or the items its group runs over
            per_sample = ([o for o in outputs if in_group(o, name)]
                          or [n for n in self.graph.nodes if in_group(n, name)][:1])
            fix = (f"to run one item through the group, as Hamilton's single-chain idiom does: "
                   f"driver.run_sample({per_sample!r}, item={short_repr(value)})")
            node = self.graph.nodes[name]
            raise InputError(
                f"cannot override source '{name}' ({node.location}): it yields the samples of its group, "
                f"one value per sample\n  fix: {fix}"
            )

    def _replaced(self, inputs: Iterable[str] | None, overrides: Iterable[str] | None) -> tuple[str, ...]:
        """Nodes whose values the caller gives: overrides, and inputs named like a node
        (an input named like a node replaces that node, and whatever only it needed)."""
        return tuple(dict.fromkeys([*(overrides or ()), *(k for k in inputs or () if k in self.graph.nodes)]))

    def _warn_unread(self, inputs: Mapping[str, Any]) -> None:
        """Warns about inputs no node reads: usually a misspelt name whose default was used."""
        unread = self.graph.unread(inputs)
        if not unread:
            return
        hints = []
        for k in unread:
            close = near(k, self.graph.inputs, cutoff=0.6)
            hints.append(f"'{k}'" + (f" (did you mean '{close}'?)" if close else ""))
        warnings.warn(
            f"input{'s' if len(unread) > 1 else ''} {', '.join(hints)} not read by any node"
            " (a switch read by @config.when chooses functions when the graph is built: give it to"
            " Builder().with_config(), not inputs=)",
            UnreadInputWarning,
            stacklevel=_user_stacklevel(),
        )

    def resolve(
        self,
        outputs: Iterable[str],
        inputs: Mapping[str, Any] | None = None,
        overrides: Mapping[str, Any] | None = None,
        *,
        per_sample: bool = False,
    ) -> Call:
        """Resolves one call: its values (config, inputs, overrides), the nodes they replace,
        and its plan -- checked as every run checks it, with a warning for inputs no node
        reads. ``per_sample=True`` plans per-sample outputs (the loader, ``run_sample()``);
        otherwise they are refused, as ``execute()`` refuses them.

        Raises:
            InputError: an unknown output, a missing input, a per-sample output where whole
                values are asked for, or a source overridden with one item.
        """
        outputs = tuple(outputs)
        values = {**self.config, **(inputs or {}), **(overrides or {})}  # config entries are inputs too, as in Hamilton
        replaced = self._replaced(inputs, overrides)  # an input named like a node replaces it too
        self._check_source_overrides(outputs, {k: values[k] for k in replaced})
        self._warn_unread(inputs or {})
        plan = make_plan(self.graph, self.analysis, outputs, set(values), replaced, allow_per_sample=per_sample)
        return Call(outputs, MappingProxyType(values), replaced, plan)

    @_public
    def plan(
        self,
        outputs: Iterable[str],
        inputs: Mapping[str, Any] | Iterable[str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> Plan:
        """What a call for ``outputs`` computes: groups, passes and once nodes (printable).

        Inputs are not required: a plan shows every input the call would read. Inputs
        named like a node replace it, as in ``execute()`` and ``dataloader()``.
        """
        names = set(self.config) | set(inputs or ()) | set(overrides or ())
        return make_plan(self.graph, self.analysis, outputs, names, self._replaced(inputs, overrides), check_inputs=False)

    @_public
    def execute(
        self,
        outputs: Iterable[str],
        inputs: Mapping[str, Any] | None = None,
        overrides: Mapping[str, Any] | None = None,
        executor: object = None,
        *,
        chunk_size: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache: Iterable[str] | None = None,
        cache_max_bytes: int | None = None,
        on_error: str = "raise",
        max_skipped: int | float | None = None,
        report: Report | None = None,
        timeout: float | None = None,
        batch_size: int = 32,
    ) -> dict[str, Any]:
        """Computes whole values: once nodes, Collect nodes and inputs -- and batch nodes,
        each as the list of its values on the group's batches.

        Args:
            outputs: Names to compute.
            inputs: Values for the graph's inputs.
            overrides: Values that replace nodes (their upstream work is skipped).
            executor: ``"inline"`` (default), ``"processes"``, or an executor object such as
                ``flowdata.ProcessExecutor(num_workers=2)``.
            chunk_size: Samples per chunk sent to the executor (default: adaptive).
            cache_dir: Keep reduction results here; a later call whose pass has the same
                fingerprint (items, code, inputs, config) loads them and skips the pass.
            cache: Per-sample nodes whose values are kept in ``cache_dir`` and read back
                instead of computed again (the sample cache; see docs/caching.md).
            cache_max_bytes: Bytes the sample cache under ``cache_dir`` may take on disk;
                values past it are not cached (counted in ``report.cache``).
            on_error: ``"raise"`` (default) stops at the first sample whose node raises;
                ``"skip"`` leaves that sample out of every pass alike, logs it and records
                it in ``report``.
            max_skipped: With ``"skip"``: raise ``TooManySkipped`` once more samples than
                this are skipped (an int count, or a float fraction of the samples seen).
            report: A :class:`flowdata.Report` to fill with samples seen and skipped and
                per-node time and call counts.
            timeout: Seconds one per-sample node may spend on one sample (default: no
                limit). Past it the sample fails with a ``SampleError`` "timed out after N
                s" (skipped under ``on_error="skip"``); a worker process whose node does not
                respond is ended and replaced.
            batch_size: Samples per batch for batch nodes asked for: the group's samples in
                order, cut into batches of this size (the last may be smaller), collated by
                torch's ``default_collate``; a batch node's result is the list of its value on
                each batch.

        Raises:
            InputError: unknown output, missing input, a per-sample output, or an argument
                with a value it cannot take (before anything runs).
            SampleError: a per-sample node raised (or ran past ``timeout``).
            NodeError: a once or Collect node raised.
            TooManySkipped: more samples skipped than ``max_skipped``.
            WorkerDied: a worker process of the executor died.
        """
        from flowdata.run import check_timeout, execute, on_error_mode

        mode = on_error_mode(on_error)
        seconds = check_timeout(timeout)
        check_max_skipped(max_skipped)
        if chunk_size is not None and (not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1):
            raise InputError(f"chunk_size={chunk_size!r}: expected a positive int, or None to adapt")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise InputError(f"batch_size={batch_size!r}: expected a positive int (samples per batch of batch nodes)")
        call = self.resolve(outputs, inputs, overrides)
        samples = self._sample_cache(cache, cache_dir, cache_max_bytes)  # checks cache_dir first
        if report is None:
            report = Report()
        report.max_skipped = max_skipped
        return execute(
            self.graph, self.analysis, self.program, call.plan, dict(call.values), executor=executor, chunk_size=chunk_size,
            cache_dir=os.fspath(cache_dir) if cache_dir is not None else None, on_error=mode, report=report,
            timeout=seconds, samples=samples, batch_size=batch_size,
        )

    def _sample_cache(self, cache: Iterable[str] | None, cache_dir: str | os.PathLike[str] | None,
                      max_bytes: int | None) -> SampleCache | None:
        """``cache=`` checked against the graph (None when no node is named)."""
        from flowdata.run import SampleCache

        # Checked here, where every call (execute, dataset, dataloader, run_sample) passes it.
        if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
            raise InputError(f"cache_dir={cache_dir!r}: expected a folder's path (a str or os.PathLike), or None")
        names = [cache] if isinstance(cache, str) else list(cache or ())
        if not names:
            return None
        if cache_dir is None:
            raise InputError(f"cache={names!r} needs cache_dir=: the folder the values are kept in")
        if max_bytes is not None and (not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0):
            raise InputError(f"cache_max_bytes={max_bytes!r}: expected a number of bytes (an int >= 0), or None")
        return SampleCache.of(names, os.fspath(cache_dir), max_bytes, self.graph.nodes, self.analysis.per_sample,
                              lambda n: self.graph.ancestors([n]))

    # The declared type is what comes back: an indexed dataset (len(), ds[i]) unless
    # streaming=True asks for a stream (iterable, no len).
    @overload
    def dataset(
        self, outputs: Iterable[str], inputs: Mapping[str, Any] | None = None, *, seed: int = 0,
        on_error: str = "raise", cache_dir: str | os.PathLike[str] | None = None, cache: Iterable[str] | None = None,
        streaming: Literal[False] = False,
    ) -> PassDataset: ...

    @overload
    def dataset(
        self, outputs: Iterable[str], inputs: Mapping[str, Any] | None = None, *, seed: int = 0,
        on_error: str = "raise", cache_dir: str | os.PathLike[str] | None = None, cache: Iterable[str] | None = None,
        streaming: Literal[True],
    ) -> StreamDataset | LaneDataset: ...

    @overload
    def dataset(
        self, outputs: Iterable[str], inputs: Mapping[str, Any] | None = None, *, seed: int = 0,
        on_error: str = "raise", cache_dir: str | os.PathLike[str] | None = None, cache: Iterable[str] | None = None,
        streaming: bool,
    ) -> PassDataset | StreamDataset | LaneDataset: ...

    @_public
    def dataset(
        self,
        outputs: Iterable[str],
        inputs: Mapping[str, Any] | None = None,
        *,
        seed: int = 0,
        on_error: str = "raise",
        cache_dir: str | os.PathLike[str] | None = None,
        cache: Iterable[str] | None = None,
        streaming: bool = False,
    ) -> PassDataset | StreamDataset | LaneDataset:
        """The torch ``Dataset`` under ``dataloader()`` (statistics of earlier passes
        computed first, inline).

        ``streaming=False`` (the default) gives a ``PassDataset``: ``len(ds)`` samples,
        ``ds[i]`` is sample ``i``'s outputs. A group that can only be streamed (a
        ``Sequential`` source, or a source returning a stream in shards such as a
        ``datasets.IterableDataset``) is refused then (``InputError``), so that the declared
        type is what comes back. ``streaming=True`` gives a ``StreamDataset`` (or a
        ``LaneDataset`` for a stream in shards): an ``IterableDataset`` of one dict per
        sample, with no length.
        """
        from flowdata.loader.build import build_dataset
        from flowdata.loader.options import LoaderOptions

        if not isinstance(streaming, bool):
            raise InputError(f"streaming={streaming!r}: expected True (a stream, no len) or False (indexed)")
        options = LoaderOptions(seed=seed, on_error=on_error, cache_dir=cache_dir, streaming=streaming,
                                samples=self._sample_cache(cache, cache_dir, None))
        return build_dataset(self, tuple(outputs), inputs, options)

    @_public
    def dataloader(
        self,
        outputs: Iterable[str],
        inputs: Mapping[str, Any] | None = None,
        *,
        batch_size: int = 1,
        shuffle: bool = False,
        seed: int = 0,
        num_workers: int = 0,
        prefetch_factor: int | None = 2,
        pin_memory: bool = False,
        drop_last: bool = False,
        even_batches: bool = True,
        persistent_workers: bool = False,
        collate_fn: Callable[[list[dict[str, Any]]], Any] | None = None,
        on_error: str = "raise",
        max_skipped: int | float | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache: Iterable[str] | None = None,
        cache_max_bytes: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        multiprocessing_context: Any = None,
        progress: bool = False,
        streaming: bool = False,
        shuffle_buffer: int = 1024,
        worker_init_fn: Callable[[int], None] | None = None,
        executor: object = None,
        timeout: float | None = None,
        device: str | torch.device | None = None,
    ) -> DataLoader:
        """A ``flowdata.DataLoader`` (a ``torch.utils.data.DataLoader``) over per-sample outputs.

        The statistics the outputs need (Collect results of earlier passes) are computed
        first, with ``num_workers`` worker processes, and kept in ``loader.stats``. Then each
        batch is computed in a DataLoader worker, column by column, and arrives as a dict
        keyed by output name. A ``Sequential`` group, or ``streaming=True``, streams the
        source in every worker instead of indexing it (an ``IterableDataset`` sharded by item
        position, with a ``shuffle_buffer``-item shuffle buffer). ``executor`` runs the
        statistics pass (default: ``num_workers`` processes, or inline). ``timeout`` bounds the
        seconds one per-sample node may spend on one sample, in the statistics pass and every
        epoch, as in ``execute()`` (it is not torch's ``timeout``, which bounds the wait for a
        batch). ``device`` moves each batch's tensors there in this process (``non_blocking``
        with ``pin_memory``); under Accelerate's ``prepare()`` it defaults to
        ``accelerator.device``. Batch nodes among ``outputs`` (``Batch[T]`` parameters) run on
        each collated batch in this process, after that move -- never in a worker. Under
        several ranks, ``even_batches`` (the default) gives every rank the same number of
        batches of the same sizes by repeating a few samples (``loader.padding(b)`` counts
        them in batch ``b``); ``even_batches=False`` deals every sample exactly once,
        unevenly. See docs/training.md.

        Faults raise what ``execute()`` raises for them (docs/errors.md has the table): an
        ``InputError`` for a bad argument, before the statistics pass; a ``WorkerDied`` for a
        DataLoader worker that dies while the loader is iterated.
        """
        from flowdata.loader.build import build_loader
        from flowdata.loader.options import LoaderOptions
        from flowdata.run import check_timeout

        rank, world_size = _ranks(rank, world_size)
        options = LoaderOptions(
            batch_size=batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last, even_batches=even_batches,
            rank=rank, world_size=world_size,
            streaming=streaming, shuffle_buffer=shuffle_buffer, on_error=on_error, max_skipped=max_skipped,
            cache_dir=cache_dir, collate_fn=collate_fn, progress=progress, num_workers=num_workers,
            multiprocessing_context=multiprocessing_context, executor=executor,
            timeout=check_timeout(timeout), samples=self._sample_cache(cache, cache_dir, cache_max_bytes),
        )
        return build_loader(self, tuple(outputs), inputs, options, prefetch_factor=prefetch_factor,
                            pin_memory=pin_memory, persistent_workers=persistent_workers,
                            worker_init_fn=worker_init_fn, device=device)

    @_public
    def visualize(
        self,
        path: str | os.PathLike[str] | None = None,
        outputs: Iterable[str] | None = None,
        inputs: Mapping[str, Any] | Iterable[str] | None = None,
        *,
        format: str | None = None,
        show_types: bool = True,
        show_passes: bool = True,
        orient: str = "LR",
        report: Report | None = None,
        legend: bool = True,
    ) -> Any:
        """Draws the graph: groups as dotted clusters, passes, roles, types, a legend.

        Args:
            path: Where to render (format from the suffix, or ``format``); None draws
                nothing to disk. Rendering needs graphviz's ``dot``; ``.source`` does not.
            outputs: Draw only what these need.
            inputs: Accepted for symmetry with ``plan()``; the picture does not need them.
            format: ``"svg"``, ``"png"``, ``"pdf"``, ... (default: the suffix of ``path``).
            show_types: Label edges with the type of the value they carry.
            show_passes: Colour and label per-sample and Collect nodes by pass.
            orient: ``"LR"`` or ``"TB"``.
            report: A run's :class:`flowdata.Report` (``loader.report``, or one given to
                ``execute(report=...)``): colours nodes by their share of time, with call
                counts and skips.
            legend: Draw the legend of shapes.

        Returns:
            The ``graphviz.Digraph``.
        """
        from flowdata.viz import to_dot

        dot = to_dot(
            self.graph, self.analysis, outputs=outputs, show_types=show_types, show_passes=show_passes,
            orient=orient, report=report, legend=legend,
        )
        if path is not None:
            _render(dot, os.fspath(path), format)
        return dot

    def to_mermaid(self, outputs: Iterable[str] | None = None, *, orient: str = "LR") -> str:
        """The graph as a Mermaid flowchart (for Markdown), groups as subgraphs."""
        from flowdata.viz import to_mermaid

        return to_mermaid(self.graph, self.analysis, outputs=None if outputs is None else list(outputs), orient=orient)

    @_public
    def run_sample(
        self,
        outputs: Iterable[str],
        *,
        item: Any = _MISSING,
        index: int = 0,
        inputs: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache: Iterable[str] | None = None,
    ) -> dict[str, Any]:
        """Runs one sample through its group: the debugging path for a subgraph.

        Args:
            outputs: Per-sample nodes of one group, and batch nodes of it (computed on a
                batch of this one sample: their values have a first dimension of 1).
            item: The source item to run; if left out, the source is run up to ``index``.
            index: The sample index (used for ``sample_index``/``sample_rng`` too).
            inputs: Values for the graph's inputs.
            cache_dir: The sample cache's folder (with ``cache``).
            cache: Per-sample nodes read from (and written to) the sample cache.

        Whole values the group reads (Collect results of earlier passes included) are
        computed first.
        """
        outputs = tuple(outputs)
        values = {**self.config, **(inputs or {})}
        self._warn_unread(inputs or {})
        not_per_sample = [o for o in outputs if o in self.graph.nodes and not self.analysis.per_sample(o)
                          and not self.analysis.batch(o)]
        plan = None
        if item is not _MISSING and outputs and not not_per_sample and outputs[0] in self.graph.nodes:
            # With the item given, the source is not called for this sample: unless an
            # earlier pass needs it, its inputs are not needed.
            source = self.graph.nodes[self.analysis.group_of[outputs[0]]]
            plan = make_plan(
                self.graph, self.analysis, outputs, set(values) | {p.name for p in source.params},
                self._replaced(inputs, None), allow_per_sample=True,
            )
            if len(plan.group(source.name).passes) > 1:
                plan = None
        if plan is None:
            plan = make_plan(self.graph, self.analysis, outputs, set(values), self._replaced(inputs, None),
                             allow_per_sample=True)
        if not_per_sample or not plan.groups:
            raise InputError(
                "run_sample() runs per-sample nodes, but "
                + (
                    f"{', '.join(repr(o) for o in not_per_sample)} "
                    + ("is a whole value" if len(not_per_sample) == 1 else "are whole values")
                    if not_per_sample
                    else "nothing asked for is per-sample"
                )
                + "\n  fix: use execute() for once and Collect nodes"
            )
        from flowdata.run import FROM_SOURCE, run_sample

        samples = self._sample_cache(cache, cache_dir, None)
        return run_sample(self.graph, self.analysis, self.program, plan, values, self.analysis.group_of[outputs[0]],
                          index, FROM_SOURCE if item is _MISSING else item, samples)


def _ranks(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """``rank``/``world_size`` as given, else from ``torch.distributed`` when initialised."""
    if rank is None or world_size is None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            rank = dist.get_rank() if rank is None else rank
            world_size = dist.get_world_size() if world_size is None else world_size
    # Only None falls back: world_size=0 is refused with the other bad values, not made 1.
    return (0 if rank is None else rank), (1 if world_size is None else world_size)


def _render(dot: Any, path: str, format: str | None) -> None:
    """Renders a Digraph to ``path`` (format from the suffix unless given)."""
    import graphviz

    stem, suffix = os.path.splitext(path)
    fmt = format or suffix.lstrip(".") or "svg"
    try:
        dot.render(outfile=path if suffix else f"{path}.{fmt}", format=fmt, cleanup=True)
    except graphviz.ExecutableNotFound as exc:
        raise FlowdataError(
            f"rendering {path!r} needs graphviz's 'dot' program, which is not installed\n"
            "  fix: apt-get install graphviz (or brew install graphviz); the DOT text is in "
            "driver.visualize().source meanwhile"
        ) from exc
