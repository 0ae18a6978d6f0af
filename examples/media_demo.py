"""The main job: generated audio and image datasets, trained through flowdata's loaders.

    .venv/bin/python examples/media_demo.py [--out DIR] [--clips N] [--images N] [--epochs N]

1. Writes a labelled audio dataset (tones, chords and chirps as WAV files at two sample
   rates and random lengths) and a labelled image dataset (circles, squares, triangles and
   crosses as PNG/JPEG files) to disk, each with train and validation manifests. Nothing
   is downloaded.
2. Builds ``flowdata_modules.audio`` and ``flowdata_modules.image``; the first pass of each
   training loader computes the normalisation statistics and label vocabulary in one
   streaming pass (with a progress bar). The validation loaders reuse the training
   statistics by passing them as inputs (an input named like a node replaces it).
3. Trains a small convolutional classifier per dataset for a few epochs, with decoding and
   feature extraction running lazily in DataLoader workers, and reports validation
   accuracy, training samples/s, and the peak memory of the whole process tree.
4. Writes the two modules' DAG pictures.

Exits with status 1 if a classifier does not learn (validation accuracy under twice
chance): labels and features that do not line up fail the job.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import torch
from PIL import Image, ImageDraw
from torch import nn

import flowdata as fd
import flowdata_modules.audio as audio
import flowdata_modules.image as image
from flowdata.peak_memory import PeakMemory

AUDIO_CLASSES = ("low", "high", "chord", "chirp")
IMAGE_CLASSES = ("circle", "square", "triangle", "cross")


# --------------------------------------------------------------------------- data
def write_manifests(folder: Path, rows: list[tuple[str, str]], val_every: int = 5) -> tuple[str, str]:
    """Writes ``train.csv`` and ``val.csv`` (every ``val_every``-th row) in ``folder``."""
    paths = []
    for name, is_val in (("train", False), ("val", True)):
        path = folder / f"{name}.csv"
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["path", "label"])
            writer.writerows(r for i, r in enumerate(rows) if (i % val_every == 0) == is_val)
        paths.append(str(path))
    return paths[0], paths[1]


def make_audio(folder: Path, n: int, seed: int) -> tuple[str, str]:
    """``n`` noisy clips, 0.5-1.3 s, at 16 or 22.05 kHz, in four classes."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        label = AUDIO_CLASSES[i % len(AUDIO_CLASSES)]
        rate = 16000 if rng.random() < 0.75 else 22050
        t = np.arange(int(rate * rng.uniform(0.5, 1.3))) / rate
        if label == "low":
            wave = np.sin(2 * math.pi * rng.uniform(200, 400) * t)
        elif label == "high":
            wave = np.sin(2 * math.pi * rng.uniform(2000, 3500) * t)
        elif label == "chord":
            f0 = rng.uniform(400, 800)
            wave = np.sin(2 * math.pi * f0 * t) + np.sin(3 * math.pi * f0 * t) / 1.5 + np.sin(4 * math.pi * f0 * t) / 2
        else:  # a rising chirp
            f0, f1 = rng.uniform(200, 500), rng.uniform(3000, 5000)
            wave = np.sin(2 * math.pi * (f0 * t + (f1 - f0) * t**2 / (2 * t[-1])))
        # loud noise (SNR of a few dB) so that the task is not trivial
        wave = rng.uniform(0.1, 0.5) * wave / np.abs(wave).max() + rng.normal(0, 0.1, t.size)
        name = f"{i:05d}_{label}.wav"
        sf.write(folder / name, wave.astype(np.float32), rate, subtype="PCM_16")
        rows.append((name, label))
    return write_manifests(folder, rows)


def make_images(folder: Path, n: int, seed: int) -> tuple[str, str]:
    """``n`` noisy 48x48 pictures of one shape each, in random colours, PNG and JPEG."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        label = IMAGE_CLASSES[i % len(IMAGE_CLASSES)]
        background = rng.integers(0, 150, (48, 48, 3), dtype=np.uint8)  # busy, so shapes are not trivial
        img = Image.fromarray(background)
        draw = ImageDraw.Draw(img)
        r = rng.uniform(6, 14)
        cx, cy = rng.uniform(r + 2, 46 - r, 2)
        colour = tuple(int(c) for c in rng.integers(60, 256, 3))
        if label == "circle":
            draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=colour)
        elif label == "square":
            draw.rectangle((cx - r, cy - r, cx + r, cy + r), fill=colour)
        elif label == "triangle":
            draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=colour)
        else:
            w = r / 3
            draw.rectangle((cx - r, cy - w, cx + r, cy + w), fill=colour)
            draw.rectangle((cx - w, cy - r, cx + w, cy + r), fill=colour)
        name = f"{i:05d}_{label}." + ("jpg" if i % 3 == 0 else "png")
        if name.endswith("jpg"):
            img.save(folder / name, quality=90)
        else:
            img.save(folder / name)
        rows.append((name, label))
    return write_manifests(folder, rows)


# --------------------------------------------------------------------------- models
def small_cnn(in_channels: int, n_classes: int) -> nn.Module:
    """Three conv blocks and a linear head over ``[in_channels, H, W]`` inputs."""
    layers: list[nn.Module] = []
    for c_in, c_out in ((in_channels, 16), (16, 32), (32, 32)):
        layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU(), nn.MaxPool2d(2)]
    layers[-1] = nn.AdaptiveAvgPool2d(1)  # the last block pools to one value per channel
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(32, n_classes))


def audio_model(n_classes: int) -> nn.Module:
    """A small CNN over ``[n_mels, frames]`` log-mel features (one input channel)."""
    return nn.Sequential(nn.Unflatten(1, (1, -1)), small_cnn(1, n_classes))


def image_model(n_classes: int) -> nn.Module:
    """A small CNN over ``[3, 32, 32]`` pixels."""
    return small_cnn(3, n_classes)


# --------------------------------------------------------------------------- training
def train_and_evaluate(
    title: str,
    dr: fd.Driver,
    x_name: str,
    train_csv: str,
    val_csv: str,
    make_model: Callable[[int], nn.Module],
    *,
    epochs: int,
    workers: int,
    batch_size: int,
    val_inputs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Statistics pass, ``epochs`` of training, then validation accuracy (``val_inputs``
    added to the validation loader's inputs)."""
    val_inputs = val_inputs or {}
    print(f"\n== {title}: statistics pass over {train_csv}")
    start = time.perf_counter()
    train = dr.dataloader(
        [x_name, "label"], inputs={"manifest": train_csv}, batch_size=batch_size, shuffle=True,
        num_workers=workers, persistent_workers=workers > 0, progress=True, seed=0,
    )
    stats_s = time.perf_counter() - start
    vocab = train.stats["label_vocab"]
    print(f"   labels {list(vocab.tokens)}; statistics in {stats_s:.1f} s")
    # Validation uses the training statistics: inputs named like nodes replace them.
    val = dr.dataloader(
        [x_name, "label"],
        inputs={"manifest": val_csv, **train.stats, **val_inputs},
        batch_size=128, num_workers=workers,
    )
    torch.manual_seed(0)
    model = make_model(len(vocab))
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    seen, train_s = 0, 0.0
    for epoch in range(epochs):
        train.set_epoch(epoch)
        model.train()
        start = time.perf_counter()
        total_loss = 0.0
        for batch in train:
            loss = nn.functional.cross_entropy(model(batch[x_name]), batch["label"])
            optimiser.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimiser.step()
            total_loss += loss.item() * len(batch["label"])
            seen += len(batch["label"])
        train_s += time.perf_counter() - start
        print(f"   epoch {epoch + 1}/{epochs}: loss {total_loss / len(train.flow_dataset):.3f}")
    model.eval()
    correct = count = 0
    with torch.no_grad():
        for batch in val:
            correct += int((model(batch[x_name]).argmax(1) == batch["label"]).sum())
            count += len(batch["label"])
    accuracy = correct / count
    print(f"   validation accuracy {accuracy:.3f} on {count} samples (chance {1 / len(vocab):.2f})")
    return {"title": title, "accuracy": accuracy, "chance": 1 / len(vocab), "samples_per_s": seen / train_s,
            "stats_s": stats_s, "val": count, "train": len(train.flow_dataset)}


def main(argv: list[str] | None = None) -> int:
    """Runs the demo; returns the process exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="demo-out", help="folder for the datasets and pictures")
    parser.add_argument("--clips", type=int, default=1000, help="audio clips to generate")
    parser.add_argument("--images", type=int, default=1500, help="images to generate")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    out = Path(args.out)
    began = time.perf_counter()
    with PeakMemory() as peak:
        print(f"writing {args.clips} clips and {args.images} images under {out}/ ...")
        audio_csv = make_audio(out / "audio", args.clips, seed=1)
        image_csv = make_images(out / "images", args.images, seed=2)
        print(f"   done in {time.perf_counter() - began:.1f} s")
        audio_dr = fd.Builder().with_modules(audio).with_config({"n_mels": 40}).build()
        image_dr = fd.Builder().with_modules(image).with_config({"image_size": 32, "augment": True}).build()
        common = {"epochs": args.epochs, "workers": args.workers, "batch_size": args.batch_size}
        results = [
            train_and_evaluate("audio", audio_dr, "features", *audio_csv, audio_model, **common),
            # augmentation is for training: the validation loader turns it off by input
            train_and_evaluate("image", image_dr, "pixels", *image_csv, image_model, **common,
                               val_inputs={"augment": False}),
        ]
        for name, dr in (("audio", audio_dr), ("image", image_dr)):
            try:
                dr.visualize(str(out / f"{name}.svg"))
            except fd.FlowdataError as exc:  # no `dot` program: keep the DOT text instead
                (out / f"{name}.dot").write_text(dr.visualize().source)
                print(f"   {exc}".splitlines()[0])
    elapsed = time.perf_counter() - began
    print(f"\n{'dataset':8} {'train':>6} {'val':>5} {'accuracy':>9} {'chance':>7} {'samples/s':>10} {'stats s':>8}")
    for r in results:
        print(f"{r['title']:8} {r['train']:6d} {r['val']:5d} {r['accuracy']:9.3f} {r['chance']:7.2f} "
              f"{r['samples_per_s']:10.0f} {r['stats_s']:8.1f}")
    print(f"peak memory (main process + workers, shared pages once): {peak.mb:.0f} MB; total time {elapsed:.0f} s "
          f"on {os.cpu_count()} CPUs with {args.workers} workers")
    print(f"pictures: {out}/audio.svg, {out}/image.svg")
    failed = [r["title"] for r in results if r["accuracy"] < 2 * r["chance"]]
    if failed:
        print(f"error: the {' and '.join(failed)} classifier did not learn (accuracy under twice chance)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
