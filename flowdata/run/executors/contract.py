"""Executors: where chunks of per-sample work run -- the contract.

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
creates itself are closed after the call. ``tests/conformance/test_executors.py`` holds
the suite that every executor must pass.

:func:`pickled_task` is how every executor that sends work elsewhere pickles a task, so
that an unpicklable item is the same error whichever executor meets it; a worker of such an
executor keeps the contexts it was sent in a :class:`ContextCache`.
"""

from __future__ import annotations

import pickle
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from flowdata.errors import FlowdataError, describe

__all__ = ["ContextCache", "Executor", "InlineExecutor", "pickled_task"]

T = TypeVar("T")
R = TypeVar("R")
C = TypeVar("C")
V = TypeVar("V")


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


class ContextCache(Generic[V]):
    """In a worker process: the contexts of the last ``keep`` ``map`` calls it met, each
    loaded the first time a task of its call arrives (a call's context is sent once, and
    a task names it by ``key``). The oldest one met is dropped first."""

    def __init__(self, keep: int = 4):
        self._keep = keep
        self._entries: OrderedDict[str, V] = OrderedDict()

    def get(self, key: str, load: Callable[[], V]) -> V:
        """The context named ``key``: kept, or ``load()`` now and kept."""
        try:
            return self._entries[key]
        except KeyError:
            pass
        entry = self._entries[key] = load()
        while len(self._entries) > self._keep:
            self._entries.popitem(last=False)
        return entry
