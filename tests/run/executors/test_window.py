"""The in-order window both out-of-process executors run through (:class:`Window`), and the
contexts a worker keeps (:class:`ContextCache`), without any process: handles are plain
objects here."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import partial

import pytest

from flowdata.run.executors.contract import ContextCache
from flowdata.run.executors.window import SLICE, Window


class NotReady(Exception):
    pass


class Handle:
    """A task submitted: done after ``polls`` waits that found it not ready."""

    def __init__(self, task: int, polls: int = 0):
        self.task, self.polls = task, polls


def _window(tasks: Iterable[int], size: int, log: list[str], polls: int = 0) -> Window[int, Handle, int]:
    def submit(task: int) -> Handle:
        log.append(f"submit {task}")
        return Handle(task, polls)

    def get(handle: Handle, timeout: float) -> int:
        assert timeout == SLICE
        if handle.polls:
            handle.polls -= 1
            log.append(f"not ready {handle.task}")
            raise NotReady
        return handle.task * 10

    return Window(tasks, size, submit, get, NotReady)


def test_results_in_task_order_with_at_most_size_in_flight() -> None:
    log: list[str] = []
    assert list(_window(range(5), 2, log)) == [0, 10, 20, 30, 40]
    assert log == ["submit 0", "submit 1", "submit 2", "submit 3", "submit 4"]


def test_tasks_are_pulled_only_as_there_is_room() -> None:
    pulled: list[int] = []

    def endless() -> Iterator[int]:
        i = 0
        while True:
            pulled.append(i)
            yield i
            i += 1

    window = _window(endless(), 3, [])
    results = iter(window)
    assert next(results) == 0
    assert pulled == [0, 1, 2, 3]  # 3 at first, one more once the first was handed over
    assert [h.task for h in window.pending] == [1, 2, 3]


def test_a_wait_runs_again_each_slice_until_ready() -> None:
    log: list[str] = []
    assert list(_window([7], 4, log, polls=2)) == [70]
    assert log == ["submit 7", "not ready 7", "not ready 7"]


def test_a_failing_wait_leaves_its_handle_pending() -> None:
    def get(handle: Handle, timeout: float) -> int:
        raise RuntimeError(f"worker of task {handle.task} died")

    window = Window(range(5), 2, Handle, get, NotReady)
    with pytest.raises(RuntimeError, match="worker of task 0 died"):
        list(window)
    assert [h.task for h in window.pending] == [0, 1]  # the executor drops both


def test_a_context_is_loaded_once_and_the_oldest_dropped_first() -> None:
    loads: list[str] = []
    cache: ContextCache[str] = ContextCache(keep=2)

    def load(key: str) -> str:
        loads.append(key)
        return key.upper()

    assert [cache.get(k, partial(load, k)) for k in ["a", "a", "b", "a", "c", "a", "b"]] == \
        ["A", "A", "B", "A", "C", "A", "B"]
    assert loads == ["a", "b", "c", "a", "b"]  # "a" dropped when "c" came, though met since
