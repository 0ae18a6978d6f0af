"""Folding: a reduction never loses or repeats a sample, whatever skips, chunks and executor.

For random skip patterns, chunk sizes, Parallel and Sequential sources and executors, a
reduction equals the same reduction computed directly over the surviving samples (exactly
for counts, to rounding for means), a plain Collect agrees with it, and the reducer's bits
do not depend on chunking or executor: as a property over random patterns, and over fixed
skip patterns (the first chunk failing, every third sample, all but one) for every chunk
size on inline and processes, with Welford against numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowdata as fd
from flowdata.stats import Stats
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


# --- reductions under on_error="skip", for every chunk size and executor ------------------


class Count:
    """A user reducer: counts the values folded into it."""

    def __init__(self) -> None:
        self.n = 0

    def update(self, value: Any) -> None:
        self.n += 1

    def merge(self, other: Count) -> Count:
        self.n += other.n
        return self

    def result(self) -> int:
        return self.n

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"n": np.array(self.n)}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> Count:
        c = cls()
        c.n = int(np.asarray(state["n"]))
        return c


def _executor(name: str, pool: fd.ProcessExecutor) -> Any:
    return pool if name == "processes" else "inline"


def _stats_equal(a: Stats, b: Stats) -> bool:
    return all(torch.equal(getattr(a, k), getattr(b, k)) for k in ("mean", "std", "var", "min", "max", "count"))


N = 200


SKIP_PATTERNS: dict[str, frozenset[int]] = {
    "first_64_fail": frozenset(range(64)),
    "64_to_127_fail": frozenset(range(64, 128)),
    "every_3rd_fails": frozenset(range(0, N, 3)),
    "all_but_0_fail": frozenset(range(1, N)),
    "all_but_117_fail": frozenset(set(range(N)) - {117}),
    "all_but_150_fail": frozenset(set(range(N)) - {150}),
    "nothing_fails": frozenset(),
}


SKIPPING = """
from flowdata import Collect, {kind}, reduce
from flowdata.stats import Stats, Welford
from tests.run.test_folding import Count

def item(n: int) -> {kind}[int]:
    yield from range(n)

def checked(item: int, fail: frozenset[int]) -> int:
    if item in fail:
        raise ValueError(f"bad {{item}}")
    return item

@reduce(Count)
def n_reduced(checked: Collect[int]) -> int: ...

def n_plain(checked: Collect[int]) -> int:
    return sum(1 for _ in checked)

def value(checked: int) -> float:
    return 1e4 + ((checked * 7919) % 1000) / 7.0

@reduce(Welford)
def value_stats(value: Collect[float]) -> Stats: ...
"""


def _value(i: int) -> float:
    return 1e4 + ((i * 7919) % 1000) / 7.0


@pytest.mark.procs
@pytest.mark.parametrize("pattern", list(SKIP_PATTERNS))
@pytest.mark.parametrize("executor", ["inline", "processes"])
@pytest.mark.parametrize("kind", ["Parallel", "Sequential"])
@pytest.mark.parametrize("chunk_size", [None, 7, 10, 64, 100])
def test_reduction_counts_every_surviving_sample(
    build: Callable[..., fd.Driver], pool: fd.ProcessExecutor, chunk_size: int | None, kind: str, executor: str, pattern: str
) -> None:
    """A reduction sees exactly the samples that survive on_error="skip", like a plain Collect."""
    dr = build(SKIPPING.format(kind=kind))
    fail = SKIP_PATTERNS[pattern]
    report = fd.Report()
    kw: dict[str, Any] = {} if chunk_size is None else {"chunk_size": chunk_size}
    out = dr.execute(
        ["n_reduced", "n_plain"], inputs={"n": N, "fail": fail}, on_error="skip", executor=_executor(executor, pool), report=report, **kw
    )
    survivors = N - len(fail)
    assert out["n_plain"] == survivors
    assert out["n_reduced"] == survivors, f"reduction saw {out['n_reduced']} of {survivors} surviving samples"
    assert sorted(s.index for s in report.skipped) == sorted(fail)


@pytest.mark.procs
@pytest.mark.parametrize("pattern", ["first_64_fail", "64_to_127_fail", "every_3rd_fails", "all_but_150_fail", "nothing_fails"])
@pytest.mark.parametrize("kind", ["Parallel", "Sequential"])
def test_welford_under_skip_matches_numpy_and_is_bitwise_stable(
    build: Callable[..., fd.Driver], pool: fd.ProcessExecutor, kind: str, pattern: str
) -> None:
    """Welford over the surviving values: numpy's answer, the same bits for any executor and chunk size."""
    dr = build(SKIPPING.format(kind=kind))
    fail = SKIP_PATTERNS[pattern]
    kept = np.array([_value(i) for i in range(N) if i not in fail], dtype=np.float64)
    first: Stats | None = None
    for executor in ("inline", "processes"):
        for chunk_size in (None, 7, 10, 64, 100):
            kw: dict[str, Any] = {} if chunk_size is None else {"chunk_size": chunk_size}
            stats = dr.execute(["value_stats"], inputs={"n": N, "fail": fail}, on_error="skip", executor=_executor(executor, pool), **kw)["value_stats"]
            where = f"{executor}, chunk_size={chunk_size}"
            assert int(stats.count) == len(kept), where
            assert np.allclose(float(stats.mean), kept.mean(), rtol=1e-12, atol=0), where
            assert np.allclose(float(stats.var), kept.var(), rtol=1e-9, atol=0), where
            assert (float(stats.min), float(stats.max)) == (kept.min(), kept.max()), where
            if first is None:
                first = stats
            assert _stats_equal(stats, first), where
