"""Media benchmark: the bundled audio and image modules against hand-written torch code.

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_media.py            # full (about 5 minutes)
    .venv/bin/python tests/benchmarks/bench_media.py --quick    # fewer epochs

What is measured
----------------
**Section 1 — memory growth with the dataset.** ``audio_memory_child.py`` in a fresh
interpreter per row, over 1,000 and then 10,000 one-second 16 kHz clips (PCM-16 WAV tones,
four labels): *flowdata* builds ``flowdata_modules.audio``'s loader (pass 1: per-mel-bin
Welford statistics and the label vocabulary, streaming, 2 workers) and runs one epoch,
batch 32, 2 workers; *eager* is the usual hand-written preprocessing (decode every clip
into a list, compute every log-mel, stack, take mean and std over the array, batch a
``TensorDataset``). Figure: the peak memory of the process tree (PSS summed over the main
process and its workers, sampled every 20 ms; ``flowdata.peak_memory``) and its growth from
1,000 to 10,000 clips. Target: flowdata grows by under 50 MB.

**Section 2 — throughput.** The same per-sample work in both contenders, from the same
functions: *image*: 2,000 64x64 RGB PNGs, ``load_image`` -> short side resized to 32 ->
centre crop 32 -> ``Normalize`` by per-channel statistics -> float32 ``[3, 32, 32]``, plus
the integer label; *audio*: the 1,000 clips of section 1, ``load_audio`` (16 kHz, mono) ->
``PadOrTrim`` -> ``LogMel`` (64 mels) -> ``Normalize`` per mel bin -> float32
``[64, 101]``, plus the label. *flowdata*: ``Driver.dataloader(["pixels", "label"])`` /
``(["features", "label"])`` over the bundled module (its statistics pass runs when the
loader is built, untimed); *hand-written*: a map-style ``torch.utils.data.Dataset`` over
the manifest's rows with the statistics given (taken from the flowdata loader) in a plain
``DataLoader``. Batch 64, shuffled, 0 and 2 workers, ``persistent_workers`` at 2. One
untimed epoch each, then ``--repeats`` epochs each, interleaved (one epoch of each in turn,
the order alternating) so that a change in the machine's load hits both alike; the best
epoch is kept. Target: flowdata / hand-written samples/s >= 0.95x.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_common as bc  # noqa: E402

BATCH = 64


# --- section 1 ----------------------------------------------------------------------------------
def memory_rows(root: Path) -> list[dict[str, Any]]:
    rows = []
    for n in (1000, 10000):
        for mode in ("flowdata", "eager"):
            print(f"  memory: {mode} over {n} clips ...", file=sys.stderr, flush=True)
            done = subprocess.run(
                [sys.executable, str(HERE / "audio_memory_child.py"), str(root / f"clips{n}"), str(n), mode],
                capture_output=True, text=True, timeout=1800, check=True,
            )
            rows.append(json.loads(done.stdout.splitlines()[-1]))
    return rows


# --- section 2 ----------------------------------------------------------------------------------
class HandImages(torch.utils.data.Dataset[dict[str, Any]]):
    """What one writes without a framework: rows in a list, decode in ``__getitem__``."""

    def __init__(self, rows: list[dict[str, str]], vocab: dict[str, int], mean: Any, std: Any, size: int):
        self.rows, self.vocab, self.size = rows, vocab, size
        from flowdata.transforms import Normalize

        self.normalize = Normalize(mean, std, dim=-3)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        from flowdata.media import load_image
        from flowdata.transforms import CenterCrop, Resize

        row = self.rows[i]
        image = load_image(row["path"], mode="RGB")
        h, w = image.shape[-2:]
        scale = self.size / min(h, w)
        size = (max(self.size, round(h * scale)), max(self.size, round(w * scale)))
        x = CenterCrop(self.size)(Resize(size)(image))
        return {"pixels": self.normalize(x).float(), "label": self.vocab[row["label"]]}


class HandAudio(torch.utils.data.Dataset[dict[str, Any]]):
    """The audio counterpart: decode, pad/trim, log-mel, normalise per mel bin."""

    def __init__(self, rows: list[dict[str, str]], vocab: dict[str, int], mean: Any, std: Any):
        from flowdata.transforms import LogMel, Normalize, PadOrTrim

        self.rows, self.vocab = rows, vocab
        self.pad = PadOrTrim(16000)
        self.mel = LogMel(sample_rate=16000, n_mels=64)
        self.normalize = Normalize(mean, std, dim=-2)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        from flowdata.media import load_audio

        row = self.rows[i]
        wave, _ = load_audio(row["path"], sample_rate=16000, mono=True)
        with torch.no_grad():
            features = self.normalize(self.mel(self.pad(wave[0]))).float()
        return {"features": features, "label": self.vocab[row["label"]]}


def read_rows(manifest: Path) -> list[dict[str, str]]:
    with open(manifest, newline="") as f:
        return [{"path": str(manifest.parent / r["path"]), "label": r["label"]} for r in csv.DictReader(f)]


def epoch_seconds(loader: Any, epoch: int) -> tuple[float, int]:
    if hasattr(loader, "set_epoch"):
        loader.set_epoch(epoch)
    t0 = time.perf_counter()
    n = 0
    for batch in loader:
        n += len(batch["label"])
    return time.perf_counter() - t0, n


def race(loaders: dict[str, Any], repeats: int) -> dict[str, float]:
    """Best samples/s of each contender over interleaved epochs (after one untimed each)."""
    best = {name: 0.0 for name in loaders}
    for name, loader in loaders.items():
        epoch_seconds(loader, 0)
    names = list(loaders)
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            seconds, n = epoch_seconds(loaders[name], r + 1)
            best[name] = max(best[name], n / seconds)
    return best


def throughput(kind: str, manifest: Path, workers: int, repeats: int) -> dict[str, float]:
    import flowdata as fd

    common = {"batch_size": BATCH, "shuffle": True, "num_workers": workers, "persistent_workers": workers > 0}
    if kind == "image":
        import flowdata_modules.image as module

        dr = fd.Builder().with_modules(module).with_config({"image_size": 32}).build()
        outputs, stats_name = ["pixels", "label"], "pixel_stats"
    else:
        import flowdata_modules.audio as module  # type: ignore[no-redef]

        dr = fd.Builder().with_modules(module).build()
        outputs, stats_name = ["features", "label"], "feature_stats"
    flow = dr.dataloader(outputs, inputs={"manifest": str(manifest)}, **common)
    stats, vocab = flow.stats[stats_name], flow.stats["label_vocab"]
    lookup = {t: i for i, t in enumerate(vocab.tokens)}
    rows = read_rows(manifest)
    if kind == "image":
        dataset: Any = HandImages(rows, lookup, stats.mean, stats.std, 32)
    else:
        dataset = HandAudio(rows, lookup, stats.mean, stats.std)
    return race({"flowdata": flow, "hand-written": torch.utils.data.DataLoader(dataset, **common)}, repeats)


def write_image_manifest(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    bc.write_pngs(folder, n, seed=(7,))
    manifest = folder / "manifest.csv"
    with open(manifest, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "label"])
        w.writerows((f"img_{i:05d}.png", f"class{i % 4}") for i in range(n))
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description="media benchmark")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    repeats = args.repeats or (3 if args.quick else 6)
    lines = bc.machine_lines()
    lines.append(f"packages  torch {bc.version('torch')}, torchaudio {bc.version('torchaudio')}, "
                 f"soundfile {bc.version('soundfile')}, pillow {bc.version('pillow')}")
    with tempfile.TemporaryDirectory(prefix="bench_media_") as tmp:
        root = Path(tmp)
        out: list[str] = []
        if not args.skip_memory:
            rows = memory_rows(root)
            out.append("\nSection 1 - peak memory of the process tree (PSS), audio, pass 1 + one epoch, batch 32, 2 workers")
            out.append(f"{'contender':12} {'1,000 clips':>12} {'10,000 clips':>13} {'growth':>9} {'10k s':>7}")
            for mode in ("flowdata", "eager"):
                small, big = (next(r for r in rows if r["mode"] == mode and r["clips"] == n) for n in (1000, 10000))
                assert small["delivered"] == 1000 and big["delivered"] == 10000
                out.append(f"{mode:12} {small['peak_mb']:9.0f} MB {big['peak_mb']:10.0f} MB "
                           f"{big['peak_mb'] - small['peak_mb']:+6.0f} MB {big['seconds']:7.1f}")
        else:
            subprocess.run([sys.executable, str(HERE / "audio_memory_child.py"), str(root / "clips1000"), "1000",
                            "flowdata"], capture_output=True, check=True)
        print("  writing 2,000 PNGs ...", file=sys.stderr, flush=True)
        images = write_image_manifest(root / "images", 2000)
        out.append(f"\nSection 2 - throughput, samples/s (best of {repeats} interleaved epochs), batch {BATCH}, shuffled")
        out.append(f"{'module':7} {'workers':>7} {'flowdata':>9} {'hand-written':>13} {'flowdata/hand':>14}")
        for kind, manifest in (("image", images), ("audio", root / "clips1000" / "manifest.csv")):
            for workers in (0, 2):
                print(f"  throughput: {kind}, {workers} workers ...", file=sys.stderr, flush=True)
                best = throughput(kind, manifest, workers, repeats)
                out.append(f"{kind:7} {workers:7d} {best['flowdata']:9.0f} {best['hand-written']:13.0f} "
                           f"{best['flowdata'] / best['hand-written']:13.2f}x")
    print("\n".join(lines + out))


if __name__ == "__main__":
    main()
