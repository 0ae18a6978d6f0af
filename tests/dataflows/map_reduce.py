"""A Parallel source, two map nodes and a Collect sum: the smallest group."""

from flowdata import Collect, Parallel

CASES = [{"n": 0}, {"n": 1}, {"n": 10}, {"n": 2500}]
OUTPUTS = ["total", "count"]


def numbers(n: int) -> Parallel[int]:
    yield from range(n)


def doubled(numbers: int) -> int:
    return numbers * 2


def plus_one(doubled: int) -> int:
    return doubled + 1


def total(plus_one: Collect[int]) -> int:
    return sum(plus_one)


def count(numbers: Collect[int]) -> int:
    return sum(1 for _ in numbers)


def _oracle(n: int) -> dict[str, object]:
    values = [x * 2 + 1 for x in range(n)]
    return {"total": sum(values), "count": n}


LOADER_OUTPUTS = ["plus_one", "doubled"]


def _loader_oracle(n: int) -> dict[str, list[object]]:
    return {"plus_one": [2 * i + 1 for i in range(n)], "doubled": [2 * i for i in range(n)]}
