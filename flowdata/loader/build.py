"""Building a training iterator: plan, statistics pass, index, dataset, loader.

:func:`build_loader` and :func:`build_dataset` are what ``Driver.dataloader()`` and
``Driver.dataset()`` delegate to. Both plan the call, run the passes the outputs need
first (the statistics pass) on the engine -- with the executor given, or a process pool of
``num_workers`` -- and make the dataset of the group's last pass:

- a ``Parallel`` group is **indexed**: the source is opened through the engine (so a
  failing source is a ``NodeError`` naming it, and a source that collects another group is
  fed by that group's pass, as in ``execute()``); a sized, indexable return value is the
  index as it is, anything else is stored once in an Arrow index (paths and metadata, never
  decoded arrays), which the statistics pass then reads instead of calling the source again;
- a ``Sequential`` group, or ``streaming=True``, is **streamed**: every DataLoader worker
  opens the source itself (see :class:`~flowdata.loader.datasets.StreamDataset`). A
  source that collects another group cannot be streamed (its input group's pass would run
  in every worker): it is refused with an ``InputError``.

Samples skipped in the statistics pass are left out of every epoch.

Batch nodes among the outputs are not part of the dataset: it delivers the per-sample
values they read, and the loader computes them on each collated batch in the process that
iterates it (:class:`~flowdata.run.batches.BatchStep`). ``dataset()`` refuses them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from flowdata.errors import InputError
from flowdata.node import Role
from flowdata.report import Report
from flowdata.run import (
    BatchStep, IndexSource, ItemsPrint, PassSpec, Recorder, Run, Shards, Watch, block_reprs, indexed, items_print,
    on_error_mode, ranks_of,
)
from flowdata.loader.datasets import PassDataset, StreamDataset
from flowdata.loader.lanes import LaneDataset
from flowdata.loader.evening import Evening
from flowdata.loader.dataloader import DataLoader, progress_bar
from flowdata.loader.options import LoaderOptions, check, statistics_executor
from flowdata.loader.order import EpochBatches

if TYPE_CHECKING:
    from flowdata.driver import Driver

__all__ = ["build_dataset", "build_loader"]

_log = logging.getLogger("flowdata")


def _refuse_split_by_node(source: str, opened: object, options: LoaderOptions) -> None:
    """A stream already split by node would be split between ranks twice: refused."""
    from flowdata.run import refuse_split_by_node

    refuse_split_by_node(source, opened, options.world_size)


def _refuse_stream(source: str, why: str) -> None:
    """``dataset()`` without ``streaming=True`` over a group that can only stream: refused,
    as its declared type (an indexed ``PassDataset``) would not be what comes back."""
    raise InputError(
        f"dataset() gives an indexed PassDataset (len(ds), ds[i]) unless streaming=True, but source "
        f"'{source}' {why}: it can only be streamed, as a dataset with no length\n"
        "  fix: dr.dataset(..., streaming=True) (an IterableDataset of one dict per sample)"
    )


def _say_fallback(source: str, shards: int, options: LoaderOptions) -> None:
    """Logs, once, that a stream has fewer shards than consumers (rows are read again)."""
    workers = max(1, options.num_workers)
    consumers = options.world_size * workers
    if shards < consumers:
        _log.info(
            "source '%s' has %d shard(s) for %d consumers (%d rank(s) x %d worker(s)): each consumer reads a "
            "whole shard and keeps its share of the rows, so every row is read about %d times and delivered "
            "once; give the stream at least %d shards to read each row once",
            source, shards, consumers, options.world_size, workers, -(-consumers // shards), consumers)


def _say_uneven(source: str, options: LoaderOptions) -> None:
    """Logs, once per loader, that a stream in shards cannot be evened out between ranks
    that are not a ``torch.distributed`` process group (rank and world_size given by hand)."""
    if options.world_size > 1 and options.even_batches:
        _log.info(
            "source '%s' is a stream in shards read by rank %d of %d, but torch.distributed has no process group "
            "of those ranks: each rank reads only its own shards, whose lengths are not known ahead, and without "
            "a group the ranks cannot even out their batch counts as they go (even_batches); a step that all ranks "
            "take together needs a process group initialised before the loader is built",
            source, options.rank, options.world_size)


def build_dataset(
    driver: Driver, outputs: Sequence[str], inputs: Mapping[str, Any] | None, options: LoaderOptions,
) -> PassDataset | StreamDataset | LaneDataset:
    """The dataset of ``Driver.dataset()``: one dict per sample; indexed (a ``PassDataset``,
    or an ``InputError`` for a group that can only stream) unless ``options.streaming``."""
    return _build(driver, outputs, inputs, options, loader=False)[0]


def _build(
    driver: Driver, outputs: Sequence[str], inputs: Mapping[str, Any] | None, options: LoaderOptions,
    *, loader: bool, watch: str | None = None,
) -> tuple[PassDataset | StreamDataset | LaneDataset, list[int], dict[str, Any], Recorder, BatchStep | None]:
    """Plans the call, computes what the last pass reads, and makes its dataset.

    ``loader``: the dataset is ``flowdata.DataLoader``'s (a stream yields collated
    batches, batch nodes are allowed); else ``dataset()``'s (one dict per sample, indexed
    unless ``options.streaming``). ``watch``: the watch folder of the loader's workers
    (``timeout`` with workers).

    Returns the dataset, the sample indices to iterate (map-style; those skipped in the
    statistics pass left out), the Collect results computed on the way (``loader.stats``),
    the recorder (report and skips) the loader goes on with, and the batch nodes to compute
    on each collated batch (None when the outputs hold none; refused unless ``batches``).
    """
    check(options)
    require_index = not loader and not options.streaming
    outputs = tuple(outputs)
    on_error = on_error_mode(options.on_error)
    call = driver.resolve(outputs, inputs, per_sample=True)
    values, plan, analysis = dict(call.values), call.plan, driver.analysis
    batch_outputs = [o for o in outputs if analysis.batch(o)]
    if batch_outputs and not loader:
        raise InputError(
            f"dataset() gives per-sample values, but {', '.join(repr(o) for o in batch_outputs)} "
            + ("is a batch node" if len(batch_outputs) == 1 else "are batch nodes")
            + ", computed on collated batches where the loader is iterated\n"
            "  fix: use dataloader(), or ask dataset() for the per-sample values "
            + ("it reads" if len(batch_outputs) == 1 else "they read")
        )
    whole_outputs = [o for o in outputs if not analysis.per_sample(o) and not analysis.batch(o)]
    if whole_outputs or not outputs:
        what = (
            f"{', '.join(repr(o) for o in whole_outputs)} "
            + ("is a whole value" if len(whole_outputs) == 1 else "are whole values")
            if whole_outputs else "no output was asked for"
        )
        raise InputError(
            f"dataloader() yields per-sample values, but {what}\n"
            "  fix: ask for per-sample nodes of one group; compute whole values with execute()"
        )
    group = plan.group(analysis.group_of[outputs[0]])
    streaming = options.streaming or group.kind == "sequential"
    if streaming and group.source in analysis.closes:
        raise InputError(
            f"source '{group.source}' collects group '{analysis.closes[group.source]}', so it cannot be "
            "streamed: every DataLoader worker would run that group's pass again\n"
            "  fix: leave streaming=False (the source is indexed once, in this process), or execute() "
            "the first group into a list and give it to a source as an input"
        )
    if require_index and streaming:
        _refuse_stream(group.source, "is a Sequential source (its samples are streamed, in order)")
    pass_ = next(p for p in group.passes if p.outputs)
    # What the dataset delivers: the per-sample outputs, and what the batch nodes read.
    delivered = pass_.outputs if pass_.batches else outputs
    step: BatchStep | None = None
    recorder = Recorder(Report(max_skipped=options.max_skipped), on_error)
    executor, owned = statistics_executor(options)
    cache_dir = os.fspath(options.cache_dir) if options.cache_dir is not None else None
    try:
        ranks = ranks_of(options.rank, options.world_size)
        run = Run.open(driver.graph, analysis, driver.program, plan, values, executor, recorder,
                       cache_dir=cache_dir or None, timeout=options.timeout, samples=options.samples,
                       rank=options.rank, world_size=options.world_size, ranks=ranks)
        printed: list[ItemsPrint] = []

        def open_group(_: object = None) -> tuple[IndexSource | None, Shards | None]:
            if group.kind != "parallel":
                return None, None
            # Called here once (a function returning a stream is cheap to call): what it
            # returns decides how the epochs read it.
            opened = run.open_source(group)
            _refuse_split_by_node(group.source, opened, options)
            shards = opened.shards()
            if shards is not None:
                if require_index:
                    _refuse_stream(group.source, f"returned a stream in shards ({type(shards.data).__name__})")
                run.use_source(group.source, opened)  # the statistics pass streams it once, here
                _say_fallback(group.source, shards.num_shards, options)
                if ranks is None:  # ranks given by hand: the loader cannot even them out
                    _say_uneven(group.source, options)
                return None, shards
            if streaming:
                return None, None
            index = indexed(opened, cache_dir)  # elsewhere when cache_dir cannot take it
            run.use_source(group.source, index)
            if ranks is not None:  # what the ranks compare before the samples are dealt
                printed.append(items_print(index.items))
            return index, None

        # Under torch.distributed, a source failing on one rank fails every rank (none waits).
        index, sharded = (ranks.together(f"opening source '{group.source}'", open_group)[0] if ranks is not None
                          else open_group())
        if ranks is not None and index is not None:
            # Every rank reaches this exchange: a rank with no index would have raised in together().
            items = index.items
            ranks.same_items(group.source, printed[0], lambda block: block_reprs(items, block))
        # Ranks sharing the pass each compute a part of it: no total to show.
        total = len(index.items) if index is not None and ranks is None else None
        bar = progress_bar(options.progress, total, 0, "statistics", unit="sample")
        if bar is not None:
            recorder.on_samples = bar.update
        try:
            whole = run.pass_whole(pass_)
            if pass_.batches:  # what they read is computed here too (a statistics pass, maybe)
                step = run.batch_step(pass_, outputs)
        finally:
            recorder.on_samples = None
            if bar is not None:
                bar.close()
    finally:
        if owned:
            close = getattr(executor, "close", None)
            if close is not None:
                close()
    spec = PassSpec(group.source, pass_.number, pass_.computes, delivered, seed=options.seed, timeout=options.timeout,
                    watch=watch)
    if options.samples is not None:  # the epochs read and write the sample cache too
        spec = options.samples.attach(spec, driver.graph.nodes, whole, driver.program.config)
    skip = on_error == "skip"
    skipped = recorder.skipped(group.source)
    dataset: PassDataset | StreamDataset | LaneDataset
    indices: list[int] = []
    if index is None:
        stream: dict[str, Any] = dict(skip=skip, collate_fn=options.collate_fn, nodes=driver.graph.nodes,
                                      exclude=skipped, collated=loader)
        dataset = (LaneDataset(driver.program, spec, whole, delivered, sharded.data, options.order(),
                               workers=options.num_workers, **stream) if sharded is not None
                   else StreamDataset(driver.program, spec, whole, delivered, options.order(), **stream))
    else:
        dataset = PassDataset(driver.program, spec, whole, index.items, delivered, options.seed, skip,
                              options.collate_fn, nodes=driver.graph.nodes)
        indices = [i for i in range(len(index.items)) if i not in skipped]
    # Collect results given by name (e.g. a validation loader fed the training statistics)
    # are part of what the loader was built with.
    given = {n: values[n] for n in call.replaced if analysis.roles.get(n) is Role.COLLECT}
    return dataset, indices, {**given, **run.collected()}, recorder, step


def build_loader(
    driver: Driver,
    outputs: Sequence[str],
    inputs: Mapping[str, Any] | None,
    options: LoaderOptions,
    *,
    prefetch_factor: int | None,
    pin_memory: bool,
    persistent_workers: bool,
    worker_init_fn: Callable[[int], None] | None,
    device: Any = None,
) -> DataLoader:
    """The ``flowdata.DataLoader`` of ``Driver.dataloader()``."""
    # Workers whose node does not let go of a sample past the timeout are ended: the watch
    # is the loader's (closed with it), its folder part of the pass the workers run.
    watch = Watch(options.timeout) if options.timeout is not None and options.num_workers > 0 else None
    try:
        dataset, indices, stats, recorder, step = _build(
            driver, outputs, inputs, options, loader=True, watch=watch.folder if watch is not None else None)
        sampler = None
        evening = None
        if isinstance(dataset, LaneDataset) and options.even_batches:
            ranks = ranks_of(options.rank, options.world_size, warn=False)  # warned when the dataset was built
            if ranks is not None:  # every rank builds its group here, in the same order
                evening = Evening(ranks, dataset.spec.group)
        if isinstance(dataset, PassDataset):  # map-style: the sampler in this process decides the order
            sampler = EpochBatches(indices, options.order())
        return DataLoader(
            dataset, sampler, num_workers=options.num_workers, prefetch_factor=prefetch_factor,
            pin_memory=pin_memory, persistent_workers=persistent_workers,
            multiprocessing_context=options.multiprocessing_context, worker_init_fn=worker_init_fn, stats=stats,
            recorder=recorder, progress=options.progress, seed=options.seed, device=device, batch_step=step,
            evening=evening, watch=watch,
        )
    except BaseException:
        if watch is not None:
            watch.close()
        raise
