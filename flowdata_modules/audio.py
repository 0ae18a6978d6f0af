"""Audio classification features: manifest -> waveform -> log-mel -> statistics -> features.

Inputs and config (Hamilton-style; config entries are inputs too):

- ``manifest``: a CSV with columns ``path,label``, paths relative to the CSV's folder; or a
  folder or glob pattern of audio files, each labelled by the name of its folder;
- ``sample_rate`` (16000), ``clip_seconds`` (1.0), ``n_mels`` (64).

Outputs: ``features`` (normalised log-mel, float32 ``[n_mels, frames]``) and ``label``
(int). Reductions: ``feature_stats`` (per-mel-bin ``Stats`` over every frame of every
clip) and ``label_vocab``. Decoding happens in the per-sample node ``waveform``, so in
DataLoader workers; the statistics take one streaming pass.
"""

from __future__ import annotations

import torch

from flowdata import Collect, Parallel, reduce
from flowdata.media import load_audio
from flowdata.stats import Stats, Vocab, Vocabulary, Welford
from flowdata.transforms import LogMel, Normalize, PadOrTrim
from flowdata_modules._manifest import read_manifest


AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3", ".aiff", ".aif", ".au", ".opus", ".m4a")


def row(manifest: str) -> Parallel[dict[str, str]]:
    """One ``{"path", "label"}`` row per clip: from a ``path,label`` CSV, or every audio file
    of a folder or glob pattern, labelled by the folder that holds it."""
    yield from read_manifest(manifest, AUDIO_SUFFIXES)


def waveform(row: dict[str, str], sample_rate: int = 16000, clip_seconds: float = 1.0,
             max_seconds: float = 3600.0) -> torch.Tensor:
    """The clip decoded, mono, resampled to ``sample_rate``, padded or trimmed: ``[samples]``.
    A file whose header declares more than ``max_seconds`` is refused before decoding."""
    wave, _ = load_audio(row["path"], sample_rate=sample_rate, mono=True, max_seconds=max_seconds)
    clip: torch.Tensor = PadOrTrim(int(round(sample_rate * clip_seconds)))(wave[0])
    return clip


def mel(sample_rate: int = 16000, n_mels: int = 64) -> LogMel:
    """The log-mel transform (25 ms windows every 10 ms), built once and shipped to the workers."""
    return LogMel(sample_rate=sample_rate, n_mels=n_mels,
                  n_fft=round(0.025 * sample_rate), hop_length=round(0.010 * sample_rate))


def log_mel(waveform: torch.Tensor, mel: LogMel) -> torch.Tensor:
    """Log-mel spectrogram ``[n_mels, frames]``."""
    with torch.no_grad():
        spectrogram: torch.Tensor = mel(waveform)
    return spectrogram


@reduce(Welford, dim=(0, 2))
def feature_stats(log_mel: Collect[torch.Tensor]) -> Stats:
    """Per-mel-bin statistics over every frame of every clip (one streaming pass)."""
    raise NotImplementedError("@reduce folds the values; the body is not called")


def feature_normalization(feature_stats: Stats) -> Normalize:
    """Per-mel-bin normalisation by the training statistics, built once for every sample."""
    return Normalize.from_stats(feature_stats, dim=-2)


def features(log_mel: torch.Tensor, feature_normalization: Normalize) -> torch.Tensor:
    """The log-mel normalised per mel bin: float32 ``[n_mels, frames]``."""
    normalized: torch.Tensor = feature_normalization(log_mel)
    return normalized.float()


def label_name(row: dict[str, str]) -> str:
    """The clip's label as written in the manifest."""
    return row["label"]


@reduce(Vocabulary)
def label_vocab(label_name: Collect[str]) -> Vocab:
    """The labels, most frequent first (ties in name order)."""
    raise NotImplementedError("@reduce folds the values; the body is not called")


def label(label_name: str, label_vocab: Vocab) -> int:
    """The label's index in ``label_vocab``."""
    return label_vocab[label_name]
