"""``RayExecutor``: chunks of a pass as Ray tasks, on this machine or a Ray cluster.

It implements the one executor contract (:mod:`flowdata.run.executors`) on Ray, an
engine that already schedules tasks across machines, rather than a home-made one:

* **The context once.** Each ``map`` call pickles ``(fn, context)`` once and puts the
  bytes in Ray's object store. A task carries the object's reference inside a list (so
  Ray hands the reference over instead of resolving it for every task); a worker process
  fetches and unpickles it the first time it meets it and keeps a few of them.
* **Chunks as tasks.** Every task is one chunk, pickled here (an error of this call when
  it cannot be), and sized by the engine to about 20 ms of work: well above the cost of
  a Ray task, which Ray's own guidance puts at about 10 ms of work at least.
* **In order, lazily.** At most ``max_in_flight`` tasks (default: twice the cluster's
  CPUs) are submitted ahead of the one being waited for; results come back in task
  order, so reductions merge as they do everywhere else and the results are bitwise
  equal to the inline executor's (:class:`~flowdata.run.executors.window.Window`, as for
  the process pool). Closing the iterator cancels the tasks still pending.
* **Plain pickles both ways.** A worker pickles the result itself and sends the bytes:
  what crosses is what crosses to a :class:`~flowdata.run.executors.ProcessExecutor`'s
  workers, and a result that cannot be pickled, or an exception of ``fn``, is reported
  the way that executor reports it. A Ray worker that dies (killed, out of memory, its
  node lost) is a :class:`~flowdata.errors.WorkerDied`; Ray does not retry the
  task (``max_retries=0``): flowdata knows which chunks to compute again (a sample past
  ``timeout=`` is reported, not retried).
* **Ctrl-C.** A ``ray.init`` or ``ray.shutdown`` cut in two by a ``KeyboardInterrupt``
  leaves processes that Ray no longer knows of (its agents ran on for a minute) or crashes
  in Ray's C++ (a segfault at exit), so a Ctrl-C is held back while either runs and raised
  right after. A Ctrl-C during a map shuts down a Ray this executor started at once (its
  workers end with it; on a Ray that stays up the pending tasks are cancelled), and is
  raised again; whatever that Ray started and is still alive a few seconds later is
  killed (see :func:`_stop`).

Ray is imported on first use (``pip install flowdata[ray]``). ``ray.init`` runs only when
Ray is not initialised yet, with the executor's arguments; a Ray the program started (or a
cluster it connected to) is used as it is and left running by :meth:`RayExecutor.close`.
Workers compute single-threaded, as pool workers do, and find the driver's modules: the
driver's ``sys.path`` travels with the context, and entries a worker lacks are appended to
its own; when the context names the script that runs (module ``__main__``: nodes defined
in it), a worker imports that file as ``__mp_main__``, as multiprocessing's spawned
workers do. On a cluster whose machines lay files out differently, ship the code with
Ray's ``runtime_env``.
"""

from __future__ import annotations

import io
import os
import pickle
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from flowdata.errors import FlowdataError, WorkerDied, describe
from flowdata.run.executors.contract import ContextCache, pickled_task
from flowdata.run.executors.signals import sigint_deferred
from flowdata.run.executors.window import Window

if TYPE_CHECKING:
    from types import ModuleType

    from ray import ObjectRef

__all__ = ["RayExecutor"]

T = TypeVar("T")
R = TypeVar("R")
C = TypeVar("C")

_HINT = "pip install flowdata[ray]"


def _import_ray() -> ModuleType:
    """Ray, or an install hint."""
    try:
        import ray
    except ImportError as exc:
        raise FlowdataError(
            f"RayExecutor needs Ray, which is not installed ({describe(exc)})\n"
            f"  fix: {_HINT} (or pip install ray), or use executor='processes' on one machine"
        ) from exc
    return ray


class RayExecutor:
    """Runs tasks as Ray tasks, keeping results in task order.

    Args:
        address: The Ray cluster to connect to (``"auto"``, ``"127.0.0.1:6379"``,
            ``"ray://head:10001"``); None does what ``ray.init()`` does (``RAY_ADDRESS``,
            else the cluster ``ray start`` runs here, else a new local Ray). Used only
            when Ray is not initialised yet.
        num_cpus: CPUs of a local Ray this executor starts (default: all of them).
        max_in_flight: Tasks submitted ahead of the one being waited for (default: twice
            the cluster's CPUs); bounds memory when a consumer is slow.
        **init_kwargs: Further arguments of ``ray.init`` (``runtime_env=...``,
            ``namespace=...``), used only when this executor starts Ray.

    Ray is started (or connected to) on first use, not here, and only when
    ``ray.is_initialized()`` is false; :meth:`close` calls ``ray.shutdown()`` only if this
    executor called ``ray.init`` (a local Ray it started stops; a cluster it joined goes on).
    """

    def __init__(
        self,
        address: str | None = None,
        num_cpus: int | None = None,
        *,
        max_in_flight: int | None = None,
        **init_kwargs: Any,
    ):
        self.address = address
        self.num_cpus = num_cpus
        self.max_in_flight = max_in_flight
        self.init_kwargs = init_kwargs
        self._started: tuple[str, str] | None = None  # the Ray session this executor started
        self._processes: list[Any] = []  # what its ray.init started here (see _stop)
        self._remote: Any = None

    def __repr__(self) -> str:
        args = [f"address={self.address!r}"] if self.address is not None else []
        if self.num_cpus is not None:
            args.append(f"num_cpus={self.num_cpus}")
        return f"RayExecutor({', '.join(args)})"

    def _ray(self) -> ModuleType:
        """Ray, initialised: by this executor if nobody did before."""
        ray = _import_ray()
        if not ray.is_initialized():
            self._start(ray)
        if self._remote is None:
            # Ray retries nothing: flowdata computes again what a lost worker held.
            self._remote = ray.remote(num_cpus=1, max_retries=0)(_run_remote)
        return ray

    def _start(self, ray: ModuleType) -> None:
        """``ray.init`` with this executor's arguments, never cut in two by a Ctrl-C.

        Interrupted half-way, ``ray.init`` forgets the processes it already started (its
        agents then ran on for up to 100 s) or leaves a half-made core worker that crashed
        at exit. A Ctrl-C is therefore held back until it returns; then the Ray just
        started is shut down and the ``KeyboardInterrupt`` raised.
        """
        try:
            with sigint_deferred():
                before = _local_node(ray)
                try:
                    ray.init(address=self.address, num_cpus=self.num_cpus, **self.init_kwargs)
                except Exception as exc:
                    raise FlowdataError(
                        f"{self!r} could not start or reach Ray: {describe(exc)}\n"
                        "  fix: give the address of a running cluster (address='auto' for the one "
                        "`ray start` runs here), or leave address out to start a local Ray; "
                        "num_cpus applies only to a Ray this executor starts"
                    ) from exc
                self._started = _session(ray)
                node = _local_node(ray)
                self._processes = _started_processes(node) if node is not before else []
        except KeyboardInterrupt:
            self.close()
            raise

    @property
    def num_workers(self) -> int:
        """The cluster's CPUs (connects to Ray, or starts it, on first use)."""
        ray = self._ray()
        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    def map(self, fn: Callable[[C, T], R], tasks: Iterable[T], *, context: C) -> Iterator[R]:
        """Yields ``fn(context, task)`` for each task, in order, with a bounded window in flight.

        The context is put in Ray's object store once per call; a task carries only a
        reference to it and its own pickled bytes.
        """
        ray = self._ray()
        size = self.max_in_flight or 2 * self.num_workers
        blob = _pickled_context(fn, context)
        # Nodes or values defined in the script that runs (module __main__): workers import
        # that file as __mp_main__, as multiprocessing's spawned workers do.
        main = _main_file() if b"__main__" in blob else None
        shared = ray.put((tuple(sys.path), main, blob))
        del blob
        remote = self._remote

        def submit(task: T) -> ObjectRef[Any]:
            ref: ObjectRef[Any] = remote.remote([shared], pickled_task(task, "Ray workers"))
            return ref

        from ray.exceptions import GetTimeoutError

        window = Window(tasks, size, submit, self._get, GetTimeoutError)
        interrupted = False
        try:
            for outcome in window:
                yield _unpack(outcome)
        except KeyboardInterrupt:
            interrupted = True
            raise
        finally:
            # A stop drops what is pending. A second Ctrl-C does not cut this in two.
            with sigint_deferred():
                if interrupted and self._started is not None:
                    # The user wants out: a Ray started here stops now, its workers with it.
                    # No ray.cancel first: one that races a task's completion ends this
                    # process in a fatal check of Ray's (task_manager.cc, "Tried to complete
                    # task that was not pending"), seen in 1 of 14 Ctrl-Cs here.
                    del shared
                    self.close()
                else:
                    # An error, a consumer that had enough, a Ctrl-C on a Ray that stays up:
                    # queued tasks never start, a running one is interrupted.
                    _cancel(ray, window.pending)
                    del shared

    def _get(self, ref: ObjectRef[Any], timeout: float) -> Any:
        """The task's outcome (``GetTimeoutError`` if not done within ``timeout``), with a
        dead worker said as such."""
        import ray
        from ray import exceptions as rx

        try:
            return ray.get(ref, timeout=timeout)
        except (rx.WorkerCrashedError, rx.OutOfMemoryError, rx.NodeDiedError, rx.ObjectLostError,
                rx.LocalRayletDiedError) as exc:
            raise WorkerDied(
                f"a Ray worker of {self!r} died while running a chunk ({type(exc).__name__}: killed "
                "by a signal, out of memory, or its node was lost)\n"
                "  fix: check memory use (Ray's memory monitor ends tasks on a full machine), "
                "or run with executor='inline' to see the failure"
            ) from exc

    def close(self) -> None:
        """``ray.shutdown()`` if this executor called ``ray.init``; a Ray initialised
        elsewhere is left as it is. A Ctrl-C meanwhile is raised once Ray is down."""
        started, self._started = self._started, None
        processes, self._processes = self._processes, []
        if started is None:
            return
        self._remote = None
        import ray

        # Not a Ray the program started again itself after shutting this one down.
        if ray.is_initialized() and _session(ray) == started:
            with sigint_deferred():
                _stop(ray, processes)

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _session(ray: ModuleType) -> tuple[str, str]:
    """This driver's node and job: a Ray started again has another node id."""
    ctx = ray.get_runtime_context()
    return str(ctx.get_node_id()), str(ctx.get_job_id())


def _cancel(ray: ModuleType, pending: Iterable[ObjectRef[Any]]) -> None:
    """Cancels each pending task once (a task cancelled twice can crash its worker in Ray)."""
    for ref in pending:
        try:
            ray.cancel(ref)
        except Exception:  # finished or gone meanwhile: nothing to cancel
            pass


def _stop(ray: ModuleType, processes: list[Any], grace: float = 5.0) -> None:
    """``ray.shutdown()``, then kills what the local Ray started here leaves running.

    ``processes`` are those this executor's ``ray.init`` started as this process's children
    (GCS, raylet, dashboard, monitors: Ray's own list of them, taken right after it); with
    everything below them now (agents, workers). Ray ends them itself; one still alive
    ``grace`` seconds later is killed. A driver that joined a cluster started none, so a
    cluster is never touched; neither is any other child of the program.
    """
    ours = list(processes)
    if ours:
        import psutil

        for root in processes:
            try:
                ours.extend(root.children(recursive=True))
            except psutil.Error:  # ended already (its children, if any, go unseen)
                pass
    ray.shutdown()
    if not ours:
        return
    _, alive = psutil.wait_procs(ours, timeout=grace)
    for proc in alive:
        try:
            proc.kill()  # psutil refuses a pid reused by another process meanwhile
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace)


def _local_node(ray: ModuleType) -> Any:
    """Ray's record of the node ``ray.init`` started or joined in this process, if any."""
    try:
        return ray._private.worker._global_node
    except AttributeError:  # another Ray version: nothing is swept after the shutdown
        return None


def _started_processes(node: Any) -> list[Any]:
    """The processes a ``ray.init`` just started as this process's children (none when it
    joined a cluster, when Ray does not say, or without psutil)."""
    try:
        import psutil

        pids = {info.process.pid for infos in node.all_processes.values() for info in infos}
    except Exception:
        return []
    procs: list[Any] = []
    for pid in sorted(pids):
        try:
            proc = psutil.Process(pid)
            if proc.ppid() == os.getpid():  # only processes this one started
                procs.append(proc)
        except psutil.Error:
            continue
    return procs


def _pickled_context(fn: Callable[..., Any], context: Any) -> bytes:
    """``(fn, context)`` pickled, or the error that says what cannot cross."""
    try:
        return pickle.dumps((fn, context), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        explain = getattr(context, "describe_unpicklable", None)
        raise FlowdataError(
            explain() if explain is not None else
            f"the tasks' context cannot be sent to Ray workers: {describe(exc)}\n"
            "  fix: make the context picklable, or use executor='inline'"
        ) from exc


def _main_file() -> str | None:
    """The file of the script that runs, if it is one (not an interactive session)."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return os.path.abspath(path) if isinstance(path, str) and path.endswith(".py") and os.path.isfile(path) else None


class _Unpickler(pickle.Unpickler):
    """Reads what the other side pickled: the script that runs is ``__main__`` in the
    driver and ``__mp_main__`` in a worker (see :func:`_context`)."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "__main__" and "__mp_main__" in sys.modules:
            module = "__mp_main__"
        elif module == "__mp_main__" and "__mp_main__" not in sys.modules:
            module = "__main__"
        return super().find_class(module, name)


def _loads(data: bytes) -> Any:
    """Unpickles what the other side sent (see :class:`_Unpickler`)."""
    return _Unpickler(io.BytesIO(data)).load()


def _unpack(outcome: tuple[str, Any, str]) -> Any:
    """A worker's outcome, here: the result, or the error it stands for."""
    kind, payload, worker = outcome
    if kind == "ok":
        return _loads(payload)
    if kind == "unpicklable":
        raise FlowdataError(
            f"a result could not be sent back from Ray worker {worker}: {payload}\n"
            "  fix: return picklable values from per-sample nodes (no locks, open files or "
            "generators), or use executor='inline'"
        )
    error, tb = payload
    try:
        exc = _loads(error)
    except Exception:
        exc = RuntimeError(f"an exception in Ray worker {worker} that cannot be read here")
    exc.add_note(f"traceback in worker {worker}:\n{tb.rstrip()}")
    raise exc


# -- in a Ray worker process ---------------------------------------------------------

_CONTEXTS: ContextCache[tuple[Callable[..., Any], Any]] = ContextCache()
_READY = False


def _run_remote(shared: list[ObjectRef[Any]], data: bytes) -> tuple[str, Any, str]:
    """In a Ray worker: ``fn(context, task)``, its result pickled (see :func:`_unpack`).

    ``shared`` holds the reference to the call's ``(driver's sys.path, its script or None,
    pickled fn and context)``; fetched and unpickled once per worker process, and kept.
    """
    worker = f"ray pid {os.getpid()}"
    try:
        fn, context = _context(shared[0])
        result = fn(context, _loads(data))
    except Exception as exc:
        return "raised", (_pickled_error(exc), traceback.format_exc()), worker
    name = getattr(result, "worker", None)
    if isinstance(name, str) and name != "main":  # a ChunkResult names the process it ran in
        result.worker = worker
    try:
        return "ok", pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL), worker
    except Exception as exc:
        return "unpicklable", describe(exc), worker


def _context(ref: ObjectRef[Any]) -> tuple[Callable[..., Any], Any]:
    """The call's ``fn`` and context, from this process's cache or fetched once."""
    global _READY
    if not _READY:
        _single_threaded()
        _READY = True
    return _CONTEXTS.get(ref.hex(), lambda: _fetch(ref))


def _fetch(ref: ObjectRef[Any]) -> tuple[Callable[..., Any], Any]:
    """The call's ``fn`` and context, fetched from the object store and unpickled."""
    import ray

    paths, main, blob = ray.get(ref)
    # The driver's modules (a project folder it put on its path, a test's rootdir) are
    # found here too; the worker's own entries come first.
    sys.path.extend(p for p in paths if p not in sys.path)
    if main is not None and getattr(sys.modules.get("__mp_main__"), "__file__", None) != main:
        _import_main(main)
    fn_context: tuple[Callable[..., Any], Any] = _loads(blob)
    return fn_context


def _import_main(path: str) -> None:
    """Imports the driver's script as ``__mp_main__`` (its ``if __name__ == "__main__":``
    block does not run), where flowdata looks for the nodes of module ``__main__``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("__mp_main__", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    # (multiprocessing names the worker's own main module __mp_main__ too: replaced here)
    previous = sys.modules.get("__mp_main__")
    sys.modules["__mp_main__"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        if previous is not None:
            sys.modules["__mp_main__"] = previous
        else:
            del sys.modules["__mp_main__"]
        raise FlowdataError(
            f"a Ray worker imported the script {path} (as __mp_main__, for what it defines) and it "
            f"failed: {describe(exc)}\n"
            "  fix: put the script's own work under `if __name__ == \"__main__\":` (workers import it), "
            "or move the nodes into a module"
        ) from exc


def _single_threaded() -> None:
    """Workers compute on one thread each, as pool workers do: the parallelism is Ray's
    (one task per CPU), and torch's intra-op pool would oversubscribe the machine."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"  # for torch and numpy imported later
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def _pickled_error(exc: BaseException) -> bytes:
    """The exception pickled, or a ``RuntimeError`` with its text when it cannot be."""
    try:
        return pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"))
