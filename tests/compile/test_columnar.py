"""Columnar nodes: a @vectorized node takes a chunk's values as one column (a record batch
of a table's rows, stacked tensors and arrays, an Arrow array) and returns one; values,
statistics and failures are the per-row path's, sample by sample."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch

import flowdata as fd

FLOW = """
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from flowdata import Collect, Parallel, reduce, vectorized
from flowdata.stats import Stats, Welford

SEEN = []  # the type each columnar call received for 'row', in this process


def row(table: object) -> Parallel[dict[str, Any]]:
    return table


@vectorized
def x(row: pa.RecordBatch) -> torch.Tensor:
    SEEN.append(type(row).__name__)
    col = pc.cast(row.column("x"), pa.float64())
    if pc.any(pc.less(col, 0)).as_py():
        raise ValueError("x is negative")
    return torch.from_numpy(col.to_numpy(zero_copy_only=False).copy())


@vectorized
def shifted(x: torch.Tensor, sample_index: np.ndarray) -> torch.Tensor:
    return x * 2 + torch.from_numpy(sample_index)


@vectorized
def word(row: pa.RecordBatch) -> pa.Array:
    return pc.utf8_upper(row.column("w"))


def shout(word: str) -> str:
    return word + "!"


@reduce(Welford)
def shifted_stats(shifted: Collect[torch.Tensor]) -> Stats: ...


def everything(shifted: Collect[torch.Tensor], shout: Collect[str]) -> list[Any]:
    return [(float(s), w) for s, w in zip(shifted, shout)]
"""

PLAIN = """
from typing import Any

import torch
from flowdata import Collect, Parallel, reduce
from flowdata.stats import Stats, Welford


def row(table: object) -> Parallel[dict[str, Any]]:
    return table


def x(row: dict[str, Any]) -> torch.Tensor:
    if row["x"] < 0:
        raise ValueError("x is negative")
    return torch.tensor(float(row["x"]), dtype=torch.float64)


def shifted(x: torch.Tensor, sample_index: int) -> torch.Tensor:
    return x * 2 + sample_index


def word(row: dict[str, Any]) -> str:
    return row["w"].upper()


def shout(word: str) -> str:
    return word + "!"


@reduce(Welford)
def shifted_stats(shifted: Collect[torch.Tensor]) -> Stats: ...


def everything(shifted: Collect[torch.Tensor], shout: Collect[str]) -> list[Any]:
    return [(float(s), w) for s, w in zip(shifted, shout)]
"""

N = 300


def _table(bad: int | None = None) -> pa.Table:
    xs = [float(i % 17) * 0.25 + 1e3 for i in range(N)]
    if bad is not None:
        xs[bad] = -1.0
    # several record batches, so that chunks span batches
    return pa.Table.from_batches(pa.table({"x": xs, "w": [f"w{i}" for i in range(N)]}).to_batches(max_chunksize=70))


def _kinds(table: pa.Table) -> dict[str, Any]:
    return {"arrow": table, "pandas": table.to_pandas(), "dicts": table.to_pylist()}


@pytest.mark.procs
def test_columnar_nodes_give_the_per_row_values_from_every_kind_of_table(build: Callable[..., fd.Driver],
                                                                      pool: fd.ProcessExecutor) -> None:
    columnar, plain = build(FLOW), build(PLAIN)
    want = plain.execute(["everything", "shifted_stats"], inputs={"table": _table()})
    module = __import__(columnar.graph.nodes["x"].module)
    for kind, table in _kinds(_table()).items():
        module.SEEN.clear()
        for executor in ("inline", pool):
            got = columnar.execute(["everything", "shifted_stats"], inputs={"table": table}, executor=executor,
                                   chunk_size=64)
            assert got["everything"] == want["everything"], (kind, executor)
            for field in ("mean", "var", "min", "max", "count"):  # bitwise: the same blocks, the same arithmetic
                assert torch.equal(getattr(got["shifted_stats"], field), getattr(want["shifted_stats"], field)), field
        assert module.SEEN and set(module.SEEN) == {"RecordBatch"}, (kind, module.SEEN)  # never a list of dicts


@pytest.mark.procs
def test_a_loader_batch_of_stacked_values_is_the_column_itself(build: Callable[..., fd.Driver]) -> None:
    columnar, plain = build(FLOW), build(PLAIN)
    outputs = ["shifted", "shout"]
    baseline = list(plain.dataloader(outputs, inputs={"table": _table()}, batch_size=32, shuffle=True, seed=3))
    for workers in (0, 2):
        batches = list(columnar.dataloader(outputs, inputs={"table": _table()}, batch_size=32, shuffle=True, seed=3,
                                           num_workers=workers))
        assert len(batches) == len(baseline)
        for b, w in zip(batches, baseline, strict=True):
            assert b["shifted"].dtype == w["shifted"].dtype == torch.float64
            assert torch.equal(b["shifted"], w["shifted"]) and b["shout"] == w["shout"]
    assert columnar.run_sample(["shifted", "shout"], index=7, inputs={"table": _table()}) == {
        "shifted": torch.tensor((7 % 17) * 0.25 + 1e3, dtype=torch.float64) * 2 + 7, "shout": "W7!"}


def test_a_failing_row_of_a_columnar_call_is_its_own_sample(build: Callable[..., fd.Driver]) -> None:
    dr = build(FLOW)
    table = _table(bad=123)
    with pytest.raises(fd.SampleError, match=r"node 'x' \(.*fdmod_.*\.py:19\) failed on sample 123 of group "
                       r"'row' .*ValueError: x is negative\n    item: \{'x': -1.0, 'w': 'w123'\}"):
        dr.execute(["everything"], inputs={"table": table}, chunk_size=64)
    report = fd.Report()
    got = dr.execute(["everything"], inputs={"table": table}, chunk_size=64, on_error="skip", report=report)
    assert [w for _, w in got["everything"]] == [f"W{i}!" for i in range(N) if i != 123]
    (skip,) = report.skipped
    assert (skip.index, skip.node) == (123, "x")
    loader = dr.dataloader(["shifted"], inputs={"table": table}, batch_size=50, on_error="skip")
    assert sum(len(b["shifted"]) for b in loader) == N - 1
    assert [s.index for s in loader.report.skipped] == [123]


def test_values_of_different_shapes_cannot_be_stacked_and_say_so(build: Callable[..., fd.Driver]) -> None:
    ragged = FLOW.replace("    return x * 2 + torch.from_numpy(sample_index)",
                          "    return x * 2 + torch.from_numpy(sample_index)\n\n\n"
                          "def grown(x: torch.Tensor, sample_index: int) -> torch.Tensor:\n"
                          "    return x.repeat(1 + sample_index % 2)\n\n\n"
                          "@vectorized\ndef summed(grown: torch.Tensor) -> torch.Tensor:\n"
                          "    return grown.sum(dim=1)")
    dr = build(ragged)
    for on_error in ("raise", "skip"):  # a fault of the graph, not of a sample
        with pytest.raises(fd.SampleError, match=r"node 'summed' .* failed on sample 1 .*ColumnError: 'summed' is "
                           r"@vectorized and takes 'grown' as torch.Tensor, the chunk's values stacked, but the value "
                           r"at position 1 of the chunk has shape \[2\], the first one \[1\].* -- fix: give 'grown' "
                           r"values of one shape .*or annotate the parameter as 'grown: Sequence\[torch.Tensor\]'"):
            list(dr.dataloader(["summed"], inputs={"table": _table()}, batch_size=8, on_error=on_error))


@pytest.mark.parametrize(("change", "message"), [
    (("def shout(word: str) -> str:\n    return word + \"!\"",
      "def shout(word: str) -> str:\n    return word + \"!\"\n\n\n"
      "@vectorized\ndef loud(shout: torch.Tensor) -> list[str]:\n    return [w + '!' for w in shout]"),
     r"FD103 vectorized-parameter: 'loud' is @vectorized, so 'shout: torch.Tensor' receives the chunk's values as one "
     r"column, made of torch.Tensor \(or numbers\), but 'shout' gives one str per sample"),
    (("def row(table: object) -> Parallel[dict[str, Any]]:", "def row(table: object) -> Parallel[int]:"),
     r"FD103 vectorized-parameter: 'x' is @vectorized, so 'row: pyarrow.RecordBatch' receives the chunk's values as one "
     r"column, made of dict\[str, Any\] \(rows\), but 'row' gives one int per sample\n.*\n.*\n"
     r"    expected: row: Sequence\[int\]\n    actual:   row: pyarrow.RecordBatch\n"),
])
def test_build_time_checks_of_columnar_parameters(build: Callable[..., fd.Driver], change: tuple[str, str],
                                                  message: str) -> None:
    source = FLOW.replace(*change)
    if "Parallel[int]" in source:
        source = source.replace("def word(row: pa.RecordBatch)", "def word(row: Sequence[int])")
    with pytest.raises(fd.GraphError, match=message):
        build(source)


def test_a_sequential_group_calls_columnar_nodes_on_one_sample_at_a_time(build: Callable[..., fd.Driver]) -> None:
    seq = build(FLOW.replace("-> Parallel[dict[str, Any]]:\n    return table",
                             "-> Sequential[dict[str, Any]]:\n    yield from table.to_pylist()").replace(
        "from flowdata import Collect, Parallel,", "from flowdata import Collect, Parallel, Sequential,"))
    plain = build(PLAIN)
    got = seq.execute(["everything", "shifted_stats"], inputs={"table": _table()})
    want = plain.execute(["everything", "shifted_stats"], inputs={"table": _table()})
    assert got["everything"] == want["everything"]
    assert torch.equal(got["shifted_stats"].var, want["shifted_stats"].var)


def test_a_chunk_of_table_rows_pickles_its_rows_only() -> None:
    import pickle

    from flowdata.columns import ArrowRows

    big = pa.table({"x": np.arange(1_000_000, dtype=np.float64)})
    rows = ArrowRows(big.slice(10, 5))
    back = pickle.loads(pickle.dumps(rows))
    assert len(pickle.dumps(rows)) < 4096  # the five rows, not the column's 8 MB
    assert back == [{"x": float(i)} for i in range(10, 15)] and isinstance(back.data, pa.Table)
    frame = pd.DataFrame({"x": [1.0, 2.0]})
    assert ArrowRows(pa.Table.from_pandas(frame)).take([1, 0]) == [{"x": 2.0}, {"x": 1.0}]
