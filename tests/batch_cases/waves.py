"""Batch nodes over tones: a per-sample waveform, a spectrum computed once per batch.

Each per-sample node records the process it ran in, and so does each batch node, so a test
can tell where the work ran. ``scaled`` reads a statistic of pass 1 and a once node."""

from __future__ import annotations

import os

import torch

from flowdata import Batch, Collect, Parallel, reduce
from flowdata.stats import Stats, Welford


def tone(n: int) -> Parallel[int]:
    yield from range(n)


def wave(tone: int) -> torch.Tensor:
    t = torch.arange(64, dtype=torch.float32)
    return torch.sin(t * (tone + 1) / 10.0)


def label(tone: int) -> int:
    return tone % 3


def sample_pid(tone: int) -> int:
    return os.getpid()


def power(wave: Batch[torch.Tensor]) -> Batch[torch.Tensor]:
    """|FFT|^2 of every wave of the batch at once."""
    return torch.fft.rfft(wave).abs().pow(2)


def power_one(wave: torch.Tensor) -> torch.Tensor:
    """The same, per sample (the oracle)."""
    return torch.fft.rfft(wave).abs().pow(2)


@reduce(Welford, dim=(0, 1))
def wave_stats(wave: Collect[torch.Tensor]) -> Stats:
    raise NotImplementedError


def gain(factor: float = 2.0) -> float:
    return factor


def scaled(power: Batch[torch.Tensor], wave_stats: Stats, gain: float) -> Batch[torch.Tensor]:
    return power * gain / float(wave_stats.std)


def batch_pid(wave: Batch[torch.Tensor]) -> Batch[torch.Tensor]:
    return torch.full((wave.shape[0],), os.getpid())


def on_device(wave: Batch[torch.Tensor]) -> Batch[list[str]]:
    return [wave.device.type] * wave.shape[0]


def flat(wave: Batch[torch.Tensor]) -> Batch[torch.Tensor]:
    """Wrong on purpose: reduces over the batch."""
    return wave.mean()


def picky(wave: Batch[torch.Tensor], label: Batch[torch.Tensor]) -> Batch[torch.Tensor]:
    """Raises on the batch that holds label 2 at its first row."""
    if int(label[0]) == 2:
        raise ValueError("no batch may start with label 2")
    return wave


def fragile(tone: int) -> int:
    if tone == 5:
        raise ValueError("tone 5 is broken")
    return tone


def fragile_sum(fragile: Batch[torch.Tensor]) -> Batch[torch.Tensor]:
    return fragile * 10


def draw(tone: int, sample_rng: torch.Generator) -> torch.Tensor:
    """A per-sample draw (the oracle of ``draws``)."""
    return torch.rand(2, generator=sample_rng)


def index_of(tone: int, sample_index: int) -> int:
    return sample_index


def draws(wave: Batch[torch.Tensor], sample_rng: Batch[list[torch.Generator]],
          sample_index: Batch[torch.Tensor]) -> Batch[dict[str, torch.Tensor]]:
    """The same draw from each sample's own generator, and the batch's sample indices."""
    return {"draw": torch.stack([torch.rand(2, generator=g) for g in sample_rng]), "index": sample_index}
