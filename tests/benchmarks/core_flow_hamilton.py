"""The core benchmark workload written for Hamilton's dynamic execution (see ``bench_core.py``).

Same graph as ``core_flow.py`` with Hamilton's own markers: ``Parallelizable[int]`` source,
two per-item nodes, and a ``Collect[int]`` sum.
"""

from hamilton.htypes import Collect, Parallelizable


def items(n: int) -> Parallelizable[int]:
    """The items: ``0 .. n-1``."""
    yield from range(n)


def doubled(items: int) -> int:
    """Twice the item."""
    return items * 2


def plus_one(doubled: int) -> int:
    """One more than ``doubled``."""
    return doubled + 1


def total(plus_one: Collect[int]) -> int:
    """The sum over every item."""
    return sum(plus_one)
