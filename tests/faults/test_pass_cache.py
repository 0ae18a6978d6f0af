"""Fault injection on the pass cache: each test is named after the fault it injects. Two
writers of one entry at once, processes sharing a cache_dir, a file in its way, an entry
whose checksums match but whose layout is wrong, an index build that fails, and
everything a pass reads changed in turn: nothing stale is ever read, nothing is left half
written.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import flowdata as fd
from flowdata.run.caching.passcache import PassCache


STATS = """
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford

def x(n: int) -> Parallel[float]:
    yield from (float(i % 17) for i in range(n))

@reduce(Welford)
def stats(x: Collect[float]) -> Stats: ...
"""


def _same(a: Any, b: Any) -> bool:
    return all(getattr(a, f).numpy().tobytes() == getattr(b, f).numpy().tobytes() for f in ("mean", "var", "count"))


def test_two_writers_store_the_same_entry_at_once(tmp_path: Path) -> None:
    cache = PassCache(tmp_path)
    states = {"stats": {"a": np.arange(3.0)}}
    errors: list[BaseException] = []
    entries: list[str | None] = []

    def store() -> None:
        try:
            entries.append(cache.store("k" * 64, states, {}))
        except BaseException as exc:  # what a crashing writer would leave
            errors.append(exc)

    threads = [threading.Thread(target=store) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(entries)) == 1 and entries[0] is not None
    loaded = cache.load("k" * 64, ["stats"])
    assert loaded is not None and loaded["stats"]["a"].tolist() == [0.0, 1.0, 2.0]
    assert [p.name for p in tmp_path.iterdir()] == [Path(entries[0]).name]  # no temporary left


def _run_pass(module_dir: str, cache_dir: str, queue: Any) -> None:
    import sys

    sys.path.insert(0, module_dir)
    import stats_flow

    dr = fd.Builder().with_modules(stats_flow).build()
    out = dr.execute(["stats"], inputs={"n": 5000}, cache_dir=cache_dir)["stats"]
    queue.put(float(out.mean))


@pytest.mark.procs
def test_several_processes_share_one_cache_dir(tmp_path: Path) -> None:
    (tmp_path / "stats_flow.py").write_text(STATS)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_run_pass, args=(str(tmp_path), str(tmp_path / "cache"), queue)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    means = [queue.get(timeout=5) for _ in procs]
    assert len(set(means)) == 1
    assert len(list((tmp_path / "cache").glob("pass-*"))) == 1


def test_a_file_in_the_way_of_cache_dir(build: Callable[..., fd.Driver], tmp_path: Path,
                                        caplog: pytest.LogCaptureFixture) -> None:
    dr = build(STATS)
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    expected = dr.execute(["stats"], inputs={"n": 300})["stats"]
    with caplog.at_level(logging.WARNING, logger="flowdata.cache"):
        got = dr.execute(["stats"], inputs={"n": 300}, cache_dir=blocker)["stats"]
        again = dr.execute(["stats"], inputs={"n": 300}, cache_dir=blocker)["stats"]
    assert _same(got, expected) and _same(again, expected)
    warnings = [r.getMessage() for r in caplog.records if "cannot be written" in r.getMessage()]
    assert len(warnings) == 1 and str(blocker) in warnings[0], warnings
    assert blocker.read_text() == "not a folder"
    loader = dr.dataloader(["x"], inputs={"n": 10}, cache_dir=blocker, batch_size=5)
    assert [v for b in loader for v in b["x"].tolist()] == [float(i % 17) for i in range(10)]


def test_an_entry_with_matching_checksums_but_the_wrong_layout(build: Callable[..., fd.Driver], tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    import hashlib
    import io

    dr = build(STATS)
    expected = dr.execute(["stats"], inputs={"n": 300}, cache_dir=tmp_path)["stats"]
    (entry,) = tmp_path.glob("pass-*")
    manifest = json.loads((entry / "manifest.json").read_text())
    meta = manifest["nodes"]["stats"]
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, unrelated=np.zeros(2))  # a valid file of the wrong layout
    (entry / meta["file"]).write_bytes(buf.getvalue())
    meta["sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()
    (entry / "manifest.json").write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        got = dr.execute(["stats"], inputs={"n": 300}, cache_dir=tmp_path)["stats"]
    assert _same(got, expected)
    assert any("does not restore" in r.getMessage() for r in caplog.records)


FAILING_SOURCE = """
from flowdata import Parallel

def item(n: int) -> Parallel[int]:
    for i in range(n):
        if i == 70_000:
            raise OSError("disk gone")
        yield i

def doubled(item: int) -> int:
    return 2 * item
"""


def test_an_index_build_that_fails_leaves_nothing(build: Callable[..., fd.Driver], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    stale = temp / "flowdata-index-999999999-abc"  # a killed run's index (no such pid)
    stale.mkdir()
    (stale / "item-1.arrow").write_bytes(b"x")
    dr = build(FAILING_SOURCE)
    with pytest.raises(fd.NodeError, match=r"OSError: disk gone \(while producing sample 70000\)"):
        dr.dataloader(["doubled"], inputs={"n": 100_000})
    assert list(temp.iterdir()) == []  # neither this run's partial index nor the stale one
    cache = tmp_path / "cache"
    with pytest.raises(fd.NodeError, match=r"disk gone"):
        dr.dataloader(["doubled"], inputs={"n": 100_000}, cache_dir=cache)
    assert list(cache.glob("*.arrow")) == []


MUTABLE = """
import os
import numpy as np
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford

SCALE = {scale}
CALLS = []

def _helper(v: float) -> float:
    return v * {helper}

def unrelated(n: int) -> int:
    {unrelated}
    return n

def clip(folder: str, n: int) -> Parallel[dict[str, list[str]]]:
    for i in range(n):
        yield {{"frames": [os.path.join(folder, f"f{{i}}-{{j}}.npy") for j in range(2)]}}

def value(clip: dict[str, list[str]], data_path: str) -> float:
    CALLS.append(1)
    frames = sum(float(np.load(p)[0]) for p in clip["frames"])
    return _helper(frames * SCALE + float(np.load(data_path)[0]))

@reduce(Welford)
def stats(value: Collect[float]) -> Stats: ...
"""


def test_the_pass_cache_misses_whenever_what_the_pass_reads_changes(make_module: Callable[[str], Any],
                                                                    tmp_path: Path) -> None:
    import shutil
    import time

    folder = tmp_path / "frames"
    folder.mkdir()
    for i in range(6):
        for j in range(2):
            np.save(folder / f"f{i}-{j}.npy", np.array([float(i + j)]))
    data = tmp_path / "table.npy"
    np.save(data, np.array([3.0]))
    cache = tmp_path / "cache"
    inputs = {"folder": str(folder), "n": 6, "data_path": str(data)}
    base = {"scale": "1.0", "helper": "2.0", "unrelated": "pass"}

    def computed(cache_dir: Path = cache, **change: str) -> bool:
        """Runs the pass; True when it was computed (a miss), False when loaded (a hit)."""
        module = make_module(MUTABLE.format(**{**base, **change}))
        dr = fd.Builder().with_modules(module).build()
        dr.execute(["stats"], inputs=inputs, cache_dir=cache_dir)
        return bool(module.CALLS)

    assert computed()  # cold
    assert not computed()  # the same code, in a module of another name: a hit
    assert not computed(unrelated="x = 1  # reformatted, and a comment")  # not reached: a hit
    moved = tmp_path / "moved"
    shutil.copytree(cache, moved)
    assert not computed(cache_dir=moved)  # the cache folder moved: a hit
    assert computed(scale="100.0")  # a module constant the node reads
    assert computed(helper="3.0")  # a private helper the node calls
    np.save(data, np.array([4.0, 0.0]))  # a data file named by an input
    assert computed()
    assert not computed()
    time.sleep(0.01)
    np.save(folder / "f2-1.npy", np.array([9.0]))  # a file named deep inside an item
    os.utime(folder / "f2-1.npy", ns=(time.time_ns(), time.time_ns()))
    assert computed()
    assert not computed()
