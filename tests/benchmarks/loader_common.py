"""Helpers shared by the loader benchmark's workloads and its hand-written baselines.

Kept apart from the dataflow modules so that the flowdata modules, the Hamilton module and
the hand-written ``Dataset`` classes of ``bench_loader.py`` call the very same functions:
the work compared is identical, only the framework around it differs.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import psutil  # type: ignore[import-untyped,unused-ignore]
import torch
from PIL import Image

__all__ = ["MB", "PROBE_FRACTIONS", "constant_value", "decode_png", "memory_probe", "probe_points", "trivial_value"]

MB = 2**20
PROBE_FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Where, as a fraction of the samples walked, a worker reads its own memory."""

_ZERO16 = torch.zeros(16)


def trivial_value(i: int) -> torch.Tensor:
    """The trivial sample ``i``: a fresh 16-float tensor filled with ``i``."""
    return torch.full((16,), float(i))


def constant_value() -> torch.Tensor:
    """An "empty-compute" sample: the same shared 16-float tensor every time (no allocation)."""
    return _ZERO16


def decode_png(path: str) -> torch.Tensor:
    """The image at ``path`` decoded with PIL as float32 ``[3, H, W]`` in ``[0, 1]`` (RGB)."""
    with Image.open(path) as im:
        hwc = np.array(im.convert("RGB"))  # a writable copy: torch.from_numpy shares it
    chw = torch.from_numpy(hwc).permute(2, 0, 1)
    return chw.to(torch.float32, memory_format=torch.contiguous_format).div_(255.0)


@functools.lru_cache(maxsize=8)
def probe_points(n: int) -> frozenset[int]:
    """The sample indices at which :func:`memory_probe` reads memory (0, n/4, ..., n - 1)."""
    return frozenset(min(n - 1, int(f * n)) for f in PROBE_FRACTIONS)


def _smaps_rollup_mb(field: str) -> float:
    """One field of ``/proc/self/smaps_rollup`` in MB (NaN where the file is missing)."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


_NAN3 = (math.nan, math.nan, math.nan)


def memory_probe(index: int, points: frozenset[int]) -> tuple[float, float, float]:
    """This process's memory when ``index`` is a probe point, else NaNs.

    Returns ``(uss, private_dirty, private_clean)`` in MB. USS (``psutil``'s
    ``memory_full_info().uss``) is Private_Clean + Private_Dirty: pages mapped by this
    process alone. Private_Dirty is what copy-on-write after ``fork`` costs (a page the
    parent shares becomes a private copy once written, e.g. by a reference count);
    Private_Clean is mostly file pages only this process maps (a memory-mapped index),
    which the kernel can drop and read again at will.
    """
    if index not in points:
        return _NAN3
    uss = psutil.Process().memory_full_info().uss / MB
    return (uss, _smaps_rollup_mb("Private_Dirty"), _smaps_rollup_mb("Private_Clean"))
