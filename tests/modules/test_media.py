"""The bundled audio and image modules on small generated datasets."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from PIL import Image

import flowdata as fd
import flowdata_modules.audio as audio
import flowdata_modules.image as image


def _write_manifest(folder: Path, rows: list[tuple[str, str]]) -> str:
    path = folder / "manifest.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "label"])
        w.writerows(rows)
    return str(path)


@pytest.fixture
def tones(tmp_path: Path) -> str:
    rows = []
    for i in range(24):
        label = ["low", "high"][i % 2]
        freq = 300.0 if label == "low" else 2000.0
        t = np.arange(int(0.4 * 8000)) / 8000  # shorter than a clip, at another rate
        sf.write(tmp_path / f"clip{i:02d}.wav", (0.3 * np.sin(2 * math.pi * freq * t)).astype(np.float32), 8000)
        rows.append((f"clip{i:02d}.wav", label))
    return _write_manifest(tmp_path, rows)


@pytest.fixture
def shapes(tmp_path: Path) -> str:
    rows = []
    rng = np.random.default_rng(0)
    for i in range(20):
        label = ["red", "blue"][i % 2]
        array = rng.integers(0, 60, (20, 28, 3)).astype(np.uint8)
        array[..., 0 if label == "red" else 2] += 150
        Image.fromarray(array).save(tmp_path / f"img{i:02d}.png")
        rows.append((f"img{i:02d}.png", label))
    return _write_manifest(tmp_path, rows)


@pytest.mark.procs
def test_audio_module(tones: str) -> None:
    dr = fd.Builder().with_modules(audio).with_config({"sample_rate": 16000, "n_mels": 32}).build()
    loader = dr.dataloader(["features", "label"], inputs={"manifest": tones}, batch_size=8, num_workers=2)
    batches = list(loader)
    feats = torch.cat([b["features"] for b in batches])
    labels = torch.cat([b["label"] for b in batches])
    assert feats.shape == (24, 32, 101) and feats.dtype == torch.float32
    assert loader.stats["label_vocab"].tokens == ("high", "low")
    assert labels.tolist() == [1, 0] * 12
    per_bin = feats.transpose(0, 1).reshape(32, -1)
    assert torch.allclose(per_bin.mean(1), torch.zeros(32), atol=1e-3)
    assert loader.stats["feature_stats"].count.tolist() == [24 * 101] * 32
    # the two classes differ where their energy is: the features carry the label
    low, high = feats[labels == 1].mean((0, 2)), feats[labels == 0].mean((0, 2))
    assert int(low.argmax()) < int(high.argmax())
    # a validation loader given the training statistics by name computes no pass 1 and lists them
    val = dr.dataloader(["features", "label"], inputs={"manifest": tones, **loader.stats}, batch_size=8)
    assert val.report.seen == {} and val.stats["label_vocab"] is loader.stats["label_vocab"]
    assert torch.equal(torch.cat([b["features"] for b in val]), feats)


def test_image_module(shapes: str) -> None:
    dr = fd.Builder().with_modules(image).with_config({"image_size": 16}).build()
    loader = dr.dataloader(["pixels", "label"], inputs={"manifest": shapes}, batch_size=5)
    batch = next(iter(loader))
    assert batch["pixels"].shape == (5, 3, 16, 16) and batch["pixels"].dtype == torch.float32
    stats = loader.stats["pixel_stats"]
    assert stats.mean.shape == (3,) and stats.count.tolist() == [20 * 16 * 16] * 3
    everything = torch.cat([b["pixels"] for b in loader])
    assert torch.allclose(everything.transpose(0, 1).reshape(3, -1).mean(1), torch.zeros(3), atol=1e-4)
    red = everything[torch.cat([b["label"] for b in loader]) == loader.stats["label_vocab"]["red"]]
    assert float(red[:, 0].mean()) > float(red[:, 2].mean())


def test_image_augmentation_never_enters_the_statistics(shapes: str) -> None:
    plain = fd.Builder().with_modules(image).with_config({"image_size": 16}).build()
    aug = fd.Builder().with_modules(image).with_config({"image_size": 16, "augment": True}).build()
    a = plain.dataloader(["pixels"], inputs={"manifest": shapes}, batch_size=20)
    b = aug.dataloader(["pixels"], inputs={"manifest": shapes}, batch_size=20, seed=1)
    assert torch.equal(a.stats["pixel_stats"].mean, b.stats["pixel_stats"].mean)
    first = next(iter(b))["pixels"]
    again = next(iter(b))["pixels"]
    assert torch.equal(first, again) and not torch.equal(first, next(iter(a))["pixels"])
    imagenet = fd.Builder().with_modules(image).with_config({"image_size": 16, "use_imagenet_stats": True}).build()
    loader = imagenet.dataloader(["pixels", "label"], inputs={"manifest": shapes}, batch_size=20)
    assert set(loader.stats) == {"label_vocab"}  # pass 1 decodes no image
    x = next(iter(loader))["pixels"]
    assert not torch.allclose(x.mean((0, 2, 3)), torch.zeros(3), atol=1e-2)  # not the dataset's own stats


def test_bad_files_raise_or_skip(tones: str, tmp_path: Path) -> None:
    folder = Path(tones).parent
    (folder / "empty.wav").write_bytes(b"")
    (folder / "notes.wav").write_text("not audio")
    (folder / "cut.wav").write_bytes((folder / "clip00.wav").read_bytes()[:30])
    with open(tones, "a", newline="") as f:
        csv.writer(f).writerows([("empty.wav", "low"), ("missing.wav", "high"), ("notes.wav", "low"), ("cut.wav", "high")])
    dr = fd.Builder().with_modules(audio).with_config({"n_mels": 16}).build()
    with pytest.raises(fd.SampleError, match=r"node 'waveform' .* failed on sample 24 .*MediaError: .*empty.wav: file is empty"):
        dr.dataloader(["features", "label"], inputs={"manifest": tones}, batch_size=8)
    loader = dr.dataloader(["features", "label"], inputs={"manifest": tones}, batch_size=8, on_error="skip")
    assert [s.index for s in loader.report.skipped] == [24, 25, 26, 27]
    assert "missing.wav: file does not exist" in loader.report.skipped[1].error
    assert sum(len(b["label"]) for b in loader) == 24
    assert loader.stats["feature_stats"].count.tolist()[0] == 24 * 101


def test_audio_statistics_come_from_the_pass_cache_the_second_time(tones: str, tmp_path: Path) -> None:
    """The once node `mel` (a torch module) is part of the cache key by content, not by its pickle."""
    dr = fd.Builder().with_modules(audio).with_config({"n_mels": 16}).build()
    first = dr.dataloader(["features"], inputs={"manifest": tones}, batch_size=8, cache_dir=tmp_path / "cache")
    again = fd.Builder().with_modules(audio).with_config({"n_mels": 16}).build()
    second = again.dataloader(["features"], inputs={"manifest": tones}, batch_size=8, cache_dir=tmp_path / "cache")
    assert first.report.seen == {"row": 24} and second.report.seen == {}  # pass 1 did not run again
    assert torch.equal(first.stats["feature_stats"].std, second.stats["feature_stats"].std)
    other = fd.Builder().with_modules(audio).with_config({"n_mels": 8}).build()
    third = other.dataloader(["features"], inputs={"manifest": tones}, batch_size=8, cache_dir=tmp_path / "cache")
    assert third.report.seen == {"row": 24} and third.stats["feature_stats"].mean.shape == (8,)


def test_a_folder_or_glob_is_a_manifest_labelled_by_folder(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    for label, channel in (("red", 0), ("blue", 2)):
        (tmp_path / "train" / label).mkdir(parents=True)
        for i in range(3):
            array = rng.integers(0, 60, (12, 12, 3)).astype(np.uint8)
            array[..., channel] += 150
            Image.fromarray(array).save(tmp_path / "train" / label / f"{i}.png")
    (tmp_path / "train" / "red" / "notes.txt").write_text("not an image, not listed")
    dr = fd.Builder().with_modules(image).with_config({"image_size": 8}).build()
    by_folder = dr.execute(["label_vocab"], inputs={"manifest": str(tmp_path / "train")})["label_vocab"]
    assert by_folder.tokens == ("blue", "red") and by_folder.counts == (3, 3)
    rows = list(dr.dataloader(["row", "label"], inputs={"manifest": str(tmp_path / "train" / "*" / "*.png")}, batch_size=6))[0]
    assert [Path(p).parent.name for p in rows["row"]["path"]] == ["blue"] * 3 + ["red"] * 3  # sorted paths
    assert rows["label"].tolist() == [0, 0, 0, 1, 1, 1]
    # the class folder is the first folder under the root; a pattern lists only image files
    (tmp_path / "train" / "red" / "more").mkdir()
    Image.fromarray(np.zeros((12, 12, 3), np.uint8)).save(tmp_path / "train" / "red" / "more" / "deep.png")
    (tmp_path / "train" / "blue" / ".hidden.png").write_bytes(b"editor litter, left out")
    again = dr.execute(["label_vocab"], inputs={"manifest": str(tmp_path / "train")})["label_vocab"]
    assert again.tokens == ("red", "blue") and again.counts == (4, 3)
    pattern = dr.execute(["label_vocab"], inputs={"manifest": str(tmp_path / "train" / "red" / "*")})["label_vocab"]
    assert pattern.counts == (3,)  # notes.txt is not an image
    with pytest.raises(fd.NodeError, match=r"node 'row' .*failed: ValueError: .*empty: no files found with a suffix in .*-- fix: check the folder"):
        (tmp_path / "empty").mkdir()
        dr.execute(["label_vocab"], inputs={"manifest": str(tmp_path / "empty")})
    Image.fromarray(np.zeros((12, 12, 3), np.uint8)).save(tmp_path / "train" / "loose.png")
    with pytest.raises(fd.NodeError, match=r"1 file\(s\) directly in the folder have no label, e.g. .*loose.png -- fix: put every file in a class folder"):
        dr.execute(["label_vocab"], inputs={"manifest": str(tmp_path / "train")})


def test_a_csv_whose_path_looks_like_a_pattern_is_read_as_a_csv(shapes: str, tmp_path: Path) -> None:
    odd = tmp_path / "data[v2]"
    odd.mkdir()
    csv_path = odd / "train.csv"
    csv_path.write_text(Path(shapes).read_text().replace("img", str(Path(shapes).parent / "img")))
    dr = fd.Builder().with_modules(image).with_config({"image_size": 8}).build()
    assert dr.execute(["label_vocab"], inputs={"manifest": str(csv_path)})["label_vocab"].counts == (10, 10)
