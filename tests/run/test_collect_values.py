"""What a plain Collect function receives: a lazy stream when it consumes it once on the
spot, else a list -- so keeping, re-reading, returning or combining a Collect argument
works, judged by the code that really runs (numpy, generators, ``@does``, decorators that
call the body twice)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

import flowdata as fd

USES = """
from flowdata import Collect, Parallel

PULLED: list[int] = []

def item(n: int) -> Parallel[int]:
    for i in range(n):
        PULLED.append(i)
        yield i

def sq(item: int) -> int:
    return item * item

def first_over(sq: Collect[int], limit: int) -> int:
    for s in sq:
        if s > limit:
            return s
    return -1

def stored(sq: Collect[int]) -> dict[str, list[int]]:
    return {"all": sq}

def mean(sq: Collect[int]) -> float:
    return sum(sq) / len(sq)

def twice_in_a_loop(sq: Collect[int]) -> int:
    total = 0
    for _ in range(2):
        total += sum(sq)
    return total

def through_helpers(sq: Collect[int]) -> list[int]:
    return sorted(map(lambda v: -v, filter(lambda v: v % 2 == 0, sq)))

def passed_on(sq: Collect[int]) -> int:
    return _count(sq) + _count(sq)

def _count(values: list[int]) -> int:
    return len(values)

def kinds(sq: Collect[int], item: Collect[int]) -> tuple[str, int]:
    return type(item).__name__, sum(sq)
"""


def test_every_use_of_a_collect_argument_gives_the_right_values(build: Callable[..., fd.Driver]) -> None:
    dr = build(USES)
    squares = [i * i for i in range(50)]
    got = dr.execute(["stored", "mean", "twice_in_a_loop", "through_helpers", "passed_on"], inputs={"n": 50})
    assert got["stored"] == {"all": squares}
    assert got["mean"] == sum(squares) / 50
    assert got["twice_in_a_loop"] == 2 * sum(squares)
    assert got["through_helpers"] == sorted(-v for v in squares if v % 2 == 0)
    assert got["passed_on"] == 100


def test_a_parameter_read_once_is_a_stream(build: Callable[..., fd.Driver]) -> None:
    dr = build(USES)
    module = dr.nodes["item"].fn.__globals__
    assert dr.execute(["first_over"], inputs={"n": 100_000, "limit": 100})["first_over"] == 121
    # A stream: breaking out of the loop stopped the source after a few chunks.
    assert len(module["PULLED"]) < 1000
    # A parameter read for something else than consuming it is a list (and lockstep with
    # a streamed one still aligns them).
    assert dr.execute(["kinds"], inputs={"n": 5})["kinds"] == ("list", 30)


STREAMING_MEMORY = """
from flowdata import Collect, Sequential

def blob(n: int) -> Sequential[bytes]:
    for i in range(n):
        yield bytes([i % 256]) * 1_000_000

def size(blob: bytes) -> int:
    return len(blob)

def total(blob: Collect[bytes]) -> int:
    return sum(len(b) for b in blob)

def kept(blob: Collect[bytes]) -> list[bytes]:
    return blob
"""


def test_a_streamed_collect_holds_one_sample_and_a_kept_one_holds_all(build: Callable[..., fd.Driver]) -> None:
    dr = build(STREAMING_MEMORY)
    tracemalloc.start()
    try:
        assert dr.execute(["total"], inputs={"n": 200})["total"] == 200_000_000
        streamed = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        assert len(dr.execute(["kept"], inputs={"n": 50})["kept"]) == 50
        kept = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert streamed < 10_000_000  # a few samples of 1 MB, not 200
    assert kept > 45_000_000  # the list the function keeps, as asked


HAMILTON = """
from hamilton.htypes import Collect, Parallelizable

def par(n: int) -> Parallelizable[int]:
    yield from range(n)

def f(par: int) -> int:
    return par + 1

def got(f: Collect[int]) -> str:
    for _ in f:
        pass
    return type(f).__name__
"""


def test_hamiltons_collect_is_always_a_list(build: Callable[..., fd.Driver]) -> None:
    dr = build(HAMILTON)
    assert dr.execute(["got"], inputs={"n": 4}) == {"got": "list"}


# --- a Collect argument returned as it is, or iterated twice ------------------------------


def _executor(name: str, pool: fd.ProcessExecutor) -> Any:
    return pool if name == "processes" else "inline"


RETURNED = """
from flowdata import Collect, Parallel

def item(n: int) -> Parallel[int]:
    yield from range(n)

def square(item: int) -> int:
    return item * item

def collected(square: Collect[int]) -> list[int]:
    return square

def total(collected: list[int]) -> int:
    return sum(collected)

def other(item: Collect[int]) -> list[int]:
    return item

def both(collected: list[int], other: list[int]) -> list[int]:
    return collected + other

def again(collected: list[int]) -> Parallel[int]:
    yield from collected

def plus_one(again: int) -> int:
    return again + 1

def plus_ones(plus_one: Collect[int]) -> list[int]:
    return list(plus_one)

def twice(square: Collect[int]) -> int:
    return sum(square) + len(list(square))
"""


SQUARES = [i * i for i in range(20)]


@pytest.mark.procs
@pytest.mark.parametrize("executor", ["inline", "processes"])
def test_collect_returned_as_it_is_keeps_its_values(build: Callable[..., fd.Driver], pool: fd.ProcessExecutor, executor: str) -> None:
    dr = build(RETURNED)
    out = dr.execute(["collected", "total"], inputs={"n": 20}, executor=_executor(executor, pool))
    assert list(out["collected"]) == SQUARES
    assert list(out["collected"]) == SQUARES  # a value, not a spent iterator
    assert out["total"] == sum(SQUARES)


def test_returned_collect_feeds_a_second_group(build: Callable[..., fd.Driver]) -> None:
    dr = build(RETURNED)
    assert dr.execute(["plus_ones"], inputs={"n": 20}) == {"plus_ones": [s + 1 for s in SQUARES]}


def test_two_returned_collects_joined(build: Callable[..., fd.Driver]) -> None:
    dr = build(RETURNED)
    assert dr.execute(["both"], inputs={"n": 20}) == {"both": SQUARES + list(range(20))}


def test_collect_parameter_iterated_twice(build: Callable[..., fd.Driver]) -> None:
    dr = build(RETURNED)
    assert dr.execute(["twice"], inputs={"n": 20}) == {"twice": sum(SQUARES) + 20}


def test_hamiltons_collect_receives_a_list(build: Callable[..., fd.Driver]) -> None:
    """Hamilton modules run unchanged: Hamilton's Collect[T] hands the function a real list."""
    dr = build("""
    from hamilton.htypes import Collect as HCollect, Parallelizable

    def par(n: int) -> Parallelizable[int]:
        yield from range(n)

    def f(par: int) -> int:
        return 3 * par

    def got(f: HCollect[int]) -> list[int]:
        assert isinstance(f, list), type(f).__name__
        return f
    """)
    out = dr.execute(["got"], inputs={"n": 12})
    assert type(out["got"]) is list and out["got"] == [3 * i for i in range(12)]


# --- a Collect argument judged by the code that really runs -------------------------------


WRAPPED = """
import functools
from collections.abc import Iterator

import numpy as np
from hamilton.function_modifiers import does
from flowdata import Collect, Parallel

def x(count: int) -> Parallel[float]:
    yield from (float(i) for i in range(count))

def np_all_positive(x: Collect[float]) -> bool:
    return bool(np.all(x))

def np_total(x: Collect[float]) -> float:
    return float(np.sum(x))

def backwards(x: Collect[float]) -> list[float]:
    return list(reversed(x))

def doubled(x: Collect[float]) -> Iterator[float]:
    for v in x:
        yield v * 2

def _keep(x: list[float]) -> list[float]:
    return list(x)

@does(_keep)
def kept(x: Collect[float]) -> list[float]:
    pass

def _retry(fn):
    @functools.wraps(fn)
    def wrapper(**kwargs):
        try:
            return fn(**kwargs)
        except ZeroDivisionError:
            return fn(**kwargs)
    return wrapper

CALLS = []

@_retry
def retried(x: Collect[float]) -> float:
    CALLS.append(1)
    total = sum(x)
    if len(CALLS) == 1:
        raise ZeroDivisionError("first try")
    return total
"""


def test_collect_arguments_judged_by_what_really_runs(build: Callable[..., fd.Driver]) -> None:
    dr = build(WRAPPED)
    got = dr.execute(["np_all_positive", "np_total", "backwards", "doubled", "kept", "retried"], inputs={"count": 5})
    assert got["np_all_positive"] is False  # np.all of a stream object was truthy
    assert got["np_total"] == 10.0
    assert got["backwards"] == [4.0, 3.0, 2.0, 1.0, 0.0]
    assert list(got["doubled"]) == [0.0, 2.0, 4.0, 6.0, 8.0]  # a generator runs after the call
    assert got["kept"] == [0.0, 1.0, 2.0, 3.0, 4.0]  # @does: the body that runs is not the source's
    assert got["retried"] == 10.0  # a decorator may call the body twice
