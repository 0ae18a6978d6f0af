"""Small values in the sample cache: a chunk's values of a node as one column record, through the public API.

Every kind a column record holds comes back bit for bit, in chunks of mixed lengths, with
no header per sample on disk; other kinds keep one record per value; a column node's
whole-chunk hit is one tensor again; the text module's ``ids`` (ragged lists of ints)
give the same batches warm, cold and uncached, shuffled, at 0 and 2 workers; a damaged
record is computed again alone and said once; a segment of the older format is left out;
samples are keyed by their items, not their positions (a new first sample misses alone),
and a file a table's cell names is part of its row's key.

Nodes are in tests/cache_cases/small_values.py; ``CALLS`` lists what the cached nodes computed.
"""

from __future__ import annotations

import json
import logging
import os
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import flowdata as fd
from flowdata.run.caching import samplecache
from flowdata_modules import text
from tests.cache_cases import images, small_values
from tests.run.caching.test_codec import same

N = 64


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    small_values.CALLS.clear()
    yield
    small_values.CALLS.clear()
    samplecache.forget()


def calls() -> list[str]:
    got = list(small_values.CALLS)
    small_values.CALLS.clear()
    return got


def driver() -> fd.Driver:
    return fd.Builder().with_modules(small_values).build()


def _raw(v: Any) -> int:
    """A value's bytes at most, as a column record holds them (offsets not counted)."""
    if isinstance(v, torch.Tensor):
        return v.numel() * v.element_size()
    if isinstance(v, (np.ndarray, np.generic)):
        return int(v.nbytes)
    if isinstance(v, list):
        return 8 * len(v)
    if isinstance(v, str):
        return len(v.encode("utf-8", "surrogatepass"))
    if isinstance(v, bytes):
        return len(v)
    return 8


@pytest.mark.parametrize("kind", [*small_values.PACKED, *small_values.LOOSE])
def test_small_values_come_back_bit_for_bit_from_one_record_per_chunk(tmp_path: Path, kind: str) -> None:
    dr = driver()
    args: dict[str, Any] = dict(inputs={"n": N, "kind": kind}, chunk_size=27)
    plain = dr.execute(["values"], **args)["values"]
    calls()
    report = fd.Report()
    cold = dr.execute(["values"], cache=["value"], cache_dir=tmp_path, report=report, **args)["values"]
    assert len(calls()) == N
    samplecache.forget()  # a new process
    again = fd.Report()
    warm = dr.execute(["values"], cache=["value"], cache_dir=tmp_path, report=again, **{**args, "chunk_size": 10})["values"]
    assert calls() == []  # every value read back
    for i, (a, b, c) in enumerate(zip(plain, cold, warm, strict=True)):
        assert same(a, b) and same(a, c), (kind, i, a, c)
    written = report.cache["value"]["bytes_written"]
    assert again.cache["value"] == {"hits": N, "misses": 0, "bytes_read": written, "bytes_written": 0,
                                    "not_cached": 0}
    if kind in small_values.PACKED:  # no header per sample: the raw bytes, offsets and one header per chunk
        assert written <= sum(map(_raw, plain)) + 16 * N, written
    else:
        assert written > sum(map(_raw, plain)) + 16 * N, written


@pytest.mark.procs
@pytest.mark.parametrize("workers", [0, 2])
def test_a_column_node_read_whole_gives_the_batches_it_computed(tmp_path: Path, workers: int) -> None:
    dr = driver()
    args: dict[str, Any] = dict(inputs={"n": N}, batch_size=16, shuffle=True, seed=3)
    plain = list(dr.dataloader(["rows", "doubled"], **args))
    calls()
    cold = list(dr.dataloader(["rows", "doubled"], cache=["rows"], cache_dir=tmp_path, num_workers=workers, **args))
    samplecache.forget()
    loader = dr.dataloader(["rows", "doubled"], cache=["rows"], cache_dir=tmp_path, num_workers=workers, **args)
    warm = list(loader)
    assert loader.report.cache["rows"]["hits"] == N and loader.report.cache["rows"]["misses"] == 0
    for a, b, c in zip(plain, cold, warm, strict=True):
        for k in ("rows", "doubled"):
            assert a[k].dtype == c[k].dtype == torch.float64 and torch.equal(a[k], b[k]) and torch.equal(a[k], c[k])


# --- the text module: ragged lists of ints -----------------------------------------------------


def _docs(path: Path, n: int, start: int = 0) -> None:
    words = ["the", "cache", "reads", "ids", "at", "memory", "speed", "über", "naïve", "!"]
    rng = np.random.default_rng(start)
    texts = [" ".join(words[j] for j in rng.integers(0, len(words), int(rng.integers(0, 30)))) + f" {k}"
             for k in range(start, start + n)]  # each its own: equal rows are one item, and share their entry
    pq.write_table(pa.table({"text": texts, "label": [("pos", "neg", "odd")[k % 3] for k in range(start, start + n)]}),
                   path)


def _text() -> fd.Driver:
    return fd.Builder().with_modules(text).with_config({"max_length": 24}).build()


def _epoch(loader: Any) -> list[dict[str, torch.Tensor]]:
    return [dict(b) for b in loader]


@pytest.mark.procs
@pytest.mark.parametrize("workers", [0, 2])
def test_cached_token_ids_give_the_uncached_batches_warm_and_cold(tmp_path: Path, workers: int) -> None:
    table = tmp_path / "docs.parquet"
    _docs(table, 300)
    dr = _text()
    args: dict[str, Any] = dict(inputs={"table": str(table)}, batch_size=32, shuffle=True, seed=7, num_workers=workers)
    plain = _epoch(dr.dataloader(["token_ids", "attention_mask", "label"], **args))
    cache: dict[str, Any] = dict(cache=["ids"], cache_dir=tmp_path / "cache")
    cold_loader = dr.dataloader(["token_ids", "attention_mask", "label"], **cache, **args)
    cold = _epoch(cold_loader)
    assert cold_loader.report.cache["ids"]["misses"] == 300
    samplecache.forget()
    warm_loader = dr.dataloader(["token_ids", "attention_mask", "label"], **cache, **args)
    warm = _epoch(warm_loader)
    warm_loader.set_epoch(1)
    later = _epoch(warm_loader)  # another order: other batches, the same values per sample
    assert warm_loader.report.cache["ids"]["hits"] == 600 and warm_loader.report.cache["ids"]["misses"] == 0
    for a, b, c in zip(plain, cold, warm, strict=True):
        for k in a:
            assert torch.equal(a[k], b[k]) and torch.equal(a[k], c[k]), k
    assert sum(int(b["attention_mask"].sum()) for b in later) == sum(int(b["attention_mask"].sum()) for b in plain)


def test_a_damaged_record_is_computed_again_alone_and_said_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    table = tmp_path / "docs.parquet"
    _docs(table, 80)
    dr = _text()
    args: dict[str, Any] = dict(inputs={"table": str(table)}, batch_size=16)
    plain = _epoch(dr.dataloader(["token_ids", "attention_mask"], **args))
    cache: dict[str, Any] = dict(cache=["ids"], cache_dir=tmp_path / "cache")
    _epoch(dr.dataloader(["token_ids", "attention_mask"], **cache, **args))
    segments = sorted((tmp_path / "cache").glob("samples/ids-*/*.seg"))
    assert len(segments) == 5  # one segment, one record, per batch
    victim = segments[2]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of the record's ids
    victim.write_bytes(bytes(data))
    samplecache.forget()
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        loader = dr.dataloader(["token_ids", "attention_mask"], **cache, **args)
        got = _epoch(loader)
        loader.set_epoch(1)
        _epoch(loader)
    assert all(torch.equal(a[k], b[k]) for a, b in zip(plain, got, strict=True) for k in a)
    assert loader.report.cache["ids"]["misses"] == 16  # the damaged record's samples, once
    said = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(said) == 1 and str(victim) in said[0] and "does not match its checksum" in said[0]
    assert not victim.exists()


def _old_segment(key: bytes) -> bytes:
    """A segment of format 1 (a JSON index, one JSON header per value)."""
    body = b"\x02\x00\x00\x00{}"
    index = json.dumps([[key.hex(), 10, len(body), zlib.crc32(body)]]).encode()
    return b"FDSAMPLE1\n" + body + index + len(index).to_bytes(8, "little") + \
        zlib.crc32(index).to_bytes(4, "little") + b"FDSEGEND\n"


def test_a_segment_of_the_older_format_is_left_out_and_its_samples_computed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    dr = driver()
    args: dict[str, Any] = dict(inputs={"n": 8, "kind": "int"}, cache=["value"], cache_dir=tmp_path)
    dr.execute(["values"], **args)
    (folder,) = tmp_path.glob("samples/value-*")
    for seg in folder.glob("*.seg"):
        seg.unlink()
    old = folder / f"{os.getpid()}-{'0' * 32}.seg"
    old.write_bytes(_old_segment(b"k" * 32))
    samplecache.forget()
    calls()
    with caplog.at_level(logging.WARNING, logger="flowdata"):
        got = dr.execute(["values"], **args)["values"]
    assert got == [small_values.PACKED["int"](i) for i in range(8)] and len(calls()) == 8
    said = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(said) == 1 and "not a flowdata sample segment of this format" in said[0] and not old.exists()


# --- a table's rows are keyed by value -----------------------------------------------------------


def test_samples_are_keyed_by_their_items_not_by_their_positions(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    for k in range(20):
        np.save(folder / f"img_{k:03d}.npy", np.full((3, 4, 4), k, dtype=np.float32))
    dr = fd.Builder().with_modules(images).build()

    def misses() -> int:
        loader = dr.dataloader(["scaled"], inputs={"folder": str(folder)}, batch_size=8, cache=["decoded"],
                               cache_dir=tmp_path / "cache")
        list(loader)
        return int(loader.report.cache["decoded"]["misses"])

    assert misses() == 20
    assert misses() == 0
    np.save(folder / "img_-01.npy", np.zeros((3, 4, 4), dtype=np.float32))  # first in order: every other moves
    assert misses() == 1
    (folder / "img_007.npy").unlink()
    assert misses() == 0


def test_a_file_a_cell_names_is_part_of_its_rows_key(tmp_path: Path) -> None:
    paths = []
    for k in range(6):
        path = tmp_path / f"f{k}.bin"
        path.write_bytes(b"x" * k)
        paths.append(str(path))
    dr = driver()
    args: dict[str, Any] = dict(inputs={"table": pa.table({"path": paths, "n": list(range(6))})}, cache=["sized"],
                                cache_dir=tmp_path / "cache")
    assert [v for v in dr.execute(["sizes"], **args)["sizes"]] == [2 * k for k in range(6)]
    calls()
    assert dr.execute(["sizes"], **args)["sizes"] == [2 * k for k in range(6)] and calls() == []
    Path(paths[4]).write_bytes(b"y" * 10)  # another size
    later = time.time_ns() + 10**9
    Path(paths[2]).write_bytes(b"z" * 2)  # the same size, a new modification time
    os.utime(paths[2], ns=(later, later))
    assert dr.execute(["sizes"], **args)["sizes"] == [0, 2, 4, 6, 14, 10]
    assert sorted(calls()) == ["sized 2", "sized 4"]
