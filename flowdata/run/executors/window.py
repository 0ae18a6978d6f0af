"""The in-order window: the tasks of one ``map`` call in flight, their results in task order.

Both executors that run tasks elsewhere (:mod:`.processes`, :mod:`.ray`) keep the contract of
:mod:`.contract` through one :class:`Window`, given how to submit a task (a future, a Ray
reference: a *handle*) and how to wait for a handle a while:

* **Lazily.** Tasks are pulled only while fewer than ``size`` are in flight: ``size`` at
  first, then one more each time a result is handed over.
* **In task order.** The oldest handle is waited for, whichever finishes first; it stays in
  :attr:`Window.pending` while waited for, so that a stop then drops it with the others.
* **In slices.** A wait lasts at most half a second at a time. A Ctrl-C that the kernel
  hands to another thread of the process (a library's native thread) does not wake a main
  thread blocked on a lock: the interpreter only notices the signal when the main thread
  runs again. Waking every half second, the wait runs again and the ``KeyboardInterrupt``
  is raised within a second; a dead worker is noticed as soon.

What is still pending when the iteration stops (an error, a Ctrl-C, a consumer that had
enough) is the executor's to drop, each its own way: the pool ends workers still computing,
Ray cancels its tasks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["Window"]

T = TypeVar("T")
H = TypeVar("H")  # a submitted task: a future, a Ray reference
O = TypeVar("O")  # what a handle gives once done

SLICE = 0.5  # seconds a wait lasts before it runs again


class Window(Generic[T, H, O]):
    """The tasks of one ``map`` call in flight, at most ``size``; iterated once, it yields
    each task's outcome in task order.

    Args:
        tasks: The tasks, pulled only as there is room for them.
        size: Tasks in flight at most (``max_in_flight``).
        submit: Sends one task off; returns its handle. An error is an error of the call.
        get: ``get(handle, timeout)``: the handle's outcome, or ``not_ready`` raised when it
            is not done within ``timeout`` seconds.
        not_ready: The exception ``get`` raises for a handle not done yet.
    """

    def __init__(
        self,
        tasks: Iterable[T],
        size: int,
        submit: Callable[[T], H],
        get: Callable[[H, float], O],
        not_ready: type[BaseException],
    ):
        self._tasks = iter(tasks)
        self._size = size
        self._submit = submit
        self._get = get
        self._not_ready = not_ready
        self.pending: deque[H] = deque()  # submitted, not handed over yet; the oldest first

    def __iter__(self) -> Iterator[O]:
        pending = self.pending
        for task in self._tasks:
            pending.append(self._submit(task))
            if len(pending) >= self._size:
                break
        while pending:
            outcome = self.wait(pending[0])  # left in pending while waited for: a stop here drops it
            pending.popleft()
            task = next(self._tasks, _END)
            if task is not _END:
                pending.append(self._submit(task))
            yield outcome

    def wait(self, handle: H) -> O:
        """The handle's outcome, waited for in slices of :data:`SLICE` seconds (see above)."""
        while True:
            try:
                return self._get(handle, SLICE)
            except self._not_ready:
                continue


_END: Any = object()
