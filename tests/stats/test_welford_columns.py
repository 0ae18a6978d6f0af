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
