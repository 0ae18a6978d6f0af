"""Files that are not what flowdata expects, through the public API: a FIFO (or a socket, a
device, a folder) where flowdata reads a file -- a sample cache segment, a pass cache
entry, an Arrow index, an image, a manifest, a table, a tokenizer --; a full disk during a
run; a streaming position past the end of the epoch; a corrupt tokenizer JSON.

Each test is named after the fault it injects. Opening a FIFO for reading waits for a
writer, so every test that meets one runs under :func:`no_hang`: a hang is a failure
after :data:`HANG_S` seconds (the FIFO is then opened for writing by another process, which ends the wait),
not a stuck suite.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from PIL import Image

import flowdata as fd
import flowdata_modules.image as image
import flowdata_modules.text as text
from flowdata.media import load_image
from flowdata.run.caching import samplecache
from tests.cache_cases import full_disk, images
from tests.ranks_cases import shards_flow

ROOT = Path(__file__).resolve().parents[2]
HANG_S = 60
N = 12


_UNBLOCK = """
import os, sys, time
seconds, mark, fifos = float(sys.argv[1]), sys.argv[2], sys.argv[3:]
time.sleep(seconds)
open(mark, "w").close()
while True:
    for fifo in fifos:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # fails unless a reader waits
        except OSError:
            pass
    time.sleep(0.05)
"""


@contextlib.contextmanager
def no_hang(*fifos: Path, seconds: float = HANG_S) -> Iterator[None]:
    """Fails the block when it is still running after ``seconds``, and unblocks a reader
    stuck opening one of ``fifos``: another process opens it for writing (the reader sees
    an empty file), so it works whatever waits in ``open()`` -- Python, or native code
    that holds the GIL (tokenizers)."""
    mark = Path(tempfile.mkdtemp(prefix="fd-hang-")) / "hung"
    watch = subprocess.Popen([sys.executable, "-c", _UNBLOCK, str(seconds), str(mark), *map(str, fifos)])
    try:
        yield
    finally:
        watch.kill()
        watch.wait()
        hung = mark.exists()
        mark.unlink(missing_ok=True)
        mark.parent.rmdir()
        if hung:
            raise AssertionError(f"still running after {seconds} s: blocked opening {[str(f) for f in fifos]}?")


def _data(folder: Path, n: int = N) -> Path:
    data = folder / "images"
    data.mkdir()
    for i in range(n):
        np.save(data / f"img_{i:03d}.npy", np.random.default_rng(i).normal(i % 5, 1, size=(3, 4, 4)).astype(np.float32))
    return data


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def _stats_and_epoch(data: Path, cache: Path | None) -> tuple[list[float], list[float]]:
    dr = fd.Builder().with_modules(images).build()
    kw: dict[str, Any] = {"cache_dir": str(cache), "cache": ["decoded"]} if cache is not None else {}
    stats = dr.execute(["stats"], inputs={"folder": str(data)}, **kw)["stats"]
    loader = dr.dataloader(["scaled"], inputs={"folder": str(data)}, batch_size=4, **kw)
    epoch = [float(b["scaled"].double().sum()) for b in loader]
    return [float(stats.mean.sum()), float(stats.var.sum())], epoch


def _make(kind: str, path: Path) -> None:
    """Something that is not a regular file at ``path``."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        raise AssertionError(kind)


# --- a FIFO in a cache_dir ----------------------------------------------------------------------


@pytest.mark.procs
@pytest.mark.parametrize("kind,said", [("fifo", "a FIFO (named pipe)"), ("directory", "a directory")])
def test_a_fifo_as_a_sample_cache_segment_is_left_alone_and_warned_once(
        tmp_path: Path, kind: str, said: str, caplog: pytest.LogCaptureFixture) -> None:
    data = _data(tmp_path)
    cache = tmp_path / "cache"
    want = _stats_and_epoch(data, None)
    _stats_and_epoch(data, cache)
    (folder,) = cache.glob("samples/*")
    intruder = folder / f"{'0' * 8}-{'f' * 32}.seg"  # where a segment would be, named like one
    _make(kind, intruder)
    for seg in folder.glob("[1-9]*.seg"):
        seg.unlink()  # every sample computed again, past the intruder
    samplecache.forget()
    with no_hang(intruder), caplog.at_level(logging.WARNING, logger="flowdata"):
        got = _stats_and_epoch(data, cache)
        again = _stats_and_epoch(data, cache)
    assert got == want and again == want
    about = [m for m in _warnings(caplog) if str(intruder) in m]
    assert len(about) == 1 and len(_warnings(caplog)) == 1, _warnings(caplog)
    assert f"is {said}, not a regular file" in about[0] and "left alone" in about[0] and "fix: remove it" in about[0]
    assert os.path.lexists(intruder)  # not flowdata's: never removed


@pytest.mark.procs
@pytest.mark.parametrize("which", ["manifest.json", "npz"])
def test_a_fifo_as_a_pass_cache_manifest_or_state_is_left_alone_and_the_pass_computed(
        tmp_path: Path, which: str, caplog: pytest.LogCaptureFixture) -> None:
    data = _data(tmp_path)
    cache = tmp_path / "cache"
    dr = fd.Builder().with_modules(images).build()
    want = dr.execute(["stats"], inputs={"folder": str(data)}, cache_dir=str(cache))["stats"]
    (entry,) = cache.glob("pass-*")
    target = entry / "manifest.json" if which == "manifest.json" else next(entry.glob("*.npz"))
    target.unlink()
    os.mkfifo(target)
    report = fd.Report()
    with no_hang(target), caplog.at_level(logging.WARNING, logger="flowdata"):
        got = dr.execute(["stats"], inputs={"folder": str(data)}, cache_dir=str(cache), report=report)["stats"]
        dr.execute(["stats"], inputs={"folder": str(data)}, cache_dir=str(cache))
    assert torch.equal(got.mean, want.mean) and torch.equal(got.var, want.var)
    assert report.node_calls.get("decoded") == N  # computed, not loaded
    said = _warnings(caplog)
    assert len(said) == 1 and str(target) in said[0] and "is a FIFO (named pipe), not a regular file" in said[0], said
    assert "fix: remove the entry's folder" in said[0]
    assert target.exists()


@pytest.mark.procs
def test_a_fifo_where_the_arrow_index_goes_is_left_alone(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = _data(tmp_path)
    cache = tmp_path / "cache"
    dr = fd.Builder().with_modules(images).build()
    loader = dr.dataloader(["scaled"], inputs={"folder": str(data)}, batch_size=4, cache_dir=str(cache))
    want = [b["scaled"] for b in loader]
    del loader
    (index,) = cache.glob("*.arrow")
    index.unlink()
    os.mkfifo(index)
    with no_hang(index), caplog.at_level(logging.WARNING, logger="flowdata"):
        loader = dr.dataloader(["scaled"], inputs={"folder": str(data)}, batch_size=4, cache_dir=str(cache))
        got = [b["scaled"] for b in loader]
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    said = _warnings(caplog)
    assert len(said) == 1 and str(index) in said[0] and "a FIFO (named pipe)" in said[0], said
    assert "source 'path'" in said[0] and "fix: remove it" in said[0]
    assert index.exists() and not index.is_file()


# --- a FIFO, a socket or a device where a file is read ------------------------------------------


@pytest.fixture()
def short_dir() -> Iterator[Path]:
    """A folder with a short path: a Unix socket's path is at most 107 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="fd-"))
    try:
        yield folder
    finally:
        for p in folder.iterdir():
            p.unlink()
        folder.rmdir()


def _special(kind: str, folder: Path, name: str) -> tuple[Path, Any]:
    """A FIFO, a socket or a character device under the name ``name``; what keeps it alive."""
    path = folder / name
    if kind == "fifo":
        os.mkfifo(path)
        return path, None
    if kind == "socket":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        return path, sock
    assert kind == "device"
    path.symlink_to("/dev/null")  # a character device (followed like any link)
    return path, None


KINDS = [("fifo", "a FIFO \\(named pipe\\)"), ("socket", "a socket"), ("device", "a character device")]


@pytest.mark.procs
@pytest.mark.parametrize("kind,said", KINDS)
def test_a_fifo_image_path_says_what_it_is_not_that_it_is_empty(short_dir: Path, kind: str, said: str) -> None:
    path, keep = _special(kind, short_dir, "x.png")
    refused = rf"x\.png: is {said}, not a regular file\n  fix: give the path of a media file"
    with no_hang(path), pytest.raises(fd.MediaError, match=refused):
        load_image(str(path))
    if keep is not None:
        keep.close()


@pytest.mark.procs
def test_a_fifo_image_in_a_manifest_is_a_skipped_sample_with_the_reason(tmp_path: Path) -> None:
    folder = tmp_path / "imgs"
    folder.mkdir()
    rows = []
    for i in range(4):
        Image.fromarray(np.full((8, 8, 3), 40 * i, dtype=np.uint8)).save(folder / f"{i}.png")
        rows.append(f"{i}.png,{'ab'[i % 2]}")
    os.mkfifo(folder / "pipe.png")
    rows.insert(2, "pipe.png,a")
    (folder / "manifest.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    dr = fd.Builder().with_modules(image).with_config({"image_size": 8}).build()
    loader = dr.dataloader(["pixels", "label"], inputs={"manifest": str(folder / "manifest.csv")}, batch_size=2,
                           on_error="skip")
    with no_hang(folder / "pipe.png"):
        got = sum(len(b["label"]) for b in loader)
    assert got == 4
    (skip,) = {s.index: s for s in loader.report.skipped}.values()
    assert skip.index == 2 and "pipe.png: is a FIFO (named pipe), not a regular file" in skip.error


@pytest.mark.procs
def test_a_fifo_manifest_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "manifest.csv")
    dr = fd.Builder().with_modules(image).build()
    refused = r"manifest\.csv: the manifest is a FIFO \(named pipe\), not a regular file -- fix: give a path,label CSV"
    with no_hang(tmp_path / "manifest.csv"), pytest.raises(fd.NodeError, match=refused):
        dr.execute(["label_vocab"], inputs={"manifest": str(tmp_path / "manifest.csv")})


@pytest.mark.procs
@pytest.mark.parametrize("name", ["table.csv", "table.parquet"])
def test_a_fifo_table_is_refused_at_once(tmp_path: Path, name: str) -> None:
    os.mkfifo(tmp_path / name)
    dr = fd.Builder().with_modules(text).build()
    refused = rf"table: .*{name} is a FIFO \(named pipe\), not a regular file -- fix: give the path of a CSV or Parquet"
    with no_hang(tmp_path / name), pytest.raises(fd.NodeError, match=refused):
        dr.execute(["vocab"], inputs={"table": str(tmp_path / name)})


@pytest.mark.procs
def test_a_fifo_tokenizer_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "tok.json")
    dr = fd.Builder().with_modules(text).with_config({"tokenizer": str(tmp_path / "tok.json")}).build()
    refused = r"tok\.json is a FIFO \(named pipe\), not a regular file; fix: give the path of a tokenizers JSON file"
    with no_hang(tmp_path / "tok.json"), pytest.raises(fd.NodeError, match=refused):
        dr.execute(["pad_id"], inputs={"table": pa.table({"text": ["a b"], "label": ["x"]})})


# --- a corrupt tokenizer JSON -------------------------------------------------------------------


@pytest.mark.parametrize("content", ['{"version": "1.0", "model": ', "not json at all", '{"version": "1.0"}'])
def test_a_corrupt_tokenizer_json_names_the_file_and_the_fix(tmp_path: Path, content: str) -> None:
    path = tmp_path / "tok.json"
    path.write_text(content)
    dr = fd.Builder().with_modules(text).with_config({"tokenizer": str(path), "max_length": 4}).build()
    table = pa.table({"text": ["a b"], "label": ["x"]})
    for outputs in (["pad_id"], ["token_ids"]):
        with pytest.raises(fd.NodeError, match=rf"tokenizer: {path} is not a tokenizers JSON file that loads "
                                               rf"\({len(content)} bytes\): .+; fix: give the file "
                                               r"Tokenizer.save\(path\) wrote") as caught:
            dr.execute(outputs, inputs={"table": table}) if outputs == ["pad_id"] else dr.run_sample(
                outputs, index=0, inputs={"table": table})
        cause = caught.value.__cause__
        assert isinstance(cause, ValueError) and cause.__cause__ is not None  # the parser's own error, kept
        assert str(cause.__cause__) in str(cause)


# --- a streaming position past the end of the epoch ---------------------------------------------

FLOW = """
from flowdata import Parallel, Sequential


def item(n: int) -> Parallel[int]:
    yield from range(n)


def tick(n: int) -> Sequential[int]:
    yield from range(n)


def x(item: int) -> int:
    return item


def t(tick: int) -> int:
    return tick
"""


@pytest.mark.procs
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("output,streaming", [("x", True), ("t", False), ("x", False)])
def test_a_streaming_position_past_the_end_is_refused_like_an_indexed_one(
        make_module: Callable[[str], Any], workers: int, output: str, streaming: bool) -> None:
    dr = fd.Builder().with_modules(make_module(FLOW)).build()
    args: dict[str, Any] = {"inputs": {"n": 30}, "batch_size": 4, "num_workers": workers, "shuffle": True, "seed": 1}
    if streaming:
        args["streaming"] = True
    first = dr.dataloader([output], **args)
    want = [v for b in first for v in b[output].tolist()]
    state = first.state_dict()  # the start of epoch 1
    assert state["batches_served"] == 0
    loader = dr.dataloader([output], **args)
    with pytest.raises(fd.FlowdataError, match=r"cannot resume: the saved position is impossible \(version 1, "
                                               r"epoch 1, batches_served 999 of 8 batches"):
        loader.load_state_dict({**state, "batches_served": 999})
    with pytest.raises(fd.FlowdataError, match=r"batches_served 9 of 8 batches"):
        loader.load_state_dict({**state, "batches_served": 9})
    loader.load_state_dict({**state, "batches_served": 8})  # at the end: an empty rest of the epoch
    assert [b for b in loader] == []
    loader.load_state_dict({**state, "batches_served": 6})
    assert sum(len(b[output]) for b in loader) == 6  # the last two batches: 4 and 2 samples
    assert len(want) == 30


def test_an_endless_stream_resumed_reads_only_as_far_as_the_position(make_module: Callable[[str], Any]) -> None:
    mod = make_module("""
import itertools
from flowdata import Sequential

PULLED = []


def tick(start: int) -> Sequential[int]:
    for i in itertools.count(start):
        PULLED.append(i)
        yield i


def t(tick: int) -> int:
    return tick
""")
    dr = fd.Builder().with_modules(mod).build()
    loader = dr.dataloader(["t"], inputs={"start": 0}, batch_size=5)
    state = {**loader.state_dict(), "batches_served": 3}
    loader.load_state_dict(state)
    assert max(mod.PULLED, default=0) < 20  # counted as far as batch 3, not to the end of a stream that has none
    assert next(iter(loader))["t"].tolist() == [15, 16, 17, 18, 19]


@pytest.mark.procs
def test_a_stream_in_shards_resumed_past_the_end_of_a_lane_is_refused(workers: int = 0) -> None:
    dr = fd.Builder().with_modules(shards_flow).build()
    data = shards_flow.Shards([list(range(s * 10, s * 10 + 6)) for s in range(2)])
    args: dict[str, Any] = {"inputs": {"data": data}, "batch_size": 2, "num_workers": 2}
    first = dr.dataloader(["ident"], **args)
    it = iter(first)
    next(it)
    state = first.state_dict()
    del it
    lane = next(k for k, v in state["lane_batches"].items() if v)
    bad = {**state, "lane_batches": {**state["lane_batches"], lane: 40}, "batches_served": 40}
    loader = dr.dataloader(["ident"], **args)
    loader.load_state_dict(bad)
    with pytest.raises(fd.FlowdataError, match=rf"cannot resume: the saved position is impossible \(lane {lane} of "
                                               r"the stream of source 'row' served 40 batches of epoch 0, but it "
                                               r"holds \d\)"):
        list(loader)


# --- a full disk --------------------------------------------------------------------------------


def _full_disk_child(scenario: str, data: Path, cache: Path, fsize: int) -> dict[str, Any]:
    """``tests.cache_cases.full_disk`` in a fresh process whose files cannot grow past ``fsize``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tests.cache_cases.full_disk", scenario, str(data), str(cache),
                           str(fsize)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])  # type: ignore[no-any-return]


@pytest.mark.procs
@pytest.mark.parametrize("scenario", ["execute", "execute-pool", "loader", "loader-workers", "stream"])
def test_a_full_disk_during_a_run_warns_once_and_counts_only_bytes_written(tmp_path: Path, scenario: str) -> None:
    # Images of 27 KB: a segment of one fits under the limit, a segment of two does not;
    # one sample in seven fails downstream of the cached node (a chunk computed again).
    data = tmp_path / "images"
    data.mkdir()
    for i in range(56):
        np.save(data / f"img_{i:03d}.npy", np.full((3, 48, 48), float(i), dtype=np.float32))
    cache = tmp_path / "cache"
    got = _full_disk_child(scenario, data, cache, 40_000)
    said = [m for m in got["said"] if "cannot be written" in m]
    assert len(said) == 1 and len(got["said"]) == 1 and str(cache) in said[0], got["said"]
    counts = got["cache"]["decoded"]
    assert counts["misses"] == 48 and counts["not_cached"] <= counts["misses"], counts
    # What the report says was written is what a later run reads back, record for record.
    stored = counts["misses"] - counts["not_cached"]
    dr = fd.Builder().with_modules(full_disk).build()
    report = fd.Report()
    dr.execute(["total_again"], inputs={"folder": str(data)}, cache=["decoded"], cache_dir=str(cache), on_error="skip",
               report=report)
    again = report.cache["decoded"]
    assert (again["hits"], again["bytes_read"]) == (stored, counts["bytes_written"]), (counts, again)
