"""Engine defects from the issue tracker, each pinned by a test through the public API.

1. Reductions lose samples under on_error="skip" (chunk sizes, Sequential groups).
2. A Collect argument returned as it is (or iterated twice) loses its values.
3. A source that raises while yielding escapes dataloader() as the raw exception.
4. The training iterator refuses chained groups that execute() runs.
5. dataloader() takes no executor= for its statistics pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pytest
import torch

import flowdata as fd
from flowdata.stats import Stats


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


@pytest.fixture(scope="module")
def pool() -> Iterator[fd.ProcessExecutor]:
    with fd.ProcessExecutor(num_workers=2) as ex:
        yield ex


def _executor(name: str, pool: fd.ProcessExecutor) -> Any:
    return pool if name == "processes" else "inline"


def _stats_equal(a: Stats, b: Stats) -> bool:
    return all(torch.equal(getattr(a, k), getattr(b, k)) for k in ("mean", "std", "var", "min", "max", "count"))


# --- 1. reductions under on_error="skip" ------------------------------------------------------

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
from tests.test_engine_defects import Count

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


# --- 2. a Collect argument returned as it is -------------------------------------------------

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


# --- 3. a source that raises while yielding, through the loader ------------------------------

FAILING_SOURCE = """
from flowdata import Collect, Parallel
def item(n: int) -> Parallel[int]:
    for i in range(n):
        if i == 3:
            raise OSError("disk gone")
        yield i
def doubled(item: int) -> int:
    return 2 * item
def total(doubled: Collect[int]) -> int:
    return sum(doubled)
"""

SOURCE_ERROR = r"node 'item' \(.*:3\) failed: OSError: disk gone \(while producing sample 3\)"


def test_source_error_from_execute(build: Callable[..., fd.Driver]) -> None:
    """What execute() gives today; the loader must say the same."""
    dr = build(FAILING_SOURCE)
    with pytest.raises(fd.NodeError, match=SOURCE_ERROR) as info:
        dr.execute(["total"], inputs={"n": 10})
    assert isinstance(info.value.__cause__, OSError)


@pytest.mark.parametrize(("streaming", "workers"), [(False, 0), (False, 2), (True, 0), (True, 2)], ids=["map-0", "map-2", "stream-0", "stream-2"])
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_source_error_from_dataloader_is_a_node_error(build: Callable[..., fd.Driver], streaming: bool, workers: int) -> None:
    dr = build(FAILING_SOURCE)
    with pytest.raises(fd.NodeError, match=SOURCE_ERROR):
        loader = dr.dataloader(["doubled"], inputs={"n": 10}, batch_size=2, num_workers=workers, streaming=streaming)
        for _ in loader:
            pass


# --- 4. chained groups in the training iterator ----------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_loader_runs_chained_groups(workers: int) -> None:
    from tests.dataflows import chained_groups

    dr = fd.Builder().with_modules(chained_groups).build()
    inputs = chained_groups.CASES[1]
    assert dr.execute(chained_groups.OUTPUTS, inputs=inputs) == chained_groups._oracle(**inputs)
    expected = [len(w) for s in inputs["sentences"] for w in s.split() if len(w) >= 3]
    assert expected
    loader = dr.dataloader(["word_length"], inputs=inputs, batch_size=4, num_workers=workers)
    got = [int(x) for b in loader for x in b["word_length"]]
    assert got == expected


# --- 5. dataloader(executor=...) for the statistics pass -------------------------------------

STATS_FLOW = """
import torch
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford

def item(n: int) -> Parallel[int]:
    yield from range(n)

def feature(item: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(item)
    return 1e4 + torch.randn(3, generator=g, dtype=torch.float64)

@reduce(Welford, dim=0)  # per feature, across samples
def feature_stats(feature: Collect[torch.Tensor]) -> Stats: ...

def normalized(feature: torch.Tensor, feature_stats: Stats) -> torch.Tensor:
    return (feature - feature_stats.mean) / feature_stats.std
"""


def test_dataloader_statistics_pass_takes_an_executor(build: Callable[..., fd.Driver], pool: fd.ProcessExecutor) -> None:
    dr = build(STATS_FLOW)
    inputs = {"n": 300}
    base = dr.dataloader(["normalized"], inputs=inputs, batch_size=50)
    base_batches = [b["normalized"] for b in base]
    for executor in ("inline", pool):
        loader = dr.dataloader(["normalized"], inputs=inputs, batch_size=50, executor=executor)
        assert loader.stats.keys() == base.stats.keys() == {"feature_stats"}
        assert _stats_equal(loader.stats["feature_stats"], base.stats["feature_stats"]), executor
        assert int(loader.stats["feature_stats"].count[0]) == 300
        batches = [b["normalized"] for b in loader]
        assert len(batches) == len(base_batches) and all(torch.equal(a, b) for a, b in zip(batches, base_batches, strict=True))


def test_dataloader_executor_with_a_two_pass_module(pool: fd.ProcessExecutor) -> None:
    from tests.dataflows import two_pass

    dr = fd.Builder().with_modules(two_pass).build()
    inputs = two_pass.CASES[2]
    base = dr.dataloader(two_pass.LOADER_OUTPUTS, inputs=inputs, batch_size=100)
    assert base.stats
    for executor in ("inline", pool):
        loader = dr.dataloader(two_pass.LOADER_OUTPUTS, inputs=inputs, batch_size=100, executor=executor)
        assert loader.stats == base.stats
        got = {k: [float(x) for b in loader for x in b[k]] for k in two_pass.LOADER_OUTPUTS}
        assert got == two_pass._loader_oracle(**inputs)
