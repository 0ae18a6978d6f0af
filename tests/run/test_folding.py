"""Property: a reduction never loses or repeats a sample, whatever skips, chunks and executor.

For random skip patterns, chunk sizes, Parallel and Sequential sources and executors, a
reduction equals the same reduction computed directly over the surviving samples (exactly
for counts, to rounding for means), a plain Collect agrees with it, and the reducer's bits
do not depend on chunking or executor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowdata as fd
from tests.conformance.test_executors import ShuffledExecutor, ThreadExecutor

FLOW = """
from flowdata import Collect, {kind}, reduce
from flowdata.stats import Count, Stats, Welford

def item(n: int) -> {kind}[int]:
    yield from range(n)

def value(item: int, bad: frozenset[int]) -> float:
    if item in bad:
        raise ValueError(f"bad sample {{item}}")
    return float((item * 7919) % 101) / 7.0

@reduce(Count)
def counted(value: Collect[float]) -> int: ...

@reduce(Welford)
def stats(value: Collect[float]) -> Stats: ...

def kept(value: Collect[float]) -> list[float]:
    return value
"""

_DRIVERS: dict[str, fd.Driver] = {}


def _driver(build: Callable[..., fd.Driver], kind: str) -> fd.Driver:
    if kind not in _DRIVERS:
        _DRIVERS[kind] = build(FLOW.format(kind=kind))
    return _DRIVERS[kind]


def _bits(stats: Any) -> bytes:
    return b"".join(getattr(stats, f).numpy().tobytes() for f in ("mean", "var", "min", "max", "count"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(0, 300),
    bad=st.one_of(
        st.sets(st.integers(0, 299), max_size=120),
        st.builds(lambda a, k: set(range(a, a + k)), st.integers(0, 250), st.integers(1, 140)),
    ),
    chunk_size=st.sampled_from([None, 1, 7, 10, 63, 64, 65, 200]),
    kind=st.sampled_from(["Parallel", "Sequential"]),
    executor=st.sampled_from(["inline", "threads", "shuffled"]),
)
def test_reductions_equal_the_survivors(
    build: Callable[..., fd.Driver], n: int, bad: set[int], chunk_size: int | None, kind: str, executor: str
) -> None:
    dr = _driver(build, kind)
    inputs = {"n": n, "bad": frozenset(bad)}
    ex: object = {"inline": "inline", "threads": ThreadExecutor(2), "shuffled": ShuffledExecutor(seed=n)}[executor]
    got = dr.execute(["counted", "stats", "kept"], inputs=inputs, on_error="skip", executor=ex, chunk_size=chunk_size)
    survivors = [float((i * 7919) % 101) / 7.0 for i in range(n) if i not in bad]
    assert got["kept"] == survivors
    assert got["counted"] == len(survivors)
    assert int(got["stats"].count) == len(survivors)
    if survivors:
        assert float(got["stats"].mean) == np.float64(np.mean(survivors)).item() or np.isclose(
            float(got["stats"].mean), np.mean(survivors), rtol=1e-12)
        assert float(got["stats"].min) == min(survivors) and float(got["stats"].max) == max(survivors)
    reference = dr.execute(["stats"], inputs=inputs, on_error="skip")["stats"]
    assert _bits(got["stats"]) == _bits(reference)
