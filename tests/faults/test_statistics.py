"""Fault injection on the values a statistics pass folds: each test is named after the fault it
injects. A constant feature, one non-finite sample among good ones, a value of the wrong
shape for its reduction: each warned of or refused with the node and the sample.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import numpy as np
import pytest

import flowdata as fd


def test_a_constant_feature(caplog: pytest.LogCaptureFixture) -> None:
    import torch

    from flowdata.stats import Welford
    from flowdata.transforms import Normalize

    rows = torch.stack([torch.tensor([float(i), 5.0, -float(i)]) for i in range(10)])
    w = Welford(dim=0)
    w.update(rows)
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        norm = Normalize.from_stats(w.result())
    out = norm(rows)
    assert torch.isfinite(out).all() and out[:, 1].abs().max() == 0  # the constant column is 0
    assert torch.allclose(out[:, 0].mean(), torch.tensor(0.0), atol=1e-6)
    messages = [r.getMessage() for r in caplog.records if "constant" in r.getMessage()]
    assert messages == ["Normalize: 1 of 3 features have a standard deviation below 1e-08 (constant): "
                        "they normalise to 0 (positions 1)"]


NAN = """
import math
import torch
from flowdata import Collect, {kind}, reduce
from flowdata.stats import Stats, Welford

def item(n: int) -> {kind}[int]:
    yield from range(n)

def feature(item: int) -> torch.Tensor:
    if item == 7:
        return torch.tensor([1.0, math.nan])
    if item == 9:
        return torch.tensor([math.inf, 0.0])
    return torch.tensor([float(item), 1.0])

@reduce(Welford, dim=0)
def stats(feature: Collect[torch.Tensor]) -> Stats: ...

@reduce(Welford, dim=0, nan="propagate")
def raw_stats(feature: Collect[torch.Tensor]) -> Stats: ...
"""


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # nan="propagate": asked for
@pytest.mark.parametrize("kind", ["Parallel", "Sequential"])
def test_one_non_finite_sample_among_good_ones(build: Callable[..., fd.Driver], kind: str) -> None:
    import torch

    dr = build(NAN.format(kind=kind))
    with pytest.raises(fd.SampleError, match=r"node 'feature' \(.*:10\) failed on sample 7 of group 'item' .*'feature' is not finite \(NaN or inf\), and reduction 'stats' folds it"):
        dr.execute(["stats"], inputs={"n": 20})
    report = fd.Report()
    stats = dr.execute(["stats"], inputs={"n": 20}, on_error="skip", report=report)["stats"]
    assert [s.index for s in report.skipped] == [7, 9]
    good = [i for i in range(20) if i not in (7, 9)]
    assert torch.isfinite(stats.mean).all() and float(stats.mean[0]) == pytest.approx(sum(good) / len(good))
    raw = dr.execute(["raw_stats"], inputs={"n": 20})["raw_stats"]  # asked for: NaN goes through
    assert bool(torch.isnan(raw.mean[1])) and bool(torch.isinf(raw.mean[0]))


ODD_SHAPE = """
import numpy as np

from flowdata import Collect, Parallel, Sequential, reduce
from flowdata.stats import Stats, Welford

def item(n: int) -> Parallel[int]:
    yield from range(n)

def stream(n: int) -> Sequential[int]:
    yield from range(n)

def frames(item: int, odd: int) -> np.ndarray:
    return np.full((2, 4 if item == odd else 3), float(item))

def streamed(stream: int, odd: int) -> np.ndarray:
    return np.full((2, 4 if stream == odd else 3), float(stream))

@reduce(Welford, dim=(0, 1))
def stats(frames: Collect[np.ndarray]) -> Stats: ...

@reduce(Welford, dim=(0, 1))
def stream_stats(streamed: Collect[np.ndarray]) -> Stats: ...
"""


@pytest.mark.procs
@pytest.mark.parametrize(("output", "n", "odd", "executor"), [
    ("stats", 10, 5, "inline"),  # folded in this process (a first, partial block)
    ("stats", 300, 0, "inline"),  # the odd value first: the others are not to blame
    ("stats", 300, 200, "processes"),  # folded in a worker (a whole block)
    ("stream_stats", 300, 130, "inline"),  # a Sequential group: folded here, value by value
])
def test_a_value_of_the_wrong_shape_for_its_reduction(build: Callable[..., fd.Driver], output: str, n: int, odd: int,
                                                      executor: str) -> None:
    dr = build(ODD_SHAPE)
    reduction = "stats" if output == "stats" else "stream_stats"
    with pytest.raises(fd.SampleError, match=rf"node '{reduction}' \(.*\) failed on sample {odd} of group .*StatsError: Welford\(dim=\(0, 1\)\) expected values whose kept shape is \(3,\), got \(4,\)(.|\n)*    item: {odd}\n"):
        dr.execute([output], inputs={"n": n, "odd": odd}, executor=executor)
    report = fd.Report()
    stats = dr.execute([output], inputs={"n": n, "odd": odd}, executor=executor, on_error="skip", report=report)[output]
    kept = [i for i in range(n) if i != odd]
    assert stats.count.tolist() == [2 * len(kept)] * 3
    assert np.allclose(stats.mean.numpy(), np.mean(kept))
    assert [(s.index, s.node) for s in report.skipped] == [(odd, reduction)] and sum(report.seen.values()) == n
