"""Welford's shifted accumulation: large values with a small spread, checked against exact
fractions; the shift rule; bitwise-identical results for any executor and chunking; the
shift in ``state_dict`` (and states written before it)."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import torch

import flowdata as fd
from flowdata.reduce import BLOCK
from flowdata.stats import Stats, Welford

FIELDS = ("mean", "std", "var", "min", "max", "count", "shift", "offset")


def _exact(values: Sequence[float]) -> tuple[Fraction, Fraction]:
    """The mean and population variance of float64 values, in exact fractions."""
    xs = [Fraction(v) for v in values]
    mean = sum(xs, Fraction(0)) / len(xs)
    return mean, sum(((x - mean) ** 2 for x in xs), Fraction(0)) / len(xs)


def _relative(got: float, exact: Fraction) -> float:
    return float(abs(Fraction(got) - exact) / abs(exact))


def _blocks(x: np.ndarray, dim: int | tuple[int, ...] | None = None, nan: Any = "propagate") -> Welford:
    """``x``'s rows folded as a reduction folds samples: a fresh Welford per block of
    ``BLOCK`` rows, merged in order into a fresh one."""
    total = Welford(dim, nan=nan)
    for start in range(0, len(x), BLOCK):
        block = Welford(dim, nan=nan)
        block.fold(list(x[start : start + BLOCK]))
        total.merge(block)
    return total


@pytest.mark.parametrize("base", [1e9, 1e15])
def test_variance_of_large_values_with_a_spread_of_one_is_exact_to_1e9(base: float) -> None:
    rng = np.random.default_rng(int(np.log10(base)))
    x = base + rng.uniform(-1.0, 1.0, 3000)  # float64: around 1e15 a multiple of 0.125
    mean, var = _exact(x.tolist())
    streamed = Welford()
    for batch in np.array_split(x, 37):  # uneven batches, merged by Chan's formula
        streamed.update(batch)
    as_reduction = _blocks(x, dim=0)
    for w in (streamed, as_reduction):
        s = w.result()
        assert _relative(float(s.var), var) <= 1e-9
        assert _relative(float(s.std) ** 2, var) <= 1e-9
        assert _relative(float(s.mean), mean) <= 1e-15
        # The exact form of the mean: shift (the first value) plus offset, right at the
        # spread's scale, where the float64 mean alone is a multiple of 0.125 around 1e15.
        assert float(s.shift) == x[0]
        assert float(abs(Fraction(float(s.shift)) + Fraction(float(s.offset)) - mean)) <= 1e-12
        assert float(s.min) == x.min() and float(s.max) == x.max() and int(s.count) == x.size


def test_per_column_statistics_of_large_values_with_missing_cells_are_exact_to_1e9() -> None:
    rng = np.random.default_rng(7)
    x = np.stack([1e9 + rng.uniform(-1.0, 1.0, 1000), 1e15 + rng.uniform(-1.0, 1.0, 1000)], axis=1)
    x[rng.random(x.shape) < 0.1] = np.nan
    x[:3, 1] = np.nan  # column 1's first value is in row 3
    s = _blocks(x, dim=0, nan="ignore").result()
    for j in range(2):
        column = x[:, j][~np.isnan(x[:, j])]
        _, var = _exact(column.tolist())
        assert _relative(float(s.var[j]), var) <= 1e-9
        assert int(s.count[j]) == column.size and float(s.shift[j]) == column[0]


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # inf - inf, as without a shift
def test_the_shift_is_each_positions_first_value_and_never_changes() -> None:
    w = Welford(dim=0, nan="ignore")
    w.update(np.array([[np.nan, 5.0, np.inf], [np.nan, 6.0, 2.0]]))
    assert w.result().shift.tolist()[1:] == [5.0, 0.0]  # inf is not a shift: 0 (the mean is inf anyway)
    assert np.isnan(w.result().shift[0].item())  # nothing folded: NaN, like the mean
    w.update(np.array([[3.0, 100.0, 4.0], [4.0, 7.0, 5.0]]))
    s = w.result()
    assert s.shift.tolist() == [3.0, 5.0, 0.0]
    assert s.mean.tolist()[:2] == [3.5, 118.0 / 4] and not np.isfinite(s.mean[2].item())
    assert s.offset.tolist()[:2] == [0.5, 118.0 / 4 - 5.0]
    # A fresh reducer that merges another takes its shift; a later merge moves means to it.
    total = Welford(dim=0, nan="ignore").merge(w)
    later = Welford(dim=0, nan="ignore")
    later.update(np.array([[9.0, 1e6, 1.0]]))
    total.merge(later)
    assert total.result().shift.tolist() == [3.0, 5.0, 0.0]
    expected = [(3.0 + 4.0 + 9.0) / 3, (5.0 + 6.0 + 100.0 + 7.0 + 1e6) / 5]
    assert total.result().mean.tolist()[:2] == pytest.approx(expected, rel=1e-15, abs=0)
    # Per channel of [channels, time] values: the first in sample order, then time order.
    clips = np.full((2, 2, 3), np.nan)
    clips[0, 0, 2], clips[1, 0, 0], clips[1, 1, 1], clips[1, 1, 2] = 5.0, 7.0, 8.0, 9.0
    channels = Welford(dim=(0, 2), nan="ignore")
    channels.update(clips)
    assert channels.result().shift.tolist() == [5.0, 8.0] and channels.result().mean.tolist() == [6.0, 8.5]


def test_public_behaviour_is_kept_for_nan_policies_dtypes_and_empty_results() -> None:
    ints = Welford(dim=(0, 2, 3))
    images = torch.randint(0, 256, (4, 3, 5, 5), dtype=torch.uint8)
    ints.update(images)
    s = ints.result()
    assert all(getattr(s, k).dtype == torch.float64 for k in FIELDS if k != "count") and s.count.dtype == torch.int64
    assert s.shift.tolist() == images[0, :, 0, 0].double().tolist()
    assert torch.allclose(s.mean, images.double().mean((0, 2, 3)), rtol=1e-14, atol=0)
    propagate = Welford(dim=0)
    propagate.update(np.array([[np.nan, 1.0], [2.0, 3.0]]))
    assert np.isnan(propagate.result().mean[0].item()) and propagate.result().mean[1].item() == 2.0
    empty = Welford().result()
    assert all(np.isnan(getattr(empty, k).item()) for k in ("mean", "shift", "offset")) and empty.count.item() == 0
    by_hand = Stats(mean=torch.zeros(1), std=torch.ones(1), var=torch.ones(1), min=torch.zeros(1),
                    max=torch.zeros(1), count=torch.ones(1, dtype=torch.int64))
    assert by_hand.shift is None and by_hand.offset is None


def _same_bits(a: Stats, b: Stats) -> bool:
    return all(torch.equal(getattr(a, k).nan_to_num(), getattr(b, k).nan_to_num()) for k in FIELDS)


def test_states_carry_the_shift_so_ranks_merge_the_same_bits() -> None:
    rng = np.random.default_rng(3)
    x = 1e15 + rng.integers(-4, 5, (400, 3)).astype(np.float64)
    first, second = Welford(dim=0), Welford(dim=0)
    first.update(x[:150])
    second.update(x[150:])
    direct = Welford(dim=0).merge(first).merge(second).result()
    # What a rank does: restore the running total from its arrays, merge its own blocks.
    sent = Welford.from_state_dict(Welford(dim=0).merge(first).state_dict())
    assert "shift" in first.state_dict() and _same_bits(sent.merge(second).result(), direct)
    assert _same_bits(pickle.loads(pickle.dumps(first)).merge(second).result(), first.merge(second).result())


def test_a_state_written_before_values_were_shifted_loads_as_shift_zero() -> None:
    # The layout of earlier versions: the raw mean as "mean", no "shift" nor "offset".
    old = {"dim": np.array([0], dtype=np.int64), "dim_is_none": np.array(False), "ddof": np.array(1),
           "nan": np.array("propagate"), "has_shape": np.array(True), "count": np.array([4, 4]),
           "mean": np.array([1.5, 1e6]), "m2": np.array([5.0, 0.0]), "min": np.array([0.0, 1e6]),
           "max": np.array([3.0, 1e6])}
    w = Welford.from_state_dict(old)
    s = w.result()
    assert s.mean.tolist() == [1.5, 1e6] and s.var.tolist() == [5.0 / 3, 0.0] and s.shift.tolist() == [0.0, 0.0]
    w.update(np.array([[1.5, 1e6]]))
    assert w.result().mean.tolist() == [1.5, 1e6] and w.result().count.tolist() == [5, 5]
    assert w.state_dict()["shift"].tolist() == [0.0, 0.0]  # it keeps accumulating about 0


FLOW = """
import numpy as np
import torch
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford

def row(n: int) -> Parallel[int]:
    yield from range(n)

def reading(row: int) -> torch.Tensor:
    u = np.random.default_rng(row).uniform(-1.0, 1.0, 3)
    x = np.array([1e9, 1e15, 1e15]) + u
    if row < 70 or row % 5 == 0:
        x[2] = np.nan  # the third position's first value comes in the second block
    return torch.from_numpy(x)

@reduce(Welford, dim=0, nan="ignore")
def reading_stats(reading: Collect[torch.Tensor]) -> Stats: ...
"""


@pytest.mark.procs
def test_a_reduction_is_exact_and_bitwise_identical_for_any_executor_and_chunking(
    make_module: Callable[[str], Any],
) -> None:
    module = make_module(FLOW)
    dr = fd.Builder().with_modules(module).build()
    inputs = {"n": 500}
    base = dr.execute(["reading_stats"], inputs=inputs)["reading_stats"]
    runs = {f"chunk_size={c}": dr.execute(["reading_stats"], inputs=inputs, chunk_size=c)["reading_stats"]
            for c in (1, 7, 64, 100)}
    with fd.ProcessExecutor(num_workers=2) as ex:
        runs["ProcessExecutor(2)"] = dr.execute(["reading_stats"], inputs=inputs, executor=ex)["reading_stats"]
        runs["ProcessExecutor(2), chunk_size=5"] = dr.execute(["reading_stats"], inputs=inputs, executor=ex,
                                                              chunk_size=5)["reading_stats"]
    assert {k: _same_bits(s, base) for k, s in runs.items()} == {k: True for k in runs}
    values = np.stack([module.reading(i).numpy() for i in range(500)])
    assert base.shift.tolist() == [values[0, 0], values[0, 1], values[71, 2]]  # row 71: the first with a value
    for j in range(3):
        column = values[:, j][~np.isnan(values[:, j])]
        _, var = _exact(column.tolist())
        assert _relative(float(base.var[j]), var) <= 1e-9 and int(base.count[j]) == column.size
