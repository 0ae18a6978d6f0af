"""Image decoding with PIL: RGB, grayscale, RGBA, 16-bit PNG, multi-page and multi-channel TIFF,
from a path, an fsspec URL, bytes, a file object or a Hugging Face ``{"bytes", "path"}`` dict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flowdata.errors import MediaError
from flowdata.media._input import Media, MediaInput, name_of, opened

__all__ = ["MAX_PIXELS", "ImageInfo", "image_info", "load_image"]

_MODES = ("RGB", "L", "RGBA", None)


@dataclass(frozen=True)
class ImageInfo:
    """What an image file's header says.

    ``path`` is what the image was given as, as errors name it: the path or URL, or for an
    image in memory ``"1234 bytes"`` (``"1234 bytes (cat.png)"`` from a media dict).
    """

    path: str
    width: int
    height: int
    mode: str
    pages: int
    format: str


MAX_PIXELS = 90_000_000
"""Default ``max_pixels`` of :func:`load_image`: about Pillow's own warning threshold."""


def _open(media: Media) -> Any:
    from PIL import Image, UnidentifiedImageError

    path = media.name
    try:
        return Image.open(media.source())
    except Image.DecompressionBombError as exc:
        raise MediaError(
            path, f"is far too large to decode ({exc})",
            "downscale the file, or raise PIL.Image.MAX_IMAGE_PIXELS and max_pixels if it is meant",
        ) from exc
    except UnidentifiedImageError as exc:
        known = _signature(media)
        if known is not None:  # PIL says "cannot identify" for a file cut inside its header too
            raise MediaError(
                path, f"cannot be decoded, truncated or corrupt (starts like {known}, but PIL cannot read it)",
                "re-export or remove the file",
            ) from exc
        raise MediaError(path, "is not an image PIL can read (unknown format)", "convert it to PNG, JPEG or TIFF") from exc
    except OSError as exc:
        if exc.errno is not None:  # the system refused (permissions, I/O, too many open files)
            raise MediaError(path, f"cannot be opened ({exc})", "check the file's permissions and the disk") from exc
        # PIL's own OSError, e.g. a JPEG cut inside its header: "Truncated File Read"
        raise MediaError(
            path, f"cannot be decoded, truncated or corrupt ({exc})", "re-export or remove the file",
        ) from exc


def _signature(media: Media) -> str | None:
    """The format whose signature the file starts with, by PIL's own checks; None when none."""
    from PIL import Image

    Image.init()
    prefix = media.head(16)
    for fmt in Image.ID:
        accept = Image.OPEN[fmt][1]
        try:
            if accept is not None and accept(prefix) is True:
                return fmt
        except Exception:  # a check that expects a longer prefix
            continue
    return None


def image_info(path: MediaInput) -> ImageInfo:
    """Reads only the header: size, mode, number of pages, format.

    Args:
        path: A path, an fsspec URL, bytes, a binary file object or a ``{"bytes", "path"}`` dict.
    """
    with opened(path) as media:
        return header(media)


def header(media: Media) -> ImageInfo:
    """:func:`image_info` of a resolved input."""
    with _open(media) as im:
        return ImageInfo(media.name, im.width, im.height, im.mode, int(getattr(im, "n_frames", 1)), str(im.format))


def load_image(
    path: MediaInput,
    mode: str | None = "RGB",
    page: int = 0,
    *,
    max_pixels: int | None = MAX_PIXELS,
    draft: tuple[int, int] | None = None,
) -> Any:
    """Decodes an image into a float32 tensor ``[channels, height, width]``.

    Integer pixels are scaled to [0, 1] by their type's maximum (255, or 65535 for 16-bit);
    float pixels are kept as they are.

    Args:
        path: The image: a path, an fsspec URL (``file://``, ``s3://``, ... as fsspec has
            installed), the encoded file as bytes, a binary file object, or a Hugging Face
            ``{"bytes", "path"}`` dict (a ``datasets.Image(decode=False)`` value; its bytes
            when present, else its path).
        mode: ``"RGB"`` (3 channels), ``"L"`` (1), ``"RGBA"`` (4), or None to keep the
            file's own channels (e.g. a multi-channel TIFF); a palette image then comes as
            its colours, RGB (RGBA when it has transparency), never as palette indices.
        page: The page of a multi-page file (TIFF).
        max_pixels: Refuse, before decoding, an image whose header declares more pixels
            (a small file can declare a huge image: a 0.25 MB PNG of 10000x9000); None
            for no limit.
        draft: ``(width, height)`` the caller needs at least: a JPEG is then decoded at the
            smallest of its built-in reduced scales (1/2, 1/4, 1/8) that still covers it.
            Other formats decode in full.
    """
    if mode not in _MODES:
        raise MediaError(name_of(path), f"mode {mode!r} is not supported", "use 'RGB', 'L', 'RGBA' or None")
    with opened(path) as media:
        return _decode(media, mode, page, max_pixels, draft)


def _decode(media: Media, mode: str | None, page: int, max_pixels: int | None, draft: tuple[int, int] | None) -> Any:
    import numpy as np
    import torch

    text = media.name
    with _open(media) as im:
        if max_pixels is not None and im.width * im.height > max_pixels:
            raise MediaError(
                text, f"declares {im.width}x{im.height} = {im.width * im.height / 1e6:.0f} megapixels, above "
                f"max_pixels={max_pixels:,}", "downscale the file, or raise max_pixels if it is meant",
            )
        if draft is not None and im.format == "JPEG":
            im.draft(mode if mode in ("RGB", "L") else None, draft)
        pages = int(getattr(im, "n_frames", 1))
        if not 0 <= page < pages:
            raise MediaError(text, f"has {pages} page(s), not page {page}")
        try:
            im.seek(page)
            im.load()
            if mode is not None and im.mode != mode:
                if im.mode.startswith("I;16") or im.mode in ("I", "F"):
                    if mode != "L":
                        raise MediaError(
                            text, f"has {im.mode} pixels (one high-precision channel), which cannot become {mode}",
                            "load it with mode='L' or mode=None",
                        )
                    array = np.asarray(im)
                else:
                    array = np.asarray(im.convert(mode))
            elif mode is None and im.mode in ("P", "PA"):
                # palette indices are not pixel values: expand to the colours they stand for
                has_alpha = im.mode == "PA" or "transparency" in im.info
                array = np.asarray(im.convert("RGBA" if has_alpha else "RGB"))
            else:
                array = np.asarray(im)
        except MediaError:
            raise
        except (OSError, SyntaxError, ValueError) as exc:
            raise MediaError(text, f"cannot be decoded, truncated or corrupt ({exc})", "re-export or remove the file") from exc
    if array.ndim == 2:
        array = array[:, :, None]
    if array.dtype == np.uint8:
        out = array.astype(np.float32) / 255.0
    elif array.dtype in (np.uint16, np.dtype(">u2"), np.dtype("<u2")) or str(array.dtype) in ("uint16", ">u2"):
        out = array.astype(np.float32) / 65535.0
    elif array.dtype == np.bool_:
        out = array.astype(np.float32)
    elif np.issubdtype(array.dtype, np.integer):
        out = array.astype(np.float32) / float(np.iinfo(array.dtype).max)
    else:
        out = array.astype(np.float32)
        if not np.isfinite(out).all():  # a float TIFF with bad pixels
            raise MediaError(text, f"holds {int((~np.isfinite(out)).sum())} pixel value(s) that are NaN or inf",
                             "re-export or remove the file")
    return torch.from_numpy(np.ascontiguousarray(out.transpose(2, 0, 1)))
