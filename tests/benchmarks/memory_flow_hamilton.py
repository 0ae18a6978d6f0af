"""The memory benchmark workload written for Hamilton's dynamic execution (see ``bench_core.py``).

Same graph as ``memory_flow.blobs``/``total_length``: distinct 1 MB ``bytes`` items behind a
``Parallelizable`` source, summed by a ``Collect``. Hamilton has no streaming source, so
this is the closest equivalent of a flowdata ``Sequential`` source.
"""

from hamilton.htypes import Collect, Parallelizable

BLOB_BYTES = 1_000_000


def blobs(n: int) -> Parallelizable[bytes]:
    """``n`` distinct 1 MB blobs."""
    for i in range(n):
        yield bytes((i % 256,)) * BLOB_BYTES


def total_length(blobs: Collect[bytes]) -> int:
    """Total size of every blob."""
    return sum(len(b) for b in blobs)
