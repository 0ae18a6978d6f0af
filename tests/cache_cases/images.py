"""Images from .npy files: decoded (cached in the tests), scaled, augmented, statistics.

``decoded`` logs every path it decodes to ``$FD_CACHE_LOG`` (one line per call, from any
process), so a test sees which samples were computed and which came from the cache.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford

SCALE = 2.0


def path(folder: str) -> Parallel[str]:
    yield from sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".npy"))


def _log(what: str) -> None:
    log = os.environ.get("FD_CACHE_LOG")
    if log:
        with open(log, "a") as f:
            f.write(what + "\n")


def decoded(path: str) -> torch.Tensor:
    _log(path)
    return torch.from_numpy(np.load(path))


def scaled(decoded: torch.Tensor, gain: float = 1.0) -> torch.Tensor:
    return decoded * SCALE * gain


def augmented(scaled: torch.Tensor, sample_rng: torch.Generator) -> torch.Tensor:
    return scaled + torch.rand(scaled.shape, generator=sample_rng)


@reduce(Welford, dim=0)
def stats(scaled: Collect[torch.Tensor]) -> Stats:
    ...


def normalized(scaled: torch.Tensor, stats: Stats) -> torch.Tensor:
    return ((scaled - stats.mean) / stats.std).float()


def pair(decoded: torch.Tensor, path: str) -> dict[str, object]:
    return {"name": os.path.basename(path), "sum": float(decoded.sum()), "shape": tuple(decoded.shape)}


def opaque(path: str) -> object:
    return object()
