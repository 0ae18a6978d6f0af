"""A user module as a mypy --strict / pyright user writes it: markers are plain typing."""

from __future__ import annotations

from collections.abc import Iterator

from hamilton.htypes import Collect as HCollect
from hamilton.htypes import Parallelizable

from flowdata import Batch, Collect, Parallel, Sequential


def path(folder: str) -> Parallel[str]:
    for i in range(3):
        yield f"{folder}/{i}.wav"


def listed(names: list[str]) -> Parallel[str]:
    return list(names)


def tick(n: int) -> Sequential[int]:
    yield from range(n)


def length(path: str) -> int:
    return len(path)


def total(length: Collect[int]) -> int:
    return sum(length)


def paired(length: Collect[int], path: Collect[str]) -> list[tuple[int, str]]:
    return list(zip(length, path))


def ticks(tick: Collect[int]) -> int:
    it: Iterator[int] = iter(tick)
    return sum(it)


def regroup(length: Collect[int]) -> Parallel[int]:
    for n in length:
        if n > 3:
            yield n


def hamilton_style(names: list[str]) -> Parallelizable[str]:
    yield from names


def hamilton_total(hamilton_style: HCollect[str]) -> int:
    return sum(len(x) for x in hamilton_style)


def doubled_lengths(length: Batch[list[int]]) -> Batch[list[int]]:
    # Batch[T] is T to a type checker: the collated batch, here read as a list.
    return [2 * n for n in length]
