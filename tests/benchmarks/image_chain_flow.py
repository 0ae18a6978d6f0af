"""The image chain before ``flowdata.transforms.Compose``, kept for ``bench_transforms.py``:
``flowdata_modules.image``'s ``resized`` and ``pixels`` as they were (torchvision's
antialiased ``Resize`` then ``CenterCrop``; a reflect pad, ``RandomCrop`` and
``RandomHorizontalFlip`` as separate steps). Built after ``flowdata_modules.image`` with
``Builder().allow_module_overrides()``, these two replace the module's own; its other
nodes are the module's. Not a test module."""

from __future__ import annotations

from typing import Any

import torch

from flowdata.media import load_image
from flowdata.transforms import CenterCrop, Normalize, RandomCrop, RandomHorizontalFlip, Resize
from flowdata_modules._manifest import media_of


def resized(
    row: dict[str, Any], image_size: int = 32, max_pixels: int = 90_000_000, jpeg_draft: bool = True,
    media_column: str = "image",
) -> torch.Tensor:
    """The image decoded as RGB in [0, 1], its short side resized, centre-cropped square."""
    draft = (image_size, image_size) if jpeg_draft else None
    image = load_image(media_of(row, media_column), mode="RGB", max_pixels=max_pixels, draft=draft)
    h, w = image.shape[-2:]
    scale = image_size / min(h, w)
    size = (max(image_size, round(h * scale)), max(image_size, round(w * scale)))
    square: torch.Tensor = CenterCrop(image_size)(Resize(size)(image))
    return square


def pixels(resized: torch.Tensor, normalization: Normalize, sample_rng: torch.Generator, augment: bool = False) -> torch.Tensor:
    """Normalised float32 ``[3, image_size, image_size]``, augmented when ``augment``."""
    x = resized
    if augment:
        size = x.shape[-1]
        x = RandomCrop(size)(torch.nn.functional.pad(x, (4, 4, 4, 4), mode="reflect"), sample_rng)
        x = RandomHorizontalFlip(0.5)(x, sample_rng)
    normalized: torch.Tensor = normalization(x)
    return normalized.float()
