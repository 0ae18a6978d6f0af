"""Every kind of source the public API accepts, as rows one table: the Source suite
(``test_sources.py``) and the combination matrix (``test_combinations*.py``) run over it.

A new source adapter joins both suites with one :class:`SourceKind` in :data:`KINDS`: how to
make its input from plain rows, which flow module's ``row`` source reads it, and what the
docs promise of it (indexed or streamed, batches laid out per consumer or not). Also here:
the plain-Python oracles the suites compare with (the rows that survive, the way the
docs deal an epoch to ranks).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import datasets
import pyarrow as pa

import flowdata as fd
from tests.conformance.flows import chained, nodes, returned, sequential, yielded

datasets.disable_progress_bars()

N = 23  # rows: not a multiple of the batch size, of the ranks, or of the shards
BAD = [5, 17]  # rows whose `value` raises (skipped under on_error="skip")
BATCH = 4
SHARDS = 4
Rows = list[dict[str, Any]]


def rows(n: int = N) -> Rows:
    return [{"x": i} for i in range(n)]


def survivors(n: int = N, bad: list[int] = BAD) -> list[int]:
    return [i for i in range(n) if i not in bad]


def _sharded(rows: Rows) -> Any:
    return datasets.Dataset.from_list(rows).to_iterable_dataset(num_shards=SHARDS)


def _sharded_lambda(rows: Rows) -> Any:
    # A stream mapped by a lambda cannot be pickled to pool workers (issue 26's seam).
    return _sharded(rows).map(lambda r: {"x": r["x"]})


def _broken_shards(rows: Rows, at: int) -> Any:
    def gen(shards: list[list[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
        for shard in shards:
            for r in shard:
                if r["x"] == at:
                    raise OSError(f"cannot read row {at}")
                yield r

    size = math.ceil(len(rows) / SHARDS)
    return datasets.IterableDataset.from_generator(
        gen, gen_kwargs={"shards": [rows[s * size:(s + 1) * size] for s in range(SHARDS)]})


def _broken_rows(rows: Rows, at: int) -> Rows:
    return [dict(r, broken=True) if r["x"] == at else r for r in rows]


@dataclass(frozen=True)
class SourceKind:
    """One kind of source, as a user hands it to the public API.

    Attributes:
        name: The row's id in every parametrised test.
        module: The flow module whose ``row`` source reads the input ``data``.
        make: Plain rows -> the input ``data``.
        indexed: The loader indexes it (``len``, ``dataset()[i]``); otherwise it streams.
        options: Extra ``dataloader()`` arguments the kind needs (``streaming=True``).
        lanes: A stream in shards: its batches are laid out per consumer (rank x worker),
            so they equal inline only at the same ``world_size x num_workers``
            (docs/huggingface.md, "What is split how"); the items stay exactly once.
        broken: Rows, index -> an input whose read fails at that row (None: the source
            holds its items in memory, nothing to read can fail).
        pass_cached: Its statistics pass is stored in the pass cache. Not for a
            ``Sequential`` source nor one that collects another group: "their items cannot
            be fingerprinted without running them" (docs/statistics.md, "How the key is
            made").
    """

    name: str
    module: ModuleType
    make: Callable[[Rows], Any]
    indexed: bool
    options: dict[str, Any] = field(default_factory=dict)
    lanes: bool = False
    broken: Callable[[Rows, int], Any] | None = None
    pass_cached: bool = True

    def driver(self) -> fd.Driver:
        return fd.Builder().with_modules(nodes, self.module).build()

    def inputs(self, data_rows: Rows | None = None, bad: list[int] = BAD) -> dict[str, Any]:
        return {"data": self.make(rows() if data_rows is None else data_rows), "bad": bad}


KINDS = [
    SourceKind("list", returned, lambda r: [dict(x) for x in r], indexed=True),
    SourceKind("arrow", returned, pa.Table.from_pylist, indexed=True),
    # a generator source: run once, its items written to an Arrow index
    SourceKind("generator", yielded, list, indexed=True, broken=_broken_rows),
    SourceKind("hf_dataset", returned, datasets.Dataset.from_list, indexed=True),
    # the same generator, streamed in every worker instead of indexed
    SourceKind("stream", yielded, list, indexed=False, options={"streaming": True}, broken=_broken_rows),
    # a Sequential source: always streamed; its pass is not cached (docs/statistics.md)
    SourceKind("sequential", sequential, list, indexed=False, broken=_broken_rows, pass_cached=False),
    SourceKind("sharded", returned, _sharded, indexed=False, lanes=True, broken=_broken_shards),
    SourceKind("sharded_lambda", returned, _sharded_lambda, indexed=False, lanes=True),
    SourceKind("chained", chained, list, indexed=True, pass_cached=False),
]
KIND = {k.name: k for k in KINDS}


def deal(order: list[int], rank: int, world_size: int, batch: int, *, streaming: bool) -> list[tuple[list[int], int]]:
    """A rank's batches of an epoch with even batches, each with its padding, as
    docs/training.md deals them.

    Full rounds of ``batch x world_size``: an indexed loader deals positions in turn (rank
    ``r`` takes ``r, r + world_size, ...``, "Ranks: even batches"); a stream cuts
    consecutive items into global batches and gives batch ``b`` to rank
    ``b % world_size`` ("Streaming"). The last, partial round is cut into ``world_size``
    runs of ``ceil(T / world_size)``; runs past the end repeat the epoch's first samples
    (the padding, counted per batch).
    """
    size = batch * world_size
    full = len(order) // size * size
    mine: list[tuple[list[int], int]] = []
    for start in range(0, full, size):
        chunk = order[start:start + size]
        mine.append((chunk[rank * batch:(rank + 1) * batch] if streaming else chunk[rank::world_size], 0))
    tail = len(order) - full
    if tail:
        run = math.ceil(tail / world_size)
        first = full + rank * run
        positions = range(first, first + run)
        mine.append(([order[p % len(order)] for p in positions], sum(p >= len(order) for p in positions)))
    return mine
