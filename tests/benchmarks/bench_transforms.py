"""Transforms benchmark: a fused ``Compose`` against the same steps unfused and in torchvision.

Run from the repository root::

    .venv/bin/python tests/benchmarks/bench_transforms.py            # 2,000 images, 2,000 PNGs
    .venv/bin/python tests/benchmarks/bench_transforms.py --quick    # 300 and 500
    .venv/bin/python tests/benchmarks/bench_transforms.py --only c   # (c) alone

(a) *Per sample on the CPU*: ``Resize(224)`` -> ``Rotate(15)`` -> ``CenterCrop(192)`` ->
``HorizontalFlip()`` on ``--images`` smooth random-ish float32 ``3x256x256`` images
(sums of a few random sinusoids), one call per image: flowdata's fused ``Compose``, the
same ``Compose(fuse=False)`` (each step on its own: torchvision's antialiased resize, a
``grid_sample`` for the rotation, slicing, a flip), and torchvision v2's functionals doing
the same steps (``resize(224, antialias=True)``, ``rotate(15, BILINEAR)``, ``center_crop(192)``,
``horizontal_flip``; torchvision's rotate defaults to nearest, bilinear is the same work as
ours). The contenders take turns, best of ``--rounds``, all under the same torch thread
count (``--threads``, default 1: what a DataLoader worker uses). Then the reconstruction
error of a chain that cancels (upscale to 384, rotate 15, rotate -15, downscale to 256):
the mean absolute error against the original, for each contender.

(b) *The image module's epoch*: ``--pngs`` 128x128 RGB PNGs in two class folders,
``flowdata_modules.image`` (``Compose``: one resampling for resize + crop, exact slicing
for the augmentation) against ``image_chain_flow`` (a copy of the module before it used
``Compose``: torchvision's antialiased resize then a crop; reflect-pad, crop and flip as
separate steps), ``Driver.dataloader(["pixels", "label"], batch_size=32, num_workers=0)``
with ImageNet statistics (no statistics pass) and ``image_size=32``, ``augment`` off and
on. The loaders are built beforehand; each epoch is timed, the two modules taking turns,
best of ``--rounds``.

(c) *Antialiasing a rotating run, against a supersampled reference*: on scikit-learn's
``china.jpg`` (427x640), ``Resize(256, short_side=True)`` -> ``Rotate(15)`` (or
``RandomAffine(15)``, one seeded draw) -> ``CenterCrop(224)``, and on a 256-pixel 1-px
checkerboard ``Resize(170)`` -> ``Rotate(15)`` (a shrink of 1.5) and ``Resize(30)`` -> ``Rotate(15)``
(8.5, where the turned frame's edges weigh most): the fused ``Compose``, ``fuse=False`` and
torchvision v2 (resize, then rotate or affine, then centre crop), timed side by side (best of
``--rounds`` of ``--calls`` calls), and each one's mean absolute error against a reference that
averages 8x8 points over every output pixel's square, mapped back through the composed
matrix and read bilinearly from the input (zeros outside).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

from bench_common import machine_lines, version  # noqa: E402
from bench_sample_cache import write_pngs  # noqa: E402


def smooth_images(n: int, side: int = 256) -> list[Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    yy, xx = torch.meshgrid(torch.linspace(0, 1, side), torch.linspace(0, 1, side), indexing="ij")
    images = []
    for _ in range(n):
        p = torch.rand(3, 4, 4, generator=g)  # per channel: 4 sinusoids, random frequency and phase
        img = sum(torch.sin(xx[None] * (1 + 8 * p[:, k, 0, None, None]) * math.pi + 6 * p[:, k, 1, None, None])
                  * torch.cos(yy[None] * (1 + 8 * p[:, k, 2, None, None]) * math.pi + 6 * p[:, k, 3, None, None])
                  for k in range(4))
        images.append((0.5 + img / 8).float().contiguous())
    return images


def per_sample(args: argparse.Namespace) -> None:
    import torch
    import torchvision.transforms.v2.functional as TF
    from torchvision.transforms import InterpolationMode

    from flowdata.transforms import CenterCrop, Compose, HorizontalFlip, Resize, Rotate

    torch.set_num_threads(args.threads)
    images = smooth_images(args.images)
    bilinear = InterpolationMode.BILINEAR
    steps = (Resize(224), Rotate(15), CenterCrop(192), HorizontalFlip())
    fused, unfused = Compose(*steps), Compose(*steps, fuse=False)

    def tv(x: Any) -> Any:
        y = TF.resize(x, [224, 224], antialias=True)
        return TF.horizontal_flip(TF.center_crop(TF.rotate(y, 15.0, interpolation=bilinear), [192, 192]))

    contenders: list[tuple[str, Callable[[Any], Any]]] = [("fused Compose", fused),
                                                           ("Compose(fuse=False)", unfused),
                                                           ("torchvision v2", tv)]
    for _, fn in contenders:  # warm up: first-call costs, the fused run's plan
        fn(images[0])
    best = {name: math.inf for name, _ in contenders}
    for r in range(args.rounds):
        for name, fn in contenders:
            t0 = time.perf_counter()
            for x in images:
                fn(x)
            best[name] = min(best[name], (time.perf_counter() - t0) / len(images))
        print(f"  round {r + 1}: " + ", ".join(f"{n} {best[n] * 1e3:.3f} ms" for n, _ in contenders), file=sys.stderr)

    # a chain that cancels: what each contender gives back
    cancel = (Resize(384), Rotate(15), Rotate(-15), Resize(256))

    def tv_cancel(x: Any) -> Any:
        y = TF.rotate(TF.resize(x, [384, 384], antialias=True), 15.0, interpolation=bilinear)
        return TF.resize(TF.rotate(y, -15.0, interpolation=bilinear), [256, 256], antialias=True)

    errors = {"fused Compose": Compose(*cancel), "Compose(fuse=False)": Compose(*cancel, fuse=False),
              "torchvision v2": tv_cancel}
    sample = images[: min(50, len(images))]
    mae = {name: sum(float((fn(x) - x).abs().mean()) for x in sample) / len(sample) for name, fn in errors.items()}

    print(f"\n(a) per sample: Resize(256->224) -> Rotate(15) -> CenterCrop(192) -> HorizontalFlip, "
          f"{len(images)} images 3x256x256 float32, torch threads {args.threads}, best of {args.rounds} rounds")
    print(f"{'contender':22} {'ms/sample':>9} {'vs torchvision':>14} {'cancel-chain MAE':>16}")
    for name, _ in contenders:
        print(f"{name:22} {best[name] * 1e3:9.3f} {best['torchvision v2'] / best[name]:13.2f}x {mae[name]:16.2e}")
    print("target: fused >= 1.5x torchvision v2 per sample")


def epochs(args: argparse.Namespace) -> None:
    import torch

    import flowdata as fd
    import image_chain_flow
    from flowdata_modules import image

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench-transforms-") as tmp:
        t0 = time.perf_counter()
        write_pngs(Path(tmp), args.pngs, side=128, seed=5)
        print(f"wrote {args.pngs} PNGs in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        loaders = {}
        for augment in (False, True):
            for name, modules in (("Compose", (image,)), ("today's chain", (image, image_chain_flow))):
                config = {"use_imagenet_stats": True, "image_size": 32, "augment": augment}
                # the chain's resized and pixels replace the module's own
                dr = fd.Builder().with_modules(*modules).allow_module_overrides().with_config(config).build()
                loaders[(augment, name)] = dr.dataloader(["pixels", "label"], inputs={"manifest": tmp},
                                                         batch_size=32, num_workers=0, shuffle=True, seed=0)
        best = {key: math.inf for key in loaders}
        for r in range(args.rounds):
            for key, loader in loaders.items():
                loader.set_epoch(r)
                t0 = time.perf_counter()
                for _ in loader:
                    pass
                best[key] = min(best[key], time.perf_counter() - t0)
            print(f"  round {r + 1}: " + ", ".join(f"{k}: {v:.2f} s" for k, v in best.items()), file=sys.stderr)
    print(f"\n(b) the image module's epoch: {args.pngs} PNGs 128x128 -> 32x32, batch_size 32, num_workers 0, "
          f"ImageNet statistics, torch threads {args.threads}, best of {args.rounds} rounds")
    print(f"{'augment':8} {'Compose s':>9} {'today s':>8} {'today/Compose':>13}")
    for augment in (False, True):
        new, old = best[(augment, "Compose")], best[(augment, "today's chain")]
        print(f"{str(augment):8} {new:9.2f} {old:8.2f} {old / new:12.2f}x")
    print("targets: augment off not slower (>= 1.0x), augment on >= 1.15x faster")


def supersampled(x: Any, run: tuple[Any, ...], n: int = 8, generator: Any = None) -> Any:
    """Each output pixel the mean of n x n points over its square, mapped back through the
    run's composed matrix onto the input and read bilinearly (zeros outside)."""
    import torch
    import torch.nn.functional as F

    size = (x.shape[-2], x.shape[-1])
    matrix = torch.eye(3, dtype=torch.float64)
    for t in run:
        m, size = t.as_matrix(size, generator)
        matrix = m @ matrix
    inverse = torch.linalg.inv(matrix)
    (oh, ow), (h, w) = size, x.shape[-2:]
    i, j = torch.meshgrid(torch.arange(oh, dtype=torch.float64), torch.arange(ow, dtype=torch.float64), indexing="ij")
    total = torch.zeros(x.shape[0], oh, ow, dtype=torch.float64)
    for sy in (torch.arange(n, dtype=torch.float64) + 0.5) / n:
        for sx in (torch.arange(n, dtype=torch.float64) + 0.5) / n:
            p = torch.stack([j + sx, i + sy, torch.ones_like(i)], -1) @ inverse.T
            grid = torch.stack([2 * p[..., 0] / w - 1, 2 * p[..., 1] / h - 1], -1)[None].float()
            total += F.grid_sample(x.float()[None], grid, mode="bilinear", padding_mode="zeros", align_corners=False)[0]
    return total / (n * n)


def antialiasing(args: argparse.Namespace) -> None:
    import torch
    import torchvision.transforms.v2.functional as TF
    from sklearn.datasets import load_sample_image
    from torchvision.transforms import InterpolationMode

    from flowdata.transforms import CenterCrop, Compose, RandomAffine, Resize, Rotate

    torch.set_num_threads(args.threads)
    bilinear = InterpolationMode.BILINEAR
    photo = (torch.from_numpy(load_sample_image("china.jpg").copy()).permute(2, 0, 1).float() / 255).contiguous()
    board = ((torch.arange(256)[:, None] + torch.arange(256)[None]) % 2).float()[None].contiguous()
    angle = -15.0 + 30.0 * float(torch.rand(6, generator=torch.Generator().manual_seed(4))[0])  # RandomAffine's draw
    cases: list[tuple[str, Any, tuple[Any, ...], Callable[[Any], Any], bool]] = [
        ("photo, Rotate(15)", photo, (Resize(256, short_side=True), Rotate(15), CenterCrop(224)),
         lambda x: TF.center_crop(TF.rotate(TF.resize(x, [256], antialias=True), 15.0, interpolation=bilinear),
                                  [224, 224]), False),
        ("photo, RandomAffine(15)", photo, (Resize(256, short_side=True), RandomAffine(15), CenterCrop(224)),
         lambda x: TF.center_crop(TF.affine(TF.resize(x, [256], antialias=True), angle, [0, 0], 1.0, [0.0, 0.0],
                                            interpolation=bilinear), [224, 224]), True),
        ("checkerboard, 1.5x", board, (Resize(170), Rotate(15)),
         lambda x: TF.rotate(TF.resize(x, [170, 170], antialias=True), 15.0, interpolation=bilinear), False),
        ("checkerboard, 8.5x", board, (Resize(30), Rotate(15)),
         lambda x: TF.rotate(TF.resize(x, [30, 30], antialias=True), 15.0, interpolation=bilinear), False),
    ]
    print(f"\n(c) antialiasing a rotating run: best of {args.rounds} rounds of {args.calls} calls, "
          f"torch threads {args.threads}; error = mean |output - supersampled reference|")
    print(f"{'case':24} {'contender':20} {'ms/call':>8} {'vs torchvision':>14} {'error':>9}")
    for title, x, run, tv, draws in cases:
        def gen() -> Any:
            return torch.Generator().manual_seed(4) if draws else None

        fused, unfused = Compose(*run), Compose(*run, fuse=False)
        contenders: list[tuple[str, Callable[[Any], Any]]] = [
            ("fused Compose", lambda v: fused(v, gen())), ("Compose(fuse=False)", lambda v: unfused(v, gen())),
            ("torchvision v2", tv)]
        reference = supersampled(x, run, generator=gen())
        error = {name: float((fn(x).double() - reference).abs().mean()) for name, fn in contenders}
        best = {name: math.inf for name, _ in contenders}
        for _ in range(args.rounds):
            for name, fn in contenders:
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    fn(x)
                best[name] = min(best[name], (time.perf_counter() - t0) / args.calls)
        for name, _ in contenders:
            print(f"{title:24} {name:20} {best[name] * 1e3:8.2f} {best['torchvision v2'] / best[name]:13.2f}x "
                  f"{error[name]:9.2e}")
    print("targets: fused error <= torchvision's, fused >= 1.5x torchvision")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--images", type=int, default=None)
    parser.add_argument("--pngs", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=None, help="(c): calls per round")
    parser.add_argument("--only", choices=["a", "b", "c"], default=None)
    args = parser.parse_args()
    args.images = args.images or (300 if args.quick else 2000)
    args.pngs = args.pngs or (500 if args.quick else 2000)
    args.calls = args.calls or (20 if args.quick else 100)
    for line in machine_lines():
        print(line)
    print(f"torch     {version('torch')}; torchvision {version('torchvision')}; pillow {version('pillow')}")
    if args.only in (None, "a"):
        per_sample(args)
    if args.only in (None, "b"):
        epochs(args)
    if args.only in (None, "c"):
        antialiasing(args)


if __name__ == "__main__":
    main()
