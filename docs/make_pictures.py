"""Draws the pictures in docs/img from the bundled modules (run from the repository root).

    .venv/bin/python docs/make_pictures.py

The pictures are generated, never drawn by hand: rerun this after changing a module.
"""

from __future__ import annotations

import os

import flowdata as fd
import flowdata_modules.example as example

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    """Writes example.svg (the structure) and example-run.svg (with a run's report)."""
    out = os.path.join(HERE, "img")
    os.makedirs(out, exist_ok=True)
    dr = fd.Builder().with_modules(example).build()
    dr.visualize(os.path.join(out, "example.svg"))
    report = fd.Report()
    dr.execute(["summary"], inputs={"n": 5000}, report=report)
    dr.visualize(os.path.join(out, "example-run.svg"), report=report, legend=False)
    with open(os.path.join(out, "example.mmd"), "w", encoding="utf-8") as f:
        f.write(dr.to_mermaid())
    print(f"wrote {out}/example.svg, example-run.svg, example.mmd")


if __name__ == "__main__":
    main()
