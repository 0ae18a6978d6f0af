"""Deadlines: ``timeout=`` bounds the seconds one node may spend on one sample.

Two layers, so that no node can hang a run:

* **Interrupt** (every process): a node call still running after ``timeout`` seconds
  gets :class:`SampleTimeout` raised inside it -- by ``SIGALRM`` when the node runs in its
  process's main thread (pool workers, DataLoader workers, the inline executor), which
  also cuts a blocking ``sleep``, ``read`` or lock wait short; by an asynchronous exception
  from a watchdog thread otherwise. The kernel sees an exception like any other: that
  sample's failure, raised or skipped under ``on_error``, and the worker goes on.
* **End the worker** (worker processes only): a node that cannot be interrupted (native
  code holding the GIL, signals blocked) is still busy ``grace`` seconds later. Each worker
  keeps a 32-byte record of the call it is in -- which node, which sample, since when --
  in a file of the pass's *watch folder*; a :class:`Watch` thread in the main process
  reads the records and kills a worker that is past its deadline, and remembers which
  sample it was computing, so that the engine can report that sample as timed out and
  go on with new workers.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import signal
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from flowdata.run import scratch

__all__ = ["SampleTimeout", "Stuck", "Watch", "check_timeout", "grace", "guarded_calls"]

_RECORD = struct.Struct("qqqd")  # pid, node position (-1: idle), sample index, started (monotonic)


class SampleTimeout(BaseException):
    """A node ran past ``timeout=`` on one sample.

    A ``BaseException``, like ``KeyboardInterrupt``: a node's own ``except Exception``
    must not swallow it and return a value as if the sample had been computed.
    """


def check_timeout(timeout: object) -> float | None:
    """``timeout=`` checked where a call begins: None or a positive number of seconds."""
    from flowdata.errors import InputError

    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InputError(f"timeout={timeout!r}: expected a positive number of seconds, or None for no limit")
    return float(timeout)


def grace(timeout: float) -> float:
    """Seconds past ``timeout`` before a worker that did not respond is ended."""
    return max(2.0, timeout / 2)


def _message(timeout: float) -> str:
    return f"timed out after {timeout:g} s"


class _Alarm:
    """The interrupt layer, for one process (see the module docstring)."""

    def __init__(self) -> None:
        self.armed = False  # a call of the main thread is under way
        self.seconds = 0.0
        self._async: dict[int, float] = {}  # thread id -> deadline, for calls outside the main thread
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    def _on_alarm(self, signum: int, frame: Any) -> None:
        if self.armed:
            self.armed = False
            raise SampleTimeout(_message(self.seconds))

    @contextmanager
    def installed(self, seconds: float) -> Iterator[bool]:
        """Our SIGALRM handler for one chunk (the previous one put back after); yields
        whether calls here can be interrupted by the signal."""
        if threading.current_thread() is not threading.main_thread():
            yield False
            return
        previous = signal.signal(signal.SIGALRM, self._on_alarm)
        self.seconds = seconds
        try:
            yield True
        finally:
            if threading.current_thread() is threading.main_thread():  # (a stream closed elsewhere)
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)

    def arm(self, seconds: float, main: bool) -> None:
        if main:
            self.armed = True
            signal.setitimer(signal.ITIMER_REAL, seconds)
            return
        with self._lock:
            self._async[threading.get_ident()] = time.monotonic() + seconds
            self.seconds = seconds
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch_threads, name="flowdata-timeout", daemon=True)
                self._watcher.start()

    def disarm(self, main: bool) -> None:
        if main:
            self.armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            return
        with self._lock:
            self._async.pop(threading.get_ident(), None)

    def _watch_threads(self) -> None:
        while True:
            time.sleep(0.05)
            now = time.monotonic()
            with self._lock:
                late = [t for t, d in self._async.items() if d <= now]
                for t in late:
                    del self._async[t]
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t), ctypes.py_object(SampleTimeout))


_ALARM = _Alarm()
_RECORDS: dict[str, mmap.mmap] = {}


def _record(folder: str) -> mmap.mmap:
    """This process's record in a watch folder (made on first use)."""
    mm = _RECORDS.get(folder)
    if mm is None:
        path = os.path.join(folder, str(os.getpid()))
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.ftruncate(fd, _RECORD.size)
            mm = mmap.mmap(fd, _RECORD.size)
        finally:
            os.close(fd)
        _RECORD.pack_into(mm, 0, os.getpid(), -1, 0, 0.0)
        while len(_RECORDS) >= 4:  # folders of passes that are over
            _RECORDS.pop(next(iter(_RECORDS))).close()
        _RECORDS[folder] = mm
    return mm


@contextmanager
def guarded_calls(timeout: float | None, watch: str | None) -> Iterator[Callable[..., Callable[..., Any]] | None]:
    """For one chunk: a function wrapping a node's function so each call is bounded.

    Yields None without a ``timeout``. Otherwise ``wrap(fn, position, indices)`` returns
    ``fn`` bounded by the deadline, where ``position`` is the node's place in the pass and
    ``indices`` the samples it will be called for, in order (None: not recorded). With a ``watch`` folder (in
    worker processes), each call is also recorded there for the main process's
    :class:`Watch`.
    """
    if timeout is None:
        yield None
        return
    record = _record(watch) if watch is not None else None
    pid = os.getpid()
    with _ALARM.installed(timeout) as main:

        def wrap(fn: Callable[..., Any], position: int, indices: Sequence[int] | None) -> Callable[..., Any]:
            calls = iter(indices) if indices is not None else None

            def bounded(*args: Any, **kwargs: Any) -> Any:
                index = next(calls) if calls is not None else -1
                if record is not None:
                    _RECORD.pack_into(record, 0, pid, position, index, time.monotonic())
                _ALARM.arm(timeout, main)
                try:
                    return fn(*args, **kwargs)
                except SampleTimeout as exc:
                    if exc.args:
                        raise
                    raise SampleTimeout(_message(timeout)) from None  # raised by class, from a thread
                finally:
                    _ALARM.disarm(main)
                    if record is not None:
                        _RECORD.pack_into(record, 0, pid, -1, 0, 0.0)

            return bounded

        yield wrap


@dataclass(frozen=True)
class Stuck:
    """A worker the watch ended: the node (by position in the pass) and the sample it was on."""

    pid: int
    position: int
    index: int
    seconds: float

    def error(self, timeout: float, worker: str, then: str) -> SampleTimeout:
        """The sample's failure: ``worker`` names what was ended, ``then`` what follows."""
        return SampleTimeout(f"{_message(timeout)}, and did not respond to the interruption: its {worker} "
                             f"(pid {self.pid}) was ended after {self.seconds:.1f} s{then}")


class Watch:
    """In the main process: ends workers whose node call is past ``timeout + grace``.

    Args:
        timeout: The ``timeout=`` of the call.

    ``folder`` is the watch folder workers record their calls in. :meth:`take` hands back
    (once) what was ended since the last call. :meth:`close` stops the thread and removes
    the folder.
    """

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.limit = timeout + grace(timeout)
        self.folder = scratch.make("watch")
        self._stuck: list[Stuck] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flowdata-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(min(0.25, self.timeout / 4)):
            for stuck in self._overdue():
                try:
                    os.kill(stuck.pid, signal.SIGKILL)
                except OSError:
                    continue  # it ended by itself
                finally:
                    try:
                        os.remove(os.path.join(self.folder, str(stuck.pid)))
                    except OSError:
                        pass
                with self._lock:
                    self._stuck.append(stuck)

    def _overdue(self) -> list[Stuck]:
        now = time.monotonic()
        late = []
        try:
            names = os.listdir(self.folder)
        except OSError:
            return []
        for name in names:
            first = self._read(name)
            if first is None or first[1] < 0 or now - first[3] < self.limit:
                continue
            if self._read(name) == first:  # not torn by a write in between
                late.append(Stuck(first[0], first[1], first[2], now - first[3]))
        return late

    def _read(self, name: str) -> tuple[int, int, int, float] | None:
        try:
            with open(os.path.join(self.folder, name), "rb") as f:
                data = f.read(_RECORD.size)
        except OSError:
            return None
        if len(data) != _RECORD.size:
            return None
        return _RECORD.unpack(data)

    def take(self) -> list[Stuck]:
        """The workers ended since the last call."""
        with self._lock:
            stuck, self._stuck = self._stuck, []
        return stuck

    def close(self) -> None:
        """Stops watching and removes the folder."""
        self._stop.set()
        self._thread.join()
        scratch.remove(self.folder)
