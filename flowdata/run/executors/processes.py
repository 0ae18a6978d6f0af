"""The process pool: tasks in worker processes, results in task order.

:class:`ProcessExecutor` follows the contract of :mod:`flowdata.run.executors.contract`:
the context is written once per ``map`` call to a file every worker reads once, tasks are
pulled only while there is room for them (:class:`~flowdata.run.executors.window.Window`),
and a worker that dies is a ``WorkerDied`` naming the tasks it held. Workers are started with Ctrl-C held back
(:func:`~flowdata.run.executors.signals.sigint_deferred`) and end when their parent does.
"""

from __future__ import annotations

import os
import signal
import pickle
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from flowdata.run import scratch
from flowdata.errors import FlowdataError, WorkerDied, describe
from flowdata.run.executors.contract import ContextCache, pickled_task
from flowdata.run.executors.signals import Held, sigint_deferred
from flowdata.run.executors.window import Window

if TYPE_CHECKING:  # imported where a pool starts: `import flowdata` stays light
    from concurrent.futures import Future, ProcessPoolExecutor

__all__ = ["ProcessExecutor"]

T = TypeVar("T")
R = TypeVar("R")
C = TypeVar("C")


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
        self._folder: str | None = None

    def __repr__(self) -> str:
        return f"ProcessExecutor(num_workers={self.num_workers}, start_method={self.start_method!r})"

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            ctx = multiprocessing.get_context(self.start_method)
            self._pool = ProcessPoolExecutor(
                max_workers=self.num_workers, mp_context=ctx, initializer=_init_worker,
                initargs=(0 if ctx.get_start_method() == "forkserver" else os.getpid(),),
            )
        return self._pool

    def _send_once(self, context: Any) -> str:
        """Writes the context where every worker reads it once; returns the file."""
        try:
            data = pickle.dumps(context, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            explain = getattr(context, "describe_unpicklable", None)
            raise FlowdataError(
                explain() if explain is not None else
                f"the tasks' context cannot be sent to worker processes: {describe(exc)}"
            ) from exc
        if self._folder is None:
            self._folder = scratch.make("context")
            weakref.finalize(self, scratch.remove, self._folder)  # an executor never closed
        path = os.path.join(self._folder, f"{uuid.uuid4().hex}.pickle")
        with open(path, "wb") as f:
            f.write(data)
        return path

    def map(self, fn: Callable[[C, T], R], tasks: Iterable[T], *, context: C) -> Iterator[R]:
        """Yields ``fn(context, task)`` for each task, in order, with a bounded window in flight.

        The context is pickled once, into a file each worker reads the first time it
        meets it; a task carries only the file's name.
        """
        from concurrent.futures.process import BrokenProcessPool

        pool = self._get_pool()
        path = self._send_once(context)

        def submit(task: T) -> Future[R]:
            # Pickled here, not in the pool's feeder thread: a task that cannot be pickled
            # is an error of this call, and cannot leave the pool waiting at shutdown.
            data = pickled_task(task, "worker processes")
            with sigint_deferred():  # a submit may fork a worker
                return pool.submit(_with_context, fn, path, data)

        def get(future: Future[R], timeout: float) -> R:
            try:
                return future.result(timeout=timeout)
            except BrokenProcessPool as exc:
                self._end_pool()
                raise WorkerDied(
                    f"a worker process of {self!r} died while running a chunk "
                    "(killed by a signal or out of memory)\n"
                    "  fix: check memory use, or run with executor='inline' to see the failure"
                ) from exc
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                if "pickle" not in str(exc):
                    raise
                raise FlowdataError(
                    f"a result could not be sent back from a worker process: {describe(exc)}\n"
                    "  fix: return picklable values from per-sample nodes (no locks, open files or "
                    "generators), or use executor='inline'"
                ) from exc

        window = Window(tasks, self.max_in_flight, submit, get, TimeoutError)
        try:
            yield from window
        finally:
            # A stop (Ctrl-C, an error, a consumer that had enough) drops what is pending;
            # a worker still computing a chunk nobody will read is ended, not waited for --
            # it may be stuck in a node forever.
            # Nothing is cancelled when a worker must be ended: the pool's manager thread marks
            # every pending future broken then, and on Python 3.11 it dies with an
            # InvalidStateError (printed to stderr) on one already cancelled.
            pending = window.pending
            if any(f.running() for f in pending) or not all([f.cancel() or f.done() for f in pending]):
                self._end_pool()
            # Tasks still queued after a stop fail to read it, and nobody waits for them.
            _remove(path)

    def _end_pool(self) -> None:
        """Ends the pool's workers at once (terminate, then kill); the next map starts new ones."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        procs = list((getattr(pool, "_processes", None) or {}).values())
        for p in procs:
            if p.is_alive():
                p.terminate()
        pool.shutdown(wait=False)
        deadline = time.monotonic() + 2.0
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(1.0)

    def close(self) -> None:
        """Shuts the pool down; a later :meth:`map` starts a new one."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._folder is not None:
            scratch.remove(self._folder)
            self._folder = None

    def __enter__(self) -> ProcessExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_CONTEXTS: ContextCache[Any] = ContextCache()


def _with_context(fn: Callable[[Any, T], R], path: str, data: bytes) -> R:
    """In a worker: the context of ``path``, read once per worker and kept, then ``fn``."""
    return fn(_CONTEXTS.get(path, lambda: _read(path)), pickle.loads(data))


def _read(path: str) -> Any:
    """The context the driver wrote to ``path`` (see :meth:`ProcessExecutor._send_once`)."""
    with open(path, "rb") as f:
        return pickle.load(f)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


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
    handler = signal.getsignal(signal.SIGINT)
    if isinstance(handler, Held):  # forked inside sigint_deferred: the parent's own handler again
        signal.signal(signal.SIGINT, handler.outer if handler.outer is not None else signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # forked with it held back
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


