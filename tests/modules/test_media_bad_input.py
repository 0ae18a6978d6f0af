"""Bad input in the bundled audio and image modules, end to end through ``dataloader()``.

One audio folder and one image folder, each with a ``manifest.csv`` of good files
interleaved with bad ones (20 bad files in all): missing, zero-byte, truncated (in the
header and in the data), a text file renamed, random bytes, a signature with nothing
behind it, and images with a pixel mode that has no RGB meaning. With ``on_error="raise"``
the first bad file stops the run with a ``SampleError`` naming the node, the sample and the
path; with ``"skip"`` the bad samples are listed in the report and left out of statistics,
label vocabulary and training alike: everything equals a run over the good files alone.

Image modes under ``load_image(path, mode="RGB")``: palette (P), grey with alpha (LA),
bilevel (1), CMYK, RGBA and a multi-page TIFF (page 0) have a well-defined RGB and load;
one high-precision channel (16-bit ``I;16``, float ``F``) does not and is a MediaError.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import soundfile as sf
import torch
from PIL import Image

import flowdata as fd
import flowdata_modules.audio as audio
import flowdata_modules.image as image
from flowdata.media import load_image

RATE = 8000
CLIP_SECONDS = 0.25  # 2000 frames: 4000 bytes of 16-bit PCM
CONFIG: dict[str, dict[str, Any]] = {
    "audio": {"sample_rate": RATE, "clip_seconds": CLIP_SECONDS, "n_mels": 16},
    "image": {"image_size": 16},
}
MODULES: dict[str, ModuleType] = {"audio": audio, "image": image}
OUTPUTS = {"audio": ["features", "label"], "image": ["pixels", "label"]}
DECODER_NODE = {"audio": "waveform", "image": "resized"}
STATS = {"audio": "feature_stats", "image": "pixel_stats"}
ONLY_BAD_LABEL = {"audio": "hiss", "image": "green"}  # a label no good file has

# Where the bad files sit among the 22 rows of each manifest (12 good, 10 bad).
BAD_POSITIONS = (1, 3, 4, 7, 9, 12, 14, 15, 18, 21)
N_ROWS = 22


@dataclass(frozen=True)
class Bad:
    """A bad file: its name, its label, and the MediaError problem it must give."""

    name: str
    label: str
    reason: str  # a regular expression


# kind -> the file and what load_audio / load_image must say about it
AUDIO_BAD = {
    "missing_wav": Bad("missing.wav", "low", r"file does not exist"),
    "empty_wav": Bad("empty.wav", "hiss", r"file is empty \(0 bytes\)"),
    "wav_header_only": Bad("header_only.wav", "high",
                           r"is truncated: its header declares 4000 bytes of audio data, the file holds 0"),
    "wav_cut_in_data": Bad("cut_in_data.wav", "low",
                           r"is truncated: its header declares 4000 bytes of audio data, the file holds 1000"),
    "wav_cut_in_header": Bad("cut_in_header.wav", "hiss", r"cannot be decoded, truncated or corrupt"),
    "flac_cut": Bad("cut.flac", "high", r"cannot be decoded, truncated or corrupt"),
    "ogg_cut": Bad("cut.ogg", "low", r"cannot be decoded, truncated or corrupt"),
    "text_as_wav": Bad("notes.wav", "hiss", r"is not an audio file soundfile can read"),
    "random_bytes_as_wav": Bad("noise.wav", "high", r"is not an audio file soundfile can read"),
    "ogg_signature_only": Bad("hollow.ogg", "low", r"cannot be decoded, truncated or corrupt"),
}
IMAGE_BAD = {
    "missing_png": Bad("missing.png", "red", r"file does not exist"),
    "empty_png": Bad("empty.png", "green", r"file is empty \(0 bytes\)"),
    "empty_jpeg": Bad("empty.jpg", "blue", r"file is empty \(0 bytes\)"),
    "png_cut_in_header": Bad("cut_in_header.png", "green",
                             r"cannot be decoded, truncated or corrupt \(starts like PNG, but PIL cannot read it\)"),
    "png_cut_in_data": Bad("cut_in_data.png", "red", r"cannot be decoded, truncated or corrupt"),
    "jpeg_cut_in_header": Bad("cut_in_header.jpg", "blue", r"cannot be decoded, truncated or corrupt"),
    "jpeg_cut_in_data": Bad("cut_in_data.jpg", "green", r"cannot be decoded, truncated or corrupt"),
    "text_as_png": Bad("notes.png", "red", r"is not an image PIL can read \(unknown format\)"),
    "gray_16_bit_png": Bad("depth16.png", "blue",
                           r"has I;16 pixels \(one high-precision channel\), which cannot become RGB"),
    "float_tiff": Bad("float.tif", "green", r"has F pixels \(one high-precision channel\), which cannot become RGB"),
}
BAD = {"audio": AUDIO_BAD, "image": IMAGE_BAD}
assert len(AUDIO_BAD) + len(IMAGE_BAD) == 20 and len(AUDIO_BAD) == len(IMAGE_BAD) == len(BAD_POSITIONS)


@dataclass(frozen=True)
class Folder:
    """One module's generated folder and its manifests."""

    path: Path
    rows: list[tuple[str, str]]  # the full manifest, in order
    good: list[tuple[str, str]]  # its good rows, in order
    manifest: str
    good_manifest: str

    def at(self, name: str) -> str:
        return str(self.path / name)


def _write_manifest(path: Path, rows: list[tuple[str, str]]) -> str:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "label"])
        w.writerows(rows)
    return str(path)


def _tone(freq: float, amplitude: float) -> np.ndarray:
    t = np.arange(int(CLIP_SECONDS * RATE)) / RATE
    return (amplitude * np.sin(2 * math.pi * freq * t)).astype(np.float32)


def _audio_files(folder: Path) -> list[tuple[str, str]]:
    """Writes 12 good clips (WAV and FLAC) and the bad ones; returns the good rows."""
    good = []
    for i in range(12):
        label = ("low", "high")[i % 2]
        freq = (200.0 + 40 * i) if label == "low" else (1800.0 + 90 * i)
        name = f"tone{i:02d}." + ("flac" if i % 5 == 4 else "wav")
        sf.write(folder / name, _tone(freq, 0.2 + 0.03 * i), RATE, subtype="PCM_16")
        good.append((name, label))
    sf.write(folder / "whole.wav", _tone(440.0, 0.3), RATE, subtype="PCM_16")
    sf.write(folder / "whole.flac", _tone(440.0, 0.3), RATE, subtype="PCM_16")
    sf.write(folder / "whole.ogg", _tone(440.0, 0.3), RATE)
    wav = (folder / "whole.wav").read_bytes()
    data_at = wav.index(b"data") + 8  # the audio data starts after the chunk's id and size
    assert len(wav) == data_at + 4000 and len((folder / "whole.flac").read_bytes()) > 1000
    writes = {
        "empty.wav": b"",
        "header_only.wav": wav[:data_at],
        "cut_in_data.wav": wav[: data_at + 1000],
        "cut_in_header.wav": wav[:30],  # inside the fmt chunk, before any 'data' chunk
        "cut.flac": (folder / "whole.flac").read_bytes()[:600],
        "cut.ogg": (folder / "whole.ogg").read_bytes()[:1000],
        "notes.wav": b"this is a text file, not audio\n" * 8,
        "noise.wav": np.random.default_rng(3).integers(0, 256, 3000, dtype=np.uint8).tobytes(),
        "hollow.ogg": b"OggS" + bytes(200),
    }
    for name, data in writes.items():
        (folder / name).write_bytes(data)
    return good


def _noise_image(rng: np.random.Generator, label: str, h: int, w: int) -> np.ndarray:
    array = rng.integers(0, 60, (h, w, 3)).astype(np.uint8)
    array[..., 0 if label == "red" else 2] += 150
    return array


def _image_files(folder: Path) -> list[tuple[str, str]]:
    """Writes 12 good images (six of them in other modes that have an RGB) and the bad ones."""
    rng = np.random.default_rng(0)
    good = []
    for i in range(6):
        label = ("red", "blue")[i % 2]
        name = f"img{i:02d}.png"
        Image.fromarray(_noise_image(rng, label, 18 + 2 * i, 24 - i)).save(folder / name)
        good.append((name, label))
    odd: dict[str, tuple[str, Callable[[Image.Image], Image.Image]]] = {  # well-defined conversions to RGB
        "palette.png": ("red", lambda im: im.convert("P")),
        "gray_alpha.png": ("blue", lambda im: im.convert("LA")),
        "bilevel.png": ("red", lambda im: im.convert("1")),
        "cmyk.jpg": ("blue", lambda im: im.convert("CMYK")),
        "rgba.png": ("red", lambda im: im.convert("RGBA")),
    }
    for name, (label, convert) in odd.items():
        convert(Image.fromarray(_noise_image(rng, label, 20, 20))).save(folder / name, quality=95)
        good.append((name, label))
    pages = [Image.fromarray(_noise_image(rng, "blue", 20, 22)), Image.fromarray(_noise_image(rng, "red", 20, 22))]
    pages[0].save(folder / "two_pages.tif", save_all=True, append_images=pages[1:])
    good.append(("two_pages.tif", "blue"))
    order = [0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11]  # the odd modes among the plain ones
    good = [good[i] for i in order]

    whole = _noise_image(rng, "red", 24, 24)
    Image.fromarray(whole).save(folder / "whole.png")
    Image.fromarray(whole).save(folder / "whole.jpg", quality=90)
    png = (folder / "whole.png").read_bytes()
    jpg = (folder / "whole.jpg").read_bytes()
    scan = jpg.index(b"\xff\xda")  # start of scan: the compressed pixels follow
    Image.fromarray((np.arange(24 * 24).reshape(24, 24) * 100).astype(np.uint16)).save(folder / "depth16.png")
    Image.fromarray(np.linspace(0, 1, 24 * 24, dtype=np.float32).reshape(24, 24)).save(folder / "float.tif")
    writes = {
        "empty.png": b"",
        "empty.jpg": b"",
        "cut_in_header.png": png[:30],  # inside IHDR's fields: PIL cannot identify it
        "cut_in_data.png": png[: len(png) // 2],  # inside IDAT
        "cut_in_header.jpg": jpg[: scan // 2],
        "cut_in_data.jpg": jpg[: (scan + len(jpg)) // 2],
        "notes.png": b"a caption, not an image\n" * 8,
    }
    for name, data in writes.items():
        (folder / name).write_bytes(data)
    assert Image.open(folder / "depth16.png").mode == "I;16" and Image.open(folder / "float.tif").mode == "F"
    return good


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Folder]:
    out = {}
    for kind, write in (("audio", _audio_files), ("image", _image_files)):
        path = tmp_path_factory.mktemp(kind)
        good = write(path)
        bad = iter((b.name, b.label) for b in BAD[kind].values())
        goods = iter(good)
        rows = [next(bad) if i in BAD_POSITIONS else next(goods) for i in range(N_ROWS)]
        assert next(bad, None) is None and next(goods, None) is None
        out[kind] = Folder(path, rows, good, _write_manifest(path / "manifest.csv", rows),
                           _write_manifest(path / "good.csv", good))
    return out


def _loader(kind: str, manifest: str, on_error: str, num_workers: int = 0) -> Any:
    dr = fd.Builder().with_modules(MODULES[kind]).with_config(CONFIG[kind]).build()
    return dr.dataloader(OUTPUTS[kind], inputs={"manifest": manifest}, batch_size=5,
                         num_workers=num_workers, on_error=on_error)


def _epoch(loader: Any, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    batches = list(loader)
    return torch.cat([b[OUTPUTS[kind][0]] for b in batches]), torch.cat([b["label"] for b in batches])


def _failure(kind: str, index: int, path: str, reason: str) -> str:
    """The head of the SampleError for a bad file: node, its file:line, sample, group, path, problem."""
    return (rf"node '{DECODER_NODE[kind]}' \(.*{kind}\.py:\d+\) failed on sample {index} of group 'row' "
            rf"\(pass 1, worker main\): MediaError: {re.escape(path)}: {reason}")


@pytest.mark.parametrize("kind", ["audio", "image"])
def test_raise_stops_at_the_first_bad_file(folders: dict[str, Folder], kind: str) -> None:
    folder = folders[kind]
    first = BAD_POSITIONS[0]
    name, _ = folder.rows[first]
    bad = next(b for b in BAD[kind].values() if b.name == name)
    with pytest.raises(fd.SampleError, match=_failure(kind, first, folder.at(name), bad.reason)) as info:
        _loader(kind, folder.manifest, "raise")
    assert (info.value.node, info.value.index, info.value.pass_) == (DECODER_NODE[kind], first, 1)


@pytest.mark.parametrize(("kind", "bad_kind"), [(k, b) for k in ("audio", "image") for b in BAD[k]])
def test_each_bad_file_raises_naming_its_path(folders: dict[str, Folder], kind: str, bad_kind: str) -> None:
    folder = folders[kind]
    bad = BAD[kind][bad_kind]
    rows = [*folder.good[:2], (bad.name, bad.label), *folder.good[2:4]]
    manifest = _write_manifest(folder.path / f"alone_{bad_kind}.csv", rows)
    with pytest.raises(fd.SampleError, match=_failure(kind, 2, folder.at(bad.name), bad.reason)) as info:
        _loader(kind, manifest, "raise")
    assert info.value.detail.startswith(f"MediaError: {folder.at(bad.name)}: ")


@pytest.mark.procs
@pytest.mark.parametrize(("kind", "num_workers"), [("audio", 2), ("image", 0), ("image", 2)])
def test_skip_leaves_bad_files_out_of_statistics_and_training(
    folders: dict[str, Folder], kind: str, num_workers: int,
) -> None:
    folder = folders[kind]
    loader = _loader(kind, folder.manifest, "skip", num_workers)
    good_only = _loader(kind, folder.good_manifest, "raise")

    # the report lists exactly the bad samples, each with its path and why
    skipped = loader.report.skipped
    assert sorted(s.index for s in skipped) == list(BAD_POSITIONS) and len(skipped) == len(BAD_POSITIONS)
    reasons = {b.name: b.reason for b in BAD[kind].values()}
    for s in skipped:
        name, _ = folder.rows[s.index]
        assert s.node == DECODER_NODE[kind] and s.pass_ == 1
        assert re.match(rf"MediaError: {re.escape(folder.at(name))}: {reasons[name]}", s.error), (s.index, s.error)

    # statistics and vocabulary: the same as the good files alone give, bit for bit
    stats, expected = loader.stats[STATS[kind]], good_only.stats[STATS[kind]]
    for field in ("mean", "std", "var", "min", "max", "count"):
        assert torch.equal(getattr(stats, field), getattr(expected, field)), field
    vocab = loader.stats["label_vocab"]
    assert vocab.tokens == good_only.stats["label_vocab"].tokens
    assert ONLY_BAD_LABEL[kind] not in vocab.tokens and len(vocab.tokens) == 2

    # training: every epoch delivers exactly the good samples, as the good-only run does
    want_x, want_y = _epoch(good_only, kind)
    assert len(want_y) == len(folder.good) == N_ROWS - len(BAD_POSITIONS)
    per_sample = want_x[0].numel() // want_x.shape[1] if kind == "audio" else want_x[0, 0].numel()
    assert stats.count.tolist() == [len(folder.good) * per_sample] * len(stats.count)
    for _ in range(2):
        x, y = _epoch(loader, kind)
        assert torch.equal(x, want_x) and torch.equal(y, want_y)
    assert len(loader.report.skipped) == len(BAD_POSITIONS)  # the training passes add no new skip
    assert [vocab.tokens[i] for i in want_y.tolist()] == [label for _, label in folder.good]


@pytest.mark.parametrize(("name", "expected"), [
    ("palette.png", lambda im: im.convert("RGB")),
    ("gray_alpha.png", lambda im: im.convert("L").convert("RGB")),  # alpha dropped, as for RGBA
    ("bilevel.png", lambda im: im.convert("RGB")),  # 0 or 255 in every channel
    ("cmyk.jpg", lambda im: im.convert("RGB")),
    ("rgba.png", lambda im: im.convert("RGB")),
    ("two_pages.tif", lambda im: im.convert("RGB")),  # page 0
])
def test_modes_with_an_rgb_meaning_load(
    folders: dict[str, Folder], name: str, expected: Callable[[Image.Image], Image.Image],
) -> None:
    path = folders["image"].at(name)
    x = load_image(path, mode="RGB")
    with Image.open(path) as im:
        assert im.mode != "RGB" or name == "two_pages.tif"
        want = torch.from_numpy(np.asarray(expected(im), dtype=np.float32).transpose(2, 0, 1) / 255.0)
    assert x.shape == (3, 20, 22 if name == "two_pages.tif" else 20) and x.dtype == torch.float32
    assert torch.equal(x, want)
    if name == "bilevel.png":
        assert set(x.unique().tolist()) <= {0.0, 1.0}
