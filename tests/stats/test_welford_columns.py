"""Welford folds a stacked column (a @vectorized node's tensor of a chunk) as it folds the
column's rows one by one: the same batches, the same bits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flowdata.columns import Stacked
from flowdata.stats import Welford


@pytest.mark.parametrize(("shape", "dim", "dtype"), [
    ((1000, 7), 0, torch.float64),
    ((1000, 7), 0, torch.float32),
    ((300, 3, 8, 8), (0, 2, 3), torch.float32),
    ((70_000,), None, torch.float64),  # several stacking batches
    ((500, 4), 0, torch.float16),
])
def test_a_stacked_column_folds_bitwise_as_its_rows(shape: tuple[int, ...], dim: object, dtype: torch.dtype) -> None:
    rng = np.random.default_rng(0)
    data = torch.from_numpy(rng.normal(1e6, 3.0, shape)).to(dtype)
    data[5] = float("nan") if dtype != torch.float16 else data[5]
    for nan in ("ignore", "propagate"):
        by_rows, by_column = Welford(dim, nan=nan), Welford(dim, nan=nan)
        by_rows.fold(list(data))
        before = data.clone()
        by_column.fold(Stacked(data))
        assert torch.equal(data.nan_to_num(), before.nan_to_num())  # the column is not written into
        a, b = by_rows.result(), by_column.result()
        for field in ("mean", "var", "std", "min", "max", "count"):
            x, y = getattr(a, field), getattr(b, field)
            assert torch.equal(x.nan_to_num(), y.nan_to_num()) and torch.equal(x.isnan(), y.isnan()), (field, nan)


@pytest.mark.parametrize(("shape", "dtype", "nan"), [
    ((640, 7), torch.float64, "ignore"),
    ((640, 7), torch.float32, "propagate"),
    ((640,), torch.float64, "ignore"),
    ((640, 1), torch.float64, "propagate"),
    ((640, 3), torch.int64, "propagate"),
    ((640, 5), torch.float16, "ignore"),
])
def test_blocks_folded_at_once_equal_each_block_folded_alone(shape: tuple[int, ...], dtype: torch.dtype,
                                                              nan: str) -> None:
    rng = np.random.default_rng(1)
    data = torch.from_numpy(rng.normal(1e9, 2.0, shape)).to(dtype) if dtype != torch.int64 else \
        torch.from_numpy(rng.integers(-5, 5, shape))
    if dtype.is_floating_point:
        data[64] = float("nan")  # a block whose first row is missing
        data[130:140] = float("nan")
    at_once = Welford(0, nan=nan).fold_blocks(Stacked(data), 64)
    assert at_once is not None and len(at_once) == 10
    for b, w in enumerate(at_once):
        alone = Welford(0, nan=nan)
        alone.fold(Stacked(data[b * 64:(b + 1) * 64]))
        for field, x in alone.state_dict().items():
            x, y = np.asarray(x), np.asarray(w.state_dict()[field])
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), (b, field)
    if len(shape) == 2:  # only per-feature statistics are folded at once
        assert Welford((0, 1)).fold_blocks(Stacked(data), 64) is None
