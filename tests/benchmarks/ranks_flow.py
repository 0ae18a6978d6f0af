"""The rank benchmark's workload (see ``bench_ranks.py``): PNG paths, decoded, per-channel
statistics in pass 1, normalised images in pass 2 (what a training loader yields)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford


def path(folder: str) -> Parallel[str]:
    """The samples: every ``*.png`` in ``folder``, in sorted order."""
    yield from sorted(str(p) for p in Path(folder).glob("*.png"))


def pixels(path: str) -> torch.Tensor:
    """The image at ``path`` as float32 CHW in ``[0, 1]`` (RGB)."""
    with Image.open(path) as im:
        hwc = np.asarray(im.convert("RGB"), dtype=np.float32)
    return torch.from_numpy(np.ascontiguousarray(hwc.transpose(2, 0, 1)) / np.float32(255.0))


@reduce(Welford, dim=(0, 2, 3))
def pixel_stats(pixels: Collect[torch.Tensor]) -> Stats:
    """Per-channel statistics over every pixel of every image."""
    raise AssertionError("the body of a reduction is not called")


def normalized(pixels: torch.Tensor, pixel_stats: Stats) -> torch.Tensor:
    """The image standardised per channel."""
    return (pixels - pixel_stats.mean[:, None, None]) / pixel_stats.std[:, None, None]
