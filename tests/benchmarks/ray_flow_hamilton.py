"""The Ray benchmark workload written for Hamilton's dynamic execution (see ``bench_ray.py``).

Same graph as ``ray_flow.py`` with Hamilton's own markers: a ``Parallelizable[int]``
source, the per-item busy loop, and ``Collect[float]`` nodes.
"""

import math
import time

from hamilton.htypes import Collect, Parallelizable


def items(n: int) -> Parallelizable[int]:
    """The items: ``0 .. n-1``."""
    yield from range(n)


def work(items: int, ms: float) -> float:
    """``ms`` milliseconds of CPU, then a value of the item."""
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass
    return items % 7 * 0.5


def total(work: Collect[float]) -> float:
    """The exact sum over every item."""
    return math.fsum(work)
