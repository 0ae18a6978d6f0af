"""Executors: where chunks of per-sample work run.

The contract is one method::

    class Executor(Protocol):
        def map(self, fn, tasks, *, context) -> Iterator[result]: ...

``map`` calls ``fn(context, task)`` for every task and yields the results **in task
order**, lazily: it pulls tasks only as it has room for them, and closing the returned
iterator stops pulling and drops pending work. ``fn`` is a module-level function, and
``context`` and the tasks are picklable, so an executor may run them anywhere (a process
pool here; a cluster engine plugs in the same way). ``context`` is the same for every task
of one ``map`` call (for flowdata: the program, the pass and its whole values), so an
executor that runs tasks elsewhere sends it **once per worker**, not with every task;
flowdata sends *chunks* of samples, never one task per sample.

A context may offer ``describe_unpicklable() -> str``, which an executor uses to say what
kept it from crossing to another process. ``close()`` is optional; executors flowdata
creates itself are closed after the call. ``tests/test_conformance.py`` holds the suite
that every executor must pass.
"""

from __future__ import annotations

import inspect
import os
import signal
import pickle
import sys
import threading
import time
import uuid
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from flowdata.run import scratch
from flowdata.errors import FlowdataError, InputError, WorkerDied, describe

if TYPE_CHECKING:  # imported where a pool starts: `import flowdata` stays light
    from concurrent.futures import Future, ProcessPoolExecutor

__all__ = ["Executor", "InlineExecutor", "ProcessExecutor", "resolve_executor"]

T = TypeVar("T")
R = TypeVar("R")
C = TypeVar("C")


@runtime_checkable
class Executor(Protocol):
    """Runs ``fn(context, task)`` over tasks and yields results in task order, lazily."""

    def map(self, fn: Callable[[C, T], R], tasks: Iterable[T], *, context: C) -> Iterator[R]:
        """Yields ``fn(context, task)`` for each task, in order."""
        ...


class InlineExecutor:
    """Runs every task in the calling thread, one after the other."""

    def map(self, fn: Callable[[C, T], R], tasks: Iterable[T], *, context: C) -> Iterator[R]:
        """Yields ``fn(context, task)`` for each task, in order."""
        for task in tasks:
            yield fn(context, task)

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
        pending: deque[Future[R]] = deque()
        it = iter(tasks)

        def submit(task: T) -> Future[R]:
            # Pickled here, not in the pool's feeder thread: a task that cannot be pickled
            # is an error of this call, and cannot leave the pool waiting at shutdown.
            data = pickled_task(task, "worker processes")
            with sigint_deferred():  # a submit may fork a worker
                return pool.submit(_with_context, fn, path, data)

        try:
            for task in it:
                pending.append(submit(task))
                if len(pending) >= self.max_in_flight:
                    break
            while pending:
                future = pending[0]  # left in pending while waited for: a stop here ends its worker
                try:
                    result = _wait(future)
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
                pending.popleft()
                task = next(it, _END)
                if task is not _END:
                    pending.append(submit(task))
                yield result
        finally:
            # A stop (Ctrl-C, an error, a consumer that had enough) drops what is pending;
            # a worker still computing a chunk nobody will read is ended, not waited for --
            # it may be stuck in a node forever.
            # Nothing is cancelled when a worker must be ended: the pool's manager thread marks
            # every pending future broken then, and on Python 3.11 it dies with an
            # InvalidStateError (printed to stderr) on one already cancelled.
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


_END: Any = object()


def pickled_task(task: Any, where: str) -> bytes:
    """``task`` pickled to be sent to ``where`` (``"worker processes"``, ``"Ray workers"``), or
    the error of the call that says what to yield instead."""
    try:
        return pickle.dumps(task, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise FlowdataError(
            f"a task cannot be sent to {where}: {describe(exc)}\n"
            "  fix: yield picklable items from the source (paths, numbers, dicts of them), "
            "or use executor='inline'"
        ) from exc


def _wait(future: Future[R]) -> R:
    """The future's result, waited for in short slices.

    A Ctrl-C that the kernel hands to another thread of the process (a library's native
    thread) does not wake a main thread blocked on a lock: the interpreter only notices the
    signal when the main thread runs again. Waking every half second, the wait runs again
    and the ``KeyboardInterrupt`` is raised here, within a second.
    """
    while True:
        try:
            return future.result(timeout=0.5)
        except TimeoutError:
            continue


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Holds a Ctrl-C back while the block runs (in the main thread), then delivers it.

    A block that forks (a pool starting a worker) must not be cut in two: a
    ``KeyboardInterrupt`` raised inside the interpreter's at-fork hooks is printed and
    dropped ("Exception ignored in ... _releaseLock"), so the run would go on, stuck with
    its stuck worker; and one raised between the fork of a process pool's workers and the
    start of its manager thread leaves workers that nobody will ever tell to stop, which
    the interpreter then joins at exit forever.

    Blocking the signal in the main thread is not enough for that: the kernel then hands it
    to any other thread of the process (torch's, a library's), whose C handler still trips
    the flag the main thread's interpreter raises from, inside the block. So the Python
    handler itself is swapped for one that only records the signal; when the block ends
    the saved handler is put back and, if a Ctrl-C came, called (the default one raises
    ``KeyboardInterrupt`` there). The signal is also blocked for the block, so that children
    forked meanwhile start with it held back (their parent ends them; a pool worker takes
    the parent's own handler back in :func:`_init_worker`).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = _Held(signal.getsignal(signal.SIGINT))
    signal.signal(signal.SIGINT, held)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a Ctrl-C kept pending arrives now, to ``held``
        signal.signal(signal.SIGINT, held.outer)
        held.deliver()


class _Held:
    """A SIGINT handler that records the signal, to be delivered to ``outer`` later."""

    def __init__(self, outer: Any):
        self.outer = outer  # the handler it stands in for (a callable, SIG_DFL, SIG_IGN or None)
        self.frame: FrameType | None = None
        self.came = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.came, self.frame = True, frame

    def deliver(self) -> None:
        """Does what a Ctrl-C during the block would have done, now."""
        if not self.came:
            return
        self.came = False
        if callable(self.outer):
            self.outer(signal.SIGINT, self.frame)
        elif self.outer == signal.SIG_DFL:
            os.kill(os.getpid(), signal.SIGINT)


_CONTEXTS: OrderedDict[str, Any] = OrderedDict()


def _with_context(fn: Callable[[Any, T], R], path: str, data: bytes) -> R:
    """In a worker: the context of ``path``, read once per worker and kept, then ``fn``."""
    context = _CONTEXTS.get(path)
    if context is None:
        with open(path, "rb") as f:
            context = pickle.load(f)
        _CONTEXTS[path] = context
        while len(_CONTEXTS) > 4:
            _CONTEXTS.popitem(last=False)
    return fn(context, pickle.loads(data))


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
    if isinstance(handler, _Held):  # forked inside sigint_deferred: the parent's own handler again
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


def resolve_executor(executor: object) -> tuple[Executor, bool]:
    """The executor for an ``executor=`` argument, and whether flowdata owns (closes) it."""
    if executor is None or executor == "inline":
        return InlineExecutor(), True
    if executor == "processes":
        return ProcessExecutor(), True
    if executor == "ray":  # joins a running Ray, else starts a local one for this call
        from flowdata.run.ray_executor import RayExecutor

        return RayExecutor(), True
    # A wrong executor= is a wrong argument, refused like any other (InputError).
    if isinstance(executor, str):
        raise InputError(
            f"unknown executor {executor!r}\n"
            "  fix: use 'inline', 'processes', 'ray', or an object with a map(fn, tasks, *, context) "
            "method such as flowdata.ProcessExecutor(num_workers=2)"
        )
    if not isinstance(executor, Executor) or not _takes_context(executor):
        raise InputError(
            f"executor {executor!r} has no map(fn, tasks, *, context) method\n"
            "  fix: pass 'inline', 'processes', 'ray', or an object implementing flowdata.Executor "
            "(map calls fn(context, task) for every task and yields the results in order)"
        )
    return executor, False


def _takes_context(executor: object) -> bool:
    try:
        params = inspect.signature(executor.map).parameters  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return True  # cannot tell: let it run
    return "context" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
