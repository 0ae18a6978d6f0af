"""Fault injection on media files: each test is named after the fault it injects. A folder
manifest with a link back to its root, an image that declares a huge size or is a
decompression bomb, a large JPEG for a small output, a WAV whose header says one hertz or
that holds a NaN, a file that cannot be read: each named by its file, none decoded past
what the output needs.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flowdata as fd


def test_a_folder_manifest_with_a_link_back_to_its_root(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import flowdata_modules.image as image

    root = tmp_path / "data"
    for label, names in (("cat", ["a.png", "b.png"]), ("dog", ["c.png", "d.png"])):
        (root / label).mkdir(parents=True)
        for name in names:
            (root / label / name).write_bytes(b"not decoded here")
    (root / "cat" / "up").symlink_to("..")  # cat/up -> data: a loop
    (root / "dog" / "also_a.png").symlink_to(root / "cat" / "a.png")  # one real file, two ways in
    dr = fd.Builder().with_modules(image).build()
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        loader = dr.dataloader(["row", "label_name"], inputs={"manifest": str(root)}, batch_size=10)
        rows = [(Path(p).relative_to(root).as_posix(), lab)
                for b in loader for p, lab in zip(b["row"]["path"], b["label_name"], strict=True)]
    assert rows == [("cat/a.png", "cat"), ("cat/b.png", "cat"), ("dog/c.png", "dog"), ("dog/d.png", "dog")]
    loops = [r.getMessage() for r in caplog.records if "reached again through a symbolic link" in r.getMessage()]
    assert len(loops) == 1 and "cat/up" in loops[0]


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")  # Pillow's own, then ours
def test_a_small_file_that_declares_a_huge_image(tmp_path: Path) -> None:
    from PIL import Image

    from flowdata.media import load_image

    path = tmp_path / "huge.png"
    Image.new("L", (10000, 9100)).save(path)  # a few hundred kB: zeros compress well
    assert path.stat().st_size < 1_000_000
    with pytest.raises(fd.MediaError, match=r"huge.png: declares 10000x9100 = 91 megapixels, above max_pixels=90,000,000"):
        load_image(path)
    small = tmp_path / "small.png"
    Image.new("RGB", (40, 30)).save(small)
    with pytest.raises(fd.MediaError, match=r"declares 40x30 = 0 megapixels, above max_pixels=1,000"):
        load_image(small, max_pixels=1000)
    assert tuple(load_image(small).shape) == (3, 30, 40)


def test_a_decompression_bomb_names_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from PIL import Image

    from flowdata.media import load_image

    path = tmp_path / "bomb.png"
    Image.new("L", (400, 300)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # Pillow's bomb check fires at twice this
    with pytest.raises(fd.MediaError, match=r"bomb.png: is far too large to decode \(.*\)"):
        load_image(path, max_pixels=None)


def test_a_jpeg_is_decoded_at_a_reduced_scale_when_that_is_enough(tmp_path: Path) -> None:
    from PIL import Image

    from flowdata.media import load_image

    path = tmp_path / "photo.jpg"
    Image.new("RGB", (800, 600), (200, 30, 30)).save(path, quality=95)
    assert tuple(load_image(path).shape) == (3, 600, 800)
    assert tuple(load_image(path, draft=(100, 75)).shape) == (3, 75, 100)  # 1/8 of the size
    assert tuple(load_image(path, draft=(300, 200)).shape) == (3, 300, 400)  # 1/2 still covers it


def test_a_wav_whose_header_says_one_hertz(tmp_path: Path) -> None:
    import soundfile as sf

    from flowdata.media import load_audio

    path = tmp_path / "slow.wav"
    sf.write(path, np.zeros(8000, dtype=np.float32), 1)  # 8 KB of samples, 8000 s long
    with pytest.raises(fd.MediaError, match=r"slow.wav: declares 8000 frames at 1 Hz = 8,000 s, above max_seconds=3600"):
        load_audio(path, sample_rate=16000)
    wave, rate = load_audio(path, max_seconds=None)
    assert rate == 1 and tuple(wave.shape) == (1, 8000)


def test_a_float_wav_with_a_nan_sample(tmp_path: Path) -> None:
    import soundfile as sf

    from flowdata.media import load_audio

    wave = np.zeros(1600, dtype=np.float32)
    wave[100] = np.nan
    path = tmp_path / "bad.wav"
    sf.write(path, wave, 16000, subtype="FLOAT")
    with pytest.raises(fd.MediaError, match=r"bad.wav: holds 1 sample\(s\) that are NaN or inf"):
        load_audio(path)


def test_a_large_jpeg_for_a_small_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from PIL import Image, JpegImagePlugin

    from flowdata_modules import image

    rng = np.random.default_rng(0)
    big = (np.kron(rng.integers(0, 255, (30, 40, 3)), np.ones((50, 50, 1))) + rng.normal(0, 4, (1500, 2000, 3)))
    Image.fromarray(big.clip(0, 255).astype(np.uint8)).save(tmp_path / "photo.jpg", quality=92)
    decoded: list[tuple[int, int]] = []
    load = JpegImagePlugin.JpegImageFile.load

    def recording(self: Any) -> Any:
        out = load(self)
        decoded.append(self.size)
        return out

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "load", recording)
    dr = fd.Builder().with_modules(image).build()
    row = {"path": str(tmp_path / "photo.jpg"), "label": "a"}
    fast = dr.run_sample(["resized"], item=row)["resized"]
    assert set(decoded) == {(250, 188)}  # 1/8 of each side still covers 32x32
    decoded.clear()
    full = dr.run_sample(["resized"], item=row, inputs={"jpeg_draft": False})["resized"]
    assert set(decoded) == {(2000, 1500)}
    assert fast.shape == full.shape == (3, 32, 32)
    assert float((fast - full).abs().mean()) < 0.02  # the same picture


def _load_as(uid: int | None, paths: list[tuple[str, str]], queue: Any) -> None:
    """In a forked child: drops to ``uid`` (root reads any file), then loads each file."""
    from flowdata.errors import MediaError
    from flowdata.media import load_audio, load_image

    if uid is not None:
        os.setgid(uid)
        os.setuid(uid)
    for kind, path in paths:
        try:
            (load_audio if kind == "audio" else load_image)(path)
            queue.put("loaded")
        except MediaError as err:
            queue.put(str(err))


@pytest.mark.procs
def test_a_file_that_cannot_be_read_for_lack_of_permission(tmp_path: Path) -> None:
    import shutil
    import tempfile

    import soundfile as sf
    import torch  # noqa: F401  # everything the loaders import, imported before the child drops its rights
    from PIL import Image, PngImagePlugin  # noqa: F401

    import flowdata.media  # noqa: F401

    open_folder = Path(tempfile.mkdtemp())  # in the system's temporary folder: anyone may enter it
    closed = tmp_path / "closed"  # a folder nobody else may enter
    closed.mkdir(mode=0o700)
    wav, png, hidden = open_folder / "clip.wav", open_folder / "shape.png", closed / "clip.wav"
    for w in (wav, hidden):
        sf.write(w, np.zeros(800, dtype=np.float32), 8000)
    Image.new("RGB", (8, 8)).save(png)
    open_folder.chmod(0o755)
    for p in (wav, png):
        p.chmod(0o000)
    try:
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        paths = [("audio", str(wav)), ("image", str(png)), ("audio", str(hidden))]
        # Root reads any file: the loaders run as 'nobody' there (as the files' owner elsewhere).
        child = ctx.Process(target=_load_as, args=(65534 if os.geteuid() == 0 else None, paths, queue))
        if os.geteuid() != 0:
            closed.chmod(0o000)
        child.start()
        out = [queue.get(timeout=60) for _ in paths]
        child.join(10)
    finally:
        closed.chmod(0o700)
        shutil.rmtree(open_folder)
    fix = "\n  fix: check the file's permissions and the disk"
    assert out[0] == f"{wav}: cannot be opened (permission denied){fix}"  # not "truncated or corrupt"
    assert out[1] == f"{png}: cannot be opened (permission denied){fix}"
    assert out[2] == (f"{hidden}: cannot be opened (permission denied: a folder on its path cannot be entered)\n"
                      "  fix: check the permissions of the folders that hold it")  # not "does not exist"
