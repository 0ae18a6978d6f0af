"""A ``Sequential`` group over .npy images: frames read in order, each decoded (cached in
the tests), and values that depend on the order (a running sum) and on every frame
(statistics). ``decoded`` logs every path it decodes to ``$FD_CACHE_LOG``; a path whose
name holds ``bad`` fails to decode.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from flowdata import Collect, Sequential, reduce
from flowdata.stats import Stats, Welford


def frame(folder: str) -> Sequential[str]:
    yield from sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".npy"))


def decoded(frame: str) -> torch.Tensor:
    log = os.environ.get("FD_CACHE_LOG")
    if log:
        with open(log, "a") as f:
            f.write(frame + "\n")
    if "bad" in os.path.basename(frame):
        raise ValueError(f"cannot decode {frame}")
    return torch.from_numpy(np.load(frame))


def brightness(decoded: torch.Tensor) -> float:
    return float(decoded.mean())


def running(brightness: Collect[float]) -> list[float]:
    out, acc = [], 0.0
    for b in brightness:
        acc += b
        out.append(acc)
    return out


@reduce(Welford, dim=0)
def stats(decoded: Collect[torch.Tensor]) -> Stats:
    ...
