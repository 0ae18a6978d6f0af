"""The decode-bound ``execute()`` workload for Hamilton's dynamic execution (see ``bench_loader.py``).

Same graph as ``loader_png_flow.py`` without ``pixels`` as a loader output: a
``Parallelizable[str]`` source of sorted PNG paths, per-item decode and mean, and a
``Collect[float]`` sum.
"""

from __future__ import annotations

from pathlib import Path

import torch
from hamilton.htypes import Collect, Parallelizable  # type: ignore[import-untyped,unused-ignore]
from loader_common import decode_png as _decode_png


def png_path(folder: str) -> Parallelizable[str]:
    """The items: every ``*.png`` in ``folder``, in sorted order."""
    yield from sorted(str(p) for p in Path(folder).glob("*.png"))


def pixels(png_path: str) -> torch.Tensor:
    """The image decoded as float32 CHW in ``[0, 1]``."""
    return _decode_png(png_path)


def pixel_mean(pixels: torch.Tensor) -> float:
    """The mean of every pixel value of the image."""
    return float(pixels.mean())


def mean_sum(pixel_mean: Collect[float]) -> float:
    """The sum of the per-image means, in item order."""
    return float(sum(pixel_mean))
