"""``bench_hf.py``'s flowdata module: a Hugging Face dataset (input ``data``) as the source.

``row`` returns the ``datasets.Dataset`` (map-style: the random-access index) or the
``datasets.IterableDataset`` (streamed in shards) as it is. ``pixels`` decodes a row's
``Image(decode=False)`` value with the shared PIL code (``hf_common.decode_resize``, as the
Hugging Face and hand-written contenders do); ``pixels_media`` decodes it with
``flowdata.media.load_image`` instead, then resizes and normalises alike. ``id`` and
``value`` are the streaming part's trivial per-sample outputs.
"""

from __future__ import annotations

from typing import Any

import hf_common
import torch

from flowdata import Parallel
from flowdata.media import load_image


def row(data: Any) -> Parallel[dict[str, Any]]:
    """The samples: the rows of the Hugging Face dataset, as it is."""
    return data  # type: ignore[no-any-return]


def pixels(row: dict[str, Any]) -> torch.Tensor:
    """The image, PIL-decoded, resized to 32x32 and normalised (the shared code)."""
    return hf_common.decode_resize(row["image"])


def pixels_media(row: dict[str, Any]) -> torch.Tensor:
    """The same, decoded by ``flowdata.media.load_image`` from the HF media dict."""
    return hf_common.resize_normalise(load_image(row["image"]))


def label(row: dict[str, Any]) -> int:
    """The class label."""
    return int(row["label"])


def id(row: dict[str, Any]) -> int:  # noqa: A001  # the column's name
    """The row's id (to check each row is delivered once)."""
    return int(row["id"])


def value(row: dict[str, Any]) -> float:
    """The trivial per-sample work."""
    return hf_common.row_value(row)
