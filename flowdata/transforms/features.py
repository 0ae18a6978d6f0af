"""Feature transforms that are not spatial: normalisation and audio.

Each is a :class:`FeatureTransform`, an ``nn.Module`` acting on the trailing dimensions, so
the same module takes ``[C, H, W]`` or ``[N, C, H, W]``, ``[T]`` or ``[N, T]``. Where
torchaudio already does the maths, these wrap it.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

_log = logging.getLogger("flowdata")

__all__ = ["FeatureTransform", "LogMel", "Normalize", "PadOrTrim", "Resample"]


class FeatureTransform(nn.Module):
    """Base of flowdata's transforms: ``forward(x: Tensor) -> Tensor`` on trailing dimensions.

    A transform whose ``forward`` draws random numbers takes ``forward(x, generator=None)``
    and sets ``random = True``: :class:`~flowdata.transforms.Compose` passes its generator
    to those members only.
    """

    random: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


class Normalize(FeatureTransform):
    """``(x - mean) / std``, with ``mean`` and ``std`` broadcast over the trailing dimensions.

    Args:
        mean: Per-channel (or per-feature) means.
        std: Standard deviations. A value below ``eps`` (a constant feature) is taken as 1, so
            that feature normalises to ``x - mean`` -- 0 for the constant -- never to inf or
            to rounding noise magnified by ``1 / eps``; it is reported once, when built.
        dim: Axis of ``x`` (counted from the end, e.g. ``-3`` for C in ``[..., C, H, W]``)
            the statistics run along; the other trailing axes are broadcast.
        eps: Smallest standard deviation used.
    """

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, mean: Any, std: Any, dim: int = -1, eps: float = 1e-8):
        super().__init__()
        if dim >= 0:
            raise ValueError(f"Normalize(dim={dim}): count the axis from the end (e.g. -3 for C in [C, H, W])")
        mean_t = torch.as_tensor(mean, dtype=torch.float32).reshape(-1)
        std_t = torch.as_tensor(std, dtype=torch.float32).reshape(-1)
        constant = (std_t < eps).nonzero().reshape(-1).tolist()
        if constant:
            shown = ", ".join(map(str, constant[:8])) + (", ..." if len(constant) > 8 else "")
            _log.warning("Normalize: %d of %d features have a standard deviation below %g (constant): "
                         "they normalise to 0 (positions %s)", len(constant), std_t.numel(), eps, shown)
            std_t = torch.where(std_t < eps, torch.ones_like(std_t), std_t)
        shape = [-1] + [1] * (-dim - 1)
        self.register_buffer("mean", mean_t.reshape(shape))
        self.register_buffer("std", std_t.reshape(shape))
        self.dim = dim

    @classmethod
    def from_stats(cls, stats: Any, dim: int = -1, eps: float = 1e-8) -> Normalize:
        """From a :class:`flowdata.stats.Stats` (its mean and std, as float32)."""
        return cls(stats.mean, stats.std, dim=dim, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


class PadOrTrim(FeatureTransform):
    """Pads with ``value`` or trims the last dimension to ``length`` (e.g. audio frames)."""

    def __init__(self, length: int, value: float = 0.0):
        super().__init__()
        self.length = int(length)
        self.value = float(value)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1]
        if n >= self.length:
            return x[..., : self.length]
        return nn.functional.pad(x, (0, self.length - n), value=self.value)


class Resample(FeatureTransform):
    """Resamples the last dimension from ``orig_freq`` to ``new_freq`` (torchaudio's resampler)."""

    def __init__(self, orig_freq: int, new_freq: int):
        super().__init__()
        import torchaudio.transforms as T

        self.inner = T.Resample(orig_freq, new_freq)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)  # type: ignore[no-any-return]


class LogMel(FeatureTransform):
    """Log-mel spectrogram ``[..., n_mels, frames]`` of ``[..., samples]`` (torchaudio's
    ``MelSpectrogram``, then ``log(x + eps)``)."""

    def __init__(self, sample_rate: int = 16000, n_mels: int = 64, n_fft: int = 400, hop_length: int = 160, eps: float = 1e-6):
        super().__init__()
        import torchaudio.transforms as T

        self.mel = T.MelSpectrogram(sample_rate=sample_rate, n_fft=n_fft, hop_length=hop_length, n_mels=n_mels)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(self.mel(x) + self.eps)
