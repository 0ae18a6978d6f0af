"""The core benchmark workload behind a ``Sequential`` source (see ``bench_core.py``).

The same nodes as ``core_flow.py``; samples are processed one at a time, in order.
"""

from flowdata import Collect, Sequential


def items(n: int) -> Sequential[int]:
    """The samples: ``0 .. n-1``, one at a time."""
    yield from range(n)


def doubled(items: int) -> int:
    """Twice the sample."""
    return items * 2


def plus_one(doubled: int) -> int:
    """One more than ``doubled``."""
    return doubled + 1


def total(plus_one: Collect[int]) -> int:
    """The sum over every sample."""
    return sum(plus_one)
