"""Memory is bounded by bytes, not counts: large samples never pile up in a chunk or a fold.

Peaks are read with tracemalloc, which sees numpy's buffers, in this process: inline the
whole pass runs here; with processes, what this process holds while workers compute.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import flowdata as fd

pytestmark = pytest.mark.procs  # every test here starts processes (workers, pools or programs)

MB = 1 << 20

LARGE = """
import numpy as np
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford

def index(n: int) -> Parallel[int]:
    yield from range(n)

def frame(index: int, mb: int) -> np.ndarray:
    # A distinct, fully written array of `mb` megabytes per sample (a decoded clip or image).
    return np.full(mb * 2**20 // 8, float(index))

def total(frame: Collect[np.ndarray]) -> float:
    return float(sum(float(f[0]) for f in frame))

@reduce(Welford, dim=None)
def frame_stats(frame: Collect[np.ndarray]) -> Stats: ...
"""


@pytest.fixture(scope="module")
def pool() -> Iterator[fd.ProcessExecutor]:
    with fd.ProcessExecutor(num_workers=2) as ex:
        yield ex


def _peak(work: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        out = work()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("executor", ["inline", "processes"])
def test_large_samples_stay_within_a_few_samples(build: Callable[..., fd.Driver], executor: str,
                                                 pool: fd.ProcessExecutor) -> None:
    """24 samples of 80 MB into a plain Collect: the first chunk holds one sample, not eight."""
    dr = build(LARGE)
    ex: object = "inline" if executor == "inline" else pool
    out, peak = _peak(lambda: dr.execute(["total"], inputs={"n": 24, "mb": 80}, executor=ex))
    assert out == {"total": float(sum(range(24)))}
    assert peak < 5 * 80 * MB, f"peak {peak / MB:.0f} MB for 80 MB samples"


@pytest.mark.parametrize("executor", ["inline", "processes"])
def test_folding_large_values_never_holds_a_block(build: Callable[..., fd.Driver], executor: str,
                                                  pool: fd.ProcessExecutor) -> None:
    """A Welford over 10 MB values folds them unit by unit: not 64 of them at once."""
    dr = build(LARGE)
    ex: object = "inline" if executor == "inline" else pool
    n = 140  # two whole blocks and a partial one
    out, peak = _peak(lambda: dr.execute(["frame_stats"], inputs={"n": n, "mb": 10}, executor=ex))
    stats = out["frame_stats"]
    assert float(stats.mean) == pytest.approx(np.mean(np.arange(n)))
    assert int(stats.count) == n * 10 * MB // 8
    assert peak < 8 * 10 * MB, f"peak {peak / MB:.0f} MB for 10 MB values"


def test_large_value_folds_are_bitwise_equal_across_executors(build: Callable[..., fd.Driver],
                                                              pool: fd.ProcessExecutor) -> None:
    dr = build(LARGE)
    inputs = {"n": 70, "mb": 9}
    runs = [
        dr.execute(["frame_stats"], inputs=inputs)["frame_stats"],
        dr.execute(["frame_stats"], inputs=inputs, executor=pool)["frame_stats"],
        dr.execute(["frame_stats"], inputs=inputs, executor=pool, chunk_size=3)["frame_stats"],
        dr.execute(["frame_stats"], inputs=inputs, chunk_size=64)["frame_stats"],
    ]
    for s in runs[1:]:
        for field in ("mean", "var", "min", "max", "count"):
            assert getattr(s, field).numpy().tobytes() == getattr(runs[0], field).numpy().tobytes(), field
