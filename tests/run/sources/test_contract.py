"""The Source contract: open (guarded), keyed, index, shards, fingerprint -- for each
adapter; an index that raises is the source's error."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import flowdata as fd
from flowdata.run.sources.adapters import IndexSource, IterableSource, Source, TableIndex, as_source, indexed
from flowdata.run.sources.contract import guarded_take

FLOW = """
from flowdata import Parallel

def item(n: int) -> Parallel[str]:
    for i in range(n):
        if i == 5:
            raise OSError("disk gone")
        yield f"s{i}"
"""


def _items(n: int) -> Iterator[str]:
    yield from (f"s{i}" for i in range(n))


def test_adapters_follow_the_contract(build: Callable[..., fd.Driver]) -> None:
    node = build(FLOW).nodes["item"]
    listed = as_source(node, [f"s{i}" for i in range(10)])
    streamed = as_source(node, _items(10))
    assert isinstance(listed, IndexSource) and isinstance(streamed, IterableSource)
    assert isinstance(listed, Source) and isinstance(streamed, Source)
    assert streamed.index() is None and listed.index() is not None
    assert listed.shards() is None and streamed.shards() is None  # neither is a stream in shards
    assert list(listed.keyed()) == [(i, f"s{i}") for i in range(10)]
    assert list(as_source(node, _items(10)).keyed()) == [(i, f"s{i}") for i in range(10)]
    assert listed.fingerprint() == as_source(node, _items(10)).fingerprint()
    arrow = indexed(streamed, None)
    index = arrow.index()
    assert index.take([9, 0, 4]) == ["s9", "s0", "s4"]
    assert list(guarded_take(index, [3, 4, 5], node)) == ["s3", "s4", "s5"]
    with pytest.raises(fd.FlowdataError, match=r"source 'item' was already read: it is an iterator"):
        streamed.open()


class _Stream:
    """A stream in shards: ``num_shards`` and ``shard(num_shards, index)``, 3 rows each."""

    num_shards = 2

    def shard(self, num_shards: int, index: int) -> list[str]:
        return [f"r{index}-{row}" for row in range(3)]


def test_a_stream_in_shards_numbers_its_own_samples_and_gives_its_shards(build: Callable[..., fd.Driver]) -> None:
    from flowdata.run.sources.sharded import SHARD_STRIDE

    source = as_source(build(FLOW).nodes["item"], _Stream())
    assert isinstance(source, Source) and source.index() is None
    shards = source.shards()
    assert shards is not None and shards.num_shards == 2 and isinstance(shards.data, _Stream)
    assert list(source.keyed()) == [(s * SHARD_STRIDE + r, f"r{s}-{r}") for s in range(2) for r in range(3)]
    assert list(source.open()) == [item for _, item in source.keyed()]


def test_closing_keyed_closes_the_source(build: Callable[..., fd.Driver]) -> None:
    closed: list[bool] = []

    def items() -> Iterator[str]:
        try:
            yield from (f"s{i}" for i in range(10))
        finally:
            closed.append(True)

    pairs = as_source(build(FLOW).nodes["item"], items()).keyed()
    assert next(pairs) == (0, "s0")
    pairs.close()  # type: ignore[attr-defined]
    assert closed == [True]


def test_open_is_guarded(build: Callable[..., fd.Driver]) -> None:
    dr = build(FLOW)
    source = as_source(dr.nodes["item"], dr.nodes["item"].fn(10))
    with pytest.raises(fd.NodeError, match=r"node 'item' \(.*:4\) failed: OSError: disk gone \(while producing sample 5\)"):
        list(source.open())


TABLE_FLOW = """
from typing import Any
from flowdata import Collect, Parallel

def row(table: Any) -> Parallel[dict]:
    return table

def x(row: dict) -> float:
    return float(row["x"]) + len(row["name"])

def all_x(x: Collect[float]) -> list[float]:
    return list(x)
"""


@pytest.mark.procs
@pytest.mark.parametrize("kind", ["arrow", "batch", "pandas"])
def test_a_table_returned_by_a_source_is_indexed_by_rows(build: Callable[..., fd.Driver], kind: str) -> None:
    import pandas as pd
    import pyarrow as pa

    data = {"x": [1, 2, 3, 4, 5], "name": ["a", "bb", "c", "dd", "e"]}
    table = {"arrow": pa.table, "batch": pa.record_batch, "pandas": pd.DataFrame}[kind](data)
    dr = build(TABLE_FLOW)
    want = [2.0, 4.0, 4.0, 6.0, 6.0]  # one dict per row (table[i] is a column of an Arrow table)
    assert dr.execute(["all_x"], inputs={"table": table})["all_x"] == want
    loader = dr.dataloader(["x"], inputs={"table": table}, batch_size=2, num_workers=2)
    assert [v for b in loader for v in b["x"].tolist()] == want


def test_a_table_of_many_chunks_gives_every_row_in_order(build: Callable[..., fd.Driver]) -> None:
    import numpy as np
    import pyarrow as pa

    # Chunks of uneven sizes (one empty), as concatenated or Parquet-read tables have.
    sizes = [7, 0, 13, 1, 29, 50]
    chunks, start = [], 0
    for size in sizes:
        chunks.append(pa.table({"x": pa.array(range(start, start + size), pa.int64()),
                                "name": pa.array(["n" * (i % 3 + 1) for i in range(size)], pa.string())}))
        start += size
    table = pa.concat_tables(chunks)
    assert table.column("x").num_chunks == len(sizes)
    rows = table.to_pylist()
    want = [float(r["x"]) + len(r["name"]) for r in rows]
    dr = build(TABLE_FLOW)
    assert dr.execute(["all_x"], inputs={"table": table})["all_x"] == want
    for shuffle in (False, True):
        loader = dr.dataloader(["x"], inputs={"table": table}, batch_size=16, shuffle=shuffle, seed=3)
        got = [v for b in loader for v in b["x"].tolist()]
        assert got == want if not shuffle else (sorted(got) == sorted(want) and got != want)  # every row once
    index = TableIndex(table)
    picks = np.random.default_rng(0).integers(0, len(rows), 40).tolist() + [99, 0, 99]
    assert index.take(picks) == [rows[i] for i in picks] and index.take(range(5, 30)) == rows[5:30]


def test_a_mapped_table_lives_in_its_file_and_pickles_as_its_path(tmp_path: Path) -> None:
    import gc
    import pickle

    import pyarrow as pa
    import pyarrow.parquet as pq

    from flowdata.io import mapped_table
    from flowdata_modules._table import table_columns

    data = pa.table({"x": list(range(3000)), "name": [f"n{i}" for i in range(3000)], "unused": [0.5] * 3000})
    pq.write_table(data, tmp_path / "t.parquet", row_group_size=700)
    table = table_columns(str(tmp_path / "t.parquet"), ["name", "x"])  # what the text and tabular sources return
    assert table.column_names == ["name", "x"] and table.to_pylist() == data.select(["name", "x"]).to_pylist()
    blob = pickle.dumps(TableIndex(table))
    assert len(blob) < 1000  # the file's path, not 3,000 rows: a worker maps the same file
    again = pickle.loads(blob)
    assert again.take([2999, 0, 1500]) == [table.to_pylist()[i] for i in (2999, 0, 1500)]
    path = pickle.loads(blob).__getstate__()["mapped"]
    assert Path(path).exists()
    plain = pickle.dumps(TableIndex(data))  # a table in memory pickles as itself
    assert len(plain) > 10_000 and pickle.loads(plain).take([5]) == [data.to_pylist()[5]]
    del table, again
    gc.collect()
    assert not Path(path).exists()  # removed with the table
    copy = mapped_table(iter(data.to_batches(max_chunksize=1000)), data.schema, "copy")
    assert copy.equals(data)


# --- an index that raises -----------------------------------------------------------------


FILES = """
from flowdata import Parallel

class Files:
    def __init__(self, n):
        self.n = n
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        if i == 3:
            raise FileNotFoundError(f"clip_{i}.wav")
        if i >= self.n:
            raise IndexError(i)
        return f"clip_{i}.wav"

def item(count: int) -> Parallel[str]:
    return Files(count)

def size(item: str) -> int:
    return len(item)
"""


@pytest.mark.procs
@pytest.mark.parametrize("workers", [0, 2])
def test_an_index_that_raises_is_the_sources_error(build: Callable[..., fd.Driver], workers: int) -> None:
    dr = build(FILES)
    loader = dr.dataloader(["size"], inputs={"count": 8}, batch_size=4, num_workers=workers)
    with pytest.raises(fd.NodeError, match=r"node 'item' \(.*:16\) failed: FileNotFoundError: clip_3.wav \(while producing sample 3\)"):
        list(loader)
