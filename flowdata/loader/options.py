"""The options of a loader or a dataset: what ``dataloader()`` and ``dataset()`` were given.

:class:`LoaderOptions` holds them as one frozen value; :func:`check` refuses bad ones
before anything runs; :meth:`LoaderOptions.order` is the epochs' order
(:class:`~flowdata.loader.order.EpochOrder`), and :func:`statistics_executor` where the
statistics pass runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flowdata.errors import check_rank, expect_int
from flowdata.loader.order import EpochOrder
from flowdata.report import check_max_skipped
from flowdata.run import Executor, InlineExecutor, ProcessExecutor, SampleCache, on_error_mode, resolve_executor

__all__ = ["LoaderOptions", "check", "statistics_executor"]


@dataclass(frozen=True)
class LoaderOptions:
    """How a loader orders and computes its batches (the arguments of ``dataloader()``)."""

    batch_size: int = 1
    shuffle: bool = False
    seed: int = 0
    drop_last: bool = False
    even_batches: bool = True
    rank: int = 0
    world_size: int = 1
    streaming: bool = False
    shuffle_buffer: int = 1024
    on_error: str = "raise"
    max_skipped: int | float | None = None
    cache_dir: str | os.PathLike[str] | None = None
    collate_fn: Callable[[list[dict[str, Any]]], Any] | None = None
    progress: bool = False
    num_workers: int = 0
    multiprocessing_context: Any = None
    executor: object = None
    timeout: float | None = None
    samples: SampleCache | None = None

    def order(self) -> EpochOrder:
        """The order of the epochs, from the first."""
        return EpochOrder(batch_size=self.batch_size, shuffle=self.shuffle, seed=self.seed,
                          drop_last=self.drop_last, even=self.even_batches, rank=self.rank,
                          world_size=self.world_size, shuffle_buffer=self.shuffle_buffer)


def check(options: LoaderOptions) -> None:
    """The arguments of ``dataloader()`` and ``dataset()``, refused (``InputError``) before
    anything runs, as ``execute()`` refuses its own: nothing is computed for a call that would
    fail later, in a worker, or with torch's own class of error."""
    on_error_mode(options.on_error)
    check_max_skipped(options.max_skipped)
    expect_int("batch_size", options.batch_size, least=1, meaning="samples per batch")
    expect_int("num_workers", options.num_workers, least=0,
               meaning="DataLoader worker processes; 0 computes the batches in this process")
    expect_int("shuffle_buffer", options.shuffle_buffer, least=1,
               meaning="items a stream's shuffle buffer holds; 1 keeps the stream's order")
    check_rank(options.rank, options.world_size)


def statistics_executor(options: LoaderOptions) -> tuple[Executor, bool]:
    """Where the statistics pass runs: the executor given, else ``num_workers`` processes."""
    if options.executor is not None:
        return resolve_executor(options.executor)
    if options.num_workers > 0:
        ctx = options.multiprocessing_context
        method = getattr(ctx, "get_start_method", lambda: ctx)()
        return ProcessExecutor(options.num_workers, start_method=method), True
    return InlineExecutor(), True
