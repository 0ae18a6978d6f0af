"""The loader benchmark's trivial workloads as a flowdata module (see ``bench_loader.py``).

Two sources of ``n`` sample numbers: ``item`` is a generator (flowdata runs it once and
stores the items in a memory-mapped Arrow index), ``listed`` returns a list (used as the
index as it is). ``value`` and ``listed_value`` make the trivial sample (a fresh
16-float tensor filled with the number); ``constant`` is the "empty-compute" sample (one
shared tensor), so a batch costs little more than its collation and transport.
"""

from __future__ import annotations

import torch
from loader_common import constant_value as _constant_value
from loader_common import trivial_value as _trivial_value

from flowdata import Parallel


def item(n: int) -> Parallel[int]:
    """The samples ``0 .. n-1``, yielded (an Arrow index)."""
    yield from range(n)


def value(item: int) -> torch.Tensor:
    """The trivial sample: a 16-float tensor filled with the sample number."""
    return _trivial_value(item)


def constant(item: int) -> torch.Tensor:
    """The empty-compute sample: one shared 16-float tensor."""
    return _constant_value()


def listed(n: int) -> Parallel[int]:
    """The samples ``0 .. n-1`` as a list (used as the index as it is; no Arrow)."""
    return list(range(n))  # type: ignore[return-value,unused-ignore]


def listed_value(listed: int) -> torch.Tensor:
    """The trivial sample, from the list source."""
    return _trivial_value(listed)
