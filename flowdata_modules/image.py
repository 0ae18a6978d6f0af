"""Image classification tensors: manifest -> decoded -> resized -> statistics -> pixels.

Inputs and config (Hamilton-style; config entries are inputs too):

- ``manifest``: a CSV with columns ``path,label``, paths relative to the CSV's folder; a
  folder or glob pattern of image files, each labelled by the name of its folder; or a
  Hugging Face ``datasets.Dataset`` or ``IterableDataset``, its images in ``media_column``
  ("image": ``Image(decode=False)`` dicts, paths, URLs or bytes) and its labels in
  ``label_column`` ("label"; a ``ClassLabel`` keeps its names and numbers);
- ``image_size`` (32), ``use_imagenet_stats`` (False), ``augment`` (False).

Outputs: ``pixels`` (normalised float32 ``[3, image_size, image_size]``) and ``label``
(int). Reductions: ``pixel_stats`` (per-channel ``Stats``) and ``label_vocab``. With
``augment=True``, a random crop (after 4-pixel padding) and a horizontal flip driven by
``sample_rng`` are applied to ``pixels`` only — never to what the statistics see. With
``use_imagenet_stats=True`` the graph has no ``pixel_stats`` dependency at all, so the
first pass reads only the manifest's labels and decodes no image.
"""

from __future__ import annotations

from typing import Any

import torch
import torchvision.transforms.v2.functional  # noqa: F401  # once here, so forked workers inherit it
from hamilton.function_modifiers import config

from flowdata import Collect, Parallel, reduce
from flowdata.media import load_image
from flowdata.stats import Stats, Vocab, Welford
from flowdata.transforms import CenterCrop, Compose, Normalize, Pad, RandomCrop, RandomHorizontalFlip, Resize
from flowdata_modules._manifest import LabelVocabulary, class_names as _class_names, label_of, media_of, read_manifest

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


# One Compose per image_size, built on first use in each process and kept: a Compose keeps
# the plan of each input size it has seen (its grid or its slicing), so images of one size
# reuse it. A dict at module level is keyed by its type only in cache keys; the code of the
# functions below, which build the pipelines, is keyed by its text.
_PIPELINES: dict[tuple[str, int], Compose] = {}


def _square(image_size: int) -> Compose:
    """Short side resized to ``image_size``, centre square kept: one resampling."""
    key = ("square", image_size)
    if key not in _PIPELINES:
        _PIPELINES[key] = Compose(Resize(image_size, short_side=True), CenterCrop(image_size))
    return _PIPELINES[key]


def _augmentation(image_size: int) -> Compose:
    """Reflect-pad 4, a random ``image_size`` crop and a horizontal flip: exact slicing, no
    interpolation (the reflect padding runs on its own: grid_sample has no such mode)."""
    key = ("augment", image_size)
    if key not in _PIPELINES:
        _PIPELINES[key] = Compose(Pad(4, "reflect"), RandomCrop(image_size), RandomHorizontalFlip(0.5))
    return _PIPELINES[key]


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


def row(manifest: object, media_column: str = "image", label_column: str = "label") -> Parallel[dict[str, Any]]:
    """The samples: one ``{"path", "label"}`` row per image of a ``path,label`` CSV, or every
    image file of a folder or glob pattern, labelled by the folder that holds it; or a
    Hugging Face dataset's rows, its ``media_column`` and ``label_column`` only (the dataset
    itself, not a copy: a map-style one is the loader's index, an iterable one streams)."""
    return read_manifest(manifest, IMAGE_SUFFIXES, media_column, label_column)


def class_names(manifest: object, label_column: str = "label") -> tuple[str, ...] | None:
    """The names of a dataset's ``ClassLabel`` label column, in its order; None for a CSV,
    folder, pattern, or a dataset whose labels are plain strings or numbers."""
    return _class_names(manifest, label_column)


def resized(
    row: dict[str, Any], image_size: int = 32, max_pixels: int = 90_000_000, jpeg_draft: bool = True,
    media_column: str = "image",
) -> torch.Tensor:
    """The image decoded as RGB in [0, 1], its short side resized to ``image_size`` and its
    centre square kept, in one resampling (``Compose(Resize(image_size, short_side=True),
    CenterCrop(image_size))``: torchvision's ``resize(image, [image_size])`` then
    ``center_crop(image_size)``, its sizes and offsets included, to float rounding -- its
    antialiased filter computed only for the pixels kept; an image already ``image_size``
    on its short side is sliced).
    An image whose header declares more than ``max_pixels`` is refused before decoding;
    with ``jpeg_draft``, a JPEG is decoded at the smallest of its built-in reduced scales
    that still covers ``image_size`` (a 4000x3000 photo for 32x32 decodes at 1/8)."""
    draft = (image_size, image_size) if jpeg_draft else None
    image = load_image(media_of(row, media_column), mode="RGB", max_pixels=max_pixels, draft=draft)
    square: torch.Tensor = _square(image_size)(image)
    return square


@reduce(Welford, dim=(0, 2, 3))
def pixel_stats(resized: Collect[torch.Tensor]) -> Stats:
    """Per-channel statistics over every pixel of every image (one streaming pass)."""
    raise NotImplementedError("@reduce folds the values; the body is not called")


@config.when_not(use_imagenet_stats=True)
def normalization__dataset(pixel_stats: Stats) -> Normalize:
    """Per-channel normalisation by the dataset's own statistics."""
    return Normalize.from_stats(pixel_stats, dim=-3)


@config.when(use_imagenet_stats=True)
def normalization__imagenet() -> Normalize:
    """Per-channel normalisation by ImageNet's constants: no image is decoded in pass 1."""
    return Normalize(IMAGENET_MEAN, IMAGENET_STD, dim=-3)


def pixels(resized: torch.Tensor, normalization: Normalize, sample_rng: torch.Generator, augment: bool = False) -> torch.Tensor:
    """Normalised float32 ``[3, image_size, image_size]``, augmented when ``augment``
    (reflect-pad 4, a random crop back to the size, a horizontal flip with probability 0.5,
    drawn from ``sample_rng``: the draws of the former separate steps, the same pixels)."""
    x = resized
    if augment:
        x = _augmentation(x.shape[-1])(x, sample_rng)
    normalized: torch.Tensor = normalization(x)
    return normalized.float()


def label_name(row: dict[str, Any], class_names: tuple[str, ...] | None = None, label_column: str = "label") -> str:
    """The image's label as written in the manifest; a ``ClassLabel``'s name for its number."""
    return label_of(row, label_column, class_names)


@reduce(LabelVocabulary)
def label_vocab(label_name: Collect[str], class_names: tuple[str, ...] | None) -> Vocab:
    """The labels, most frequent first (ties in name order); a ``ClassLabel``'s names in the
    dataset's order, so that ``label`` is the dataset's own number."""
    raise NotImplementedError("@reduce folds the values; the body is not called")


def label(label_name: str, label_vocab: Vocab) -> int:
    """The label's index in ``label_vocab``."""
    return label_vocab[label_name]
