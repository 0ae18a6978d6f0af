"""The statistics benchmark workload as a flowdata module (see ``bench_stats.py``).

``path`` is a Parallel source of the PNG files in ``folder`` (sorted, so the sample order
is fixed); ``pixels`` decodes one with PIL into a float32 ``[3, H, W]`` array in
``[0, 1]``; ``pixel_stats`` is a reduction: flowdata folds the decoded images into a
per-channel :class:`~flowdata.stats.Welford` inside the workers (``dim=(0, 2, 3)`` reduces
height and width of each value; the sample axis is always reduced), so no decoded image
travels back to the main process. ``pixel_count`` is the same pass without a reduction
(a plain Collect node that counts), to show what folding costs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford


def path(folder: str) -> Parallel[str]:
    """The samples: every ``*.png`` in ``folder``, in sorted order."""
    yield from sorted(str(p) for p in Path(folder).glob("*.png"))


def pixels(path: str) -> np.ndarray:
    """The image at ``path`` as float32 CHW in ``[0, 1]`` (RGB)."""
    with Image.open(path) as im:
        hwc = np.asarray(im.convert("RGB"), dtype=np.float32)
    chw: np.ndarray = np.ascontiguousarray(hwc.transpose(2, 0, 1)) / np.float32(255.0)
    return chw


@reduce(Welford, dim=(0, 2, 3))
def pixel_stats(pixels: Collect[np.ndarray]) -> Stats:
    """Per-channel mean, std, var, min, max and count over every pixel of every image."""
    raise AssertionError("the body of a reduction is not called")


def pixel_count(pixels: Collect[np.ndarray]) -> int:
    """How many images were decoded: the same pass without a reduction (for comparison)."""
    return sum(1 for _ in pixels)
