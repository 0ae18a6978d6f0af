"""The Source contract: open (guarded), index, fingerprint, shard -- for each adapter."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

import flowdata as fd
from flowdata.run.source import IndexSource, IterableSource, Source, as_source, indexed

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
    assert list(listed.shard(1, 3)) == [(i, f"s{i}") for i in range(1, 10, 3)]
    assert list(as_source(node, _items(10)).shard(2, 4)) == [(2, "s2"), (6, "s6")]
    assert listed.fingerprint() == as_source(node, _items(10)).fingerprint()
    arrow = indexed(streamed, None)
    assert arrow.index().take([9, 0, 4]) == ["s9", "s0", "s4"] and list(arrow.shard(0, 5)) == [(0, "s0"), (5, "s5")]
    with pytest.raises(fd.FlowdataError, match=r"source 'item' was already read: it is an iterator"):
        streamed.open()


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
