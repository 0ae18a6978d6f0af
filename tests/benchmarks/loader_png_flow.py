"""The loader benchmark's decode-bound workload as a flowdata module (see ``bench_loader.py``).

``png_path`` is a Parallel source of the PNG files in ``folder`` (sorted, so the sample
order is fixed); ``pixels`` decodes one with PIL into a float32 ``[3, H, W]`` tensor in
``[0, 1]`` (what the training iterator yields); ``pixel_mean`` is its mean and
``mean_sum`` a plain Collect node adding the means of every image (what ``execute()``
computes, compared with Hamilton's ``loader_png_hamilton.py``).
"""

from __future__ import annotations

from pathlib import Path

import torch
from loader_common import decode_png as _decode_png

from flowdata import Collect, Parallel


def png_path(folder: str) -> Parallel[str]:
    """The samples: every ``*.png`` in ``folder``, in sorted order."""
    yield from sorted(str(p) for p in Path(folder).glob("*.png"))


def pixels(png_path: str) -> torch.Tensor:
    """The image decoded as float32 CHW in ``[0, 1]``."""
    return _decode_png(png_path)


def pixel_mean(pixels: torch.Tensor) -> float:
    """The mean of every pixel value of the image."""
    return float(pixels.mean())


def mean_sum(pixel_mean: Collect[float]) -> float:
    """The sum of the per-image means, in sample order."""
    return float(sum(pixel_mean))
