"""Memory: 10,000 one-second clips through the audio module stay under 1.5 GB for the whole tree."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowdata.peak_memory import PeakMemory, tree_rss

CHILD = Path(__file__).parent / "benchmarks" / "audio_memory_child.py"


def _hold(mb: int, seconds: float) -> None:
    block = bytearray(mb * 2**20)
    block[:: 4096] = b"x" * len(block[:: 4096])  # touch every page
    time.sleep(seconds)


def test_peak_memory_counts_the_workers() -> None:
    pytest.importorskip("psutil")
    before = tree_rss()
    with PeakMemory(interval=0.01) as peak:
        child = multiprocessing.get_context("spawn").Process(target=_hold, args=(200, 1.5))
        child.start()
        child.join()
    assert child.exitcode == 0
    assert peak.peak - before > 180 * 2**20  # the child's 200 MB showed up in the tree's peak
    assert tree_rss() - before < 100 * 2**20  # and left with it


def test_ten_thousand_clips_stay_under_one_and_a_half_gigabytes(tmp_path: Path) -> None:
    """Pass 1 (statistics) and one epoch, batch 32, two workers; peak of the process tree."""
    pytest.importorskip("psutil")
    done = subprocess.run(
        [sys.executable, str(CHILD), str(tmp_path / "clips"), "10000", "flowdata", "--workers", "2"],
        capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["delivered"] == 10000
    assert result["peak_mb"] < 1536, result
