"""A generator of many short items (``"000042"``), for an Arrow index of several batches."""

from __future__ import annotations

from flowdata import Parallel


def item(n: int) -> Parallel[str]:
    yield from (f"{i:06d}" for i in range(n))


def number(item: str) -> int:
    return int(item)
