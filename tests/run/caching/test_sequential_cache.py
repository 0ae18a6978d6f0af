"""``cache=`` on a ``Sequential`` group: its samples go through the kernel one at a time, in
order, reading and writing the sample cache; values, order, statistics and skips are those
of an uncached run, and the cached node is not called again."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

import flowdata as fd
from flowdata.stats import Stats
from tests.cache_cases import sequential_images

N = 40


@pytest.fixture()
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "frames"
    folder.mkdir()
    for i in range(N):
        np.save(folder / f"f_{i:03d}.npy", np.random.default_rng(i).normal(i % 7, 1, size=(2, 3)).astype(np.float32))
    monkeypatch.setenv("FD_CACHE_LOG", str(tmp_path / "calls.log"))
    return folder


def calls(folder: Path) -> list[str]:
    """The paths decoded since the last look (and forgets them)."""
    log = folder.parent / "calls.log"
    got = log.read_text().split() if log.exists() else []
    log.write_text("")
    return got


def segments(cache: Path) -> list[Path]:
    return sorted(cache.glob("samples/decoded-*/*.seg"))


def build() -> fd.Driver:
    return fd.Builder().with_modules(sequential_images).build()


def same(a: dict[str, object], b: dict[str, object]) -> None:
    assert a["running"] == b["running"]
    sa, sb = a["stats"], b["stats"]
    assert isinstance(sa, Stats) and isinstance(sb, Stats)
    assert torch.equal(sa.mean, sb.mean) and torch.equal(sa.std, sb.std) and torch.equal(sa.count, sb.count)


def test_a_sequential_group_reads_its_cached_values_back(data: Path, tmp_path: Path) -> None:
    dr, cache = build(), tmp_path / "cache"
    inputs = {"folder": str(data)}
    plain = dr.execute(["running", "stats"], inputs=inputs)
    assert len(calls(data)) == N
    first_report = fd.Report()
    first = dr.execute(["running", "stats"], inputs=inputs, cache=["decoded"], cache_dir=cache, report=first_report)
    assert calls(data) == sorted(str(p) for p in data.iterdir())  # every frame decoded once, in order
    assert first_report.cache["decoded"]["misses"] == N and first_report.cache["decoded"]["hits"] == 0
    # Written a few hundred values at a time, not a file per sample.
    assert len(segments(cache)) == 1
    again_report = fd.Report()
    again = dr.execute(["running", "stats"], inputs=inputs, cache=["decoded"], cache_dir=cache, report=again_report)
    assert calls(data) == []  # the decode is not called again
    assert again_report.cache["decoded"]["hits"] == N and again_report.cache["decoded"]["misses"] == 0
    same(first, plain)
    same(again, plain)


def test_a_failing_frame_is_skipped_alike_and_the_others_are_cached(data: Path, tmp_path: Path) -> None:
    os.rename(data / "f_010.npy", data / "f_010_bad.npy")
    dr, cache = build(), tmp_path / "cache"
    inputs = {"folder": str(data)}
    plain = dr.execute(["running", "stats"], inputs=inputs, on_error="skip")
    calls(data)
    report = fd.Report()
    first = dr.execute(["running", "stats"], inputs=inputs, cache=["decoded"], cache_dir=cache, on_error="skip",
                       report=report)
    assert [s.index for s in report.skipped] == [10]
    same(first, plain)
    calls(data)
    again = dr.execute(["running", "stats"], inputs=inputs, cache=["decoded"], cache_dir=cache, on_error="skip")
    assert calls(data) == [str(data / "f_010_bad.npy")]  # only the failing frame is tried again
    same(again, plain)


def test_under_raise_the_frames_before_the_failure_stay_cached(data: Path, tmp_path: Path) -> None:
    os.rename(data / "f_030.npy", data / "f_030_bad.npy")
    dr, cache = build(), tmp_path / "cache"
    inputs = {"folder": str(data)}
    with pytest.raises(fd.SampleError, match=r"node 'decoded' .*sample 30.*cannot decode"):
        dr.execute(["running"], inputs=inputs, cache=["decoded"], cache_dir=cache)
    assert len(calls(data)) == 31
    with pytest.raises(fd.SampleError, match=r"node 'decoded'"):
        dr.execute(["running"], inputs=inputs, cache=["decoded"], cache_dir=cache)
    assert calls(data) == [str(data / "f_030_bad.npy")]  # the 30 frames before it came from the cache


def test_a_loader_over_a_sequential_group_shares_the_entries(data: Path, tmp_path: Path) -> None:
    dr, cache = build(), tmp_path / "cache"
    inputs = {"folder": str(data)}
    dr.execute(["running"], inputs=inputs, cache=["decoded"], cache_dir=cache)
    assert len(calls(data)) == N
    loader = dr.dataloader(["brightness"], inputs=inputs, batch_size=8, cache=["decoded"], cache_dir=cache)
    got = [float(v) for batch in loader for v in batch["brightness"]]
    assert calls(data) == []  # the loader's batches read what execute() wrote
    want = [float(np.load(data / f"f_{i:03d}.npy").mean()) for i in range(N)]
    assert got == pytest.approx(want, rel=1e-6)
    assert loader.report.cache["decoded"]["hits"] == N
