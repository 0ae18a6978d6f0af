"""Feature transforms: small ``nn.Module`` s that work on one sample or a batch.

Every transform is a :class:`FeatureTransform` — an ``nn.Module`` with ``forward(x) -> x``
— so they compose with ``nn.Sequential``, pickle, save through ``state_dict`` (loadable
with ``torch.load(weights_only=True)``), and move with ``.to(device)``. They act on the
trailing dimensions, so the same module takes ``[C, H, W]`` or ``[N, C, H, W]``, ``[T]`` or
``[N, T]``. Random transforms take a ``torch.Generator`` (pass ``sample_rng``) so their
randomness is reproducible per sample. Where torchaudio or torchvision already do the
maths, these wrap them.

- :mod:`~flowdata.transforms.features`: ``Normalize`` and the audio transforms;
- :mod:`~flowdata.transforms.spatial`: the spatial transforms, each with
  ``as_matrix(size, generator=None) -> (matrix, out_size)``;
- :mod:`~flowdata.transforms.compose`: ``Compose``, which fuses each run of adjacent
  spatial transforms into one ``grid_sample`` (or exact slicing);
- :mod:`~flowdata.transforms.sampling`: the matrix maths, the exact path and the grid path;
- :mod:`~flowdata.transforms.prefilter` and :mod:`~flowdata.transforms.coverage`: a rotating
  run's antialiasing where it shrinks, and the fade of its turned frame's edges.

See docs/transforms.md.
"""

from __future__ import annotations

from flowdata.transforms.compose import Compose
from flowdata.transforms.features import FeatureTransform, LogMel, Normalize, PadOrTrim, Resample
from flowdata.transforms.spatial import (
    Affine,
    CenterCrop,
    HorizontalFlip,
    Pad,
    RandomAffine,
    RandomCrop,
    RandomHorizontalFlip,
    Resize,
    Rotate,
    SpatialTransform,
)

__all__ = [
    "Affine",
    "CenterCrop",
    "Compose",
    "FeatureTransform",
    "HorizontalFlip",
    "LogMel",
    "Normalize",
    "Pad",
    "PadOrTrim",
    "RandomAffine",
    "RandomCrop",
    "RandomHorizontalFlip",
    "Resample",
    "Resize",
    "Rotate",
    "SpatialTransform",
]
