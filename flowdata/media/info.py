"""``metadata(path)``: the header of an audio or image file, whichever it is."""

from __future__ import annotations

import os

from flowdata.errors import MediaError
from flowdata.media.audio import AudioInfo, audio_info
from flowdata.media.image import ImageInfo, image_info

__all__ = ["metadata"]


def metadata(path: str | os.PathLike[str]) -> AudioInfo | ImageInfo:
    """Reads only the header: duration, sample rate and channels of audio; size and mode of images."""
    try:
        return audio_info(path)
    except MediaError as audio_error:
        if "does not exist" in audio_error.problem or "empty" in audio_error.problem:
            raise
        try:
            return image_info(path)
        except MediaError:
            raise MediaError(
                os.fspath(path), "is neither an audio file soundfile reads nor an image PIL reads",
                "check the file's format",
            ) from audio_error
