"""The bundled image and audio modules take a Hugging Face dataset as their manifest.

Every dataset here is built in memory (``Dataset.from_dict``, ``IterableDataset.from_generator``)
from generated PNG and WAV bytes; nothing is downloaded. A map-style dataset gives exactly
what the same files in a folder or CSV give; a ``ClassLabel`` keeps its names and numbers.
"""

from __future__ import annotations

import os

os.environ["HF_DATASETS_OFFLINE"] = "1"  # before datasets is imported: never the network

import csv
import io
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pytest
import soundfile as sf
import torch
from PIL import Image

import flowdata as fd
import flowdata_modules.audio as audio
import flowdata_modules.image as image

IMAGE_CONFIG = {"image_size": 8}
AUDIO_CONFIG = {"sample_rate": 8000, "clip_seconds": 0.25, "n_mels": 16}
COLOURS = ("red", "blue", "green")


def _png(label: str, i: int) -> bytes:
    rng = np.random.default_rng(i)
    array = rng.integers(0, 60, (10 + i % 3, 12, 3)).astype(np.uint8)
    array[..., COLOURS.index(label)] += 150
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def _wav(label: str, i: int) -> bytes:
    t = np.arange(1600 + 100 * i) / 8000
    freq = {"low": 300.0, "high": 2000.0}[label]
    buffer = io.BytesIO()
    sf.write(buffer, (0.3 * np.sin(2 * math.pi * freq * t)).astype(np.float32), 8000, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, bytes]]]:
    """Ten images in class folders (blue is rarer), and their (label, bytes) in the folder's sorted order."""
    root = tmp_path_factory.mktemp("shapes")
    rows = []
    for i in range(10):
        label = ("red", "blue", "red", "green", "red")[i % 5]
        data = _png(label, i)
        (root / label).mkdir(exist_ok=True)
        (root / label / f"{i:02d}.png").write_bytes(data)
        rows.append((f"{label}/{i:02d}.png", label, data))
    rows.sort()  # the folder manifest's order: sorted paths
    return root, [(label, data) for _, label, data in rows]


def _image_dataset(rows: list[tuple[str, bytes]], *, class_label: tuple[str, ...] | None = None,
                   media: str = "image", label: str = "label") -> datasets.Dataset:
    features = datasets.Features({
        media: datasets.Image(decode=False),
        label: datasets.ClassLabel(names=list(class_label)) if class_label else datasets.Value("string"),
        "note": datasets.Value("string"),
    })
    return datasets.Dataset.from_dict({
        media: [{"bytes": data, "path": f"{i}.png"} for i, (_, data) in enumerate(rows)],
        label: [class_label.index(lab) if class_label else lab for lab, _ in rows],
        "note": ["an unused column"] * len(rows),
    }, features=features)


def _epoch(loader: Any, output: str) -> tuple[torch.Tensor, torch.Tensor]:
    batches = list(loader)
    return torch.cat([b[output] for b in batches]), torch.cat([b["label"] for b in batches])


@pytest.mark.procs
@pytest.mark.parametrize("num_workers", [0, 2])
def test_image_dataset_gives_what_the_folder_gives(shapes: tuple[Path, list[tuple[str, bytes]]], num_workers: int) -> None:
    root, rows = shapes
    dr = fd.Builder().with_modules(image).with_config(IMAGE_CONFIG).build()
    args: dict[str, Any] = {"batch_size": 4, "num_workers": num_workers}
    by_folder = dr.dataloader(["pixels", "label"], inputs={"manifest": str(root)}, **args)
    by_dataset = dr.dataloader(["pixels", "label"], inputs={"manifest": _image_dataset(rows)}, **args)
    assert by_dataset.stats["label_vocab"] == by_folder.stats["label_vocab"]
    assert by_folder.stats["label_vocab"].tokens == ("red", "blue", "green")  # by count, then name
    for field in ("mean", "std", "count"):
        assert torch.equal(getattr(by_dataset.stats["pixel_stats"], field), getattr(by_folder.stats["pixel_stats"], field))
    want_x, want_y = _epoch(by_folder, "pixels")
    got_x, got_y = _epoch(by_dataset, "pixels")
    assert got_x.shape == (10, 3, 8, 8) and torch.equal(got_x, want_x) and torch.equal(got_y, want_y)
    # the same through execute() and one sample through run_sample()
    out = dr.execute(["pixel_stats", "label_vocab"], inputs={"manifest": _image_dataset(rows)})
    assert torch.equal(out["pixel_stats"].mean, by_folder.stats["pixel_stats"].mean)
    one = dr.run_sample(["pixels", "label"], index=3, inputs={"manifest": _image_dataset(rows), **by_folder.stats})
    assert torch.equal(one["pixels"], want_x[3]) and one["label"] == int(want_y[3])


def test_the_source_is_the_dataset_itself(shapes: tuple[Path, list[tuple[str, bytes]]]) -> None:
    """Not a list copy: a map-style dataset is the loader's index as it is, rows read in workers."""
    _, rows = shapes
    ds = _image_dataset(rows)
    source = image.row(ds)
    assert isinstance(source, datasets.Dataset) and len(source) == len(ds)
    assert source.column_names == ["image", "label"]  # only what the module reads
    decoding = ds.cast_column("image", datasets.Image())  # decodes to PIL images ...
    rows_of = image.row(decoding)
    assert isinstance(rows_of, datasets.Dataset) and rows_of.features["image"].decode is False  # ... not here
    assert rows_of[0]["image"] == {"bytes": rows[0][1], "path": "0.png"}
    streamed = image.row(ds.to_iterable_dataset())
    assert isinstance(streamed, datasets.IterableDataset) and streamed.column_names == ["image", "label"]
    dr = fd.Builder().with_modules(image).with_config(IMAGE_CONFIG).build()
    assert dr.execute(["label_vocab"], inputs={"manifest": decoding})["label_vocab"].counts == (6, 2, 2)


@pytest.mark.procs
@pytest.mark.parametrize("num_workers", [0, 2])
def test_class_label_keeps_the_dataset_names_and_numbers(
    shapes: tuple[Path, list[tuple[str, bytes]]], num_workers: int,
) -> None:
    _, rows = shapes
    names = ("green", "cyan", "red", "blue")  # not by count, not by name; cyan has no image
    ds = _image_dataset(rows, class_label=names)
    dr = fd.Builder().with_modules(image).with_config(IMAGE_CONFIG).build()
    loader = dr.dataloader(["pixels", "label", "label_name"], inputs={"manifest": ds}, batch_size=3,
                           num_workers=num_workers)
    vocab = loader.stats["label_vocab"]
    assert vocab.tokens == names and vocab.counts == (2, 0, 6, 2)
    batches = list(loader)
    assert torch.cat([b["label"] for b in batches]).tolist() == list(ds["label"])  # the dataset's own numbers
    assert [n for b in batches for n in b["label_name"]] == [label for label, _ in rows]
    assert dr.execute(["class_names"], inputs={"manifest": ds}) == {"class_names": names}
    # a validation loader given the training vocabulary computes no pass 1 for it
    val = dr.dataloader(["label"], inputs={"manifest": ds, **loader.stats}, batch_size=10)
    assert val.report.seen == {} and next(iter(val))["label"].tolist() == list(ds["label"])


def test_custom_media_and_label_columns(shapes: tuple[Path, list[tuple[str, bytes]]]) -> None:
    root, rows = shapes
    ds = _image_dataset(rows, class_label=COLOURS, media="picture", label="colour")
    dr = fd.Builder().with_modules(image).with_config(
        {**IMAGE_CONFIG, "media_column": "picture", "label_column": "colour"}).build()
    loader = dr.dataloader(["pixels", "label"], inputs={"manifest": ds}, batch_size=5)
    assert loader.stats["label_vocab"].tokens == COLOURS
    x, y = _epoch(loader, "pixels")
    folder = fd.Builder().with_modules(image).with_config(IMAGE_CONFIG).build()
    want = folder.dataloader(["pixels"], inputs={"manifest": str(root)}, batch_size=10)
    assert torch.equal(x, next(iter(want))["pixels"]) and y.tolist() == list(ds["colour"])
    # a CSV still works under the same config: its rows are {"path", "label"}
    csv_path = root.parent / "train.csv"
    with open(csv_path, "w", newline="") as f:
        csv.writer(f).writerows([("path", "label"), *sorted((str(p), p.parent.name) for p in root.glob("*/*.png"))])
    by_csv = dr.dataloader(["pixels"], inputs={"manifest": str(csv_path)}, batch_size=10)
    assert torch.equal(next(iter(by_csv))["pixels"], next(iter(want))["pixels"])


def test_paths_and_media_dicts_with_paths_work_as_rows(shapes: tuple[Path, list[tuple[str, bytes]]]) -> None:
    root, _ = shapes
    files = sorted(str(p) for p in root.glob("*/*.png"))
    labels = [Path(p).parent.name for p in files]
    dr = fd.Builder().with_modules(image).with_config(IMAGE_CONFIG).build()
    want = next(iter(dr.dataloader(["pixels"], inputs={"manifest": str(root)}, batch_size=10)))["pixels"]
    as_paths = datasets.Dataset.from_dict({"image": files, "label": labels})  # plain strings
    as_dicts = as_paths.cast_column("image", datasets.Image(decode=False))  # {"bytes": None, "path": ...}
    as_urls = datasets.Dataset.from_dict({"image": [Path(p).as_uri() for p in files], "label": labels})
    for ds in (as_paths, as_dicts, as_urls):
        got = next(iter(dr.dataloader(["pixels"], inputs={"manifest": ds}, batch_size=10)))["pixels"]
        assert torch.equal(got, want)


def test_a_plain_int_label_column_is_counted_like_csv_labels(shapes: tuple[Path, list[tuple[str, bytes]]]) -> None:
    _, rows = shapes
    ds = datasets.Dataset.from_dict({
        "image": [{"bytes": data, "path": None} for _, data in rows],
        "label": [COLOURS.index(label) * 7 for label, _ in rows],  # 0 red, 7 blue, 14 green
    }).cast_column("image", datasets.Image(decode=False))
    dr = fd.Builder().with_modules(image).with_config({**IMAGE_CONFIG, "use_imagenet_stats": True}).build()
    loader = dr.dataloader(["label", "label_name"], inputs={"manifest": ds}, batch_size=10)
    tokens = ("0", "14", "7")  # strings, by count (red is the most frequent), ties by name
    assert loader.stats["label_vocab"].tokens == tokens and set(loader.stats) == {"label_vocab"}
    batch = next(iter(loader))
    assert batch["label_name"] == [str(v) for v in ds["label"]]
    assert batch["label"].tolist() == [tokens.index(str(v)) for v in ds["label"]]


def test_missing_columns_are_named_with_the_fix(shapes: tuple[Path, list[tuple[str, bytes]]]) -> None:
    _, rows = shapes
    ds = _image_dataset(rows, class_label=COLOURS, media="picture", label="colour")

    def run(config: dict[str, Any]) -> None:
        dr = fd.Builder().with_modules(image).with_config({**IMAGE_CONFIG, **config}).build()
        dr.execute(["label_vocab"], inputs={"manifest": ds})

    columns = r"its columns: 'picture', 'colour', 'note'"
    with pytest.raises(fd.NodeError, match=rf"node 'row' .*failed: ValueError: the dataset has no column 'image' "
                                           rf"\(media_column\) nor 'label' \(label_column\); {columns} -- fix: name "
                                           r"the columns in the config, Builder\(\).with_config\(\{'media_column': "
                                           r"'picture', 'label_column': 'colour'\}\)"):
        run({})
    with pytest.raises(fd.NodeError, match=rf"the dataset has no column 'label' \(label_column\); {columns} -- fix: "
                                           r"name the column in the config, Builder\(\).with_config\(\{'label_column': "
                                           r"'colour'\}\)"):
        run({"media_column": "picture"})
    with pytest.raises(fd.NodeError, match=rf"the dataset has no column 'img' \(media_column\); {columns} -- fix: .*"
                                           r"\{'media_column': 'picture'\}"):
        run({"media_column": "img", "label_column": "colour"})
    with pytest.raises(fd.NodeError, match=r"node 'class_names' .*TypeError: manifest is a DatasetDict of splits "
                                           r"\(train, test\); give one split, e.g. inputs=\{'manifest': ds\['train'\]\}"):
        fd.Builder().with_modules(image).build().execute(
            ["label_vocab"], inputs={"manifest": datasets.DatasetDict({"train": ds, "test": ds})})


def _generated(rows: list[tuple[str, bytes]], media: str) -> Iterator[dict[str, Any]]:
    for label, data in rows:
        yield {media: {"bytes": data, "path": None}, "label": label}


def test_an_iterable_dataset_is_read_by_execute(shapes: tuple[Path, list[tuple[str, bytes]]]) -> None:
    root, rows = shapes
    dr = fd.Builder().with_modules(image).with_config(IMAGE_CONFIG).build()
    want = dr.execute(["pixel_stats", "label_vocab"], inputs={"manifest": str(root)})
    streamed = _image_dataset(rows).to_iterable_dataset()
    got = dr.execute(["pixel_stats", "label_vocab"], inputs={"manifest": streamed})
    assert got["label_vocab"] == want["label_vocab"] and torch.equal(got["pixel_stats"].mean, want["pixel_stats"].mean)
    sharded = dr.execute(["pixel_stats"], inputs={"manifest": _image_dataset(rows).to_iterable_dataset(num_shards=2)})
    assert torch.allclose(sharded["pixel_stats"].mean, want["pixel_stats"].mean, rtol=0, atol=1e-12)
    # from a generator: no features, so no ClassLabel, and a row without the column fails on that sample
    generated = datasets.IterableDataset.from_generator(_generated, gen_kwargs={"rows": rows, "media": "image"})
    assert dr.execute(["label_vocab"], inputs={"manifest": generated})["label_vocab"] == want["label_vocab"]
    other = datasets.IterableDataset.from_generator(_generated, gen_kwargs={"rows": rows, "media": "picture"})
    with pytest.raises(fd.SampleError, match=r"node 'resized' .* failed on sample 0 .*ValueError: the row has no "
                                             r"column 'image' \(media_column\); its columns: 'picture', 'label' -- fix:"):
        dr.execute(["pixel_stats"], inputs={"manifest": other})


@pytest.mark.procs
@pytest.mark.parametrize("num_workers", [0, 2])
def test_an_iterable_dataset_is_streamed_by_the_loader_with_every_image_once(
    shapes: tuple[Path, list[tuple[str, bytes]]], num_workers: int
) -> None:
    root, rows = shapes
    dr = fd.Builder().with_modules(image).with_config(IMAGE_CONFIG).build()
    by_folder = dr.dataloader(["pixels", "label"], inputs={"manifest": str(root)}, batch_size=4)
    want_x, want_y = _epoch(by_folder, "pixels")
    streamed = dr.dataloader(["pixels", "label"], inputs={"manifest": _image_dataset(rows).to_iterable_dataset(
        num_shards=2)}, batch_size=4, num_workers=num_workers)
    assert streamed.streaming and streamed.stats["label_vocab"] == by_folder.stats["label_vocab"]
    got_x, got_y = _epoch(streamed, "pixels")
    # every image once (in the lanes' order): the same multiset of (pixels, label) as the folder's
    key = lambda x, y: sorted((round(float(a.sum()), 4), int(b)) for a, b in zip(x, y))  # noqa: E731
    assert got_x.shape == want_x.shape and key(got_x, got_y) == key(want_x, want_y)


def test_an_unlabelled_class_label_row_fails_or_is_skipped(shapes: tuple[Path, list[tuple[str, bytes]]]) -> None:
    _, rows = shapes
    ds = _image_dataset(rows, class_label=COLOURS)
    labels = list(ds["label"])
    labels[4] = -1  # a test split's "no label"
    ds = ds.remove_columns("label").add_column("label", labels, feature=datasets.ClassLabel(names=list(COLOURS)))
    dr = fd.Builder().with_modules(image).with_config(IMAGE_CONFIG).build()
    with pytest.raises(fd.SampleError, match=r"node 'label_name' .* failed on sample 4 .*ValueError: label -1 in column "
                                             r"'label' is not one of the 3 classes of its ClassLabel \(-1 marks a row "
                                             r"without a label, as in a test split\) -- fix: drop the unlabelled rows"):
        dr.dataloader(["pixels", "label"], inputs={"manifest": ds}, batch_size=5)
    loader = dr.dataloader(["pixels", "label"], inputs={"manifest": ds}, batch_size=5, on_error="skip")
    assert [s.index for s in loader.report.skipped] == [4] and sum(loader.stats["label_vocab"].counts) == 9
    assert sum(len(b["label"]) for b in loader) == 9


def test_a_bad_image_in_a_dataset_is_named_by_its_bytes(shapes: tuple[Path, list[tuple[str, bytes]]]) -> None:
    _, rows = shapes
    bad = [*rows[:2], ("red", b"not a png, just text"), *rows[2:]]
    dr = fd.Builder().with_modules(image).with_config(IMAGE_CONFIG).build()
    with pytest.raises(fd.SampleError, match=r"node 'resized' .* failed on sample 2 .*MediaError: 20 bytes \(2.png\): "
                                             r"is not an image PIL can read \(unknown format\)"):
        dr.dataloader(["pixels"], inputs={"manifest": _image_dataset(bad)}, batch_size=4)


@pytest.fixture(scope="module")
def tones(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[tuple[str, bytes]]]:
    """Eight WAV clips and a path,label CSV of them; their (label, bytes) in the CSV's order."""
    folder = tmp_path_factory.mktemp("tones")
    rows = []
    for i in range(8):
        label = ("low", "high", "low", "low")[i % 4]
        data = _wav(label, i)
        (folder / f"clip{i}.wav").write_bytes(data)
        rows.append((label, data))
    manifest = folder / "train.csv"
    with open(manifest, "w", newline="") as f:
        csv.writer(f).writerows([("path", "label"), *((f"clip{i}.wav", label) for i, (label, _) in enumerate(rows))])
    return str(manifest), rows


def _audio_dataset(rows: list[tuple[str, bytes]], names: tuple[str, ...] | None = None) -> datasets.Dataset:
    # cast_column, not from_dict(features=...): encoding audio through Audio's features needs torchcodec
    ds = datasets.Dataset.from_dict({
        "audio": [{"bytes": data, "path": f"clip{i}.wav"} for i, (_, data) in enumerate(rows)],
        "label": [names.index(lab) if names else lab for lab, _ in rows],
    }).cast_column("audio", datasets.Audio(decode=False))
    return ds.cast_column("label", datasets.ClassLabel(names=list(names))) if names else ds


@pytest.mark.procs
@pytest.mark.parametrize("num_workers", [0, 2])
def test_audio_dataset_gives_what_the_files_give(tones: tuple[str, list[tuple[str, bytes]]], num_workers: int) -> None:
    manifest, rows = tones
    dr = fd.Builder().with_modules(audio).with_config(AUDIO_CONFIG).build()
    args: dict[str, Any] = {"batch_size": 3, "num_workers": num_workers}
    by_csv = dr.dataloader(["features", "label"], inputs={"manifest": manifest}, **args)
    by_dataset = dr.dataloader(["features", "label"], inputs={"manifest": _audio_dataset(rows)}, **args)
    assert by_dataset.stats["label_vocab"] == by_csv.stats["label_vocab"]
    assert by_csv.stats["label_vocab"].tokens == ("low", "high")
    assert torch.equal(by_dataset.stats["feature_stats"].mean, by_csv.stats["feature_stats"].mean)
    want_x, want_y = _epoch(by_csv, "features")
    got_x, got_y = _epoch(by_dataset, "features")
    assert got_x.shape == (8, 16, 26) and torch.equal(got_x, want_x) and torch.equal(got_y, want_y)


def test_audio_class_label_and_a_decoding_audio_column(tones: tuple[str, list[tuple[str, bytes]]]) -> None:
    """An Audio() column that decodes (which needs torchcodec in datasets) is read as its bytes."""
    _, rows = tones
    ds = _audio_dataset(rows, names=("high", "mid", "low"))
    decoding = ds.cast_column("audio", datasets.Audio(sampling_rate=16000))
    assert audio.row(decoding).features["audio"].decode is False
    dr = fd.Builder().with_modules(audio).with_config(AUDIO_CONFIG).build()
    loader = dr.dataloader(["features", "label"], inputs={"manifest": decoding}, batch_size=8)
    assert loader.stats["label_vocab"].tokens == ("high", "mid", "low") and loader.stats["label_vocab"].counts == (2, 0, 6)
    assert next(iter(loader))["label"].tolist() == list(ds["label"])
    streamed = dr.execute(["label_vocab"], inputs={"manifest": decoding.to_iterable_dataset()})
    assert streamed["label_vocab"] == loader.stats["label_vocab"]
    renamed = ds.rename_column("audio", "speech")
    with pytest.raises(fd.NodeError, match=r"the dataset has no column 'audio' \(media_column\); its columns: 'speech', "
                                           r"'label' -- fix: .*\{'media_column': 'speech'\}"):
        dr.execute(["label_vocab"], inputs={"manifest": renamed})
    custom = fd.Builder().with_modules(audio).with_config({**AUDIO_CONFIG, "media_column": "speech"}).build()
    assert custom.execute(["label_vocab"], inputs={"manifest": renamed})["label_vocab"] == loader.stats["label_vocab"]


def test_the_pass_cache_recognises_a_dataset(tmp_path: Path, tones: tuple[str, list[tuple[str, bytes]]]) -> None:
    """The cache keys on the rows' bytes; a ClassLabel vocabulary comes back from it with its names' order."""
    _, rows = tones
    names = ("mid", "low", "high")
    dr = fd.Builder().with_modules(audio).with_config(AUDIO_CONFIG).build()
    args: dict[str, Any] = {"batch_size": 4, "cache_dir": tmp_path}
    first = dr.dataloader(["features", "label"], inputs={"manifest": _audio_dataset(rows, names)}, **args)
    second = dr.dataloader(["features", "label"], inputs={"manifest": _audio_dataset(rows, names)}, **args)
    assert first.report.seen == {"row": 8} and second.report.seen == {}
    assert second.stats["label_vocab"] == first.stats["label_vocab"]
    assert first.stats["label_vocab"].tokens == names and first.stats["label_vocab"].counts == (0, 6, 2)
    assert torch.equal(_epoch(second, "features")[1], _epoch(first, "features")[1])
    changed = [*rows[:-1], (rows[-1][0], _wav(rows[-1][0], 99))]  # other bytes: other statistics
    third = dr.dataloader(["features", "label"], inputs={"manifest": _audio_dataset(changed, names)}, **args)
    assert third.report.seen == {"row": 8}
