"""What a plain Collect function receives: a lazy stream when it consumes it once on the
spot, else a list -- so keeping, re-reading or combining a Collect argument works."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

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
