"""Image decoding with PIL: RGB, grayscale, RGBA, 16-bit PNG, multi-page and multi-channel TIFF."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from flowdata.errors import MediaError
from flowdata.media._checks import existing

__all__ = ["MAX_PIXELS", "ImageInfo", "image_info", "load_image"]

_MODES = ("RGB", "L", "RGBA", None)


@dataclass(frozen=True)
class ImageInfo:
    """What an image file's header says."""

    path: str
    width: int
    height: int
    mode: str
    pages: int
    format: str


MAX_PIXELS = 90_000_000
"""Default ``max_pixels`` of :func:`load_image`: about Pillow's own warning threshold."""


def _open(path: str) -> Any:
    from PIL import Image, UnidentifiedImageError

    try:
        return Image.open(path)
    except Image.DecompressionBombError as exc:
        raise MediaError(
            path, f"is far too large to decode ({exc})",
            "downscale the file, or raise PIL.Image.MAX_IMAGE_PIXELS and max_pixels if it is meant",
        ) from exc
    except UnidentifiedImageError as exc:
        known = _signature(path)
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


def _signature(path: str) -> str | None:
    """The format whose signature the file starts with, by PIL's own checks; None when none."""
    from PIL import Image

    Image.init()
    with open(path, "rb") as f:
        prefix = f.read(16)
    for fmt in Image.ID:
        accept = Image.OPEN[fmt][1]
        try:
            if accept is not None and accept(prefix) is True:
                return fmt
        except Exception:  # a check that expects a longer prefix
            continue
    return None


def image_info(path: str | os.PathLike[str]) -> ImageInfo:
    """Reads only the header: size, mode, number of pages, format."""
    text = existing(path)
    with _open(text) as im:
        return ImageInfo(text, im.width, im.height, im.mode, int(getattr(im, "n_frames", 1)), str(im.format))


def load_image(
    path: str | os.PathLike[str],
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
        path: The file.
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
    import numpy as np
    import torch

    if mode not in _MODES:
        raise MediaError(os.fspath(path), f"mode {mode!r} is not supported", "use 'RGB', 'L', 'RGBA' or None")
    text = existing(path)
    with _open(text) as im:
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
