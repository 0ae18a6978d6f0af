"""The core benchmark workload as a flowdata module (see ``bench_core.py``).

``items`` is a Parallel source of ``n`` ints; ``doubled`` and ``plus_one`` are per-sample
nodes; ``total`` is a plain Collect node that sums the stream. The result is
``sum(2 * i + 1 for i in range(n)) == n * n``.
"""

from flowdata import Collect, Parallel


def items(n: int) -> Parallel[int]:
    """The samples: ``0 .. n-1``."""
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
