"""flowdata.media: decoding audio and images, headers, and a clear error for every bad file."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from PIL import Image

import flowdata as fd
from flowdata.media import AudioInfo, ImageInfo, load_audio, load_image, metadata


def _tone(seconds: float = 0.5, rate: int = 8000, channels: int = 1, freq: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    wave = 0.5 * np.sin(2 * math.pi * freq * t)
    return np.stack([wave * (c + 1) / channels for c in range(channels)], axis=1).astype(np.float32)


@pytest.mark.parametrize(("suffix", "subtype", "tolerance"), [
    (".wav", "PCM_16", 1e-3), (".flac", "PCM_16", 1e-3), (".ogg", "VORBIS", 0.1), (".mp3", "MPEG_LAYER_III", 0.2),
])
def test_audio_formats(tmp_path: Path, suffix: str, subtype: str, tolerance: float) -> None:
    path = tmp_path / f"tone{suffix}"
    data = _tone(channels=2)
    sf.write(path, data, 8000, subtype=subtype)
    wave, rate = load_audio(path, mono=False)
    assert rate == 8000 and wave.dtype == torch.float32 and wave.shape[0] == 2
    n = min(wave.shape[1], data.shape[0])
    assert wave.shape[1] >= data.shape[0] * 0.9
    if suffix in (".wav", ".flac"):
        assert torch.allclose(wave[:, :n], torch.from_numpy(data[:n].T), atol=tolerance)
    mono, _ = load_audio(path)
    assert mono.shape[0] == 1
    info = metadata(path)
    assert isinstance(info, AudioInfo) and info.channels == 2 and info.sample_rate == 8000
    assert info.duration == pytest.approx(0.5, abs=0.1)


def test_audio_resample(tmp_path: Path) -> None:
    path = tmp_path / "tone.wav"
    sf.write(path, _tone(seconds=1.0, rate=8000), 8000)
    wave, rate = load_audio(path, sample_rate=16000)
    assert rate == 16000 and wave.shape == (1, 16000)


def _png(path: Path, mode: str, size: tuple[int, int] = (6, 4)) -> None:
    w, h = size
    if mode == "I;16":
        Image.fromarray((np.arange(w * h).reshape(h, w) * 1000).astype(np.uint16)).save(path)
    else:
        channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
        array = (np.arange(w * h * channels).reshape(h, w, channels) % 256).astype(np.uint8)
        Image.fromarray(array.squeeze() if channels == 1 else array, mode=mode).save(path)


@pytest.mark.parametrize(("mode", "as_mode", "channels"), [
    ("RGB", "RGB", 3), ("L", "L", 1), ("RGBA", "RGBA", 4), ("RGBA", "RGB", 3), ("L", "RGB", 3), ("I;16", "L", 1), ("RGB", None, 3),
])
def test_image_modes(tmp_path: Path, mode: str, as_mode: str | None, channels: int) -> None:
    path = tmp_path / "img.png"
    _png(path, mode)
    x = load_image(path, mode=as_mode)
    assert x.shape == (channels, 4, 6) and x.dtype == torch.float32
    assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0
    if mode == "I;16":
        assert float(x.max()) == pytest.approx(23000 / 65535, rel=1e-6)  # 16-bit scaled by 65535
    info = metadata(path)
    assert isinstance(info, ImageInfo) and (info.width, info.height) == (6, 4)


def test_multipage_and_multichannel_tiff(tmp_path: Path) -> None:
    path = tmp_path / "stack.tif"
    pages = [Image.fromarray(np.full((3, 5), 40 * (i + 1), dtype=np.uint8)) for i in range(3)]
    pages[0].save(path, save_all=True, append_images=pages[1:])
    assert image_pages(path) == 3
    assert float(load_image(path, mode="L", page=2)[0, 0, 0]) == pytest.approx(120 / 255)
    with pytest.raises(fd.MediaError, match=r"has 3 page\(s\), not page 5"):
        load_image(path, mode="L", page=5)
    floats = tmp_path / "float.tif"
    Image.fromarray(np.linspace(0, 2, 15, dtype=np.float32).reshape(3, 5)).save(floats)
    x = load_image(floats, mode=None)
    assert x.shape == (1, 3, 5) and float(x.max()) == pytest.approx(2.0)  # float pixels kept as they are
    with pytest.raises(fd.MediaError, match=r"has F pixels \(one high-precision channel\), which cannot become RGB"):
        load_image(floats, mode="RGB")


def image_pages(path: Path) -> int:
    info = metadata(path)
    assert isinstance(info, ImageInfo)
    return info.pages


def _bad_files(folder: Path) -> dict[str, Path]:
    good_wav = folder / "good.wav"
    sf.write(good_wav, _tone(), 8000)
    good_png = folder / "good.png"
    _png(good_png, "RGB", (32, 32))
    files = {
        "missing": folder / "missing.wav",
        "empty": folder / "empty.wav",
        "text_as_wav": folder / "notes.wav",
        "truncated_wav": folder / "cut.wav",
        "truncated_flac": folder / "cut.flac",
        "truncated_png": folder / "cut.png",
        "text_as_png": folder / "notes.png",
        "text_as_mp3": folder / "notes.mp3",
    }
    files["empty"].write_bytes(b"")
    files["text_as_wav"].write_text("this is not audio\n" * 20)
    files["truncated_wav"].write_bytes(good_wav.read_bytes()[:30])
    sf.write(folder / "full.flac", _tone(), 8000)
    files["truncated_flac"].write_bytes((folder / "full.flac").read_bytes()[:60])
    files["truncated_png"].write_bytes(good_png.read_bytes()[:80])
    files["text_as_png"].write_text("not an image")
    files["text_as_mp3"].write_text("this is not audio either\n")
    return files


@pytest.mark.parametrize(("name", "pattern"), [
    ("missing", r"missing.wav: file does not exist"),
    ("empty", r"empty.wav: file is empty \(0 bytes\)"),
    ("text_as_wav", r"notes.wav: is not an audio file soundfile can read"),
    ("truncated_wav", r"cut.wav: (cannot be decoded, truncated or corrupt|is not an audio file|has no audio frames)"),
    ("truncated_flac", r"cut.flac: (cannot be decoded, truncated or corrupt|is not an audio file|has no audio frames)"),
    # libsndfile calls a rejected MP3 "does not exist"; the error must not repeat that
    ("text_as_mp3", r"notes.mp3: cannot be decoded, truncated or corrupt \(libsndfile's decoders found no audio stream"),
])
def test_bad_audio(tmp_path: Path, name: str, pattern: str) -> None:
    path = _bad_files(tmp_path)[name]
    with pytest.raises(fd.MediaError, match=pattern) as info:
        load_audio(path)
    assert info.value.path == str(path)


@pytest.mark.parametrize(("name", "pattern"), [
    ("truncated_png", r"cut.png: cannot be decoded, truncated or corrupt"),
    ("text_as_png", r"notes.png: is not an image PIL can read \(unknown format\)"),
    ("empty", r"empty.wav: file is empty"),
])
def test_bad_images(tmp_path: Path, name: str, pattern: str) -> None:
    with pytest.raises(fd.MediaError, match=pattern):
        load_image(_bad_files(tmp_path)[name])


def test_media_error_pickles() -> None:
    import pickle

    err = fd.MediaError("a.wav", "file is empty (0 bytes)", "remove it")
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) and back.path == "a.wav"


def test_palette_image_keeps_its_colours_with_mode_none(tmp_path: Path) -> None:
    rgb = Image.fromarray(np.array([[[200, 10, 10], [10, 200, 10]], [[10, 10, 200], [250, 250, 0]]], dtype=np.uint8))
    rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=4).save(tmp_path / "pal.png")
    got = load_image(tmp_path / "pal.png", mode=None)
    assert got.shape == (3, 2, 2)
    assert torch.equal(got, load_image(tmp_path / "pal.png", mode="RGB"))
    assert float(got[0, 0, 0]) > 0.7 and float(got[2, 1, 0]) > 0.7  # red and blue, not indices / 255
