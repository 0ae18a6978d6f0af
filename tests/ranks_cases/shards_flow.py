"""A flow over a stream in shards, for the rank tests of evened streams
(tests/run/distributed/test_ranks_shards.py).

``row`` returns the stream it is given (flowdata's own sharded iterable, :class:`Shards`, or a
Hugging Face ``IterableDataset`` of Parquet files); ``ident`` is the row's id, unique over the
whole stream, and fails on the id ``$FD_FAIL`` names for the rank ``RANK`` (``rank:id``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch

from flowdata import Parallel


class Shards:
    """Any iterable with ``num_shards`` and ``shard(num_shards, index)`` is a stream in shards."""

    def __init__(self, parts: list[list[int]]):
        self.parts = parts

    @property
    def num_shards(self) -> int:
        return len(self.parts)

    def shard(self, num_shards: int, index: int) -> list[dict[str, int]]:
        return [{"x": v} for v in self.parts[index]]

    def __iter__(self) -> Iterator[dict[str, int]]:
        return (r for i in range(len(self.parts)) for r in self.shard(len(self.parts), i))


def row(data: Any) -> Parallel[dict]:
    return data


def ident(row: dict) -> int:
    fail = os.environ.get("FD_FAIL")
    if fail and fail == f"{os.environ.get('RANK', '0')}:{row['x']}":
        raise OSError(f"transient read error on row {row['x']}")
    return int(row["x"])


def value(row: dict) -> torch.Tensor:
    return torch.tensor([float(row["x"]), 1.0])


def name(row: dict) -> str:
    return f"r{row['x']}"
