"""Decoding media inside per-sample nodes: audio with soundfile, images with PIL.

Every decoder raises :class:`flowdata.MediaError` naming the path and what is wrong
(missing, empty, truncated or corrupt, unknown format, unsupported layout), so a bad file
in a dataset becomes a clear ``SampleError`` — or a skipped sample under
``on_error="skip"``.
"""

from flowdata.errors import MediaError
from flowdata.media.audio import AudioInfo, audio_info, load_audio
from flowdata.media.image import ImageInfo, image_info, load_image
from flowdata.media.info import metadata

__all__ = ["AudioInfo", "ImageInfo", "MediaError", "audio_info", "image_info", "load_audio", "load_image", "metadata"]
