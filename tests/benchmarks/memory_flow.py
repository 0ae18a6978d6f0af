"""The memory benchmark workload as a flowdata module (see ``bench_core.py``).

Every sample is a distinct 1 MB ``bytes`` object. ``blobs`` is a Sequential source streamed
into the Collect node ``total_length``; ``parallel_blobs``/``parallel_total_length`` is the
same workload behind a Parallel source. The result is ``n * 1_000_000``.
"""

from flowdata import Collect, Parallel, Sequential

BLOB_BYTES = 1_000_000


def make_blob(i: int) -> bytes:
    """A distinct 1 MB bytes object for sample ``i``."""
    return bytes((i % 256,)) * BLOB_BYTES


def blobs(n: int) -> Sequential[bytes]:
    """``n`` blobs, one at a time, in order."""
    for i in range(n):
        yield make_blob(i)


def total_length(blobs: Collect[bytes]) -> int:
    """Total size of every blob; keeps none of them."""
    return sum(len(b) for b in blobs)


def parallel_blobs(n: int) -> Parallel[bytes]:
    """``n`` blobs as independent samples."""
    for i in range(n):
        yield make_blob(i)


def parallel_total_length(parallel_blobs: Collect[bytes]) -> int:
    """Total size of every blob; keeps none of them."""
    return sum(len(b) for b in parallel_blobs)
