"""The large-sample workload (see ``bench_core.py``, section 3).

``n`` samples whose per-sample value is a distinct 80 MB ``bytes`` object (a decoded
clip or image), summed by length in a plain Collect node. The result is ``n * 80 MiB``.
"""

from flowdata import Collect, Parallel

FRAME_BYTES = 80 << 20


def index(n: int) -> Parallel[int]:
    """The samples: ``0 .. n-1`` (light items)."""
    yield from range(n)


def frame(index: int) -> bytes:
    """A distinct 80 MB value for the sample."""
    return bytes((index % 256,)) * FRAME_BYTES


def total_bytes(frame: Collect[bytes]) -> int:
    """Total size of every frame; keeps none of them."""
    return sum(len(f) for f in frame)
