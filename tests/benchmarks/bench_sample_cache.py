"""Sample-cache benchmark: a cold epoch (writing), a warm epoch (reading), and no cache.

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_sample_cache.py            # 5,000 PNGs, 2,000 WAVs
    .venv/bin/python tests/benchmarks/bench_sample_cache.py --quick    # 1,000 and 400

Data (written once into a temporary folder, never timed): ``--pngs`` 256x256 RGB PNGs
(gradients and noise, drawn from a seeded generator) and ``--wavs`` one-second 16 kHz
tones (16-bit WAV), in two class folders each. Workloads, both from ``flowdata_modules``:

- *image*: ``flowdata_modules.image`` with ``image_size=64`` and ImageNet statistics (one
  pass): each sample is decoded with PIL, resized and centre-cropped (``resized``), then
  normalised (``pixels``); the cached node is ``resized``;
- *audio*: ``flowdata_modules.audio``: decoded with soundfile (``waveform``), log-mel
  (``log_mel``, 64 bands); the cached node and the output is ``log_mel``.

For each workload and ``num_workers`` in {0, 2}, the contenders take turns, best of
``--rounds``, each round with a fresh ``cache_dir``: *no cache* (a loader without
``cache=``, one epoch), *cold* (the first epoch of a loader with ``cache=[...]``: computes
and writes every value), *warm* (its second epoch: reads every value back). Time is the
wall time of iterating one epoch (``batch_size=32``), the loader built beforehand. Disk
bytes per sample are the cache folder's size over the sample count, against the raw
bytes of one cached value.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

from bench_common import machine_lines, version  # noqa: E402


def write_pngs(folder: Path, n: int, side: int = 256, seed: int = 3) -> None:
    """``n`` RGB PNGs of ``side`` x ``side`` (gradients and noise) in two class folders."""
    import numpy as np
    from PIL import Image

    ramp = np.linspace(0, 255, side, dtype=np.float32)
    for i in range(n):
        rng = np.random.default_rng([seed, i])
        planes = [np.add.outer(ramp * rng.random(), ramp * rng.random()) / 2 for _ in range(3)]
        arr = np.stack(planes, -1) + rng.normal(0, 10, (side, side, 3))
        target = folder / f"class_{i % 2}"  # the image module reads labels from class folders
        target.mkdir(exist_ok=True)
        Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB").save(target / f"img_{i:05d}.png")


def write_wavs(folder: Path, n: int) -> None:
    import numpy as np
    import soundfile as sf

    t = np.arange(16000) / 16000
    for i in range(n):
        freq = 110 * 2 ** ((i % 36) / 12)
        target = folder / f"class_{i % 2}"
        target.mkdir(exist_ok=True)
        sf.write(target / f"tone_{i:05d}.wav", (0.3 * np.sin(2 * math.pi * freq * t)).astype(np.float32), 16000,
                 subtype="PCM_16")


def epoch_seconds(loader: Any, epoch: int) -> float:
    loader.set_epoch(epoch)
    t0 = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - t0


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*.seg"))


def measure(module: Any, config: dict[str, Any], manifest: str, output: str, cached: str, workers: int,
            cache_dir: Path) -> dict[str, float]:
    import flowdata as fd

    dr = fd.Builder().with_modules(module).with_config(config).build()
    args: dict[str, Any] = dict(inputs={"manifest": manifest}, batch_size=32, num_workers=workers)
    plain = dr.dataloader([output], **args)
    uncached = epoch_seconds(plain, 0)
    loader = dr.dataloader([output], cache=[cached], cache_dir=cache_dir, **args)
    cold = epoch_seconds(loader, 0)
    warm = epoch_seconds(loader, 1)
    stats = loader.report.cache[cached]
    assert stats["hits"] == stats["misses"], stats  # every sample written once, read once
    return {"none": uncached, "cold": cold, "warm": warm, "bytes": folder_bytes(cache_dir)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pngs", type=int, default=None)
    parser.add_argument("--wavs", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    n_png = args.pngs or (1000 if args.quick else 5000)
    n_wav = args.wavs or (400 if args.quick else 2000)

    import torch

    from flowdata_modules import audio, image

    with tempfile.TemporaryDirectory(prefix="bench-cache-") as tmp:
        root = Path(tmp)
        (root / "png").mkdir()
        (root / "wav").mkdir()
        t0 = time.perf_counter()
        write_pngs(root / "png", n_png)
        write_wavs(root / "wav", n_wav)
        print(f"wrote {n_png} PNGs and {n_wav} WAVs in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        workloads = [
            ("image", image, {"use_imagenet_stats": True, "image_size": 64}, str(root / "png"), "pixels", "resized",
             n_png, 3 * 64 * 64 * 4),
            ("audio", audio, {}, str(root / "wav"), "log_mel", "log_mel", n_wav, None),
        ]
        results: dict[tuple[str, int], dict[str, float]] = {}
        for r in range(args.rounds):
            for name, module, config, manifest, output, cached, n, raw in workloads:
                for workers in (0, 2):
                    got = measure(module, config, manifest, output, cached, workers, root / f"cache-{name}-{workers}-{r}")
                    print(f"  round {r + 1}: {name} workers={workers}: none {got['none']:.2f} s, cold "
                          f"{got['cold']:.2f} s, warm {got['warm']:.2f} s", file=sys.stderr)
                    best = results.setdefault((name, workers), dict(got))
                    for k in ("none", "cold", "warm"):
                        best[k] = min(best[k], got[k])
        if True:  # the raw size of one log-mel value
            from flowdata_modules.audio import LogMel

            mel = audio.log_mel(torch.zeros(1, 16000), LogMel(16000, 64))
            raw_audio = mel.numel() * mel.element_size()
    for line in machine_lines():
        print(line)
    print(f"torch     {version('torch')}; pillow {version('pillow')}; soundfile {version('soundfile')}; "
          f"best of {args.rounds} rounds; batch_size 32")
    print(f"\n{'workload':8} {'workers':>7} {'no cache s':>10} {'cold s':>8} {'warm s':>8} {'cold/none':>9} "
          f"{'none/warm':>9} {'disk B/sample':>13} {'raw B':>7}")
    for name, _, _, _, _, _, n, raw in workloads:
        for workers in (0, 2):
            m = results[(name, workers)]
            raw_b = raw if raw is not None else raw_audio
            print(f"{name:8} {workers:7d} {m['none']:10.2f} {m['cold']:8.2f} {m['warm']:8.2f} "
                  f"{m['cold'] / m['none']:8.2f}x {m['none'] / m['warm']:8.1f}x {m['bytes'] / n:13.0f} {raw_b:7d}")
    print("\ntargets: warm epoch >= 10x faster than an uncached one (none/warm), cold <= 1.15x uncached (cold/none)")


if __name__ == "__main__":
    main()
