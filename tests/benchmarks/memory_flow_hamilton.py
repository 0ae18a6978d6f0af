"""The memory benchmark workload written for Hamilton's dynamic execution (see ``bench_core.py``).

Distinct 1 MB ``bytes`` items behind a ``Parallelizable`` source, summed by a ``Collect``.
Hamilton has no streaming source, so this is the closest equivalent of a flowdata
``Sequential`` source. The per-item node ``blob`` is needed: a Hamilton ``Collect`` that
reads the ``Parallelizable`` node directly receives ``[[item, item, ...]]`` (one list
wrapping all the items) and the sum comes out wrong without any error.
"""

from hamilton.htypes import Collect, Parallelizable

BLOB_BYTES = 1_000_000


def blobs(n: int) -> Parallelizable[bytes]:
    """``n`` distinct 1 MB blobs."""
    for i in range(n):
        yield bytes((i % 256,)) * BLOB_BYTES


def blob(blobs: bytes) -> bytes:
    """One blob, as it is (the per-item step)."""
    return blobs


def total_length(blob: Collect[bytes]) -> int:
    """Total size of every blob."""
    return sum(len(b) for b in blob)
