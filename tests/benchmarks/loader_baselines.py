"""The hand-written baselines of ``bench_loader.py``: what one writes with torch alone.

Map-style ``torch.utils.data.Dataset`` classes returning one dict per sample, for a plain
``torch.utils.data.DataLoader`` with its default collation. They call the same functions
(``loader_common``) as the flowdata workloads, so only the framework around the work
differs. Module-level classes, so they pickle under any start method.
"""

from __future__ import annotations

from typing import Any

import torch
from loader_common import (
    constant_value,
    decode_png,
    memory_probe,
    probe_points,
    trivial_value,
)
from torch.utils.data import Dataset

__all__ = ["ConstantDataset", "PathListDataset", "PngDataset", "TrivialDataset"]


class TrivialDataset(Dataset[dict[str, torch.Tensor]]):
    """Sample ``i`` is ``{"value": torch.full((16,), float(i))}``."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"value": trivial_value(i)}


class ConstantDataset(TrivialDataset):
    """Every sample is the same shared tensor: a batch costs its collation and transport."""

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"value": constant_value()}


class PngDataset(Dataset[dict[str, torch.Tensor]]):
    """Sample ``i`` is the ``i``-th PNG decoded as float32 CHW in ``[0, 1]``."""

    def __init__(self, paths: list[str]):
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"pixels": decode_png(self.paths[i])}


class PathListDataset(Dataset[dict[str, Any]]):
    """Paths in a plain ``list[str]`` (copied on read by forked workers); sample ``i`` is the
    path's length, plus the worker's memory at probe indices."""

    def __init__(self, paths: list[str]):
        self.paths = paths
        self.n = len(paths)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"path_length": len(self.paths[i]), "memory": memory_probe(i, probe_points(self.n))}
