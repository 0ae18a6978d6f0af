"""Audio classification features: manifest -> waveform -> log-mel -> statistics -> features.

Inputs and config (Hamilton-style; config entries are inputs too):

- ``manifest``: a CSV with columns ``path,label``, paths relative to the CSV's folder; a
  folder or glob pattern of audio files, each labelled by the name of its folder; or a
  Hugging Face ``datasets.Dataset`` or ``IterableDataset``, its clips in ``media_column``
  ("audio": ``Audio(decode=False)`` dicts, paths, URLs or bytes) and its labels in
  ``label_column`` ("label"; a ``ClassLabel`` keeps its names and numbers);
- ``sample_rate`` (16000), ``clip_seconds`` (1.0), ``n_mels`` (64).

Outputs: ``features`` (normalised log-mel, float32 ``[n_mels, frames]``) and ``label``
(int). Reductions: ``feature_stats`` (per-mel-bin ``Stats`` over every frame of every
clip) and ``label_vocab``. Decoding happens in the per-sample node ``waveform``, so in
DataLoader workers; the statistics take one streaming pass.
"""

from __future__ import annotations

from typing import Any

import torch

from flowdata import Collect, Parallel, reduce
from flowdata.media import load_audio
from flowdata.stats import Stats, Vocab, Welford
from flowdata.transforms import LogMel, Normalize, PadOrTrim
from flowdata_modules._manifest import LabelVocabulary, class_names as _class_names, label_of, media_of, read_manifest


AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3", ".aiff", ".aif", ".au", ".opus", ".m4a")


def row(manifest: object, media_column: str = "audio", label_column: str = "label") -> Parallel[dict[str, Any]]:
    """The samples: one ``{"path", "label"}`` row per clip of a ``path,label`` CSV, or every
    audio file of a folder or glob pattern, labelled by the folder that holds it; or a
    Hugging Face dataset's rows, its ``media_column`` and ``label_column`` only (the dataset
    itself, not a copy: a map-style one is the loader's index, an iterable one streams)."""
    return read_manifest(manifest, AUDIO_SUFFIXES, media_column, label_column)


def class_names(manifest: object, label_column: str = "label") -> tuple[str, ...] | None:
    """The names of a dataset's ``ClassLabel`` label column, in its order; None for a CSV,
    folder, pattern, or a dataset whose labels are plain strings or numbers."""
    return _class_names(manifest, label_column)


def waveform(row: dict[str, Any], sample_rate: int = 16000, clip_seconds: float = 1.0,
             max_seconds: float = 3600.0, media_column: str = "audio") -> torch.Tensor:
    """The clip decoded, mono, resampled to ``sample_rate``, padded or trimmed: ``[samples]``.
    A file whose header declares more than ``max_seconds`` is refused before decoding."""
    wave, _ = load_audio(media_of(row, media_column), sample_rate=sample_rate, mono=True, max_seconds=max_seconds)
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


def label_name(row: dict[str, Any], class_names: tuple[str, ...] | None = None, label_column: str = "label") -> str:
    """The clip's label as written in the manifest; a ``ClassLabel``'s name for its number."""
    return label_of(row, label_column, class_names)


@reduce(LabelVocabulary)
def label_vocab(label_name: Collect[str], class_names: tuple[str, ...] | None) -> Vocab:
    """The labels, most frequent first (ties in name order); a ``ClassLabel``'s names in the
    dataset's order, so that ``label`` is the dataset's own number."""
    raise NotImplementedError("@reduce folds the values; the body is not called")


def label(label_name: str, label_vocab: Vocab) -> int:
    """The label's index in ``label_vocab``."""
    return label_vocab[label_name]
