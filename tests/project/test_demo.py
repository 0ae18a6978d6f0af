"""The main job's demo, at a small size: it generates data, learns, and reports."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docs, pytest.mark.procs]  # the README's demo, in a process of its own

DEMO = Path(__file__).parents[2] / "examples" / "media_demo.py"


def test_demo_trains_both_classifiers(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, str(DEMO), "--out", str(out), "--clips", "480", "--images", "640", "--epochs", "6"],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = dict(re.findall(r"^(audio|image) +\d+ +\d+ +([\d.]+) ", done.stdout, re.M))
    assert set(rows) == {"audio", "image"}
    assert all(float(acc) >= 0.5 for acc in rows.values()), done.stdout  # twice chance (0.25)
    assert re.search(r"peak memory \(main process \+ workers, shared pages once\): \d+ MB", done.stdout)
    assert "statistics" in done.stderr  # the progress bar of the statistics pass
    assert sorted(p.name for p in (out / "audio").glob("*.csv")) == ["train.csv", "val.csv"]
    assert len(list((out / "images").glob("*.jpg"))) == 214
    suffix = "svg" if shutil.which("dot") else "dot"
    for name, reduction in (("audio", "feature_stats"), ("image", "pixel_stats")):
        picture = (out / f"{name}.{suffix}").read_text()
        assert reduction in picture and "label_vocab" in picture
