"""The bytes-per-chunk workload (see ``bench_core.py``, section 4).

Pass 2 reads a whole value, the mean of pass 1, and an input of ``k`` floats (a lookup
table): what a chunk of pass 2 sends to a process worker, besides its samples.
"""

from flowdata import Collect, Parallel


def value(n: int) -> Parallel[float]:
    """The samples."""
    yield from (float(i % 7) for i in range(n))


def total(value: Collect[float]) -> float:
    """Sum of the samples (pass 1)."""
    return sum(value)


def shifted(value: float, total: float, table: list[float]) -> float:
    """A sample shifted by the total and a table entry (pass 2)."""
    return value - total + table[int(value)]


def shifted_sum(shifted: Collect[float]) -> float:
    """Sum of the shifted samples."""
    return sum(shifted)
