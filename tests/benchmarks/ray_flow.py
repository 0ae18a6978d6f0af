"""The Ray benchmark workload as a flowdata module (see ``bench_ray.py``).

``items`` is a Parallel source of ``n`` ints; ``work`` spends ``ms`` milliseconds of CPU
on each (a busy loop: no sleep, so the work needs a core) and returns a value of its
sample; ``total`` sums the stream with ``math.fsum``, ``count`` counts it. The result
does not depend on ``ms``: ``total == sum(i % 7 * 0.5 for i in range(n))``.
"""

import math
import time

from flowdata import Collect, Parallel


def items(n: int) -> Parallel[int]:
    """The samples: ``0 .. n-1``."""
    yield from range(n)


def work(items: int, ms: float) -> float:
    """``ms`` milliseconds of CPU, then a value of the sample."""
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass
    return items % 7 * 0.5


def total(work: Collect[float]) -> float:
    """The exact sum over every sample."""
    return math.fsum(work)

