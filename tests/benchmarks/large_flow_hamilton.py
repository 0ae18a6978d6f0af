"""The large-sample workload for Hamilton's dynamic execution (see ``bench_core.py``)."""

from hamilton.htypes import Collect, Parallelizable

FRAME_BYTES = 80 << 20


def index(n: int) -> Parallelizable[int]:
    """The samples: ``0 .. n-1``."""
    yield from range(n)


def frame(index: int) -> bytes:
    """A distinct 80 MB value for the sample."""
    return bytes((index % 256,)) * FRAME_BYTES


def total_bytes(frame: Collect[bytes]) -> int:
    """Total size of every frame."""
    return sum(len(f) for f in frame)
