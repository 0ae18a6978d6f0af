"""Executors: where chunks of per-sample work run.

The contract is one method::

    class Executor(Protocol):
        def map(self, fn, tasks) -> Iterator[result]: ...

``map`` calls ``fn(task)`` for every task and yields the results **in task order**,
lazily: it pulls tasks only as it has room for them, and closing the returned iterator
stops pulling and drops pending work. ``fn`` is a module-level function and tasks are
picklable, so an executor may run them anywhere (a process pool here; a cluster engine
can plug in the same way). flowdata sends *chunks* of samples, never one task per sample.

``close()`` is optional; executors flowdata creates itself are closed after the call.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol, TypeVar, runtime_checkable

from flowdata.errors import FlowdataError

__all__ = ["Executor", "InlineExecutor", "ProcessExecutor", "resolve_executor"]

T = TypeVar("T")
R = TypeVar("R")


@runtime_checkable
class Executor(Protocol):
    """Runs ``fn`` over tasks and yields results in task order, lazily."""

    def map(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        """Yields ``fn(task)`` for each task, in order."""
        ...


class InlineExecutor:
    """Runs every task in the calling thread, one after the other."""

    def map(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        """Yields ``fn(task)`` for each task, in order."""
        for task in tasks:
            yield fn(task)

    def close(self) -> None:
        """Nothing to release."""

    def __repr__(self) -> str:
        return "InlineExecutor()"


class ProcessExecutor:
    """Runs tasks in a pool of worker processes, keeping results in task order.

    Args:
        num_workers: Worker processes (default: the number of CPUs).
        start_method: ``"fork"``, ``"spawn"`` or ``"forkserver"`` (default: the platform's).
        max_in_flight: Tasks submitted ahead of the one being waited for (default:
            ``2 * num_workers``); bounds memory when a consumer is slow.

    The pool starts on first use and is reused by later calls until :meth:`close`.
    Workers rebuild the graph from module names and config, so nothing but plain data
    and module-level functions crosses the process boundary.
    """

    def __init__(
        self,
        num_workers: int | None = None,
        *,
        start_method: str | None = None,
        max_in_flight: int | None = None,
    ):
        self.num_workers = num_workers or os.cpu_count() or 1
        self.start_method = start_method
        self.max_in_flight = max_in_flight or 2 * self.num_workers
        self._pool: ProcessPoolExecutor | None = None

    def __repr__(self) -> str:
        return f"ProcessExecutor(num_workers={self.num_workers}, start_method={self.start_method!r})"

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx = multiprocessing.get_context(self.start_method)
            self._pool = ProcessPoolExecutor(
                max_workers=self.num_workers, mp_context=ctx, initializer=_init_worker,
                initargs=(0 if ctx.get_start_method() == "forkserver" else os.getpid(),),
            )
        return self._pool

    def map(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        """Yields ``fn(task)`` for each task, in order, with a bounded window in flight."""
        pool = self._get_pool()
        pending: deque[Future[R]] = deque()
        it = iter(tasks)
        try:
            for task in it:
                pending.append(pool.submit(fn, task))
                if len(pending) >= self.max_in_flight:
                    break
            while pending:
                future = pending.popleft()
                try:
                    result = future.result()
                except BrokenProcessPool as exc:
                    self._pool = None
                    raise FlowdataError(
                        f"a worker process of {self!r} died while running a chunk "
                        "(killed by a signal or out of memory)\n"
                        "  fix: check memory use, or run with executor='inline' to see the failure"
                    ) from exc
                task = next(it, _END)
                if task is not _END:
                    pending.append(pool.submit(fn, task))
                yield result
        finally:
            for f in pending:
                f.cancel()

    def close(self) -> None:
        """Shuts the pool down; a later :meth:`map` starts a new one."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> ProcessExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_END: Any = object()


def _init_worker(parent: int) -> None:
    """Makes a pool worker safe to compute in and unable to outlive its parent.

    torch's intra-op thread pool does not survive ``fork``: a forked worker that runs a
    parallel torch kernel can wait forever on a lock held by a thread that only existed in
    the parent. Workers therefore compute single-threaded (as torch's own DataLoader
    workers do) -- the parallelism is the pool itself. A daemon thread also watches the
    parent and ends the worker once it is gone, so a crashed or killed main process leaves
    no orphans holding memory and pipes. (The kernel's parent-death signal is not used: it
    fires when the *thread* that started the worker ends, and pools start workers from
    whichever thread submits first.)
    """
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"  # for torch and numpy imported later (spawn, forkserver)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
    parent = parent or os.getppid()
    threading.Thread(target=_watch_parent, args=(parent,), name="flowdata-watch-parent", daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def resolve_executor(executor: object) -> tuple[Executor, bool]:
    """The executor for an ``executor=`` argument, and whether flowdata owns (closes) it."""
    if executor is None or executor == "inline":
        return InlineExecutor(), True
    if executor == "processes":
        return ProcessExecutor(), True
    if isinstance(executor, str):
        raise FlowdataError(
            f"unknown executor {executor!r}\n"
            "  fix: use 'inline', 'processes', or an object with a map(fn, tasks) method "
            "such as flowdata.ProcessExecutor(num_workers=2)"
        )
    if not isinstance(executor, Executor):
        raise FlowdataError(
            f"executor {executor!r} has no map(fn, tasks) method\n"
            "  fix: pass 'inline', 'processes', or an object implementing flowdata.Executor"
        )
    return executor, False
