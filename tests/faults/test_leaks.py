"""Fault injection, leaks: each test is named after the fault it injects. Nothing that a run
writes accumulates -- loaders over one source share one index file, what a killed writer
left half written is removed by the next run (and said), and so are the scratch folders of
a killed run, whatever the next run does."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import flowdata as fd
from flowdata.run.caching.passcache import PassCache
from flowdata.run.caching import samplecache
from flowdata.run.writers import HOST

ITEMS = """
from flowdata import Collect, Parallel

def item(n: int, first: int = 0) -> Parallel[dict]:
    for i in range(first, first + n):
        yield {"path": f"clip-{i}.wav", "label": i % 3}

def label(item: dict) -> int:
    return item["label"]

def scaled(label: int) -> float:
    return 0.5 * label

def all_scaled(scaled: Collect[float]) -> list[float]:
    return list(scaled)
"""


def _dead_pid() -> int:
    """The pid of a process that has ended (a killed writer's)."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(proc.stdout)


def _in_child(script: str, tmp_path: Path, env: dict[str, str] | None = None) -> None:
    """Runs ``script`` in a new process (its own process group) until it prints 'ready',
    then kills the group with SIGKILL: a writer killed where the script stops."""
    path = tmp_path / f"child_{time.monotonic_ns()}.py"
    path.write_text(script)
    proc = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)


def _said(caplog: pytest.LogCaptureFixture, part: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if part in r.getMessage()]


# --- the Arrow index ------------------------------------------------------------------------------


def test_twenty_loaders_over_one_source_share_one_index_file(build: Callable[..., fd.Driver], tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    dr = build(ITEMS)
    loaders = [dr.dataloader(["label"], inputs={"n": 5000}, cache_dir=cache, batch_size=1000) for _ in range(20)]
    files = list(cache.glob("*.arrow"))
    assert len(files) == 1 and [p.name for p in cache.iterdir()] == [files[0].name]
    assert dr.dataset(["label"], inputs={"n": 5000}, cache_dir=cache).index.path == str(files[0])
    assert [v for b in loaders[7] for v in b["label"].tolist()] == [i % 3 for i in range(5000)]
    # Other items are another file (never the first one reused); the first one is not changed.
    before = files[0].read_bytes()
    other = dr.dataloader(["label"], inputs={"n": 5000, "first": 1}, cache_dir=cache, batch_size=1000)
    assert len(list(cache.glob("*.arrow"))) == 2 and files[0].read_bytes() == before
    assert [v for b in other for v in b["label"].tolist()] == [(i + 1) % 3 for i in range(5000)]


def test_an_index_file_damaged_under_its_name_is_written_anew(build: Callable[..., fd.Driver], tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    dr = build(ITEMS)
    dr.dataloader(["label"], inputs={"n": 300}, cache_dir=cache)
    (index,) = cache.glob("*.arrow")
    index.write_bytes(index.read_bytes()[:-100])  # truncated, under the name its contents had
    loader = dr.dataloader(["label"], inputs={"n": 300}, cache_dir=cache, batch_size=100)
    assert [p.name for p in cache.glob("*.arrow")] == [index.name]
    assert len(pa.ipc.open_file(str(index)).read_all()) == 300
    assert [v for b in loader for v in b["label"].tolist()] == [i % 3 for i in range(300)]


SLOW_SOURCE = """
import sys, time
sys.path.insert(0, {folder!r})
import flowdata as fd
from flowdata import Parallel

def item(n: int) -> Parallel[int]:
    for i in range(n):
        if i == 70_000:  # the first Arrow batch (65,536 items) is in the file
            print("ready", flush=True)
            time.sleep(3600)
        yield i

def doubled(item: int) -> int:
    return 2 * item

dr = fd.Builder().with_modules(sys.modules[__name__]).build()
dr.dataloader(["doubled"], inputs={{"n": 100_000}}, cache_dir={cache!r})
"""


@pytest.mark.procs
def test_a_loader_killed_while_writing_its_index(build: Callable[..., fd.Driver], tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    _in_child(SLOW_SOURCE.format(folder=str(tmp_path), cache=str(cache)), tmp_path)
    (left,) = cache.iterdir()  # the file it was writing
    size = left.stat().st_size
    assert size > 0 and left.name.startswith(".item-") and left.name.endswith(".arrow.tmp")
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        ds = build(ITEMS).dataset(["label"], inputs={"n": 10}, cache_dir=cache)
    assert [p.name for p in cache.iterdir()] == [os.path.basename(ds.index.path)]
    assert _said(caplog, "temporary index") == [
        f"cache_dir {cache}: removed 1 temporary index file ({size:,} bytes) left by writers that were killed "
        "while writing"]


# --- the sample cache -----------------------------------------------------------------------------


KILLED_IN_FLUSH = """
import os, sys, time
import flowdata as fd
import flowdata.run.caching.store as store

sys.path.insert(0, {folder!r})
import {module}

def replace(src, dst):  # the segment is written whole, not yet renamed into place
    print("ready", flush=True)
    time.sleep(3600)

store.os.replace = replace
dr = fd.Builder().with_modules({module}).build()
dr.execute(["all_scaled"], inputs={{"n": 40}}, cache=["label"], cache_dir={cache!r})
"""


@pytest.mark.procs
def test_a_writer_killed_mid_segment(make_module: Callable[..., Any], tmp_path: Path,
                                     caplog: pytest.LogCaptureFixture) -> None:
    module = make_module(ITEMS)
    cache = tmp_path / "cache"
    _in_child(KILLED_IN_FLUSH.format(folder=str(tmp_path), module=module.__name__, cache=str(cache)), tmp_path)
    (left,) = cache.glob("samples/*/.*.tmp")
    size = left.stat().st_size
    assert size > 0 and f"~{HOST}" in left.name and not list(cache.glob("samples/*/*.seg"))
    dr = fd.Builder().with_modules(module).build()
    samplecache.forget()  # a new process
    report = fd.Report()
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        got = dr.execute(["all_scaled"], inputs={"n": 40}, cache=["label"], cache_dir=cache, report=report)
    assert got["all_scaled"] == [0.5 * (i % 3) for i in range(40)]
    assert not left.exists() and not list(cache.glob("samples/*/.*"))
    assert report.cache["label"]["misses"] == 40 and len(list(cache.glob("samples/*/*.seg"))) >= 1
    assert _said(caplog, "temporary segment") == [
        f"sample cache {cache / 'samples'}: removed 1 temporary segment ({size:,} bytes) left by writers that were "
        "killed while writing"]


def test_a_segment_being_written_counts_under_cache_max_bytes(make_module: Callable[..., Any],
                                                              tmp_path: Path) -> None:
    module = make_module(ITEMS)
    dr = fd.Builder().with_modules(module).build()
    report = fd.Report()
    dr.execute(["all_scaled"], inputs={"n": 40}, cache=["label"], cache_dir=tmp_path, report=report)
    (folder,) = tmp_path.glob("samples/*")
    # Another writer, alive (this process, on this machine), is half way through 10 kB.
    (folder / f".{os.getpid()}-{'a' * 32}.seg~{HOST}.tmp").write_bytes(b"x" * 10_000)
    samplecache.forget()
    report = fd.Report()
    dr.execute(["all_scaled"], inputs={"n": 40, "first": 40}, cache=["label"], cache_dir=tmp_path, cache_max_bytes=9_000,
               report=report)
    assert report.cache["label"]["not_cached"] == 40 and report.cache["label"]["bytes_written"] == 0
    assert (folder / f".{os.getpid()}-{'a' * 32}.seg~{HOST}.tmp").exists()  # a live writer's: kept


@pytest.mark.procs
def test_temporary_segments_of_writers_elsewhere(make_module: Callable[..., Any], tmp_path: Path) -> None:
    module = make_module(ITEMS)
    dr = fd.Builder().with_modules(module).build()
    dr.execute(["all_scaled"], inputs={"n": 4}, cache=["label"], cache_dir=tmp_path)
    (folder,) = tmp_path.glob("samples/*")
    live, dead = os.getpid(), _dead_pid()
    hour = time.time() - 2 * 3600
    names = {
        f".{dead}-{'b' * 32}.seg~{HOST}.tmp": None,  # this machine, writer gone: removed
        f".{live}-{'c' * 32}.seg~{HOST}.tmp": None,  # this machine, writer running: kept
        f".{dead}-{'d' * 32}.seg~other-host.tmp": None,  # another machine, just written: kept
        f".{dead}-{'e' * 32}.seg~other-host.tmp ": hour,  # not one of ours (a space): kept
        f".{dead}-{'f' * 32}.seg~other-host.tmp": hour,  # another machine, untouched for 2 hours: removed
        f".{dead}-{'0' * 32}.seg.tmp": hour,  # an older flowdata's (no host), untouched for 2 hours: removed
    }
    for name, when in names.items():
        (folder / name).write_bytes(b"x")
        if when is not None:
            os.utime(folder / name, (when, when))
    samplecache.forget()
    dr.execute(["all_scaled"], inputs={"n": 4}, cache=["label"], cache_dir=tmp_path)
    assert sorted(p.name for p in folder.glob(".*")) == sorted(list(names)[1:4])


# --- the pass cache -------------------------------------------------------------------------------


@pytest.mark.procs
def test_a_pass_cache_writer_killed_mid_entry(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    dead = _dead_pid()
    killed = tmp_path / f".tmp-{dead}~{HOST}-k1ll3d_"  # what a writer killed mid-entry leaves
    killed.mkdir()
    (killed / "x.npz").write_bytes(b"x" * 1234)
    older = tmp_path / ".tmp-abcd1234"  # an older flowdata's, untouched for 2 hours
    older.mkdir()
    hour = time.time() - 2 * 3600
    os.utime(older, (hour, hour))
    running = tmp_path / f".tmp-{os.getpid()}~{HOST}-running"  # a writer at work: kept
    running.mkdir()
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        entry = PassCache(tmp_path).store("k" * 64, {"stats": {"a": np.arange(3.0)}}, {})
    assert entry is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([running.name, os.path.basename(entry)])
    assert _said(caplog, "temporary entr") == [
        f"pass cache {tmp_path}: removed 2 temporary entries (1,234 bytes) left by writers that were killed "
        "while writing"]


# --- scratch folders ------------------------------------------------------------------------------


KILLED_WITH_A_POOL = """
import sys, time
sys.path.insert(0, {folder!r})
import flowdata as fd
import {module}

dr = fd.Builder().with_modules({module}).build()
pool = fd.ProcessExecutor(1)
dr.execute(["all_scaled"], inputs={{"n": 4}}, executor=pool)  # the pool's context folder
print("ready", flush=True)
time.sleep(3600)
"""


@pytest.mark.procs
def test_a_killed_run_leaves_a_scratch_folder_the_next_build_removes(make_module: Callable[..., Any], tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    module = make_module(ITEMS)
    temp = tmp_path / "tmp"
    temp.mkdir()
    _in_child(KILLED_WITH_A_POOL.format(folder=str(tmp_path), module=module.__name__), tmp_path,
              env={"TMPDIR": str(temp)})
    (left,) = temp.iterdir()
    assert left.name.startswith("flowdata-context-")
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    fd.Builder().with_modules(module).build()  # a run that makes no scratch folder of its own
    assert list(temp.iterdir()) == []


@pytest.mark.procs
@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="start times are read from /proc (Linux)")
def test_a_scratch_folder_whose_pid_was_reused(make_module: Callable[..., Any], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    module = make_module(ITEMS)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        reused = temp / f"flowdata-index-{other.pid}-reused"  # made an hour before that process started
        reused.mkdir()
        hour = time.time() - 3600
        os.utime(reused, (hour, hour))
        mine = temp / f"flowdata-index-{other.pid}-current"  # made by it, as far as anyone can tell: kept
        mine.mkdir()
        fd.Builder().with_modules(module).build()
        assert [p.name for p in temp.iterdir()] == [mine.name]
    finally:
        other.kill()
        other.wait()
