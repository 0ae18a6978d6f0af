"""A ``cache_dir`` that cannot be written, through the public API: read-only, full, a file in
the way -- for the pass cache, the sample cache (``cache=[...]``) and a loader's Arrow index
alike. Each run delivers every sample and the values of an uncached run, gives one warning
naming the ``cache_dir``, and leaves nothing partial there. Also: a damaged segment that
several workers meet is warned about once, and the pass cache over a
``datasets.IterableDataset`` hits in a new process.

Root ignores permission bits, so a read-only folder is tried in a fresh process
(:mod:`tests.cache_cases.unwritable_child`) that drops to the user ``nobody`` when the tests
run as root (as the folder's owner otherwise), after a first run that imports what the run
needs; a full disk is a process whose file size limit (``RLIMIT_FSIZE``, with ``SIGXFSZ``
ignored) makes a write past it fail with ``EFBIG``, as ``ENOSPC`` would.
"""

from __future__ import annotations

import gc
import glob
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch

import flowdata as fd
from flowdata.run.caching import samplecache
from tests.cache_cases import images
from tests.cache_cases.unwritable_child import Said as _Said
from tests.cache_cases.unwritable_child import run as _run

pytestmark = pytest.mark.procs  # every test here starts processes (workers, pools or programs)

ROOT = Path(__file__).resolve().parents[2]
N = 40


@pytest.fixture()
def open_folder() -> Iterator[Path]:
    """A folder in the system's temporary directory that anyone may enter (``nobody`` reads
    the images there and writes the decode log)."""
    folder = Path(tempfile.mkdtemp(prefix="fd-unwritable-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for p in [folder, *folder.rglob("*")]:  # read-only folders are made writable to be removed
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(folder)


def _images(folder: Path, side: int) -> Path:
    data = folder / "images"
    data.mkdir()
    for i in range(N):
        value = np.random.default_rng(i).normal(i % 5, 1, size=(3, side, side)).astype(np.float32)
        np.save(data / f"img_{i:03d}.npy", value)
    for p in data.iterdir():
        p.chmod(0o644)
    data.chmod(0o755)
    log = folder / "log"
    log.mkdir()
    log.chmod(0o777)
    return data




def in_child(scenario: str, *args: Any, warm: tuple[Any, ...] | None = None, drop: bool = False,
             fsize: int | None = None, log: str | None = None) -> tuple[Any, list[str]]:
    """A scenario of :mod:`tests.cache_cases.unwritable_child` in a fresh process (as
    ``nobody`` when ``drop`` and root, after a ``warm`` run; with a file size limit of
    ``fsize`` bytes): what it returned, and the warnings logged there."""
    spec = {"scenario": scenario, "args": list(args), "warm": list(warm) if warm else None, "drop": drop,
            "fsize": fsize, "log": log}
    # The node modules run from a copy that anyone may read: the cache key holds their
    # source text, which ``nobody`` could not read from a checkout under a private folder
    # (a clone in ``mktemp -d``), and would then key by name alone, missing every entry.
    code = Path(tempfile.mkdtemp(prefix="fd-unwritable-code-"))
    try:
        (code / "tests" / "cache_cases").mkdir(parents=True)
        shutil.copy(ROOT / "tests" / "__init__.py", code / "tests")
        for module in (ROOT / "tests" / "cache_cases").glob("*.py"):
            shutil.copy(module, code / "tests" / "cache_cases")
        for p in [code, *code.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{ROOT}"}
        done = subprocess.run([sys.executable, "-m", "tests.cache_cases.unwritable_child", json.dumps(spec)],
                              cwd=code, env=env, capture_output=True, text=True, timeout=600)
    finally:
        shutil.rmtree(code)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    got = json.loads(lines[-1][len("RESULT "):])
    return got["out"], got["said"]


def read_only(folder: Path) -> None:
    """Every folder under ``folder`` (itself included) read-only, every file too."""
    for p in [*folder.rglob("*"), folder]:
        p.chmod(0o555 if p.is_dir() else 0o444)


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def about(said: list[str], folder: Path) -> list[str]:
    return [m for m in said if "cannot be written" in m and str(folder) in m]


def _decoded(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


# --- read-only ----------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_a_read_only_cache_dir_warns_once_and_the_run_computes_everything(open_folder: Path, workers: int) -> None:
    data = _images(open_folder, 4)
    want = _run(str(data), None, 0)
    cache = open_folder / "cache"
    cache.mkdir()
    read_only(cache)
    got, said = in_child("run", str(data), str(cache), workers, drop=True,
                         warm=(str(data), str(open_folder / "warm"), workers))
    assert (got["stats"], got["epoch"], got["samples"]) == (want["stats"], want["epoch"], N)
    assert len(about(said, cache)) == 1, said  # the pass cache, the samples and the index: one warning
    assert said == about(said, cache), said
    assert "going on without caching" in said[0] and "PermissionError" in said[0]
    assert list(cache.iterdir()) == []
    assert got["execute"]["decoded"] == {"hits": 0, "misses": N, "bytes_read": 0, "bytes_written": 0,
                                         "not_cached": N}
    assert got["loader"]["decoded"]["bytes_written"] == 0
    assert got["loader"]["decoded"]["not_cached"] == got["loader"]["decoded"]["misses"] > 0


def test_a_read_only_cache_dir_that_holds_entries_is_read(open_folder: Path) -> None:
    data = _images(open_folder, 4)
    cache = open_folder / "cache"
    want = _run(str(data), str(cache), 2)  # fills it
    before = files_under(cache)
    read_only(cache)
    log = open_folder / "log" / "decoded.log"
    got, said = in_child("run", str(data), str(cache), 2, drop=True, log=str(log),
                         warm=(str(data), str(open_folder / "warm"), 2))
    assert (got["stats"], got["epoch"], got["samples"]) == (want["stats"], want["epoch"], N)
    assert _decoded(log) == []  # every image read back: the statistics pass loaded, the epoch hit
    assert got["loader"]["decoded"]["hits"] == N and got["loader"]["decoded"]["misses"] == 0
    # Only the loader's new Arrow index wanted to write there: it went to a temporary folder.
    assert len(about(said, cache)) == 1 and said == about(said, cache), said
    assert files_under(cache) == before


# --- a full disk --------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_a_full_cache_dir_warns_once_and_leaves_nothing_partial(open_folder: Path, workers: int) -> None:
    # Images of 27 KB: a segment of one image fits under the limit, one of two or more does
    # not, nor does the statistics entry (float64 mean and variance of 55 KB each).
    data = _images(open_folder, 48)
    want = _run(str(data), None, 0)
    cache = open_folder / "cache"
    got, said = in_child("run", str(data), str(cache), workers, fsize=40_000)
    assert (got["stats"], got["epoch"], got["samples"]) == (want["stats"], want["epoch"], N)
    assert len(about(said, cache)) == 1 and said == about(said, cache), said
    assert "File too large" in said[0]
    assert not list(cache.glob("pass-*")) and not list(cache.glob(".*"))
    for path in files_under(cache):  # what was written whole stays; nothing else
        assert path.stat().st_size > 0 and not path.name.startswith(".") and not path.name.endswith(".tmp"), path
        assert path.suffix in (".seg", ".arrow"), path
    for arrow in cache.glob("*.arrow"):
        assert len(pa.ipc.open_file(str(arrow)).read_all()) == N
    # The segments that were written read back whole: a later run finds nothing damaged.
    stored = len(list(cache.glob("samples/*/*.seg")))
    samplecache.forget()
    caplog_said = _Said()
    logging.getLogger("flowdata").addHandler(caplog_said)
    try:
        again = _run(str(data), str(cache), 0)
    finally:
        logging.getLogger("flowdata").removeHandler(caplog_said)
    assert (again["stats"], again["epoch"]) == (want["stats"], want["epoch"])
    assert caplog_said.messages == []
    assert again["execute"]["decoded"]["hits"] >= stored > 0


@pytest.mark.parametrize("workers", [0, 2])
def test_an_index_that_no_folder_can_take_is_kept_in_memory(open_folder: Path, workers: int) -> None:
    # 150,000 items: the first Arrow batch (65,536 items) is written, the second passes the
    # limit -- in cache_dir and in the temporary folder alike. What was written is read back.
    cache = open_folder / "cache"
    got, said = in_child("index", str(cache), 150_000, workers, fsize=800_000)
    assert got == {"ok": True, "samples": 150_000, "scratch": []}
    assert len(about(said, cache)) == 1, said
    memory = [m for m in said if "kept in memory" in m]
    assert len(memory) == 1 and "source 'item'" in memory[0] and len(said) == 2, said
    assert files_under(cache) == []


# --- a file in the way --------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_a_file_in_the_way_of_the_cache_dir(open_folder: Path, workers: int,
                                            caplog: pytest.LogCaptureFixture) -> None:
    data = _images(open_folder, 4)
    want = _run(str(data), None, 0)
    blocker = open_folder / "cache"
    blocker.write_text("not a folder")
    first = str(sorted(data.iterdir())[0])
    dr = fd.Builder().with_modules(images).build()
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        got = _run(str(data), str(blocker), workers)
        one = dr.run_sample(["scaled"], item=first, cache=["decoded"], cache_dir=blocker)["scaled"]
        ds = dr.dataset(["scaled"], inputs={"folder": str(data)}, cache=["decoded"], cache_dir=blocker)
        row = ds[0]["scaled"]
    assert torch.equal(one, row) and torch.equal(one, images.scaled(images.decoded(first)))
    assert (got["stats"], got["epoch"], got["samples"]) == (want["stats"], want["epoch"], N)
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and "cannot be written" in said[0] and str(blocker) in said[0], said
    assert blocker.read_text() == "not a folder"
    del ds
    gc.collect()  # the indexes, in temporary folders, go with the loader and the dataset
    assert not glob.glob(os.path.join(tempfile.gettempdir(), f"flowdata-index-{os.getpid()}-*"))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_file_in_the_way_of_the_sample_cache_only(open_folder: Path, workers: int,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    data = _images(open_folder, 4)
    want = _run(str(data), None, 0)
    cache = open_folder / "cache"
    cache.mkdir()
    (cache / "samples").write_text("in the way")
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        got = _run(str(data), str(cache), workers)
    assert (got["stats"], got["epoch"], got["samples"]) == (want["stats"], want["epoch"], N)
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and "cannot be written" in said[0] and str(cache) in said[0], said
    assert len(list(cache.glob("pass-*"))) == 1  # the pass cache, beside it, is written
    assert (cache / "samples").read_text() == "in the way"
    assert got["loader"]["decoded"]["not_cached"] == got["loader"]["decoded"]["misses"]


# --- a damaged segment, met by several workers ---------------------------------------------------


def test_a_damaged_segment_met_by_two_workers_is_warned_once(open_folder: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    data = _images(open_folder, 4)
    want = _run(str(data), None, 0)
    cache = open_folder / "cache"
    dr = fd.Builder().with_modules(images).build()
    dr.execute(["stats"], inputs={"folder": str(data)}, cache=["decoded"], cache_dir=cache)
    for seg in cache.glob("samples/*/*.seg"):
        seg.write_bytes(b"not a segment" * 50)  # every worker meets them
    shutil.rmtree(next(cache.glob("pass-*")))
    samplecache.forget()
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        got = _run(str(data), str(cache), 2)
    assert (got["stats"], got["epoch"]) == (want["stats"], want["epoch"])
    said = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    damaged = {m.split()[3] for m in said}
    assert len(said) == len(damaged) > 1, said  # each segment once, in the main process
    assert not any(os.path.exists(p) for p in damaged)


# --- the pass cache over a stream, in a new process ---------------------------------------------


@pytest.mark.parametrize("kind,api", [("parquet", "dataloader"), ("memory", "execute")])
def test_the_pass_cache_over_an_iterable_dataset_hits_in_a_new_process(tmp_path: Path, kind: str, api: str) -> None:
    import datasets

    data = tmp_path / "data"
    data.mkdir()
    for s in range(4):
        datasets.Dataset.from_dict({"x": [float(s * 100 + i % 7) for i in range(30)]}).to_parquet(
            str(data / f"part-{s}.parquet"))
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    env.pop("PYTHONHASHSEED", None)  # each process its own hash seed
    cmd = [sys.executable, "-m", "tests.cache_cases.stream_stats", kind, str(data), str(cache), api]
    runs = [subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), [r.stderr[-3000:] for r in runs]
    first, second = (r.stdout.split() for r in runs)
    delivered = "120" if api == "dataloader" else "0"
    assert first[1:] == ["miss", delivered] and second == [first[0], "hit", delivered], (first, second)
    assert len(list(cache.glob("pass-*"))) == 1
