"""The loader benchmark's index-memory workload as a flowdata module (see ``bench_loader.py``).

``clip_path`` yields ``n`` path strings (flowdata stores them in an Arrow index that the
DataLoader worker memory-maps); ``path_length`` is the trivial per-sample work; ``memory``
reads the worker's own memory at a few sample indices (NaN elsewhere), so the main
process learns how the worker's private memory grew as it walked the items.
"""

from __future__ import annotations

from loader_common import memory_probe as _memory_probe
from loader_common import probe_points as _probe_points

from flowdata import Parallel


def clip_path(n: int) -> Parallel[str]:
    """``n`` distinct paths, ``/data/clips/00000000.wav`` onwards."""
    for i in range(n):
        yield f"/data/clips/{i:08d}.wav"


def path_length(clip_path: str) -> int:
    """The trivial per-sample work: the path's length."""
    return len(clip_path)


def memory(path_length: int, sample_index: int, n: int) -> tuple[float, float, float]:
    """``(uss, private_dirty, private_clean)`` MB of this worker at probe indices, else NaN."""
    return _memory_probe(sample_index, _probe_points(n))
