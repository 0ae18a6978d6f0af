"""flowdata.media takes paths, fsspec URLs, bytes, file objects and Hugging Face media dicts.

Every input kind decodes to what the file's path gives, for images and audio, through
``load_*`` and ``*_info`` alike; the checks made before decoding (``max_pixels``,
``max_seconds``), 16-bit and grayscale images, resampling and truncation hold for each; and
every error names what it was given.
"""

from __future__ import annotations

import io
import math
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
import torch
from PIL import Image

import flowdata as fd
from flowdata.media import AudioInfo, ImageInfo, audio_info, image_info, load_audio, load_image, metadata

RATE = 8000


def _tone(seconds: float = 0.25, rate: int = RATE, freq: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.4 * np.sin(2 * math.pi * freq * t)).astype(np.float32)


def _wav_bytes(seconds: float = 0.25, fmt: str = "WAV") -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, _tone(seconds), RATE, format=fmt, subtype="PCM_16")
    return buffer.getvalue()


def _png_bytes(mode: str = "RGB", size: tuple[int, int] = (6, 4)) -> bytes:
    w, h = size
    if mode == "I;16":
        image = Image.fromarray((np.arange(w * h).reshape(h, w) * 1000).astype(np.uint16))
    else:
        rng = np.random.default_rng(0)
        image = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


class _Stream:
    """A binary stream that cannot seek (a pipe, an HTTP response): only ``read``."""

    def __init__(self, data: bytes):
        self._buffer = io.BytesIO(data)

    def read(self, size: int = -1, /) -> bytes:
        return self._buffer.read(size)


@pytest.fixture
def memory_url() -> Iterator[Callable[[bytes, str], str]]:
    """Writes bytes to fsspec's in-memory filesystem (a non-local protocol); returns the URL."""
    import fsspec

    fs = fsspec.filesystem("memory")
    written: list[str] = []

    def write(data: bytes, name: str) -> str:
        path = f"/flowdata-test-{uuid.uuid4().hex}/{name}"
        fs.pipe(path, data)
        written.append(path)
        return f"memory://{path}"

    yield write
    for path in written:
        fs.rm(path)


# kind -> how to make that kind of input from the file's path and bytes; and the name errors use
KINDS: dict[str, Callable[[Path, bytes, Any], Any]] = {
    "str path": lambda p, b, url: str(p),
    "pathlib path": lambda p, b, url: p,
    "file url": lambda p, b, url: p.as_uri(),
    "memory url": lambda p, b, url: url(b, p.name),
    "bytes": lambda p, b, url: b,
    "bytearray": lambda p, b, url: bytearray(b),
    "memoryview": lambda p, b, url: memoryview(b),
    "file object": lambda p, b, url: open(p, "rb"),  # noqa: SIM115  # closed by the test
    "BytesIO": lambda p, b, url: io.BytesIO(b),
    "stream": lambda p, b, url: _Stream(b),
    "hf dict": lambda p, b, url: {"bytes": b, "path": p.name},
    "hf dict without path": lambda p, b, url: {"bytes": b, "path": None},
    "hf dict without bytes": lambda p, b, url: {"bytes": None, "path": str(p)},
}


def _name(kind: str, path: Path, data: bytes, given: Any) -> str:
    """What an error must call the input."""
    return {
        "str path": str(path), "pathlib path": str(path), "file url": path.as_uri(),
        "memory url": given if isinstance(given, str) else "", "file object": str(path),
        "bytes": f"{len(data)} bytes", "bytearray": f"{len(data)} bytes", "memoryview": f"{len(data)} bytes",
        "BytesIO": "a file object", "stream": "a file object",
        "hf dict": f"{len(data)} bytes ({path.name})", "hf dict without path": f"{len(data)} bytes",
        "hf dict without bytes": str(path),
    }[kind]


def _input(kind: str, path: Path, data: bytes, url: Any) -> Any:
    path.write_bytes(data)
    return KINDS[kind](path, data, url)


def _close(value: Any) -> None:
    if hasattr(value, "close"):
        value.close()


@pytest.mark.parametrize("kind", KINDS)
def test_image_from_every_kind_of_input(tmp_path: Path, memory_url: Any, kind: str) -> None:
    data = _png_bytes("RGBA", (7, 5))
    path = tmp_path / "cat.png"
    want = (path.write_bytes(data), load_image(path))[1]
    for mode, channels in (("RGB", 3), ("L", 1), (None, 4)):
        given = _input(kind, path, data, memory_url)
        try:
            got = load_image(given, mode=mode)
        finally:
            _close(given)
        assert got.shape == (channels, 5, 7) and got.dtype == torch.float32
        if mode == "RGB":
            assert torch.equal(got, want)
    given = _input(kind, path, data, memory_url)
    try:
        info = image_info(given)
    finally:
        _close(given)
    assert info == ImageInfo(_name(kind, path, data, given), 7, 5, "RGBA", 1, "PNG")


@pytest.mark.parametrize("kind", KINDS)
def test_audio_from_every_kind_of_input(tmp_path: Path, memory_url: Any, kind: str) -> None:
    data = _wav_bytes()
    path = tmp_path / "clip.wav"
    path.write_bytes(data)
    want, _ = load_audio(path)
    given = _input(kind, path, data, memory_url)
    try:
        wave, rate = load_audio(given)
    finally:
        _close(given)
    assert rate == RATE and torch.equal(wave, want)
    given = _input(kind, path, data, memory_url)
    try:
        resampled, rate = load_audio(given, sample_rate=16000)  # resampling from every kind
    finally:
        _close(given)
    assert rate == 16000 and resampled.shape == (1, 4000)
    given = _input(kind, path, data, memory_url)
    try:
        info = audio_info(given)
    finally:
        _close(given)
    assert info == AudioInfo(_name(kind, path, data, given), RATE, 1, 2000, "WAV")
    assert info.duration == pytest.approx(0.25)


@pytest.mark.parametrize("kind", ["bytes", "BytesIO", "stream", "hf dict", "memory url", "file url"])
def test_checks_before_decoding_hold_for_every_kind(tmp_path: Path, memory_url: Any, kind: str) -> None:
    """max_pixels and max_seconds read the header only (the image's pixel data here is cut off)."""
    png = _png_bytes("RGB", (64, 48))
    cut_png = png[: len(png) // 2]
    given = _input(kind, tmp_path / "big.png", cut_png, memory_url)
    name = re.escape(_name(kind, tmp_path / "big.png", cut_png, given))
    with pytest.raises(fd.MediaError, match=rf"^{name}: declares 64x48 = 0 megapixels, above max_pixels=1,000"):
        load_image(given, max_pixels=1000)
    wav = _wav_bytes(seconds=2.0)  # (libsndfile counts the frames a cut WAV holds, not those it declares)
    given = _input(kind, tmp_path / "long.wav", wav, memory_url)
    name = re.escape(_name(kind, tmp_path / "long.wav", wav, given))
    with pytest.raises(fd.MediaError, match=rf"^{name}: declares 16000 frames at 8000 Hz = 2 s, above max_seconds=1"):
        load_audio(given, max_seconds=1.0)


def test_sixteen_bit_and_grayscale_from_bytes() -> None:
    depth = _png_bytes("I;16")
    x = load_image(depth, mode="L")
    assert x.shape == (1, 4, 6) and float(x.max()) == pytest.approx(23000 / 65535, rel=1e-6)  # scaled by 65535
    with pytest.raises(fd.MediaError, match=rf"^{len(depth)} bytes: has I;16 pixels \(one high-precision channel\), "
                                            "which cannot become RGB\n  fix: load it with mode='L'"):
        load_image(depth, mode="RGB")
    gray = load_image({"bytes": _png_bytes("L"), "path": "gray.png"}, mode=None)
    assert gray.shape == (1, 4, 6)
    info = metadata(depth)
    assert isinstance(info, ImageInfo) and info.mode == "I;16" and info.path == f"{len(depth)} bytes"
    flac = _wav_bytes(fmt="FLAC")
    info = metadata(io.BytesIO(flac))
    assert isinstance(info, AudioInfo) and info.format == "FLAC" and info.path == "a file object"


def test_bad_bytes_are_named_by_their_size(tmp_path: Path) -> None:
    text = b"a caption, not an image\n" * 4
    with pytest.raises(fd.MediaError, match=r"^96 bytes: is not an image PIL can read \(unknown format\)"):
        load_image(text)
    with pytest.raises(fd.MediaError, match=r"^96 bytes \(cat.png\): is not an image PIL can read"):
        image_info({"bytes": text, "path": "cat.png"})
    with pytest.raises(fd.MediaError, match=r"^a file object: is not an image PIL can read"):
        load_image(io.BytesIO(text))
    (tmp_path / "notes.png").write_bytes(text)
    with open(tmp_path / "notes.png", "rb") as f, pytest.raises(
        fd.MediaError, match=rf"^{re.escape(str(tmp_path / 'notes.png'))}: is not an image PIL can read"
    ):
        load_image(f)
    png = _png_bytes()
    with pytest.raises(fd.MediaError, match=r"^30 bytes: cannot be decoded, truncated or corrupt \(starts like PNG, "
                                            r"but PIL cannot read it\)"):
        load_image(png[:30])  # the signature is read from the bytes
    with pytest.raises(fd.MediaError, match=rf"^{len(png) // 2} bytes: cannot be decoded, truncated or corrupt"):
        load_image(png[: len(png) // 2])
    # audio: libsndfile's words, without the repr of the buffer it was handed
    with pytest.raises(fd.MediaError, match=r"^96 bytes: is not an audio file soundfile can read "
                                            r"\(Format not recognised.\)\n  fix: convert it") as info:
        load_audio(text)
    assert "BytesIO" not in str(info.value) and info.value.path == "96 bytes"
    with pytest.raises(fd.MediaError, match=r"^96 bytes \(clip.wav\): is not an audio file soundfile can read"):
        audio_info({"bytes": text, "path": "clip.wav"})
    wav = _wav_bytes()
    data_at = wav.index(b"data") + 8
    with pytest.raises(fd.MediaError, match=rf"^{data_at + 1000} bytes: is truncated: its header declares 4000 bytes "
                                            "of audio data, the file holds 1000"):
        load_audio(wav[: data_at + 1000])
    with pytest.raises(fd.MediaError, match=r"^a file object: cannot be decoded, truncated or corrupt"):
        load_audio(_Stream(wav[:30]))
    with pytest.raises(fd.MediaError, match=r"^96 bytes: is neither an audio file soundfile reads nor an image PIL"):
        metadata(text)


@pytest.mark.parametrize("load", [load_image, image_info, load_audio, audio_info])
def test_inputs_that_name_no_file(tmp_path: Path, load: Callable[[Any], Any], memory_url: Any) -> None:
    missing = (tmp_path / "missing.png").as_uri()
    with pytest.raises(fd.MediaError, match=rf"^{re.escape(missing)}: file does not exist"):
        load(missing)
    with pytest.raises(fd.MediaError, match=r"^memory:///no-such-folder/x.png: file does not exist\n  fix: check the URL"):
        load("memory:///no-such-folder/x.png")
    with pytest.raises(fd.MediaError, match=r"^nosuchprotocol://x.png: cannot be opened: fsspec has no filesystem "
                                            r"for it .*\n  fix: install fsspec's implementation of the protocol"):
        load("nosuchprotocol://x.png")
    with pytest.raises(fd.MediaError, match=rf"^{re.escape(tmp_path.as_uri())}: is a folder, not a file"):
        load(tmp_path.as_uri())
    empty = memory_url(b"", "empty.png")
    with pytest.raises(fd.MediaError, match=rf"^{re.escape(empty)}: file is empty \(0 bytes\)"):
        load(empty)
    with pytest.raises(fd.MediaError, match=r"^0 bytes: is empty: there is nothing to decode"):
        load(b"")
    with pytest.raises(fd.MediaError, match=r"^0 bytes \(cat.png\): is empty"):
        load({"bytes": b"", "path": "cat.png"})  # bytes, even empty, win over the path
    with pytest.raises(fd.MediaError, match=r"^a file object: file is empty \(0 bytes\)"):
        load(io.BytesIO())
    with pytest.raises(fd.MediaError, match=r"^a media dict with neither bytes nor a path: holds no file "
                                            r"\(\{'bytes': None, 'path': None\}\)\n  fix: drop the rows without media"):
        load({"bytes": None, "path": None})
    with pytest.raises(fd.MediaError, match=rf"^{re.escape(str(tmp_path / 'gone.png'))}: file does not exist"):
        load({"bytes": None, "path": str(tmp_path / "gone.png")})
    with pytest.raises(fd.MediaError, match=r"^None: is not media: the row has no file"):
        load(None)
    with pytest.raises(TypeError, match=r"media must be a path, an fsspec URL, bytes, a binary file object or a "
                                         r"\{'bytes', 'path'\} dict, got int: 3"):
        load(3)
    (tmp_path / "notes.txt").write_text("text")
    with open(tmp_path / "notes.txt") as text_file, pytest.raises(
        fd.MediaError, match=r"notes.txt: is a text file object \(read\(\) gives str, not bytes\)\n  fix: open the file "
                             r"in binary mode"
    ):
        load(text_file)


def test_a_file_object_is_read_from_its_start_and_left_open(tmp_path: Path) -> None:
    data = _wav_bytes()
    buffer = io.BytesIO(data)
    buffer.seek(100)
    wave, _ = load_audio(buffer)
    assert not buffer.closed and torch.equal(wave, load_audio(data)[0])
    png = io.BytesIO(_png_bytes())
    png.seek(5)
    assert load_image(png).shape == (3, 4, 6) and not png.closed
    assert image_info(png).width == 6  # and again: it is not used up


def test_a_mode_error_names_any_kind_of_input() -> None:
    with pytest.raises(fd.MediaError, match=r"^12 bytes \(x.png\): mode 'CMYK' is not supported"):
        load_image({"bytes": b"not read yet", "path": "x.png"}, mode="CMYK")
    with pytest.raises(fd.MediaError, match=r"^a file object: mode 'CMYK' is not supported"):
        load_image(io.BytesIO(b"x"), mode="CMYK")


@pytest.mark.parametrize("load", [load_audio, audio_info])
def test_soundfile_missing_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          load: Callable[[Any], Any]) -> None:
    """The error once read ': audio decoding needs ...', with an empty name."""
    path = tmp_path / "tone.wav"
    path.write_bytes(_wav_bytes())
    monkeypatch.setitem(sys.modules, "soundfile", None)  # `import soundfile` raises ImportError
    with pytest.raises(fd.MediaError, match=rf"^{re.escape(str(path))}: audio decoding needs the soundfile package"
                                            r"\n  fix: pip install soundfile"):
        load(path)
    with pytest.raises(fd.MediaError, match=r"^4044 bytes \(tone.wav\): audio decoding needs the soundfile package"):
        load({"bytes": path.read_bytes(), "path": "tone.wav"})
    with pytest.raises(fd.MediaError, match=rf"^{re.escape(str(path))}: audio decoding needs the soundfile package"):
        metadata(path)  # not "neither audio nor an image"
    png = tmp_path / "still.png"
    png.write_bytes(_png_bytes())
    assert isinstance(metadata(png), ImageInfo)  # images need no soundfile


@pytest.mark.procs
def test_importing_flowdata_media_stays_light() -> None:
    code = ("import sys, flowdata.media; "
            "print(sorted(m for m in ('fsspec', 'PIL', 'soundfile', 'torch', 'datasets') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
