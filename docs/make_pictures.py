"""Draws the pictures in docs/img from the bundled modules (run from the repository root).

    .venv/bin/python docs/make_pictures.py

The pictures are generated, never drawn by hand: rerun this after changing a module.
"""

from __future__ import annotations

import os

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


if __name__ == "__main__":
    main()
