"""The decoded-sample cache (``cache=[node, ...]`` with ``cache_dir``), through the public API.

Samples are small ``.npy`` images; ``decoded`` logs every path it decodes, from any process,
so each test sees what was computed and what was read from the cache.
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch

import flowdata as fd
from flowdata.run.caching import samplecache
from tests.cache_cases import images

ROOT = Path(__file__).resolve().parents[3]
N = 40


@pytest.fixture()
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(N):
        np.save(folder / f"img_{i:03d}.npy", np.random.default_rng(i).normal(i % 5, 1, size=(3, 4, 4)).astype(np.float32))
    monkeypatch.setenv("FD_CACHE_LOG", str(tmp_path / "calls.log"))
    return folder


def calls(folder: Path) -> list[str]:
    """The paths decoded since the last look (and forgets them)."""
    log = folder.parent / "calls.log"
    if not log.exists():
        return []
    got = log.read_text().split()
    log.write_text("")
    return got


def build(module: ModuleType = images, config: dict[str, Any] | None = None) -> fd.Driver:
    return fd.Builder().with_modules(module).with_config(config or {}).build()


def _equal(a: Any, b: Any) -> bool:
    return bool(torch.equal(a, b)) if isinstance(a, torch.Tensor) else a == b


@pytest.mark.procs
def test_execute_reads_the_cached_values_back_instead_of_decoding(data: Path, tmp_path: Path) -> None:
    dr = build()
    plain = dr.execute(["stats"], inputs={"folder": str(data)})
    calls(data)
    cache = tmp_path / "cache"
    report = fd.Report()
    first = dr.execute(["stats"], inputs={"folder": str(data)}, cache=["decoded"], cache_dir=cache, report=report)
    assert len(calls(data)) == N
    assert report.cache["decoded"]["misses"] == N and report.cache["decoded"]["hits"] == 0
    assert report.cache["decoded"]["bytes_written"] > N * 3 * 4 * 4 * 4
    # A new reduction over the same cached node (no pass cache entry for it): a new pass, all hits.
    report = fd.Report()
    again = dr.execute(["stats"], inputs={"folder": str(data), "gain": 3.0}, cache=["decoded"], cache_dir=cache,
                       report=report, executor=fd.ProcessExecutor(2), chunk_size=7)
    assert calls(data) == []  # nothing decoded: every value came from the cache
    assert report.cache["decoded"]["hits"] == N and report.cache["decoded"]["misses"] == 0
    for k in ("mean", "std"):
        assert torch.equal(getattr(first["stats"], k), getattr(plain["stats"], k))
        assert torch.allclose(getattr(again["stats"], k), getattr(plain["stats"], k) * 3.0)


@pytest.mark.procs
@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_decodes_once_and_every_later_epoch_and_loader_reads_the_cache(
        data: Path, tmp_path: Path, workers: int) -> None:
    dr = build()
    args: dict[str, Any] = dict(inputs={"folder": str(data)}, batch_size=8, shuffle=True, seed=1)
    want = [b["augmented"] for b in dr.dataloader(["augmented"], **args)]
    calls(data)
    cache = tmp_path / "cache"
    loader = dr.dataloader(["augmented"], cache=["decoded"], cache_dir=cache, num_workers=workers, **args)
    got = [b["augmented"] for b in loader]
    assert len(calls(data)) == N  # epoch 0 decodes each sample once, writing it
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))  # downstream (random) nodes as before
    loader.set_epoch(1)
    list(loader)
    assert calls(data) == []
    assert loader.report.cache["decoded"]["hits"] == N and loader.report.cache["decoded"]["misses"] == N
    fresh = dr.dataloader(["augmented"], cache=["decoded"], cache_dir=cache, num_workers=2 - workers,
                          **{**args, "batch_size": 5})
    list(fresh)
    assert calls(data) == []  # another loader, other workers and batch size: the same entries
    assert dr.run_sample(["scaled"], index=3, inputs={"folder": str(data)}, cache=["decoded"], cache_dir=cache)
    assert calls(data) == []


def test_a_random_node_cannot_be_cached(data: Path, tmp_path: Path) -> None:
    dr = build()
    with pytest.raises(fd.InputError, match=r"cache=\['augmented'\]: node 'augmented' \(.*images.py:\d+\) depends on "
                                            r"sample_rng, so its values change every epoch"):
        dr.dataloader(["augmented"], inputs={"folder": str(data)}, cache=["augmented"], cache_dir=tmp_path)
    with pytest.raises(fd.InputError, match=r"cache=\['stats'\]: not a per-sample node"):
        dr.execute(["stats"], inputs={"folder": str(data)}, cache=["stats"], cache_dir=tmp_path)
    with pytest.raises(fd.InputError, match=r"cache=\['decoded'\] needs cache_dir="):
        dr.execute(["stats"], inputs={"folder": str(data)}, cache=["decoded"])
    with pytest.raises(fd.InputError, match=r"cache=\['path'\]: a source \(its items are read, not computed\)"):
        dr.execute(["stats"], inputs={"folder": str(data)}, cache=["path"], cache_dir=tmp_path)


def test_values_of_other_kinds_are_an_error_naming_the_node(data: Path, tmp_path: Path) -> None:
    dr = build()
    got = dr.run_sample(["pair"], index=2, inputs={"folder": str(data)}, cache=["pair"], cache_dir=tmp_path)
    back = dr.run_sample(["pair"], index=2, inputs={"folder": str(data)}, cache=["pair"], cache_dir=tmp_path)
    assert back == got and back["pair"]["shape"] == (3, 4, 4)  # dicts, tuples, numbers, strings round-trip
    with pytest.raises(fd.SampleError, match=r"node 'opaque' .*cache=\['opaque'\] cannot store what 'opaque' "
                                             r"returned: value is a builtins.object"):
        dr.run_sample(["opaque"], index=0, inputs={"folder": str(data)}, cache=["opaque"], cache_dir=tmp_path)


@pytest.mark.procs
def test_cache_max_bytes_leaves_the_rest_uncached_and_counts_it(data: Path, tmp_path: Path) -> None:
    dr = build()
    report = fd.Report()
    dr.execute(["stats"], inputs={"folder": str(data)}, cache=["decoded"], cache_dir=tmp_path, cache_max_bytes=2000,
               report=report)
    c = report.cache["decoded"]
    written = N - c["not_cached"]
    assert 0 < written < N and c["bytes_written"] <= 2000
    calls(data)
    report = fd.Report()
    dr.execute(["stats"], inputs={"folder": str(data), "gain": 2.0}, cache=["decoded"], cache_dir=tmp_path, report=report)
    assert report.cache["decoded"]["hits"] == written
    assert len(calls(data)) == c["not_cached"]
    # The bound is the cache's disk, every node's folder together: full, nothing more is written.
    report = fd.Report()
    used = sum(p.stat().st_size for p in tmp_path.glob("samples/*/*.seg"))
    assert used > 2000  # the run above wrote the rest without a bound
    dr.execute(["stats"], inputs={"folder": str(data), "gain": 4.0}, cache=["scaled"], cache_dir=tmp_path,
               cache_max_bytes=2000, report=report, executor=fd.ProcessExecutor(2), chunk_size=5)
    assert report.cache["scaled"]["not_cached"] == N and report.cache["scaled"]["bytes_written"] == 0
    assert sum(p.stat().st_size for p in tmp_path.glob("samples/*/*.seg")) == used


# --- never stale: each change in turn, hit or miss ----------------------------------------------


class Mutable:
    """A copy of tests/cache_cases/images.py as module ``cache_mutant``, edited and reloaded."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(exist_ok=True)
        self.path = folder / "cache_mutant.py"
        self.path.write_text((ROOT / "tests" / "cache_cases" / "images.py").read_text())
        sys.path.insert(0, str(folder))

    def edit(self, old: str, new: str) -> None:
        text = self.path.read_text()
        assert old in text, old
        self.path.write_text(text.replace(old, new, 1))

    def module(self) -> ModuleType:
        sys.modules.pop("cache_mutant", None)
        importlib.invalidate_caches()
        return importlib.import_module("cache_mutant")

    def close(self) -> None:
        sys.path.remove(str(self.folder))
        sys.modules.pop("cache_mutant", None)


@pytest.fixture()
def mutable(tmp_path: Path) -> Any:
    m = Mutable(tmp_path / "code")
    yield m
    m.close()


def decodes(data: Path, module: ModuleType, cached: str, cache_dir: Path, config: dict[str, Any] | None = None,
            **inputs: Any) -> int:
    """How many samples ``decoded`` ran for in one epoch of a loader caching ``cached``."""
    calls(data)
    loader = build(module, config).dataloader(["scaled"], inputs={"folder": str(data), **inputs}, batch_size=8,
                                              cache=[cached], cache_dir=cache_dir)
    list(loader)
    return len(calls(data))


CHANGES = [
    # (what changes, the node cached, edit (old, new) of the module or None, inputs, config, hit?)
    ("the cached node's code", "decoded", ("return torch.from_numpy(np.load(path))",
                                           "return torch.from_numpy(np.load(path)) * 1"), {}, None, False),
    ("a helper the node calls", "decoded", ('f.write(what + "\\n")', 'f.write(what + "\\n")  # logged'), {}, None,
     False),
    ("code upstream of the cached node", "scaled", ("return torch.from_numpy(np.load(path))",
                                                    "return torch.from_numpy(np.load(path)) + 0"), {}, None, False),
    ("a constant the cached node reads", "scaled", ("SCALE = 2.0", "SCALE = 3.0"), {}, None, False),
    ("an input the cached node reads", "scaled", None, {"gain": 2.0}, None, False),
    ("the config", "decoded", None, {}, {"mode": "other"}, False),
    ("a docstring of a node downstream", "decoded", ("def augmented(scaled: torch.Tensor, sample_rng: "
                                                     "torch.Generator) -> torch.Tensor:\n",
                                                     "def augmented(scaled: torch.Tensor, sample_rng: "
                                                     "torch.Generator) -> torch.Tensor:\n    \"\"\"Noise.\"\"\"\n"),
     {}, None, True),
    ("line numbers (lines added above every node)", "decoded", ("import os\n", "import os\n\n# a comment\n\n"), {},
     None, True),
    ("an input the cached node does not read", "decoded", None, {"gain": 5.0}, None, True),
]


@pytest.mark.parametrize("change", CHANGES, ids=[c[0] for c in CHANGES])
def test_a_change_misses_exactly_when_the_values_may_differ(data: Path, tmp_path: Path, mutable: Mutable,
                                                          change: tuple[Any, ...]) -> None:
    what, cached, edit, inputs, config, hit = change
    cache = tmp_path / "cache"
    assert decodes(data, mutable.module(), cached, cache) == N
    assert decodes(data, mutable.module(), cached, cache) == 0  # nothing changed: every sample hits
    if edit is not None:
        mutable.edit(*edit)
    assert decodes(data, mutable.module(), cached, cache, config, **inputs) == (0 if hit else N), what


def test_a_changed_file_misses_for_its_sample_only(data: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert decodes(data, images, "decoded", cache) == N
    target = data / "img_007.npy"
    np.save(target, np.zeros((3, 4, 4), dtype=np.float32))  # same size, new modification time
    os.utime(target, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    np.save(data / "img_008.npy", np.zeros((3, 4, 5), dtype=np.float32))  # another size
    calls(data)
    loader = build().dataloader(["scaled"], inputs={"folder": str(data)}, batch_size=1, cache=["decoded"],
                                cache_dir=cache)
    shapes = [tuple(b["scaled"].shape) for b in loader]
    assert shapes[8] == (1, 3, 4, 5) and shapes.count((1, 3, 4, 4)) == N - 1
    assert sorted(Path(p).name for p in calls(data)) == ["img_007.npy", "img_008.npy"]


def test_versions_are_part_of_the_key(data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    assert decodes(data, images, "decoded", cache) == N
    from flowdata.run.caching import fingerprint

    real = fingerprint.package_version
    monkeypatch.setattr(fingerprint, "package_version", lambda m: "0.0-other" if m == "torch" else real(m))
    assert decodes(data, images, "decoded", cache) == N


def test_a_moved_cache_dir_still_hits(data: Path, tmp_path: Path) -> None:
    assert decodes(data, images, "decoded", tmp_path / "cache") == N
    shutil.move(tmp_path / "cache", tmp_path / "elsewhere")
    assert decodes(data, images, "decoded", tmp_path / "elsewhere") == 0


# --- never trusted blindly --------------------------------------------------------------------


def _segments(cache: Path) -> list[Path]:
    return sorted(cache.glob("samples/*/*.seg"))


def _corrupt_truncated(seg: Path) -> None:
    seg.write_bytes(seg.read_bytes()[:-7])


def _corrupt_bit_flipped(seg: Path) -> None:
    data = bytearray(seg.read_bytes())
    data[len(data) // 3] ^= 0x10  # inside a record's bytes
    seg.write_bytes(bytes(data))


def _corrupt_foreign(seg: Path) -> None:
    seg.write_bytes(b"PK\x03\x04 this is a zip file, not a segment" * 20)


@pytest.mark.parametrize("damage", [_corrupt_truncated, _corrupt_bit_flipped, _corrupt_foreign],
                         ids=["truncated", "bit-flipped", "foreign"])
def test_a_damaged_segment_is_detected_recomputed_and_reported_once(
        data: Path, tmp_path: Path, damage: Any, caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    dr = build()
    args: dict[str, Any] = dict(inputs={"folder": str(data)}, batch_size=8)
    want = [b["scaled"] for b in dr.dataloader(["scaled"], **args)]
    list(dr.dataloader(["scaled"], cache=["decoded"], cache_dir=cache, **args))
    segments = _segments(cache)
    assert len(segments) == N // 8  # one segment per batch written
    victim = segments[1]
    damage(victim)
    samplecache.forget()  # read the folder afresh, as a new process does
    calls(data)
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        loader = dr.dataloader(["scaled"], cache=["decoded"], cache_dir=cache, **args)
        got = [b["scaled"] for b in loader]
        loader.set_epoch(1)
        list(loader)
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    assert len(calls(data)) == 8  # the damaged segment's samples, computed again once
    said = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(said) == 1 and str(victim) in said[0] and "computed again and written anew" in said[0]
    assert not victim.exists()  # removed: the next run reads the samples written anew
    list(dr.dataloader(["scaled"], cache=["decoded"], cache_dir=cache, **args))
    assert calls(data) == []


@pytest.mark.procs
def test_processes_writing_at_once_leave_a_cache_every_later_run_reads(data: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "tests.cache_cases.run_epoch", str(data), str(cache)]
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    plain = sum(float(b["scaled"].double().sum()) for b in build().dataloader(
        ["scaled"], inputs={"folder": str(data)}, batch_size=4))
    totals = [float(o[0].split()[0]) for o in outs]
    assert totals == [plain] * 3
    calls(data)
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=True)
    assert again.stdout.split() == [repr(plain), str(N)]  # every sample read from what the three wrote
    assert calls(data) == []


def test_the_dataset_reads_the_cache_too(data: Path, tmp_path: Path) -> None:
    dr = build()
    list(dr.dataloader(["scaled"], inputs={"folder": str(data)}, cache=["decoded"], cache_dir=tmp_path))
    calls(data)
    ds = dr.dataset(["scaled"], inputs={"folder": str(data)}, cache=["decoded"], cache_dir=tmp_path)
    assert torch.equal(ds[3]["scaled"], images.decoded(str(data / "img_003.npy")) * images.SCALE)
    assert len(calls(data)) == 1  # the call just above; the dataset read sample 3 from the cache
