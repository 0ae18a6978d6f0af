"""The log-mel of ``flowdata_modules.audio`` as a batch node: one call per collated batch,
where the loader is iterated (beside the module's per-sample ``log_mel``, for
``bench_batch_nodes.py``)."""

from __future__ import annotations

import torch

from flowdata import Batch
from flowdata.transforms import LogMel


def log_mel_batch(waveform: Batch[torch.Tensor], mel: LogMel) -> Batch[torch.Tensor]:
    """``[batch, n_mels, frames]`` for the whole batch in one call."""
    with torch.no_grad():
        spectrogram: torch.Tensor = mel(waveform)
    return spectrogram
