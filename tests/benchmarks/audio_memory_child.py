"""One measured run over N generated one-second 16 kHz clips; prints one JSON line.

    python tests/benchmarks/audio_memory_child.py DIR N {flowdata,eager} [--workers 2]

Writes N clips (tones, four labels) and ``manifest.csv`` into DIR unless they are there,
then measures the peak memory of this process tree (PSS summed over the main process and
its workers, see ``flowdata.peak_memory``) while it

- ``flowdata``: builds ``flowdata_modules.audio`` and its loader (pass 1: statistics and
  vocabulary, streaming) and runs one epoch, batch 32;
- ``eager``: the usual hand-written preprocessing -- decode every clip into a list,
  compute every log-mel, stack, take the statistics over the array, then batch it.

Run by ``tests/run/test_memory_bound.py`` (10,000 clips, the bound) and
``tests/benchmarks/bench_media.py`` (growth from 1,000 to 10,000 clips).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from flowdata.peak_memory import PeakMemory

RATE = 16000
LABELS = ("a", "b", "c", "d")


def write_clips(folder: Path, n: int) -> str:
    """``n`` one-second 16 kHz PCM-16 tones and their manifest (reused when present)."""
    manifest = folder / "manifest.csv"
    if manifest.exists():
        with open(manifest) as f:
            if sum(1 for _ in f) == n + 1:
                return str(manifest)
    folder.mkdir(parents=True, exist_ok=True)
    t = np.arange(RATE) / RATE
    rows = []
    for i in range(n):
        label = LABELS[i % len(LABELS)]
        freq = 200.0 * (2 + LABELS.index(label)) * (1 + 0.05 * math.sin(i))
        sf.write(folder / f"{i:05d}.wav", (0.3 * np.sin(2 * math.pi * freq * t)).astype(np.float32), RATE, subtype="PCM_16")
        rows.append((f"{i:05d}.wav", label))
    with open(manifest, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "label"])
        w.writerows(rows)
    return str(manifest)


def run_flowdata(manifest: str, workers: int) -> int:
    import flowdata as fd
    import flowdata_modules.audio as audio

    dr = fd.Builder().with_modules(audio).build()
    loader = dr.dataloader(["features", "label"], inputs={"manifest": manifest}, batch_size=32, num_workers=workers)
    delivered = 0
    for batch in loader:
        delivered += len(batch["label"])
    return delivered


def run_eager(manifest: str) -> int:
    from flowdata.media import load_audio
    from flowdata.transforms import LogMel, PadOrTrim

    with open(manifest, newline="") as f:
        rows = list(csv.DictReader(f))
    folder = Path(manifest).parent
    waves = [PadOrTrim(RATE)(load_audio(str(folder / r["path"]), sample_rate=RATE)[0][0]) for r in rows]
    mel = LogMel(sample_rate=RATE, n_mels=64)
    with torch.no_grad():
        feats = torch.stack([mel(w) for w in waves])
    mean, std = feats.mean((0, 2), keepdim=True), feats.std((0, 2), keepdim=True)
    feats = (feats - mean) / std
    vocab = sorted({r["label"] for r in rows})
    labels = torch.tensor([vocab.index(r["label"]) for r in rows])
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(feats, labels), batch_size=32)
    return sum(len(y) for _, y in loader)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("n", type=int)
    parser.add_argument("mode", choices=("flowdata", "eager"))
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    manifest = write_clips(Path(args.dir), args.n)
    torch.set_num_threads(1)  # the same compute for both modes: one thread per process
    start = time.perf_counter()
    with PeakMemory(interval=0.02) as peak:
        baseline = peak.peak
        delivered = run_flowdata(manifest, args.workers) if args.mode == "flowdata" else run_eager(manifest)
    print(json.dumps({
        "mode": args.mode, "clips": args.n, "delivered": delivered, "peak_mb": peak.mb,
        "baseline_mb": baseline / 2**20, "seconds": time.perf_counter() - start,
    }))


if __name__ == "__main__":
    main()
