"""Audio decoding with soundfile (WAV, FLAC, OGG, MP3 and the other libsndfile formats),
and torchcodec for other formats when it is installed; from a path, an fsspec URL, bytes, a
file object or a Hugging Face ``{"bytes", "path"}`` dict."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from flowdata.errors import MediaError
from flowdata.media._input import Media, MediaInput, opened

__all__ = ["MAX_SECONDS", "AudioInfo", "audio_info", "load_audio"]


@dataclass(frozen=True)
class AudioInfo:
    """What an audio file's header says.

    ``path`` is what the audio was given as, as errors name it: the path or URL, or for a
    file in memory ``"1234 bytes"`` (``"1234 bytes (clip.wav)"`` from a media dict).
    """

    path: str
    sample_rate: int
    channels: int
    frames: int
    format: str

    @property
    def duration(self) -> float:
        """Length in seconds."""
        return self.frames / self.sample_rate if self.sample_rate else 0.0


def _soundfile(name: str) -> Any:
    """The soundfile module; ``name`` is the input the error names when it is missing."""
    try:
        import soundfile
    except ImportError as exc:
        raise MediaError(name, "audio decoding needs the soundfile package", "pip install soundfile") from exc
    return soundfile


def audio_info(path: MediaInput) -> AudioInfo:
    """Reads only the header: sample rate, channels, frames, format.

    Args:
        path: A path, an fsspec URL, bytes, a binary file object or a ``{"bytes", "path"}`` dict.
    """
    with opened(path) as media:
        return header(media)


def header(media: Media) -> AudioInfo:
    """:func:`audio_info` of a resolved input."""
    sf = _soundfile(media.name)
    source = media.source()
    try:
        info = sf.info(source)
    except Exception as exc:
        raise _unreadable(media, source, exc) from exc
    return AudioInfo(media.name, int(info.samplerate), int(info.channels), int(info.frames), str(info.format))


MAX_SECONDS = 3600.0
"""Default ``max_seconds`` of :func:`load_audio`: an hour."""


def load_audio(
    path: MediaInput,
    sample_rate: int | None = None,
    mono: bool = True,
    *,
    max_seconds: float | None = MAX_SECONDS,
) -> tuple[Any, int]:
    """Decodes a file into a float32 tensor ``[channels, frames]`` in [-1, 1].

    Args:
        path: The audio: a path, an fsspec URL (``file://``, ``s3://``, ... as fsspec has
            installed), the encoded file as bytes, a binary file object, or a Hugging Face
            ``{"bytes", "path"}`` dict (a ``datasets.Audio(decode=False)`` value; its bytes
            when present, else its path).
        sample_rate: Resample to this rate (torchaudio's resampler) when it differs.
        mono: Average the channels into one.
        max_seconds: Refuse, before decoding, a file whose header declares a longer
            duration (an 8 KB WAV whose header says 1 Hz lasts 2 hours, and resampled to
            16 kHz fills half a gigabyte); None for no limit.

    Returns:
        ``(waveform, sample_rate)``.
    """
    with opened(path) as media:
        return _decode(media, sample_rate, mono, max_seconds)


def _decode(media: Media, sample_rate: int | None, mono: bool, max_seconds: float | None) -> tuple[Any, int]:
    import torch

    text = media.name
    sf = _soundfile(text)
    source = media.source()
    try:
        with sf.SoundFile(source) as f:
            if max_seconds is not None and f.samplerate > 0 and f.frames / f.samplerate > max_seconds:
                raise MediaError(
                    text, f"declares {f.frames} frames at {f.samplerate} Hz = {f.frames / f.samplerate:,.0f} s, above "
                    f"max_seconds={max_seconds:g}", "cut or re-export the file, or raise max_seconds if it is meant",
                )
            data, rate, log = f.read(dtype="float32", always_2d=True), f.samplerate, f.extra_info
    except MediaError:
        raise
    except Exception as exc:
        decoded = _torchcodec(media)
        if decoded is None:
            raise _unreadable(media, source, exc) from exc
        wave, rate = decoded
    else:
        _check_complete(text, log)
        wave = torch.from_numpy(data.T.copy())
    if wave.shape[-1] == 0:
        raise MediaError(text, "has no audio frames (truncated header?)", "re-export or remove the file")
    if wave.is_floating_point() and not bool(torch.isfinite(wave).all()):
        bad = int((~torch.isfinite(wave)).sum())
        raise MediaError(text, f"holds {bad} sample(s) that are NaN or inf (a float file with bad values)",
                         "re-export or remove the file")
    if mono and wave.shape[0] > 1:
        wave = wave.mean(dim=0, keepdim=True)
    if sample_rate is not None and int(rate) != int(sample_rate):
        import torchaudio.functional as AF

        wave = AF.resample(wave, int(rate), int(sample_rate))
        rate = int(sample_rate)
    return wave, int(rate)


# libsndfile reads a file cut short in its audio data without an error, up to where it
# ends, and only logs the data chunk's declared size with the size it "should be" (WAV
# "data", AIFF "SSND", AU "Data Size"). 0xFFFFFFFF and 0x7FFFFFFF are the placeholders of
# writers that stream to a pipe (the length is unknown), not a truncation.
_SHORT = re.compile(r"^\s*(?:data|SSND|Data Size)\s*:\s*(\d+) \(should be (\d+)\)", re.MULTILINE)
_UNKNOWN_LENGTH = (0xFFFFFFFF, 0x7FFFFFFF)


def _check_complete(path: str, log: str) -> None:
    """Raises MediaError when libsndfile's log says the audio data is shorter than declared."""
    for declared, present in _SHORT.findall(log):
        if int(present) < int(declared) and int(declared) not in _UNKNOWN_LENGTH:
            raise MediaError(
                path, f"is truncated: its header declares {declared} bytes of audio data, the file holds {present}",
                "re-export or remove the file",
            )


def _torchcodec(media: Media) -> tuple[Any, int] | None:
    """Decodes with torchcodec when it (and FFmpeg) is installed; None otherwise."""
    try:
        from torchcodec.decoders import AudioDecoder
    except Exception:
        return None
    try:  # torchcodec takes a path, bytes or a file object
        samples = AudioDecoder(media.path or media.data or media.source()).get_all_samples()
    except Exception:
        return None
    return samples.data.float(), int(samples.sample_rate)


def _unreadable(media: Media, source: object, exc: Exception) -> MediaError:
    path = media.name
    message = str(exc)
    if media.is_file_object():  # soundfile says "Error opening <_io.BytesIO object at 0x...>: ..."
        message = message.replace(f"Error opening {source!r}: ", "")
    low = message.lower()
    if "permission denied" in low:
        return MediaError(path, "cannot be opened (permission denied)", "check the file's permissions")
    if "does not exist or is not a regular file" in low:
        # libsndfile's words for a file its MP3 decoder rejects; the file exists (checked first)
        message = "libsndfile's decoders found no audio stream in it"
    if "format not recognised" in low or "unknown format" in low or "file contains data in an unknown format" in low:
        return MediaError(path, f"is not an audio file soundfile can read ({message.strip()})",
                          "convert it to WAV/FLAC/OGG/MP3, or install torchcodec and FFmpeg for other formats")
    return MediaError(path, f"cannot be decoded, truncated or corrupt ({message.strip()})", "re-export or remove the file")
