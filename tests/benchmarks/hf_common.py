"""The work that ``bench_hf.py`` compares, shared by every contender.

The image decode (:func:`decode_resize`), the streaming per-sample conversion
(:func:`row_value`), the Hugging Face transform and map functions, the hand-written torch
``Dataset`` and a read-counting generator over Parquet files live here, at module level
(they pickle under any start method), so that flowdata (``hf_flow.py``), the Hugging Face
pipeline and the hand-written one call the very same functions: only the pipeline differs.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from bench_common import png_image
from PIL import Image
from torch.utils.data import Dataset

OUT = 32
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


# --- data ------------------------------------------------------------------------------------


def png_bytes(i: int, seed: int = 0) -> bytes:
    """A deterministic 64x64 RGB PNG: :func:`bench_common.png_image` of ``[seed, i]``."""
    out = io.BytesIO()
    png_image([seed, i]).save(out, format="PNG")
    return out.getvalue()


def image_rows(ranges: list[tuple[int, int]]) -> Any:
    """Rows ``{"image": {"bytes", "path"}, "label"}`` of each range, for ``Dataset.from_generator``."""
    for a, b in ranges:
        for i in range(a, b):
            yield {"image": {"bytes": png_bytes(i), "path": None}, "label": i % 10}


# --- per-sample work ---------------------------------------------------------------------------


def resize_normalise(chw: torch.Tensor) -> torch.Tensor:
    """Float ``[3, H, W]`` in [0, 1] -> bilinear (antialiased) 32x32 -> (x - mean) / std."""
    small = F.interpolate(chw[None], size=(OUT, OUT), mode="bilinear", antialias=True, align_corners=False)[0]
    return (small - MEAN) / STD


def decode_resize(image: dict[str, Any]) -> torch.Tensor:
    """A ``datasets.Image(decode=False)`` value decoded with PIL, resized and normalised."""
    with Image.open(io.BytesIO(image["bytes"])) as im:
        hwc = np.array(im.convert("RGB"))
    return resize_normalise(torch.from_numpy(hwc).permute(2, 0, 1).float().div_(255.0))


def hf_transform(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """The ``with_transform`` function: a batch of rows in, a batch of samples out."""
    return {"pixels": [decode_resize(im) for im in batch["image"]], "label": batch["label"]}


def row_value(row: dict[str, Any]) -> float:
    """The trivial per-sample work of the streaming part."""
    return float(row["x"]) * 2.0


def hf_value(row: dict[str, Any]) -> dict[str, Any]:
    """The same as a Hugging Face ``IterableDataset.map`` function."""
    return {"id": row["id"], "value": row_value(row)}


class ArrowImages(Dataset[dict[str, Any]]):
    """Hand-written: the saved Arrow files memory-mapped by pyarrow (opened lazily in each
    process), one row's bytes read per ``__getitem__``, decoded by :func:`decode_resize`."""

    def __init__(self, files: list[str]):
        self.files = files
        self._images: Any = None
        self._labels: Any = None

    def _open(self) -> None:
        import pyarrow as pa

        table = pa.concat_tables(pa.ipc.open_stream(pa.memory_map(f)).read_all() for f in self.files)
        self._images, self._labels = table.column("image"), table.column("label")

    def __len__(self) -> int:
        if self._images is None:
            self._open()
        return len(self._images)

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self._images is None:
            self._open()
        image = {"bytes": self._images[i]["bytes"].as_py()}
        return {"pixels": decode_resize(image), "label": self._labels[i].as_py()}


# --- streaming sources ---------------------------------------------------------------------------


def counted_parquet_rows(files: list[str], counter: str) -> Any:
    """Rows of the Parquet ``files`` (an ``IterableDataset.from_generator`` generator: one shard
    per file); appends ``pid file rows`` to ``counter/<pid>.txt`` for every file it read, with
    the rows it actually read (in ``finally``, so a shard left part-way counts what it read)."""
    import pyarrow.parquet as pq

    for f in files:
        n = 0
        try:
            for rb in pq.ParquetFile(f).iter_batches(batch_size=1024):
                cols = rb.to_pydict()
                for i in range(rb.num_rows):
                    n += 1
                    yield {"id": cols["id"][i], "x": cols["x"][i], "s": cols["s"][i]}
        finally:
            with open(Path(counter) / f"{os.getpid()}.txt", "a") as out:
                out.write(f"{os.getpid()} {Path(f).name} {n}\n")


def range_rows(ranges: list[tuple[int, int]]) -> Any:
    """Rows ``{"id": i, "x": float(i), "s": ""}`` of each range (one shard per range)."""
    for a, b in ranges:
        for i in range(a, b):
            yield {"id": i, "x": float(i), "s": ""}
