"""The pipeline every source kind feeds (its source, ``row``, comes from a sibling module).

A per-sample value with a failing row (``bad``), a Welford statistics pass over it, a
deterministic node that reads the statistics (the sample cache keys it by the reducer's
result), and an augmentation drawn from ``sample_rng``. The offset of ``1e6`` makes the order
of the Welford additions show in the last bits, so "bitwise equal" means something.
"""

from __future__ import annotations

import torch

from flowdata import Collect, reduce
from flowdata.stats import Stats, Welford

OFFSET = 1e6
SCALE = 0.37


def value(row: dict, bad: list[int]) -> float:
    if row["x"] in bad:
        raise ValueError(f"bad row {row['x']}")
    return float(row["x"]) * SCALE + OFFSET


@reduce(Welford)
def value_stats(value: Collect[float]) -> Stats:
    raise NotImplementedError("@reduce folds the values; the body is not called")


def key(row: dict) -> int:
    return int(row["x"])


def centered(value: float, value_stats: Stats) -> float:
    return value - float(value_stats.mean)


def out(centered: float, sample_rng: torch.Generator) -> float:
    return centered + float(torch.rand(1, generator=sample_rng, dtype=torch.float64))


def listed(key: Collect[int]) -> list[int]:
    return list(key)
