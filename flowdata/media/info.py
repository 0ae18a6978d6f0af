"""``metadata(path)``: the header of an audio or image file, whichever it is."""

from __future__ import annotations

from flowdata.errors import MediaError
from flowdata.media._input import MediaInput, opened
from flowdata.media.audio import AudioInfo
from flowdata.media.audio import header as audio_header
from flowdata.media.image import ImageInfo
from flowdata.media.image import header as image_header

__all__ = ["metadata"]


def metadata(path: MediaInput) -> AudioInfo | ImageInfo:
    """Reads only the header: duration, sample rate and channels of audio; size and mode of images.

    Args:
        path: A path, an fsspec URL, bytes, a binary file object or a ``{"bytes", "path"}``
            dict (resolved once, so a URL is opened once for both tries).
    """
    with opened(path) as media:
        try:
            return audio_header(media)
        except MediaError as audio_error:
            try:
                return image_header(media)
            except MediaError:
                if "audio decoding needs" in audio_error.problem:  # soundfile is missing: say so
                    raise audio_error from None
                raise MediaError(
                    media.name, "is neither an audio file soundfile reads nor an image PIL reads",
                    "check the file's format",
                ) from audio_error
