"""Decoding media inside per-sample nodes: audio with soundfile, images with PIL.

The decoders take a path, an fsspec URL (``file://``, ``s3://``, ... as fsspec has
installed), the encoded file as bytes, a binary file object, or a Hugging Face
``{"bytes", "path"}`` dict (what ``datasets.Image(decode=False)`` and
``datasets.Audio(decode=False)`` columns hold): :data:`MediaInput`.

Every decoder raises :class:`flowdata.MediaError` naming what it was given (the path or URL,
``"1234 bytes"``, ``"1234 bytes (cat.png)"``, a file object's name) and what is wrong
(missing, empty, truncated or corrupt, unknown format, unsupported layout), so a bad file
in a dataset becomes a clear ``SampleError`` — or a skipped sample under
``on_error="skip"``.
"""

from flowdata.errors import MediaError
from flowdata.media._input import MediaInput
from flowdata.media.audio import AudioInfo, audio_info, load_audio
from flowdata.media.image import ImageInfo, image_info, load_image
from flowdata.media.info import metadata

__all__ = [
    "AudioInfo", "ImageInfo", "MediaError", "MediaInput", "audio_info", "image_info", "load_audio", "load_image", "metadata",
]
