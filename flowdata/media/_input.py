"""What a decoder is given, resolved into one :class:`Media`: a name for errors and a way to read it.

A media input is

- a local path (``str`` or ``os.PathLike``);
- an fsspec URL (``file://...``, ``memory://...``, ``s3://...``: any protocol whose fsspec
  implementation is installed; chained URLs such as ``zip://a.png::file:///x.zip`` too);
- the encoded file in memory: ``bytes``, ``bytearray`` or ``memoryview``;
- a binary file object (anything with ``read``), read from its start;
- a Hugging Face media dict ``{"bytes": ..., "path": ...}``, what ``datasets.Image(decode=False)``
  and ``datasets.Audio(decode=False)`` columns hold: its bytes when they are there, else its path.

Every error names what it was given (:func:`name_of`): the path or URL; ``"1234 bytes"`` for
bytes (``"1234 bytes (cat.png)"`` for a media dict with a path); a file object's ``name``, or
``"a file object"``.
"""

from __future__ import annotations

import importlib
import io
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, Protocol, TypeAlias

from flowdata.errors import MediaError
from flowdata.media._checks import existing

__all__ = ["BinaryReader", "Media", "MediaInput", "name_of", "opened"]


class BinaryReader(Protocol):
    """A binary file object: anything with ``read`` that returns bytes."""

    def read(self, size: int = ..., /) -> bytes: ...


MediaInput: TypeAlias = str | os.PathLike[str] | bytes | bytearray | memoryview | BinaryReader | Mapping[str, Any]
"""What :func:`flowdata.media.load_image`, :func:`~flowdata.media.load_audio` and their
``*_info`` functions accept."""

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_KINDS = "a path, an fsspec URL, bytes, a binary file object or a {'bytes', 'path'} dict"


@dataclass(frozen=True)
class Media:
    """A resolved media input: what errors call it, and exactly one way to read it.

    Attributes:
        name: What it was given, for error messages (never empty).
        path: A local file that exists and is not empty, opened by the decoder itself.
        data: The encoded file in memory.
        file: A seekable binary file object (the caller's, or one fsspec opened).
    """

    name: str
    path: str | None = None
    data: bytes | None = None
    file: IO[bytes] | None = None

    def source(self) -> str | IO[bytes]:
        """What PIL and soundfile open: the local path, or a file object at its start."""
        if self.path is not None:
            return self.path
        if self.data is not None:
            return io.BytesIO(self.data)
        assert self.file is not None
        self.file.seek(0)
        return self.file

    def head(self, size: int) -> bytes:
        """The first ``size`` bytes (to tell a format by its signature)."""
        if self.path is not None:
            with open(self.path, "rb") as f:
                return f.read(size)
        if self.data is not None:
            return self.data[:size]
        assert self.file is not None
        self.file.seek(0)
        return self.file.read(size)

    def is_file_object(self) -> bool:
        """Whether decoders read it through a file object (bytes or a file), not a path."""
        return self.path is None


def name_of(value: object) -> str:
    """What an error calls ``value`` (see the module docstring); reads nothing."""
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        return text if isinstance(text, str) else repr(text)  # a bytes path, which opened() refuses
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"{memoryview(value).nbytes} bytes"
    if isinstance(value, Mapping) and ("bytes" in value or "path" in value):
        data, path = value.get("bytes"), value.get("path")
        if data is not None and isinstance(data, (bytes, bytearray, memoryview)):
            size = f"{memoryview(data).nbytes} bytes"
            return f"{size} ({path})" if path else size
        if path:
            return str(path)
        return "a media dict with neither bytes nor a path"
    if value is None:
        return "None"
    if hasattr(value, "read"):
        name = getattr(value, "name", None)
        if isinstance(name, os.PathLike):
            name = os.fspath(name)
        return name if isinstance(name, str) and name else "a file object"
    return f"a {type(value).__name__}"


@contextmanager
def opened(value: object) -> Iterator[Media]:
    """The input resolved and checked (exists, not a folder, not empty), for as long as the block runs.

    A file that fsspec opens for a URL is closed when the block ends; a file object the
    caller gave is not.

    Raises:
        MediaError: The input names no readable, non-empty file.
        TypeError: The input is none of the accepted kinds.
    """
    if isinstance(value, Mapping) and ("bytes" in value or "path" in value):
        data, path = value.get("bytes"), value.get("path")
        if data is not None:  # the bytes win: the path may be a name only, or on another machine
            yield _in_memory(data, name_of(value))
            return
        if not path:
            raise MediaError(name_of(value), f"holds no file ({_short(value)})",
                             "drop the rows without media, or skip them with on_error='skip'")
        value = path
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if not isinstance(text, str):
            raise TypeError(f"a media path must be a str or os.PathLike[str], got {text!r}")
        if _URL.match(text):
            with _url(text) as media:
                yield media
            return
        yield Media(text, path=existing(text))
        return
    if isinstance(value, (bytes, bytearray, memoryview)):
        yield _in_memory(value, name_of(value))
        return
    if value is None:
        raise MediaError("None", "is not media: the row has no file",
                         "drop the rows without media, or skip them with on_error='skip'")
    if hasattr(value, "read"):
        yield _file_object(value)
        return
    raise TypeError(f"media must be {_KINDS}, got {type(value).__name__}: {_short(value)}")


def _in_memory(data: object, name: str) -> Media:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"{name}: a media dict's 'bytes' must be bytes, got {type(data).__name__}")
    raw = bytes(data)
    if not raw:
        raise MediaError(name, "is empty: there is nothing to decode", "re-export the file, or drop the row")
    return Media(name, data=raw)


def _file_object(file: Any) -> Media:
    name = name_of(file)
    try:
        seekable = bool(file.seekable()) if hasattr(file, "seekable") else False
        if not seekable:  # a pipe or a network stream: PIL and soundfile need to seek
            data = file.read()
            _binary(data, name)
            return _in_memory(data, name)
        _binary(file.read(0), name)
        file.seek(0, io.SEEK_END)
        size = file.tell()
        file.seek(0)
    except (OSError, ValueError) as exc:  # closed, or the system refuses
        raise MediaError(name, f"cannot be read ({type(exc).__name__}: {exc})", "give an open binary file") from exc
    if size == 0:
        raise MediaError(name, "file is empty (0 bytes)", "re-export or remove the file")
    return Media(name, file=file)


def _binary(data: object, name: str) -> None:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MediaError(name, f"is a text file object (read() gives {type(data).__name__}, not bytes)",
                         "open the file in binary mode, open(path, 'rb')")


@contextmanager
def _url(url: str) -> Iterator[Media]:
    try:  # through importlib: fsspec ships no type information
        fsspec_core = importlib.import_module("fsspec.core")
        local = importlib.import_module("fsspec.implementations.local")
    except ImportError as exc:
        raise MediaError(url, "reading a URL needs the fsspec package", "pip install fsspec") from exc
    try:
        fs, path = fsspec_core.url_to_fs(url)
    except (ValueError, ImportError) as exc:  # an unknown protocol, or its implementation is not installed
        raise MediaError(url, f"cannot be opened: fsspec has no filesystem for it ({exc})",
                         "install fsspec's implementation of the protocol (s3fs for s3://, gcsfs for gs://, ...)") from exc
    if isinstance(fs, local.LocalFileSystem):  # file://: the local checks and messages, under the URL's name
        yield Media(url, path=existing(path, name=url))
        return
    try:
        info = fs.info(path)
    except FileNotFoundError:
        raise MediaError(url, "file does not exist", "check the URL") from None
    except Exception as exc:
        raise MediaError(url, f"cannot be opened ({type(exc).__name__}: {exc})",
                         "check the URL, the network and the credentials") from exc
    if info.get("type") == "directory":
        raise MediaError(url, "is a folder, not a file")
    if info.get("size") == 0:
        raise MediaError(url, "file is empty (0 bytes)", "re-export or remove the file")
    try:
        file = fs.open(path, "rb")
    except Exception as exc:
        raise MediaError(url, f"cannot be opened ({type(exc).__name__}: {exc})",
                         "check the URL, the network and the credentials") from exc
    try:
        yield Media(url, file=file)
    finally:
        file.close()


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
