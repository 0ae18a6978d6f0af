"""Draws the pictures in docs/img from the bundled modules (run from the repository root).

    .venv/bin/python docs/make_pictures.py

The pictures are generated, never drawn by hand: rerun this after changing a module.
"""

from __future__ import annotations

import os

import torch

import flowdata as fd
import flowdata_modules.audio as audio
import flowdata_modules.example as example
import flowdata_modules.image as image
import flowdata_modules.tabular as tabular
import flowdata_modules.text as text

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    """Writes the example's pictures and those of the bundled media modules."""
    out = os.path.join(HERE, "img")
    os.makedirs(out, exist_ok=True)
    example_pictures(out)
    media_pictures(out)
    tabular_picture(out)
    text_pictures(out)
    transforms_picture(out)


def example_pictures(out: str) -> None:
    """Writes example.svg (the structure), example-run.svg (with a run's report), example.mmd."""
    dr = fd.Builder().with_modules(example).build()
    dr.visualize(os.path.join(out, "example.svg"))
    report = fd.Report()
    dr.execute(["summary"], inputs={"n": 5000}, report=report)
    dr.visualize(os.path.join(out, "example-run.svg"), report=report, legend=False)
    with open(os.path.join(out, "example.mmd"), "w", encoding="utf-8") as f:
        f.write(dr.to_mermaid())
    print(f"wrote {out}/example.svg, example-run.svg, example.mmd")


def media_pictures(out: str) -> None:
    """Writes audio.svg, image.svg (default config) and image-imagenet.svg (use_imagenet_stats=True)."""
    dr = fd.Builder().with_modules(audio).build()
    dr.visualize(os.path.join(out, "audio.svg"), outputs=["features", "label"])
    dr = fd.Builder().with_modules(image).build()
    dr.visualize(os.path.join(out, "image.svg"), outputs=["pixels", "label"])
    dr = fd.Builder().with_modules(image).with_config({"use_imagenet_stats": True}).build()
    dr.visualize(os.path.join(out, "image-imagenet.svg"), outputs=["pixels", "label"], legend=False)
    print(f"wrote {out}/audio.svg, image.svg, image-imagenet.svg")


def text_pictures(out: str) -> None:
    """Writes text.svg (built-in tokenizer) and text-tokenizer.svg (a tokenizers JSON file)."""
    outputs = ["token_ids", "attention_mask", "label"]
    fd.Builder().with_modules(text).build().visualize(os.path.join(out, "text.svg"), outputs=outputs)
    dr = fd.Builder().with_modules(text).with_config({"tokenizer": "tokenizer.json"}).build()
    dr.visualize(os.path.join(out, "text-tokenizer.svg"), outputs=outputs, legend=False)
    print(f"wrote {out}/text.svg, text-tokenizer.svg")


def tabular_picture(out: str) -> None:
    """Writes tabular.svg (the tabular module, its three outputs)."""
    dr = fd.Builder().with_modules(tabular).build()
    dr.visualize(os.path.join(out, "tabular.svg"), outputs=["numeric", "categories", "label"])
    print(f"wrote {out}/tabular.svg")


def test_card(side: int = 128) -> torch.Tensor:
    """A generated RGB image in [0, 1]: smooth colour ramps, rings and a fine grid (sharp
    detail shows blur), float32 ``[3, side, side]``."""
    import torch

    yy, xx = torch.meshgrid(torch.linspace(-1, 1, side), torch.linspace(-1, 1, side), indexing="ij")
    rings = 0.5 + 0.5 * torch.cos(18 * torch.sqrt(xx**2 + yy**2))
    grid = ((torch.arange(side)[:, None] // 3 + torch.arange(side)[None] // 3) % 2).float()
    inner = (xx.abs() < 0.45) & (yy.abs() < 0.45)
    red = torch.where(inner, grid, 0.5 + 0.5 * xx)
    green = torch.where(inner, grid, rings)
    blue = torch.where(inner, 1 - grid, 0.5 - 0.5 * yy)
    return torch.stack([red, green, blue]).clamp(0, 1)


def transforms_picture(out: str) -> None:
    """Writes transforms-fused.png: two chains through Compose unfused and fused, their outputs
    and errors (x8), from a generated image (PIL composes the panels; no matplotlib)."""
    from PIL import Image, ImageDraw

    from flowdata.transforms import Compose, Resize, Rotate

    x = test_card()
    rows = [
        ("upscale 2x, Rotate(25), Rotate(-25), downscale", (Resize(256), Rotate(25), Rotate(-25), Resize(128)), x),
        ("six Rotate(10), against one Rotate(60)", tuple(Rotate(10) for _ in range(6)), Rotate(60)(x)),
    ]
    side, gap, label_h, title_h = x.shape[-1], 8, 28, 22
    names = ["original", "unfused", "fused", "unfused error x8", "fused error x8"]
    width = len(names) * side + (len(names) + 1) * gap
    sheet = Image.new("RGB", (width, len(rows) * (title_h + side + label_h)), "white")
    draw = ImageDraw.Draw(sheet)

    def to_pil(t: torch.Tensor) -> Image.Image:
        return Image.fromarray((t.clamp(0, 1) * 255).round().byte().permute(1, 2, 0).numpy(), "RGB")

    for r, (title, chain, target) in enumerate(rows):
        top = r * (title_h + side + label_h)
        unfused, fused = Compose(*chain, fuse=False)(x), Compose(*chain)(x)
        panels = [x, unfused, fused, ((unfused - target).abs() * 8).expand(3, -1, -1),
                  ((fused - target).abs() * 8).expand(3, -1, -1)]
        maes = ["", f"MAE {float((unfused - target).abs().mean()):.4f}", f"MAE {float((fused - target).abs().mean()):.4f}",
                "", ""]
        draw.text((gap, top + 5), title, fill="black")
        for i, (panel, name, mae) in enumerate(zip(panels, names, maes)):
            left = gap + i * (side + gap)
            sheet.paste(to_pil(panel), (left, top + title_h))
            draw.text((left, top + title_h + side + 3), name, fill="black")
            draw.text((left, top + title_h + side + 15), mae, fill="black")
    path = os.path.join(out, "transforms-fused.png")
    # a palette of 256 colours keeps the picture small enough to keep in the repository
    sheet.quantize(256).save(path, optimize=True)
    print(f"wrote {path} ({os.path.getsize(path):,} bytes)")


if __name__ == "__main__":
    main()
